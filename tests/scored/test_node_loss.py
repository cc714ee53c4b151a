"""A node lost while a job runs on it (docs/scored/admin.md, "What happens
when things fail"): its agent killed, or silent past the heartbeat timeout.
The job fails everywhere with "node nX lost", the node shows down, and once
its agent is back the node is up again and takes jobs.  These tests break
their cluster, so the module has one of its own."""

import os
import re
import signal

import pytest

from .score import agent_pid, marker, processes_with, start_agent, wait_for


@pytest.fixture
def score(own_score):
    return own_score


def start_4x1(score):
    m = marker()
    run = score.start("-v", "-nodes=4x1", "sleep", m)
    job_id = run.job_id()
    job = score.wait_job(job_id, "running")
    assert job["nodes"] == ["n1", "n2", "n3", "n4"], job
    wait_for(lambda: len(processes_with(m)) == 4, 10, "the 4 ranks to start")
    return run, job_id, m


def test_a_killed_agent_fails_its_job_and_comes_back(score):
    vc = score.vc
    run, job_id, m = start_4x1(score)
    boot_id = score.nodes()["n3"]["boot_id"]

    os.kill(agent_pid(vc, "n3"), signal.SIGKILL)
    assert run.wait(30) == 1, run.stderr()
    assert f"scrun: job {job_id} failed: node n3 lost" in run.stderr(), run.stderr()
    job = score.job(job_id)
    assert job["state"] == "failed" and job["exit_status"] == 1, job
    assert job["reason"].startswith("node n3 lost"), job
    nodes = score.nodes()
    assert nodes["n3"]["state"] == "down" and nodes["n3"]["reason"], nodes["n3"]
    assert [n for n in ("n1", "n2", "n4") if nodes[n]["state"] != "up"] == []
    # The ranks on the other nodes are killed; the one on n3 died with its agent.
    wait_for(lambda: not processes_with(m), 20, "every rank of the job to be gone")

    # While n3 is down a 4-node job waits for it ...
    waiting = score.start("-v", "-nodes=4x1", "hostname")
    waiting_id = waiting.job_id()
    job = wait_for(lambda: (lambda j: j if j["state"] == "pending" else None)(
        score.job(waiting_id)), 10, "the 4-node job to wait")
    assert re.fullmatch(r"waiting for 4 node(s|\(s\)) \(3 free\)", job["reason"]), job

    # ... and runs on all four once the agent is back.
    start_agent(vc, "n3")
    wait_for(lambda: score.nodes()["n3"]["state"] == "up", 20, "n3 to be up again")
    assert score.nodes()["n3"]["boot_id"] != boot_id
    assert waiting.wait(30) == 0, waiting.stderr()
    assert sorted(waiting.stdout().split()) == ["n1", "n2", "n3", "n4"]
    # The restarted agent removed what the failed job left on n3.
    score.assert_job_gone(job_id, m)
    proc = score.scrun("-nodes=4x1", "hostname")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["n1", "n2", "n3", "n4"]


def node_of(pid):
    """SCORE_NODE of a rank (its environment, readable by root)."""
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"SCORE_NODE="):
            return kv.split(b"=", 1)[1].decode()
    return None


def test_a_silent_agent_is_lost_after_the_heartbeat_timeout(score):
    vc = score.vc
    run, job_id, m = start_4x1(score)
    pid = agent_pid(vc, "n2")
    os.kill(pid, signal.SIGSTOP)
    try:
        assert run.wait(30) == 1, run.stderr()
        assert f"scrun: job {job_id} failed: node n2 lost (no heartbeat for 3000 ms)" \
            in run.stderr(), run.stderr()
        node = score.nodes()["n2"]
        assert node["state"] == "down" and node["reason"] == "no heartbeat for 3000 ms", node
        # The ranks on the nodes that answer are killed.
        wait_for(lambda: len(processes_with(m)) <= 1, 20, "the ranks on n1, n3, n4 to go")
    finally:
        os.kill(pid, signal.SIGCONT)
    # Awake again, the agent finds its way back and its node's share of the
    # failed job does not outlive it.
    wait_for(lambda: score.nodes()["n2"]["state"] == "up", 30, "n2 to be up again")
    score.assert_job_gone(job_id, m)
    proc = score.scrun("-nodes=4x1", "hostname")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["n1", "n2", "n3", "n4"]


def test_ranks_die_with_their_agent_even_when_not_root(score):
    """kill -9 of an agent: its node's ranks go at once, also those of a
    user other than root (the death signal is set after the change of
    credentials, which clears it), not only when the master fails the job.
    n4: the other tests kill or stop the agents of n3 and n2."""
    vc = score.vc
    m = marker()
    run = score.start("-v", "-nodes=4x1", "sleep", m, user="nobody")
    job_id = run.job_id()
    score.wait_job(job_id, "running")
    wait_for(lambda: len(processes_with(m)) == 4, 10, "the 4 ranks to start")
    on_n4 = [p for p in processes_with(m) if node_of(p) == "n4"]
    assert len(on_n4) == 1, {p: node_of(p) for p in processes_with(m)}
    assert os.stat(f"/proc/{on_n4[0]}").st_uid != 0, "the rank runs as nobody"

    os.kill(agent_pid(vc, "n4"), signal.SIGKILL)
    wait_for(lambda: on_n4[0] not in processes_with(m), 5,
             f"rank {on_n4[0]} on n4 to die with its agent")
    assert run.wait(30) == 1, run.stderr()
    assert "node n4 lost" in run.stderr(), run.stderr()
    wait_for(lambda: not processes_with(m), 20, "every rank of the job to be gone")
    start_agent(vc, "n4")
    wait_for(lambda: score.nodes()["n4"]["state"] == "up", 20, "n4 to be up again")
