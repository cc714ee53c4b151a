"""The master restarts while jobs run (docs/scored/admin.md, "Restarting the
master"): it is killed with SIGKILL, as a crash would, and started again
with the same configuration.  The agents keep their jobs, the new master
adopts them from its state directory, scrun re-attaches, and nothing is
lost: every line of output arrives once and in order, a PM job's fences
(which go through the master) complete, a queued job still runs, job ids
are never reused.  These tests kill their master, so the module has a
cluster of its own."""

import os
import signal
import subprocess
from pathlib import Path

import pytest

from .score import PMCHECK, SCORE_BIN, Score, marker, processes_with, wait_for

# A scrun that does not come back is given up after this (default 30 s).
REATTACH_TIMEOUT_MS = 8000

# Lines each rank prints, one every LINE_GAP s: the job outlives the restart.
LINES = 80
LINE_GAP = 0.05


@pytest.fixture(scope="module")
def restart_cluster(own_cluster_factory):
    return own_cluster_factory(score_master={"reattach_timeout_ms": REATTACH_TIMEOUT_MS})


@pytest.fixture
def score(restart_cluster):
    s = Score(restart_cluster)
    try:
        yield s
    finally:
        s.cleanup()


def master_pid(vc):
    """The PID of the cluster's live master, found by its command line."""
    config = str(vc.service_dir / "scored.toml").encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"master" in argv and config in argv and argv[0].endswith(b"scored"):
            return int(pid)
    return None


def restart_master(score, while_down=None):
    """SIGKILL the master, run `while_down()`, start it again as vcluster
    does.  The new master is ended by its command line when the module's
    cluster goes down."""
    vc = score.vc
    pid = master_pid(vc)
    assert pid, "no master runs"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or
             Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", 10, "the master to die")
    if while_down:
        while_down()
    with open(vc.service_dir / "head" / "scored.log", "ab") as log:
        subprocess.Popen([str(SCORE_BIN / "scored"), "master", "--config",
                          str(vc.service_dir / "scored.toml")],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                         start_new_session=True)
    wait_for(lambda: master_pid(vc), 10, "the new master to start")


def counting_job(score, m, label=True):
    """A 4x1 job whose ranks print LINES numbered lines, slowly; `m`
    marks its processes."""
    script = (f"i=1; while [ $i -le {LINES} ]; do echo line $i; sleep {LINE_GAP}; "
              f"i=$((i+1)); done; : {m}")
    return score.start("-v", *(["-l"] if label else []), "-nodes=4x1", "sh", "-c", script)


def test_a_running_job_survives_a_restart_of_the_master(score):
    m = marker()
    run = counting_job(score, m)
    job_id = run.job_id()
    score.wait_job(job_id, "running")
    # Part of the output is out before the crash, the rest comes after.
    wait_for(lambda: "line 5\n" in run.stdout(), 20, "the first lines")

    restart_master(score)

    assert run.wait(90) == 0, run.stderr()
    err = run.stderr()
    assert f"scrun: lost the scored master" in err and f"re-attaching to job {job_id}" in err, err
    assert f"scrun: re-attached to job {job_id}" in err, err
    # Every line of every rank exactly once, in order.
    for rank in range(4):
        lines = [line.split(": ", 1)[1] for line in run.stdout().splitlines()
                 if line.startswith(f"{rank}: ")]
        assert lines == [f"line {i}" for i in range(1, LINES + 1)], (rank, lines)
    job = score.job(job_id)
    assert job["state"] == "completed" and job["exit_status"] == 0, job
    score.assert_job_gone(job_id, m)
    # The nodes are up under the new master, and new ids follow the old ones.
    assert {n["state"] for n in score.nodes().values()} == {"up"}
    proc = score.scrun("-v", "-nodes=4x1", "true")
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stderr.split("scrun: job ")[1].split()[0]) > job_id, proc.stderr


def test_a_pm_job_and_a_queued_job_survive_a_restart_of_the_master(score):
    # A PM job on every node (its fences go through the master) and a job
    # queued behind it.
    pm = score.start("-v", "-nodes=4x2", PMCHECK, "--pattern", "all", "--count", "3000",
                     "--hold-every", "300", "--hold-ms", "300", "--quiet")
    pm_id = pm.job_id()
    score.wait_job(pm_id, "running")
    queued = score.start("-v", "-nodes=4x1", "hostname")
    queued_id = queued.job_id()
    score.wait_job(queued_id, "pending")

    restart_master(score)

    assert pm.wait(120) == 0, pm.stderr()
    assert f"scrun: re-attached to job {pm_id}" in pm.stderr(), pm.stderr()
    assert queued.wait(60) == 0, queued.stderr()
    assert sorted(queued.stdout().split()) == ["n1", "n2", "n3", "n4"]
    assert score.job(pm_id)["state"] == "completed"
    assert score.job(queued_id)["state"] == "completed"


def test_a_job_whose_scrun_does_not_come_back_is_cancelled(score):
    """A scrun that dies with the master is not waited for beyond
    reattach_timeout_ms: its job is cancelled and cleaned up."""
    m = marker()
    run = score.start("-v", "-nodes=2x1", "sleep", m)
    job_id = run.job_id()
    score.wait_job(job_id, "running")
    wait_for(lambda: len(processes_with(m)) == 2, 10, "the 2 ranks to start")

    restart_master(score, while_down=run.kill)

    job = score.wait_job(job_id, ["cancelled", "failed"],
                         timeout=REATTACH_TIMEOUT_MS / 1000 + 30)
    assert "scrun" in job["reason"], job
    score.assert_job_gone(job_id, m)
