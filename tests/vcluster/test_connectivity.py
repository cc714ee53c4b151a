"""A cluster that is up is a working cluster: every node reaches every other
node on every network, host names and name tables are right inside the nodes,
and the host reaches the nodes."""

import subprocess

import pytest


@pytest.fixture
def vc(vcluster):
    return vcluster(nodes=3, nics=2)


def test_every_node_reaches_every_node_on_every_network(vc):
    failures = []
    for src in vc.nodes:
        targets = [vc.address(dst, net) for dst in vc.nodes if dst != src
                   for net in range(vc.shape["nics"])]
        # One shell per source node; each ping is bounded (-c1 -W1), as is the loop.
        script = 'for a in "$@"; do ping -n -q -c1 -W1 "$a" >/dev/null || echo "$a"; done'
        proc = vc.exec(src, "sh", "-c", script, "sh", *targets, timeout=30)
        assert proc.returncode == 0, proc.stderr
        failures += [f"{src} -> {addr}" for addr in proc.stdout.split()]
    assert not failures, "unreachable: " + ", ".join(failures)


def test_host_name_is_the_node_name(vc):
    for node in vc.nodes:
        assert vc.exec(node, "hostname", check=True).stdout.strip() == node


def test_names_resolve_inside_every_node(vc):
    expected = {}
    for other in vc.nodes:
        for name, net in ((other, 0), (f"{other}-net0", 0), (f"{other}-net1", 1),
                          (f"{other}.{vc.name}", 0), (f"{other}-net1.{vc.name}", 1)):
            expected[name] = vc.address(other, net)
    expected["host-net1"] = vc.host_address(1)
    for node in vc.nodes:
        # One getent per node for all names: it prints one line per name, in order.
        out = vc.exec(node, "getent", "hosts", *expected, check=True).stdout.splitlines()
        got = [line.split()[0] for line in out]
        assert got == list(expected.values()), f"inside {node}:\n" + "\n".join(out)


def test_sysfs_shows_the_node_interfaces(vc):
    out = vc.exec("n2", "ls", "/sys/class/net", check=True).stdout.split()
    assert sorted(out) == ["eth0", "eth1", "lo"]


def test_host_reaches_nodes_by_address_and_name(vc):
    for net in range(vc.shape["nics"]):
        proc = subprocess.run(["ping", "-n", "-q", "-c1", "-W1", vc.address("n3", net)],
                              capture_output=True, text=True, timeout=10)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # Bare names may belong to another cluster that is up too; qualified ones are unique.
    out = subprocess.run(["getent", "hosts", f"n2-net1.{vc.name}"], capture_output=True,
                         text=True, timeout=10).stdout.split()
    assert out and out[0] == vc.address("n2", 1)


def test_mtu_is_set_on_both_ends(vcluster):
    vc = vcluster(nodes=2, mtu=9000)
    assert vc.exec("n1", "cat", "/sys/class/net/eth0/mtu", check=True).stdout.strip() == "9000"
    with open(f"/sys/class/net/{vc.bridge(0)}/mtu") as f:
        assert f.read().strip() == "9000"
    # A 9000-byte datagram crosses the bridge without fragmentation (-M do).
    vc.exec("n1", "ping", "-n", "-q", "-c1", "-W1", "-M", "do", "-s", "8972",
            vc.address("n2"), check=True)


def test_frames_between_nodes_skip_the_hosts_netfilter(vc):
    """The bridges are in the cluster's switch namespace, with br_netfilter's
    hooks off there: a counter in the host's own prerouting hook sees no
    frame from n1 to n2, whatever the host's net.bridge.bridge-nf-call-iptables
    (build.py, "The switch").  The counter is in a table of the test's own,
    which counts and changes nothing, and goes at the end."""
    proc = subprocess.run(["ip", "netns", "exec", vc.switch_netns(), "sh", "-c",
                           "cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null "
                           "|| echo absent"],
                          capture_output=True, text=True, timeout=10, check=True)
    assert proc.stdout.strip() in ("0", "absent"), proc.stdout
    table = f"vcluster_test_{vc.name}"
    src, dst = vc.address("n1"), vc.address("n2")

    def nft(*args, rules=None):
        return subprocess.run(["nft", *args], input=rules, capture_output=True, text=True,
                              timeout=10)

    made = nft("-f", "-", rules=(f"table ip {table} {{\n chain pre {{\n"
                                 f"  type filter hook prerouting priority -300;\n"
                                 f"  ip saddr {src} ip daddr {dst} counter\n }}\n}}\n"))
    assert made.returncode == 0, made.stderr
    try:
        vc.exec("n1", "ping", "-n", "-q", "-c3", "-i", "0.2", "-W1", dst, check=True)
        listing = nft("list", "table", "ip", table)
        assert listing.returncode == 0, listing.stderr
        assert "counter packets 0 bytes 0" in listing.stdout, listing.stdout
    finally:
        nft("delete", "table", "ip", table)
