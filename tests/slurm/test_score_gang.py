"""`srun --score-gang` (slurm/spank/spank_score.c, docs/admin/slurm.md): Slurm
starts the tasks, scored gang-schedules them.  On a cluster that runs both
scored and Slurm, two PM jobs started with `srun -p score --score-gang`
and one started with scrun share both nodes: scored's matrix shows them as
rows that take turns, every job ends correct with no PM retransmission, and
scored records them completed.  Without an agent to answer on a node, the step fails with a
message that names the socket, and nothing is left running."""

import json
import os
import shutil
import subprocess

import pytest

from mpi.mpijob import BUILD
from pm.pmjob import PMCHECK, wait_for

from .slurmjob import pmcheck_results, processes_with_argv

PLUGIN = BUILD / "lib" / "slurm" / "spank_score.so"

pytestmark = pytest.mark.skipif(shutil.which("srun") is None or shutil.which("slurmctld") is None,
                                reason="Slurm is not installed (slurmctld, slurmd, slurm-client: "
                                       "scripts/install-deps.sh)")

COUNT = 150000


@pytest.fixture
def cluster(vcluster):
    assert PLUGIN.is_file(), f"{PLUGIN}: run `make` (needs libslurm-dev)"
    vc = vcluster(nodes=2, nics=1, with_score=True, with_slurm=True,
                  score_master={"quantum_ms": 100})
    plugstack = (vc.service_dir / "slurm" / "plugstack.conf").read_text()
    assert str(PLUGIN) in plugstack, plugstack
    return vc


def start_srun(vc, *args):
    return subprocess.Popen(["srun", *map(str, args)], env=vc.slurm_env(), cwd="/tmp",
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def scorectl(vc, *args):
    proc = subprocess.run([str(BUILD / "bin" / "scorectl"), *args], env=vc.score_env(),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def finish(proc, timeout=240):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        err += f"\n(test: srun killed after {timeout} s)"
    return proc.returncode, out, err


def test_two_score_gang_steps_take_turns_in_scoreds_matrix_beside_a_scrun_job(cluster):
    program = [PMCHECK, "--pattern", "all", "--count", COUNT, "--timeout", 200]
    beside = subprocess.Popen([str(BUILD / "bin" / "scrun"), "-nodes=2x1",
                               "--no-stdin", *map(str, program)], env=cluster.score_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd="/tmp", start_new_session=True)
    argv = ["-p", "score", "--score-gang", "--mpi=pmix", "-N", 2, "-n", 2, *program]
    steps = [start_srun(cluster, *argv) for _ in range(2)]
    try:
        rows, running = set(), set()

        def both_seen_running():
            m = json.loads(scorectl(cluster, "matrix", "--json"))
            for r in m["rows"]:
                rows.update(j for j in r["jobs"] if j)
            running.update(m["running"])
            return len(rows) >= 3 and rows <= running
        wait_for("the scrun job and both adopted jobs in scored's matrix, each seen running",
                 both_seen_running, timeout=120, interval=0.05)
        results = [finish(p) for p in [*steps, beside]]
    finally:
        for p in [*steps, beside]:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    for rc, out, err in results:
        assert rc == 0, err
        recs = pmcheck_results(out)
        assert len(recs) == 2, out + err
        for r in recs:
            assert r["ok"] and r["errors"] == 0 and r["received"] == r["sent"] > 0, r
            assert r["retransmits"] == 0, r
    for jid in sorted(rows):
        wait_for(f"scored's job {jid} completed",
                 lambda: json.loads(scorectl(cluster, "show", str(jid), "--json"))["state"]
                 == "completed", timeout=30)


def test_without_an_agent_to_answer_the_step_fails_and_says_where(cluster):
    socket = cluster.service_dir / "n2" / "run" / "adopt.sock"
    assert socket.exists()
    socket.unlink()      # the agent runs, but nothing answers on n2's socket
    # n1's task runs on after n2's fails (no KillOnBadExit), so it is short:
    # srun then ends by itself, with n2's failure as its status.  With
    # --kill-on-bad-exit n2's message may never reach srun's stderr.
    rc, out, err = finish(start_srun(cluster, "-p", "score", "--score-gang", "-N", 2, "-n", 2,
                                     "sleep", "9.77"), timeout=120)
    assert "(test: srun killed" not in err, err
    assert rc != 0
    assert f"no scored agent answers at {socket}" in err, err
    wait_for("no task left", lambda: not processes_with_argv(["sleep", "9.77"]), timeout=30)
    # scored's record of the step ends too.
    def settled():
        jobs = json.loads(scorectl(cluster, "jobs", "--json"))
        return not [j for j in jobs if j["state"] in ("running", "launching", "pending")]
    wait_for("scored's adopted job ended", settled, timeout=60)


def test_the_option_is_listed_and_without_scored_the_step_fails_clearly(vcluster):
    vc = vcluster(nodes=2, nics=1, with_slurm=True)     # Slurm, no scored
    env = vc.slurm_env()
    help_text = subprocess.run(["srun", "--help"], env=env, capture_output=True, text=True,
                               timeout=30).stdout
    assert "--score-gang" in help_text, help_text
    proc = subprocess.run(["srun", "-p", "score", "--score-gang", "-N", "2", "-n", "2", "hostname"],
                          env=env, capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert proc.returncode != 0
    assert "scored did not take the step" in proc.stderr, proc.stderr
    assert proc.stdout == "", "a task ran although the step failed"
    # Without the option the plugin does nothing: Slurm runs the step.
    plain = subprocess.run(["srun", "-N", "2", "hostname"], env=env, capture_output=True,
                           text=True, timeout=60, cwd="/tmp")
    assert plain.returncode == 0 and sorted(plain.stdout.split()) == ["n1", "n2"], plain.stderr
