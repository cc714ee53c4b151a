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

import pytest
from vclusterlib import procs

from .score import (PMCHECK, SCORE_BIN, Score, agent_metrics_url, marker, master_state_dir,
                    pb_field, processes_with, scored_pid, scrape, wait_for)

# A scrun that does not come back is given up after this (default 30 s).
REATTACH_TIMEOUT_MS = 8000

# Each rank prints a counter every 10 ms, LINES times: the job outlives
# the restart.
LINES = 300
LINE_GAP = 0.01


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
    return scored_pid(vc, "master")


# JobSpec.argv's field number (scored/proto/score.proto).
ARGV_FIELD = 3


def wait_saved(score):
    """Every job the master lists is in its state file (each one's argv, as
    the file encodes it): the background save that follows each change has
    run.  A job submitted in the last milliseconds before a crash is not
    adopted (docs/scored/admin.md, "What is lost in a restart"); these
    tests are about the jobs that were saved."""
    state = master_state_dir(score.vc) / "master.state"
    argvs = [b"".join(pb_field(ARGV_FIELD, a) for a in j["argv"]) for j in score.jobs()]
    wait_for(lambda: all(a in state.read_bytes() for a in argvs), 10,
             "the master's state file to hold every job")


def restart_master(score, while_down=None, sig=signal.SIGKILL):
    """Once the master has saved its jobs, kill it with `sig` (SIGKILL: as
    a crash would), run `while_down()`, start it again as vcluster does.
    The new master is ended by its command line when the module's cluster
    goes down."""
    vc = score.vc
    pid = master_pid(vc)
    assert pid, "no master runs"
    wait_saved(score)
    os.kill(pid, sig)
    # SIGTERM: the streams still open are closed after 1 s (STOP_GRACE).
    wait_for(lambda: procs.exited(pid), 10, "the master to die")
    if while_down:
        while_down()
    with open(vc.service_dir / "head" / "scored.log", "ab") as log:
        subprocess.Popen([str(SCORE_BIN / "scored"), "master", "--config",
                          str(vc.service_dir / "scored.toml")],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                         start_new_session=True)
    try:
        wait_for(lambda: score.scorectl("nodes").returncode == 0, 10, "the new master to answer")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{daemon_logs(vc)}") from None


def daemon_logs(vc, chars=4000):
    """The ends of the master's and the agents' logs, for a failure message."""
    out = []
    for node in ["head", *vc.nodes]:
        log = (vc.service_dir / node / "scored.log").read_text(errors="replace")
        out.append(f"--- {node}/scored.log:\n{log[-chars:]}")
    return "\n".join(out)


def stuck_job_report(score, job_id):
    """What the master, the agents and the kernel say of a job that does
    not end: its record, the matrix, its PM contexts' counters and its
    processes' states, then the daemons' logs."""
    out = []
    for args in (("show", str(job_id)), ("matrix",)):
        r = score.scorectl(*args)
        out.append(f"--- scorectl {' '.join(args)}:\n{r.stdout}{r.stderr}")
    for node in score.vc.nodes:
        try:
            text = scrape(agent_metrics_url(score, node))
        except Exception as e:  # noqa: BLE001 - a report, not a check
            out.append(f"--- {node} metrics: {e}")
            continue
        lines = [ln for ln in text.splitlines() if f'job="{job_id}"' in ln and not ln.endswith(" 0")]
        out.append(f"--- {node} metrics of job {job_id} (non-zero):\n" + "\n".join(lines))
    for pid in processes_with(str(PMCHECK)):
        try:
            status = dict(ln.split(":", 1) for ln in
                          open(f"/proc/{pid}/status").read().splitlines() if ":" in ln)
            wchan = open(f"/proc/{pid}/wchan").read()
        except OSError:
            continue
        out.append(f"--- pid {pid}: state {status.get('State', '?').strip()}, wchan {wchan}")
    out.append(daemon_logs(score.vc))
    return "\n".join(out)


def counting_job(score, m, shape="-nodes=4x2", status=0):
    """A job whose ranks print a counter every LINE_GAP s, LINES times, and
    exit with `status`; `m` marks its processes.  With a status, each rank
    waits (a bounded file barrier in the shared work directory) until every
    rank has printed all its lines: the first failed rank ends the job."""
    barrier = ""
    if status:
        nodes, ppn = shape.split("=")[1].split("x")
        ranks = int(nodes) * int(ppn)
        d = score.workdir / f"barrier-{m}"
        d.mkdir()
        barrier = (f"touch {d}/$PMIX_RANK; n=0; while [ $(ls {d} | wc -l) -lt {ranks} ] && "
                   f"[ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done; ")
    script = (f"i=1; while [ $i -le {LINES} ]; do echo count $i; sleep {LINE_GAP}; "
              f"i=$((i+1)); done; {barrier}exit {status}; : {m}")
    return score.start("-v", "-l", shape, "sh", "-c", script)


def assert_every_line_once(run, ranks):
    """Every rank's counter, each value exactly once, in order."""
    out = run.stdout().splitlines()
    for rank in range(ranks):
        lines = [line.split(": ", 1)[1] for line in out if line.startswith(f"{rank}: ")]
        assert lines == [f"count {i}" for i in range(1, LINES + 1)], \
            (rank, len(lines), [x for x in lines if not x.startswith("count ")][:5])


def history(score):
    """`scorectl jobs --all`: every job the master knows, finished ones too."""
    return {j["id"]: (j["state"], j.get("exit_status")) for j in score.jobs(all=True)}


def test_a_running_job_survives_a_restart_of_the_master(score):
    # Some history first: it must look the same to the new master.
    assert score.scrun("-nodes=2x1", "true").returncode == 0
    assert score.scrun("-nodes=1x1", "false").returncode == 1
    m = marker()
    run = counting_job(score, m, status=3)
    job_id = run.job_id()
    score.wait_job(job_id, "running")
    # Part of the output is out before the crash, the rest comes after.
    wait_for(lambda: "count 20\n" in run.stdout(), 20, "the first lines")
    before = {k: v for k, v in history(score).items() if k != job_id}

    restart_master(score)

    assert run.wait(90) == 3, run.stderr()
    err = run.stderr()
    assert "scrun: lost the scored master" in err and f"re-attaching to job {job_id}" in err, err
    assert f"scrun: re-attached to job {job_id}" in err, err
    assert_every_line_once(run, 8)
    job = score.job(job_id)
    assert job["state"] == "failed" and job["exit_status"] == 3, job
    score.assert_job_gone(job_id, m)
    after = history(score)
    assert {k: v for k, v in after.items() if k != job_id} == before
    # The nodes are up under the new master, and new ids follow the old ones.
    assert {n["state"] for n in score.nodes().values()} == {"up"}
    proc = score.scrun("-v", "-nodes=4x1", "true")
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stderr.split("scrun: job ")[1].split()[0]) > job_id, proc.stderr


def test_two_gang_scheduled_jobs_survive_a_restart_of_the_master(score):
    marks = [marker(), marker()]
    runs = [counting_job(score, m) for m in marks]
    ids = [run.job_id() for run in runs]
    for job_id in ids:
        score.wait_job(job_id, "running", timeout=30)
    # Both need every node: they take turns in two rows of the matrix.
    rows = [[job_id] * 4 for job_id in sorted(ids)]
    assert [r["jobs"] for r in score.scorectl_json("matrix")["rows"]] == rows
    wait_for(lambda: all("count 10\n" in r.stdout() for r in runs), 30,
             "both jobs to have run")

    restart_master(score)

    # The new master has the same matrix, and switches its rows again.
    wait_for(lambda: [r["jobs"] for r in score.scorectl_json("matrix")["rows"]] == rows, 30,
             "the restored matrix")
    seen = set()
    wait_for(lambda: seen.update(score.scorectl_json("matrix")["running"]) or
             set(ids) <= seen, 30, "both jobs to run in turn", interval=0.05)
    for run, job_id, m in zip(runs, ids, marks):
        try:
            status = run.wait(120)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{daemon_logs(score.vc)}") from None
        assert status == 0, run.stderr()
        assert f"scrun: re-attached to job {job_id}" in run.stderr(), run.stderr()
        assert_every_line_once(run, 8)
        assert score.job(job_id)["state"] == "completed"
        score.assert_job_gone(job_id, m)


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

    try:
        status = pm.wait(120)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{stuck_job_report(score, pm_id)}") from None
    assert status == 0, pm.stderr()
    assert f"scrun: re-attached to job {pm_id}" in pm.stderr(), pm.stderr()
    assert queued.wait(60) == 0, queued.stderr()
    assert sorted(queued.stdout().split()) == ["n1", "n2", "n3", "n4"]
    assert score.job(pm_id)["state"] == "completed"
    assert score.job(queued_id)["state"] == "completed"


def test_a_master_stopped_with_sigterm_exits_and_its_successor_adopts_the_job(score):
    """SIGTERM (systemctl stop) ends the master although the agents' and
    scrun's streams stay open; it says so, and the job goes on under the
    next master."""
    m = marker()
    run = score.start("-v", "-nodes=4x1", "sleep", m)
    job_id = run.job_id()
    score.wait_job(job_id, "running")
    log = score.vc.service_dir / "head" / "scored.log"
    before = log.read_text(errors="replace")

    restart_master(score, sig=signal.SIGTERM)

    said = log.read_text(errors="replace")[len(before):]
    assert "SIGTERM: stopping" in said and "master stopped" in said, said
    assert score.job(job_id)["state"] == "running"
    score.scorectl("cancel", str(job_id))
    assert run.wait(60) != 0
    assert f"scrun: re-attached to job {job_id}" in run.stderr(), run.stderr()
    score.assert_job_gone(job_id, m)


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
