"""A cluster configured as in production rather than for the tests: root's
jobs are refused (master.allow_root_jobs = false) and there is no time
sharing (master.gang_slots = 1), so a job that does not fit waits for free
nodes.  Jobs run as `nobody`; root still manages them with scorectl."""

import re
import signal
import time

import pytest

from .score import Score, marker, processes_with, wait_for


@pytest.fixture(scope="module")
def strict_cluster(own_cluster_factory):
    return own_cluster_factory(score_master={"allow_root_jobs": False, "gang_slots": 1})


@pytest.fixture
def score(strict_cluster):
    s = Score(strict_cluster)
    try:
        yield s
    finally:
        s.cleanup()


def test_roots_jobs_are_refused(score):
    m = marker()
    proc = score.scrun("-nodes=1", "sleep", m)
    assert proc.returncode == 255, proc.stderr
    assert "jobs of root are refused by this cluster (master.allow_root_jobs = false)" \
        in proc.stderr, proc.stderr
    assert not processes_with(m)
    assert not [j for j in score.jobs(all=True) if m in j["argv"]]
    rejected = score.scorectl("jobs")  # root may still look
    assert rejected.returncode == 0, rejected.stderr


def test_an_ordinary_users_job_runs_as_that_user(score):
    proc = score.scrun("-l", "-nodes=2x1", "sh", "-c", 'echo "$(id -u) $(id -g)"',
                       user="nobody")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["0: 65534 65534", "1: 65534 65534"]


def _pending(score, job_id):
    job = score.job(job_id)
    return job if job["state"] == "pending" else None


def test_two_jobs_share_the_cluster_and_a_third_waits(score):
    flag = score.workdir / "release-a"
    ma, mb = marker(), marker()
    a = score.start("-v", "-J", "share-a", "-nodes=2x1", "sh", "-c",
                    f"while [ ! -e {flag} ]; do sleep 0.1; done; : {ma}", user="nobody")
    b = score.start("-v", "-J", "share-b", "-nodes=2x1", "sleep", mb, user="nobody")
    ja, jb = a.job_id(), b.job_id()
    job_a = score.wait_job(ja, "running")
    job_b = score.wait_job(jb, "running")
    assert len(job_a["nodes"]) == len(job_b["nodes"]) == 2
    assert not set(job_a["nodes"]) & set(job_b["nodes"]), (job_a["nodes"], job_b["nodes"])

    c = score.start("-v", "-J", "share-c", "-nodes=2x1", "hostname", user="nobody")
    jc = c.job_id()
    wait_for(lambda: _pending(score, jc), 10, f"job {jc} to be pending")
    job_c = next(j for j in score.jobs() if j["id"] == jc)  # as `scorectl jobs --json` shows it
    assert job_c["state"] == "pending" and job_c["nodes"] == [], job_c
    assert re.fullmatch(r"waiting for 2 node(s|\(s\)) \(0 free\)", job_c["reason"]), job_c
    time.sleep(1)  # it keeps waiting while both run
    assert score.job(jc)["state"] == "pending"
    assert {score.job(ja)["state"], score.job(jb)["state"]} == {"running"}

    flag.touch()
    assert a.wait(30) == 0, a.stderr()
    assert c.wait(30) == 0, c.stderr()
    job_c = score.job(jc)
    assert job_c["state"] == "completed"
    assert sorted(job_c["nodes"]) == sorted(job_a["nodes"])
    assert sorted(c.stdout().split()) == sorted(job_a["nodes"])
    assert re.search(rf"job {jc} queued \(waiting for 2 node(s|\(s\)) \(0 free\)\)", c.stderr()), \
        c.stderr()
    # b was never disturbed.
    assert score.job(jb)["state"] == "running"
    proc = score.scorectl("cancel", jb)  # root manages nobody's job
    assert proc.returncode == 0, proc.stderr
    assert b.wait(30) == 130, b.stderr()
    score.assert_job_gone(jb, mb)


def test_a_job_does_not_overtake_an_earlier_waiting_one(score):
    m = marker()
    big = score.start("-v", "-nodes=3x1", "sleep", m, user="nobody")
    jbig = big.job_id()
    score.wait_job(jbig, "running")
    # 2 nodes wanted, 1 free: waits ...
    second = score.start("-v", "-nodes=2x1", "hostname", user="nobody")
    j2 = second.job_id()
    wait_for(lambda: _pending(score, j2), 10, f"job {j2} to be pending")
    # ... and a 1-node job that would fit waits behind it.
    third = score.start("-v", "-nodes=1", "hostname", user="nobody")
    j3 = third.job_id()
    job3 = wait_for(lambda: _pending(score, j3), 10, f"job {j3} to be pending")
    assert re.fullmatch(r"waiting behind 1 earlier job\(s\)", job3["reason"]), job3
    time.sleep(1)
    assert score.job(j3)["state"] == "pending"
    big.signal(signal.SIGINT)
    assert big.wait(30) == 130, big.stderr()
    assert second.wait(30) == 0, second.stderr()
    assert third.wait(30) == 0, third.stderr()
    score.assert_job_gone(jbig, m)
