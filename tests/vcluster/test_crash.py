"""down is safe after a crash: with the state file gone, stale or lying, with
a holder dead, or after an up that failed half-way (which rolls itself back)."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .checks import holders_of, leftovers

STATE_DIR = Path("/run/score/vcluster")


def test_down_without_state_file_removes_everything(vcluster, vcluster_cli):
    vc = vcluster(nodes=3, nics=2, rate="1gbit")
    sleeper = vc.popen("n1", "sleep", "300")
    (STATE_DIR / f"{vc.name}.json").unlink()
    down = vcluster_cli("down", "--name", vc.name)
    assert down.returncode == 0, down.stderr
    assert sleeper.wait(timeout=10) != 0
    assert leftovers(vc.name) == []


def test_up_refuses_leftovers_without_state_file(vcluster, vcluster_cli):
    vc = vcluster(nodes=2)
    (STATE_DIR / f"{vc.name}.json").unlink()
    proc = vcluster_cli("up", "--name", vc.name, "--nodes", "2")
    assert proc.returncode == 1
    assert f"cluster {vc.name} has leftovers of an earlier run without a state file" in proc.stderr
    assert "3 namespaces" in proc.stderr      # the 2 nodes' and the switch's
    assert f"run 'vcluster down --name {vc.name}' first" in proc.stderr


def test_a_dead_holder_is_reported_and_cleaned_up(vcluster, vcluster_cli):
    vc = vcluster(nodes=2)
    pid = vc.state["nodes"][1]["holder_pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pid in holders_of(vc.name) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc = vcluster_cli("exec", "--name", vc.name, "n2", "--", "true")
    assert proc.returncode == 1
    assert f"node n2 of cluster {vc.name} is not running" in proc.stderr
    proc = vcluster_cli("up", "--name", vc.name, "--nodes", "2")
    assert proc.returncode == 1
    assert f"cluster {vc.name} is damaged: node(s) n2 have no holder process" in proc.stderr
    assert not vc.status()["healthy"]
    assert vcluster_cli("down", "--name", vc.name).returncode == 0
    assert leftovers(vc.name) == []


def test_a_stale_state_file_is_ignored(vcluster, vcluster_cli):
    """A state file whose cluster is gone (a reboot with a persistent /run)."""
    vc = vcluster(nodes=2)
    state_file = STATE_DIR / f"{vc.name}.json"
    saved = state_file.read_text()
    vc.down()
    state_file.write_text(saved)
    proc = vcluster_cli("up", "--name", vc.name, "--nodes", "3")
    assert proc.returncode == 0, proc.stderr
    assert "removing stale state file" in proc.stderr
    assert vcluster_cli("exec", "--name", vc.name, "n3", "--", "hostname").stdout == "n3\n"


def test_failed_up_rolls_back_and_spares_foreign_links(cluster_name, vcluster_cli):
    """An interface in the way makes up fail half-way; what up made is removed,
    the interface it did not make is left alone.  (The veths of the nodes are
    made in the root namespace before they move to the switch, so a name
    taken there is in the way.)"""
    blocker = f"{cluster_name}-n2-0"
    _add_foreign_link(blocker)
    try:
        proc = vcluster_cli("up", "--name", cluster_name, "--nodes", "3")
        assert proc.returncode == 1
        assert "rolling back" in proc.stderr
        assert "File exists" in proc.stderr
        assert leftovers(cluster_name) == [f"link {blocker}"]
    finally:
        subprocess.run(["ip", "link", "del", blocker], timeout=10)
    assert leftovers(cluster_name) == []


def test_down_removes_leftovers_of_a_crashed_up(cluster_name, vcluster_cli):
    """Objects made by hand the way a crashed up would leave them: no state,
    no link alias, no holders."""
    ns = f"vcluster-{cluster_name}-n1"
    bridge = f"{cluster_name}-br0"
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=10)
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True, timeout=10)
    subprocess.run(["ip", "link", "add", f"{cluster_name}-n1-0", "type", "veth", "peer", "name",
                    "eth0", "netns", ns], check=True, timeout=10)
    Path(f"/etc/netns/{ns}").mkdir(parents=True)
    status = vcluster_cli("status")
    assert f"cluster {cluster_name}: leftovers without a state file" in status.stdout
    proc = vcluster_cli("down", "--name", cluster_name)
    assert proc.returncode == 0, proc.stderr
    assert leftovers(cluster_name) == []


def _add_foreign_link(name):
    """A link of a kind vcluster never makes (dummy, or ifb where there is no dummy)."""
    for kind in ("dummy", "ifb"):
        if subprocess.run(["ip", "link", "add", name, "type", kind], capture_output=True,
                          timeout=10).returncode == 0:
            return
    pytest.skip("the kernel has neither dummy nor ifb links")


def test_up_interrupted_half_way_rolls_back(cluster_name):
    """SIGTERM while a large cluster is being built: up removes what it made."""
    from conftest import VCLUSTER
    proc = subprocess.Popen([str(VCLUSTER), "up", "--name", cluster_name, "--nodes", "64",
                             "--nics", "8", "--rate", "1gbit"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not Path(f"/run/netns/vcluster-{cluster_name}-n1").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "up ended before it built anything"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "rolling back" in err and "terminated by signal 15" in err
    assert leftovers(cluster_name) == []


def test_the_next_run_takes_down_a_cluster_left_by_a_killed_run(vcluster):
    """Every holder dead, the namespaces left, as when a test run is killed
    before its teardown: the next pytest session takes the cluster down at
    its start (tests/conftest.py, pytest_sessionstart), and leaves a
    cluster that is alive alone."""
    from conftest import pytest_sessionstart

    left, alive = vcluster(nodes=2), vcluster(nodes=1)
    for node in left.state["nodes"]:
        os.kill(node["holder_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while holders_of(left.name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(left.name), "the killed cluster's namespaces must still be there"
    pytest_sessionstart(None)
    assert leftovers(left.name) == []
    assert alive.status()["healthy"]
