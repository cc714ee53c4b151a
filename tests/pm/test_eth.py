"""PM's eth device between virtual-cluster nodes: the udp device's protocol
in raw Ethernet frames (EtherType 0x88B5, a 12-byte link header), chosen
for peers on other nodes by composite with PM_NET_DEVICE=eth.  pmcheck
checks every message (exactly once, in order, with the right bytes) while
the frames trunk over two NICs, get lost, and meet malformed frames sent by
a stranger; misuse fails with a message that says what to do.

Three nodes with two NICs each; ranks are placed one or two per node.
Figures (pmcheck's seconds and counters) are printed: `pytest -s` shows them.
"""

import json
import os
import signal
import shutil
import struct
import time

import pytest

from . import pmjob
from .pmjob import App, garbage_datagrams, grown, nic_counters, pm_sockets, wait_for

NODES = ["n1", "n2", "n3"]
NICS = ["eth0", "eth1"]
ETH_TYPE = 0x88B5
# Composite: shm on a node, raw frames between nodes, over both NICs.
ETH = {"PM_NET_DEVICE": "eth", "PM_UDP_NICS": ",".join(NICS)}


# The tests count and drop packets with nftables inside the nodes.
needs_nft = pytest.mark.skipif(
    shutil.which("nft") is None,
    reason="nftables is not installed (nftables, scripts/install-deps.sh)")


@pytest.fixture(scope="module")
def cluster(vcluster_module, mpirun_available):
    return vcluster_module(nodes=3, nics=2)


@pytest.fixture
def mpirun_argv_edit(monkeypatch):
    """edit(f): the jobs of this test run mpirun with f(argv) (pmjob.Job builds
    its argv with pmjob.mpirun_argv; the original comes back after the test)."""
    def install(edit):
        original = pmjob.mpirun_argv
        monkeypatch.setattr(pmjob, "mpirun_argv", lambda *a, **k: edit(original(*a, **k)))
    return install


def by_node(argv):
    """Ranks round-robin over the nodes (rank r on node r mod N), so that rank
    r ^ 1, whose device pmcheck reports, is always on another node."""
    return argv[:1] + ["--map-by", "node"] + argv[1:]


UDP_TABLE = "pmethudp"


def count_nic_udp(vc, node):
    """Count the UDP datagrams that go in or out of `node`'s NICs (nftables;
    the shm device's wake-ups on loopback are not counted)."""
    nics = ", ".join(f'"{nic}"' for nic in NICS)
    vc.exec(node, "nft", "-f", "-", check=True, timeout=10, input=(
        f"table inet {UDP_TABLE} {{\n"
        f"  chain input {{\n"
        f"    type filter hook input priority 0; policy accept;\n"
        f"    iifname {{ {nics} }} meta l4proto udp counter\n"
        f"  }}\n"
        f"  chain output {{\n"
        f"    type filter hook output priority 0; policy accept;\n"
        f"    oifname {{ {nics} }} meta l4proto udp counter\n"
        f"  }}\n"
        f"}}\n"))


def nft_counters(vc, node, family, table):
    """{chain: packets} of the counters in `table` of `node`."""
    proc = vc.exec(node, "nft", "-j", "list", "table", family, table, check=True, timeout=10)
    found = {}
    for item in json.loads(proc.stdout)["nftables"]:
        rule = item.get("rule")
        for expr in (rule or {}).get("expr", []):
            if "counter" in expr:
                found[rule["chain"]] = expr["counter"]["packets"]
    return found


def check(res):
    """Every rank ok: no wrong, lost, duplicated or reordered message, no stall."""
    assert res.all_ok(), res.describe()


def report(name, res):
    print(f"\n{name}: {res.seconds():.2f} s (pmcheck), {res.wall:.2f} s (mpirun); "
          f"{res.counters('retransmits', 'loses', 'stops', 'gos', 'drops', 'dups')}")


@needs_nft
@pytest.mark.parametrize("pattern, per_node, count", [("all", 1, 3000), ("all", 2, 1000),
                                                      ("ring", 1, 10000), ("ring", 2, 4000)])
def test_verified_traffic_over_eth(cluster, jobs, mpirun_argv_edit, pattern, per_node, count):
    """All-to-all and ring, one and two ranks per node (placed round-robin,
    so co-located ranks talk over shm and the rest over eth), 1-9000 bytes:
    every message exact; every rank reports its peer on another node as
    reached by "eth"; every node sent frames on both NICs (trunking); and
    no UDP datagram went through any node's NICs (the frames are not UDP)."""
    vc = cluster
    mpirun_argv_edit(by_node)
    nranks = len(NODES) * per_node
    before = {n: nic_counters(vc, n) for n in NODES}
    try:
        for node in NODES:
            count_nic_udp(vc, node)
        res = jobs(vc, NODES, [App(nranks, ["--pattern", pattern, "--count", count,
                                            "--sizes", "1-9000", "--timeout", 40], env=ETH)],
                   slots=per_node).wait()
        udp = {n: nft_counters(vc, n, "inet", UDP_TABLE) for n in NODES}
    finally:
        for node in NODES:
            vc.exec(node, "nft", "delete", "table", "inet", UDP_TABLE, timeout=10)
    after = {n: nic_counters(vc, n) for n in NODES}
    tx = {n: {nic: grown(before[n], after[n], nic) for nic in NICS} for n in NODES}
    report(f"{pattern}, {nranks} ranks on {len(NODES)} nodes, {count} messages per destination",
           res)
    print(f"tx packets per NIC: {tx}; UDP datagrams through the NICs: {udp}")
    check(res)
    per_rank = count * (nranks - 1 if pattern == "all" else 1)
    assert all(r["sent"] == per_rank and r["received"] == per_rank
               for r in res.ranks.values()), res.describe()
    assert all(r["device"] == "eth" for r in res.ranks.values()), res.describe()
    # Every node sends to other nodes, its frames striped over both NICs:
    # thousands of frames each (a message of 4.5 kB on average is 3-4 frames).
    for node in NODES:
        for nic in NICS:
            assert tx[node][nic] > 1000, f"{node} {nic} carried little: {tx}"
    assert all(c == {"input": 0, "output": 0} for c in udp.values()), \
        f"UDP datagrams went through the NICs while the job ran over eth: {udp}"


LOSS_TABLE = "pmethloss"


def add_frame_loss(vc, node, percent):
    """Drop `percent` % of the PM frames (EtherType 0x88B5) each NIC of `node`
    receives: nftables at the NICs' ingress, before any packet socket sees
    them.  (tc netem would do as well where the kernel has it: this kernel
    has no sch_netem.)"""
    chains = "".join(
        f"  chain {nic} {{\n"
        f"    type filter hook ingress device \"{nic}\" priority 0; policy accept;\n"
        f"    ether type 0x{ETH_TYPE:04x} numgen random mod 100 < {int(percent)} counter drop\n"
        f"  }}\n" for nic in NICS)
    vc.exec(node, "nft", "-f", "-", input=f"table netdev {LOSS_TABLE} {{\n{chains}}}\n",
            check=True, timeout=10)


@needs_nft
def test_lost_frames_are_repaired(cluster, jobs):
    """2 % of the frames each NIC of n1 and n2 receives are dropped: Go-Back-N
    (LOSE, timeouts) repairs every loss, on both networks."""
    vc = cluster
    pair = NODES[:2]
    try:
        for node in pair:
            add_frame_loss(vc, node, 2)
        res = jobs(vc, pair, [App(2, ["--count", 10000, "--sizes", "1-9000", "--timeout", 40],
                                  env=ETH)]).wait()
        dropped = {n: nft_counters(vc, n, "netdev", LOSS_TABLE) for n in pair}
    finally:
        for node in pair:
            vc.exec(node, "nft", "delete", "table", "netdev", LOSS_TABLE, timeout=10)
    report("2 % of the frames lost, 10000 messages 1-9000 B", res)
    print(f"frames dropped at the NICs: {dropped}")
    check(res)
    assert all(r["device"] == "eth" for r in res.ranks.values()), res.describe()
    for node in pair:
        assert all(dropped[node].get(nic, 0) > 0 for nic in NICS), dropped
    assert res.total("retransmits") > 0 and res.total("loses") > 0, res.describe()


# ---- a full receive ring ----

def pids_in(vc, node, program="pmcheck"):
    """PIDs of the `program` processes in `node` (its network namespace)."""
    ns = vc.exec(node, "readlink", "/proc/self/ns/net", check=True, timeout=10).stdout.strip()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != ns:
                continue
            argv0 = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]
        except OSError:
            continue
        if argv0.endswith(program.encode()):
            found.append(int(pid))
    return sorted(found)


def ring_drops(vc, node, pids):
    """Frames the kernel dropped for a full ring, summed over the NICs of the
    contexts of `pids` (pminfo's rx_dropped, while they run)."""
    proc = vc.exec(node, str(pmjob.BUILD / "bin" / "pminfo"), "--json", check=True, timeout=10)
    return sum(n["rx_dropped"] for c in json.loads(proc.stdout)["contexts"]
               if c["pid"] in pids for n in c["nics"])


def test_a_full_ring_is_counted_and_repaired(cluster, jobs, mpirun_argv_edit):
    """The two ranks on n1 stop (SIGSTOP, by PID) for half a second while the
    four on n2 and n3 send to everyone over one NIC: each sender may have
    half of a peer's ring slots in flight (1024 of 2048 at MTU 1500, with
    PM_UDP_WINDOW raised to that bound), so four of them overfill the rings
    of n1's contexts twice over and the kernel drops the rest.  The drops
    are counted per NIC (pminfo's rx_dropped, read while the job runs),
    Go-Back-N resends them, and every message is exact.  (With the default
    window, 512, four senders fill a ring exactly: only the acknowledgements
    beside the data overflow it, and those need no resend.)"""
    vc = cluster
    mpirun_argv_edit(by_node)
    # A floor on the job's length: every rank holds 300 ms every 20000
    # messages, so it runs on after the stop for pminfo to read it.
    job = jobs(vc, NODES, [App(6, ["--pattern", "all", "--count", 60000, "--sizes", "1-64",
                                   "--hold-ms", 300, "--hold-every", 20000, "--timeout", 60],
                               env=dict(ETH, PM_UDP_NICS="eth0", PM_UDP_WINDOW="1024"))],
                  slots=2)
    pids = wait_for("the two ranks on n1", lambda: (lambda p: p if len(p) == 2 else None)(
        pids_in(vc, "n1")), timeout=30)
    wait_for("traffic on n1's eth0", lambda: nic_counters(vc, "n1")["eth0"]["rx"] > 5000,
             timeout=30)
    assert job.running(), "the job ended before the stop: raise --count"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    dropped = wait_for("rx_dropped of n1's contexts", lambda: ring_drops(vc, "n1", pids),
                       timeout=10)
    assert job.running(), "the job ended before its counters were read: raise --count"
    res = job.wait()
    report(f"n1's two ranks stopped 0.5 s; {dropped} frames dropped for full rings", res)
    check(res)
    assert dropped > 0
    assert res.total("retransmits") > 0, res.describe()


# ---- malformed frames ----

# Runs inside a node: read "IFNAME DST-MAC ETHERTYPE HEX-PAYLOAD" lines from
# stdin, send each as one Ethernet frame, print how many went out.  Paced
# (64 frames, then 2 ms) so that a receiver that keeps reading never finds
# its ring full.
FRAME_SENDER = r"""
import socket, sys, time
socks, n = {}, 0
for line in sys.stdin:
    ifname, mac, etype, payload = line.split()
    if ifname not in socks:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((ifname, 0))
        socks[ifname] = (s, s.getsockname()[4])
    s, src = socks[ifname]
    dst = bytes.fromhex(mac.replace(':', ''))
    s.send(dst + src + bytes.fromhex(etype) + bytes.fromhex(payload.strip('-')))
    n += 1
    if n % 64 == 0:
        time.sleep(0.002)
print(n)
"""


def link_header(dst_port, length, reserved=0, src_port=40000, src_addr="10.0.0.99"):
    """The eth device's 12-byte link header (pm/src/eth/frame.h)."""
    addr = bytes(int(b) for b in src_addr.split("."))
    return struct.pack(">HH4sHH", dst_port, src_port, addr, length, reserved)


def malformed_frames(port, seed, garbage):
    """Payloads (after the Ethernet header) for `port` that the eth device must
    drop and count: shorter than the link header, len past the frame's end,
    reserved bits set, and a sound link header around `garbage` PM packets no
    receiver may accept (random bytes, truncated headers, a wrong job key)."""
    frames = [struct.pack(">H", port) + bytes(k) for k in range(10)]      # 2-11 bytes
    body = bytes(range(40))
    frames += [link_header(port, len(body) + extra) + body for extra in (1, 2, 100, 1400)]
    frames.append(link_header(port, 0xFFFF))
    frames += [link_header(port, len(body), reserved=r) + body for r in (1, 0x100, 0x8000, 0xFFFF)]
    frames += [link_header(port, len(d)) + d for d in garbage_datagrams(seed, garbage)]
    return frames


def decoy_frames(port, other_port):
    """Frames that must never reach the context: for another port (the socket
    filter keeps them out) and of another EtherType."""
    probe = link_header(other_port, 8) + bytes(8)
    return [probe] * 50, [link_header(port, 8) + bytes(8)] * 50


def mac_of(vc, node, nic):
    proc = vc.exec(node, "ip", "-j", "link", "show", nic, check=True, timeout=10)
    return json.loads(proc.stdout)[0]["address"]


def test_malformed_frames_are_dropped_and_counted(cluster, jobs):
    """While n1 and n2 run a job, n3 sends n1's NICs raw frames of EtherType
    0x88B5 for the ports of rank 0 (the UDP port each NIC's reservation
    socket holds): too short for the link header, len past the frame, reserved
    bits set, and sound link headers around garbage PM packets; and, as
    decoys, frames for another port and frames of another EtherType.  The
    job is untouched, rank 0 drops and counts exactly the frames sent to its
    ports (none of the decoys), rank 1 none."""
    vc = cluster
    pair, stranger = NODES[:2], NODES[2]
    # A floor on the job's length whatever the machine's speed: each rank
    # holds (keeps reading, releases nothing) 250 ms every 30000 messages.
    job = jobs(vc, pair, [App(2, ["--count", 150000, "--sizes", "1-9000", "--hold-ms", 250,
                                  "--hold-every", 30000, "--timeout", 45], env=ETH)])
    addrs = {vc.address("n1", i): nic for i, nic in enumerate(NICS)}

    def eth_ports():        # the port of each NIC; not the launcher's sockets on loopback
        found = {addrs[a]: p for (a, p) in pm_sockets(vc, "n1") if a in addrs}
        return found if len(found) == len(NICS) else None

    ports = wait_for("pmcheck's port reservation on each NIC of n1", eth_ports, timeout=30)
    assert job.running(), "the job ended before its ports were found: raise --count"
    lines, expected = [], 0
    for i, (nic, port) in enumerate(sorted(ports.items())):
        mac = mac_of(vc, "n1", nic)
        other = next(p for p in range(port ^ 0x5A5A, 65536) if p not in ports.values())
        bad = malformed_frames(port, seed=11 + i, garbage=300)
        wrong_port, wrong_type = decoy_frames(port, other)
        expected += len(bad)
        lines += [f"{nic} {mac} {ETH_TYPE:04x} {f.hex() or '-'}" for f in bad]
        lines += [f"{nic} {mac} {ETH_TYPE:04x} {f.hex()}" for f in wrong_port]
        lines += [f"{nic} {mac} {ETH_TYPE + 1:04x} {f.hex()}" for f in wrong_type]
    proc = vc.exec(stranger, "python3", "-c", FRAME_SENDER, input="\n".join(lines) + "\n",
                   check=True, timeout=30)
    assert int(proc.stdout.strip()) == len(lines), proc.stdout
    time.sleep(0.5)
    assert job.running(), "the job ended before the frames were read: raise --count"
    res = job.wait()
    report(f"{len(lines)} frames sent to n1, {expected} of them malformed for rank 0's ports",
           res)
    check(res)
    assert all(r["device"] == "eth" for r in res.ranks.values()), res.describe()
    drops = {r: res.ranks[r]["drops"] for r in res.ranks}
    print(f"drops: {drops}; {expected} malformed frames sent to rank 0's ports, "
          f"{len(lines) - expected} decoys")
    assert drops[0] >= expected, \
        f"rank 0 counted {drops[0]} drops, {expected} malformed frames were sent to its ports"
    assert drops[0] == expected, \
        f"rank 0 counted {drops[0]} drops for {expected} malformed frames: decoys counted?"
    assert drops[1] == 0, f"rank 1 received no malformed frame, yet dropped some: {drops}"


# ---- misuse: clear errors ----

def failed_open(res):
    """The job failed in pm_open: mpirun non-zero, no rank reported."""
    assert res.returncode != 0 and not res.ranks, res.describe()
    assert "pm_open" in res.stderr, res.describe()


def test_eth_alone_cannot_reach_its_own_node(cluster, jobs):
    """PM_DEVICE=eth without composite: a frame never comes back to the NIC
    that sent it, so a context cannot reach itself; pm_open fails and says
    to run eth under composite."""
    vc = cluster
    res = jobs(vc, NODES[:2], [App(2, ["--count", 100, "--timeout", 20],
                                   env=dict(ETH, PM_DEVICE="eth"))]).wait()
    print(f"\nstderr: {res.stderr.strip()}")
    failed_open(res)
    assert "PM_NET_DEVICE=eth" in res.stderr, res.describe()


@pytest.mark.skipif(shutil.which("setpriv") is None,
                    reason="setpriv is not installed (util-linux)")
def test_without_cap_net_raw_the_error_says_so(cluster, jobs, mpirun_argv_edit):
    """Ranks started as root but without CAP_NET_RAW in their bounding set
    (setpriv) cannot open packet sockets: pm_open fails with EPERM and the
    message names CAP_NET_RAW and the way out (PM_NET_DEVICE=udp)."""
    vc = cluster

    def without_net_raw(argv):
        i = argv.index(str(pmjob.PMCHECK))
        return argv[:i] + ["setpriv", "--bounding-set", "-net_raw"] + argv[i:]

    mpirun_argv_edit(without_net_raw)
    res = jobs(vc, NODES[:2], [App(2, ["--count", 100, "--timeout", 20], env=ETH)]).wait()
    print(f"\nstderr: {res.stderr.strip()}")
    failed_open(res)
    assert "CAP_NET_RAW" in res.stderr, res.describe()
    assert "PM_NET_DEVICE=udp" in res.stderr, res.describe()
