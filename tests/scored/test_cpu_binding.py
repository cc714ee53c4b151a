"""agent.cpus binds a job's ranks to CPUs in order (docs/scored/admin.md):
the node's i-th rank runs on cpus[i % len]; the role score_smp writes the
list from the node's topology.  A CPU the agent may not use is refused when
the agent starts, not when a rank does.  The module restarts its cluster's
agents with a configuration of their own, so it has its own cluster."""

import os
import signal
import subprocess

import pytest

from .score import SCORE_BIN, agent_pid, start_agent, wait_for


@pytest.fixture
def score(own_score):
    return own_score


def with_cpus(toml, cpus):
    lines = [line for line in toml.splitlines() if not line.startswith("cpus =")]
    return "\n".join(lines).replace("[agent]", f"[agent]\ncpus = {cpus}", 1) + "\n"


def test_ranks_run_on_the_cpus_of_agent_cpus_in_order(score):
    if (os.cpu_count() or 1) < 2:
        pytest.fail("this test needs 2 CPUs")
    vc = score.vc
    for node in vc.nodes:
        pid = agent_pid(vc, node)
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 10, f"{node}'s agent to end")
        conf = vc.service_dir / node / "scored.toml"
        conf.write_text(with_cpus(conf.read_text(), "[1, 0]"))
        start_agent(vc, node)
    wait_for(lambda: all(n["state"] == "up" for n in score.nodes().values()), 30,
             "every agent back")
    run = score.scrun("-nodes=1x2", "sh", "-c",
                      'echo "$SCORE_LOCAL_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"')
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.splitlines()) == ["0 1", "1 0"], run.stdout


@pytest.mark.parametrize("cpus, message", [
    ("[4096]", "agent.cpus names CPU 4096; CPU numbers go up to 1023"),
    (f"[{(os.cpu_count() or 1) + 7}]", "which this agent may not use"),
])
def test_a_cpu_the_agent_may_not_use_is_refused_at_start(own_cluster, tmp_path, cpus, message):
    conf = tmp_path / "scored.toml"
    conf.write_text(with_cpus((own_cluster.service_dir / "n1" / "scored.toml").read_text(), cpus))
    proc = subprocess.run([str(SCORE_BIN / "scored"), "agent", "--config", str(conf)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
