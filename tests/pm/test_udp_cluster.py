"""PM on a bigger virtual cluster: 4 nodes x 3 NICs, 2 processes per node,
so every job mixes the shm device (the two ranks of a node) and the udp
device striped over three NICs (ranks on other nodes).  pmcheck checks every
message: exactly once, in order, with the right bytes."""

import pytest

from .pmjob import App, grown, nic_counters

NODES = ["n1", "n2", "n3", "n4"]
NICS = ["eth0", "eth1", "eth2"]


@pytest.fixture(scope="module")
def cluster(vcluster_module, mpirun_available):
    return vcluster_module(nodes=4, nics=3)


@pytest.mark.parametrize("pattern, count", [("all", 2000), ("ring", 10000)])
def test_shm_and_udp_mixed(cluster, jobs, pattern, count):
    vc = cluster
    before = {n: nic_counters(vc, n) for n in NODES}
    res = jobs(vc, NODES, [App(8, ["--pattern", pattern, "--count", count, "--sizes", "1-9000",
                                   "--timeout", 60])], slots=2).wait()
    after = {n: nic_counters(vc, n) for n in NODES}
    tx = {n: {nic: grown(before[n], after[n], nic) for nic in NICS} for n in NODES}
    print(f"\n{pattern}, 8 ranks on 4 nodes, {count} messages per destination: "
          f"{res.seconds():.2f} s (pmcheck), {res.wall:.2f} s (mpirun); {res.counters()}")
    print(f"tx packets per NIC: {tx}")
    assert res.all_ok(), res.describe()
    per_rank = count * (7 if pattern == "all" else 1)
    assert all(r["sent"] == per_rank and r["received"] == per_rank for r in res.ranks.values())
    # Every node sends to other nodes (all-to-all; ring: rank 2k+1 on one
    # node -> 2k+2 on the next), striped over its three NICs.
    for node in NODES:
        for nic in NICS:
            assert tx[node][nic] > 1000, f"{node} {nic} carried little: {tx}"


def test_nodes_with_different_nics(cluster, jobs):
    """When the job starts, n3 has eth0 and eth1 up and n4 eth0 alone (their
    other NICs are down): PM pairs each node's NICs with its peer's on the
    same networks, so n1 and n2 trunk over three NICs between them, over
    two with n3 and over one with n4.  Every message is right (pmcheck, all
    to all), each network carries what its nodes share, and nothing leaves
    by a NIC that is down."""
    vc = cluster
    down = {"n3": ["eth2"], "n4": ["eth1", "eth2"]}
    try:
        for node, nics in down.items():
            for nic in nics:
                vc.exec(node, "ip", "link", "set", nic, "down", check=True)
        before = {n: nic_counters(vc, n) for n in NODES}
        res = jobs(vc, NODES, [App(4, ["--pattern", "all", "--count", 3000, "--sizes", "1-9000",
                                       "--timeout", 60])]).wait()
        after = {n: nic_counters(vc, n) for n in NODES}
    finally:
        for node, nics in down.items():
            for nic in nics:
                vc.exec(node, "ip", "link", "set", nic, "up", check=False)
    tx = {n: {nic: grown(before[n], after[n], nic) for nic in NICS} for n in NODES}
    print(f"\n4 nodes with 3, 3, 2 and 1 NICs up, all to all: {res.seconds():.2f} s "
          f"(pmcheck); tx packets per NIC: {tx}")
    assert res.all_ok(), res.describe()
    assert all(r["device"] == "udp" for r in res.ranks.values()), res.describe()
    assert tx["n4"]["eth1"] == 0 and tx["n4"]["eth2"] == 0 and tx["n3"]["eth2"] == 0, tx
    assert tx["n4"]["eth0"] > 1000, f"n4 sent little over its one NIC: {tx}"
    assert tx["n3"]["eth0"] > 1000 and tx["n3"]["eth1"] > 1000, f"n3 did not trunk: {tx}"
    for node in ("n1", "n2"):
        for nic in NICS:
            assert tx[node][nic] > 1000, f"{node} {nic} carried little: {tx}"
