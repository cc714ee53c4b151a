"""up is idempotent and down removes everything it made, processes included."""

import json
import subprocess
import time

from .checks import leftovers, process_gone


def _pids_in(vc, node):
    """PIDs that `vcluster status` lists as running in `node`."""
    return [p["pid"] for p in vc.status()["nodes"][vc.nodes.index(node)]["processes"]]


def test_up_twice_with_the_same_shape_changes_nothing(vcluster, vcluster_cli):
    vc = vcluster(nodes=2, nics=2, rate="1gbit")
    again = vcluster_cli("up", "--json", "--name", vc.name, "--nodes", 2, "--nics", 2,
                         "--rate", "1000mbit")
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stderr
    result = json.loads(again.stdout)
    assert result["changed"] is False
    assert [n["holder_pid"] for n in result["cluster"]["nodes"]] == \
           [n["holder_pid"] for n in vc.state["nodes"]]


def test_down_leaves_nothing_behind(vcluster, vcluster_cli):
    vc = vcluster(nodes=4, nics=2, rate="1gbit")
    assert leftovers(vc.name), "the check itself must see a cluster that is up"
    # A process vcluster exec started, and one that left its parent behind.
    sleeper = vc.popen("n2", "sleep", "300")
    orphan = vc.exec("n3", "sh", "-c", "sleep 301 >/dev/null 2>&1 & echo $!", check=True)
    orphan_pid = int(orphan.stdout)
    deadline = time.monotonic() + 5
    while sleeper.pid not in _pids_in(vc, "n2") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleeper.pid in _pids_in(vc, "n2")
    assert orphan_pid in _pids_in(vc, "n3")

    down = vcluster_cli("down", "--name", vc.name)
    assert down.returncode == 0, down.stderr
    assert sleeper.wait(timeout=10) != 0  # ended by a signal
    assert process_gone(orphan_pid)
    assert leftovers(vc.name) == []

    again = vcluster_cli("down", "--name", vc.name)
    assert again.returncode == 0 and "not up" in again.stderr


def test_status_shows_nodes_and_their_processes(vcluster, vcluster_cli):
    vc = vcluster(nodes=2, nics=1, rate="100mbit", mtu=9000)
    sleeper = vc.popen("n1", "sleep", "299")
    deadline = time.monotonic() + 5
    while sleeper.pid not in _pids_in(vc, "n1") and time.monotonic() < deadline:
        time.sleep(0.05)
    status = vc.status()
    assert status["shape"] == {"nodes": 2, "nics": 1, "rate_bps": 100_000_000,
                               "rate": "100mbit", "mtu": 9000}
    assert status["healthy"]
    n1 = status["nodes"][0]
    assert {"pid": sleeper.pid, "command": "sleep 299"} in n1["processes"]
    text = vcluster_cli("status", "--name", vc.name)
    assert text.returncode == 0
    assert "rate 100mbit, MTU 9000" in text.stdout and "sleep 299" in text.stdout


def test_status_of_a_cluster_that_is_not_up(cluster_name, vcluster_cli):
    proc = vcluster_cli("status", "--name", cluster_name)
    assert proc.returncode == 3
    assert f"cluster {cluster_name} is not up" in proc.stdout


def test_tc_limits_both_ends_of_every_link(vcluster):
    vc = vcluster(nodes=2, nics=2, rate="250mbit")
    for node in vc.nodes:
        for net in range(2):
            # The bridge's end of the link is in the switch's namespace.
            host_end = subprocess.run(["tc", "-n", vc.switch_netns(), "qdisc", "show",
                                       "dev", f"{vc.name}-{node}-{net}"],
                                      capture_output=True, text=True, timeout=10, check=True).stdout
            node_end = vc.exec(node, "tc", "qdisc", "show", "dev", f"eth{net}", check=True).stdout
            assert "tbf" in host_end and "250Mbit" in host_end, host_end
            assert "tbf" in node_end and "250Mbit" in node_end, node_end


def test_two_clusters_side_by_side(vcluster, vcluster_cli):
    a = vcluster(nodes=2)
    b = vcluster(nodes=2, nics=2)
    assert a.subnet != b.subnet
    assert a.bridge(0) != b.bridge(0)
    # Same node names, separate networks: each n1 reaches its own n2 only.
    a.exec("n1", "ping", "-n", "-q", "-c1", "-W1", a.address("n2"), check=True)
    b.exec("n1", "ping", "-n", "-q", "-c1", "-W1", b.address("n2", 1), check=True)
    # a's nodes have no route into b's subnet at all.
    proc = a.exec("n1", "ping", "-n", "-q", "-c1", "-W1", b.address("n2"))
    assert proc.returncode == 2 and "Network is unreachable" in proc.stderr, proc.stderr
    # Without a name, rsh finds the cluster by a qualified name or an address.
    env = {k: v for k, v in a.env.items() if k != "VCLUSTER_NAME"}
    for target in (f"n2.{b.name}", a.address("n2")):
        proc = vcluster_cli("rsh", target, "hostname", env=env)
        assert proc.returncode == 0 and proc.stdout == "n2\n", proc.stderr
    proc = vcluster_cli("rsh", "n2", "hostname", env=env)
    assert proc.returncode == 1
    assert "several clusters are up" in proc.stderr and "VCLUSTER_NAME" in proc.stderr
    a.down()
    assert leftovers(a.name) == []
    assert b.exec("n2", "hostname").stdout == "n2\n"
