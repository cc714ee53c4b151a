"""PM's udp device between two nodes of the virtual cluster, checked by
pmcheck: every message exactly once, in order, with the right bytes, while
the network trunks over two NICs, loses packets, loses a NIC for a while,
meets a receiver that sits on its buffers, and receives foreign datagrams.

Ranks 0 and 1 run on n1 and n2 (pattern pairs: 0 <-> 1, both directions at
once), so all their traffic is udp.  Figures (pmcheck's seconds and
counters) are printed: `pytest -s` shows them.
"""

import shutil
import time

import pytest

from .pmjob import (App, add_udp_loss, fnv1a64, garbage_datagrams, grown, namespace_of,
                    nic_counters, pm_sockets, send_datagrams, udp_loss_dropped, wait_for)

PAIR = ["n1", "n2"]


def check(res):
    """Every rank ok: no wrong, lost, duplicated or reordered message, no stall."""
    assert res.all_ok(), res.describe()


def report(name, res):
    print(f"\n{name}: {res.seconds():.2f} s (pmcheck), {res.wall:.2f} s (mpirun); "
          f"{res.counters('retransmits', 'loses', 'stops', 'gos', 'drops', 'send_eagain')}")


def test_two_nics_carry_verified_traffic(pair_cluster, jobs):
    """100k messages of 1-9000 bytes each way plus remote writes and reads:
    all correct, and both NICs of both nodes carried a large share."""
    vc = pair_cluster
    before = {n: nic_counters(vc, n) for n in PAIR}
    res = jobs(vc, PAIR, [App(2, ["--count", 100000, "--sizes", "1-9000", "--rma",
                                  "--timeout", 45])]).wait()
    after = {n: nic_counters(vc, n) for n in PAIR}
    report("2 nodes x 2 NICs, 100k messages 1-9000 B, --rma", res)
    check(res)
    assert all(r["device"] == "udp" for r in res.ranks.values()), res.describe()
    assert all(r["rma_writes"] >= 5 and r["rma_reads"] >= 5 for r in res.ranks.values())
    # 100k messages of 4.5 kB on average are about 330k packets per direction;
    # striping puts a large share on each NIC (not an exact half: the path with
    # fewer bytes in flight is chosen).
    for node in PAIR:
        tx = {nic: grown(before[node], after[node], nic) for nic in ("eth0", "eth1")}
        print(f"{node} tx packets: {tx}")
        for nic, packets in tx.items():
            assert packets > 50000, f"{node} {nic} sent only {packets} packets: {tx}"


@pytest.mark.skipif(shutil.which("nft") is None,
                    reason="nftables is not installed (nftables, scripts/install-deps.sh)")
@pytest.mark.parametrize("percent, count", [(1, 50000),
                                            pytest.param(10, 4000, marks=pytest.mark.slow)])
def test_random_loss_is_repaired(vcluster, jobs, percent, count):
    """nftables in both nodes drops `percent` % of incoming UDP: Go-Back-N
    (LOSE, timeouts) repairs every loss."""
    vc = vcluster(nodes=2, nics=2)
    for node in PAIR:
        add_udp_loss(vc, node, percent)
    res = jobs(vc, PAIR, [App(2, ["--count", count, "--sizes", "1-9000", "--timeout", 60])]).wait()
    dropped = {n: udp_loss_dropped(vc, n) for n in PAIR}
    report(f"{percent} % loss, {count} messages 1-9000 B", res)
    print(f"dropped by nftables: {dropped}")
    check(res)
    assert all(dropped.values()), dropped
    assert res.total("retransmits") > 0 and res.total("loses") > 0, res.describe()


@pytest.mark.slow
def test_a_nic_that_goes_down_and_up(vcluster, jobs):
    """eth1 of n1 goes down for 3 s in the middle of a job: traffic goes on
    over eth0, nothing is lost or duplicated, and eth1 is used again once it
    is back."""
    vc = vcluster(nodes=2, nics=2)
    job = jobs(vc, PAIR, [App(2, ["--count", 800000, "--sizes", "1-9000", "--timeout", 120])])
    wait_for("pmcheck's sockets in n1", lambda: pm_sockets(vc, "n1"), timeout=30)
    time.sleep(2)
    assert job.running(), "the job ended before the NIC went down: raise --count"
    vc.exec("n1", "ip", "link", "set", "eth1", "down", check=True)
    down = nic_counters(vc, "n1")
    time.sleep(3)
    assert job.running(), "the job ended while the NIC was down: raise --count"
    vc.exec("n1", "ip", "link", "set", "eth1", "up", check=True)
    up = nic_counters(vc, "n1")
    res = job.wait()
    end = nic_counters(vc, "n1")
    report("eth1 of n1 down for 3 s, 800k messages 1-9000 B", res)
    during = {nic: grown(down, up, nic) for nic in ("eth0", "eth1")}
    after = {nic: (grown(up, end, nic, "tx"), grown(up, end, nic, "rx")) for nic in ("eth0", "eth1")}
    print(f"n1 tx packets while eth1 was down: {during}; (tx, rx) after it came back: {after}")
    check(res)
    assert not down["eth1"]["up"] and up["eth1"]["up"]
    assert during["eth0"] > 1000, f"traffic did not go on over eth0: {during}"
    assert after["eth1"][0] > 1000 and after["eth1"][1] > 1000, \
        f"eth1 carried no traffic after it came back: {after}"


def test_a_receiver_that_sits_on_its_buffers_stops_the_sender(pair_cluster, jobs):
    """Flow control: rank 1 (n2) has a 64 KiB receive ring, rank 0 (n1) the
    default 512 KiB, so rank 0 can have far more in flight than rank 1 can
    take; rank 1 pauses 200 ms every 2000 messages.  Rank 1 must refuse with
    STOP and reopen with GO, and every message still arrives exactly once.

    (pmcheck --hold-ms keeps a single message unreleased while it sleeps, so
    with equal rings on both sides the ring hardly ever fills: in flight
    never exceeds the sender's own ring.)"""
    vc = pair_cluster
    args = ["--count", 20000, "--sizes", "1-9000", "--hold-ms", 200, "--hold-every", 2000,
            "--timeout", 30]
    res = jobs(vc, PAIR, [App(1, args), App(1, args, env={"PM_UDP_RING_KIB": 64})]).wait()
    report("receiver holds 200 ms every 2000 messages, 64 KiB ring on rank 1", res)
    check(res)
    small = res.ranks[1]
    assert small["stops"] > 0 and small["gos"] > 0, res.describe()


@pytest.mark.slow
def test_a_million_messages(pair_cluster, jobs):
    """10^6 messages of 1-2048 bytes in all (500k each way), every one
    checked: exactly once, in order, right length, right bytes."""
    res = jobs(pair_cluster, PAIR, [App(2, ["--count", 500000, "--sizes", "1-2048",
                                            "--timeout", 90])]).wait()
    report("10^6 messages of 1-2048 B (500k each way)", res)
    check(res)
    assert res.total("received") == 10**6 and res.total("sent") == 10**6


def test_foreign_and_malformed_datagrams_are_dropped(pair_cluster, jobs):
    """While n1 and n2 run a job, n3 sends n1's PM sockets random bytes,
    truncated headers, well-formed packets of another job (wrong job key)
    and well-formed packets with the key one could derive from the job's
    name (which is public; the key is a secret drawn for the job): rank 0
    drops and counts every one, and the job is untouched."""
    vc = pair_cluster
    job = jobs(vc, PAIR, [App(2, ["--count", 100000, "--sizes", "1-9000", "--timeout", 45])])
    nics = {vc.address("n1", net) for net in (0, 1)}

    def pm_ports():     # one per NIC; not the launcher's own sockets on loopback
        found = {s: d for s, d in pm_sockets(vc, "n1").items() if s[0] in nics}
        return found if len(found) == len(nics) else None

    targets = wait_for("pmcheck's socket on each NIC of n1", pm_ports, timeout=30)
    namespace = namespace_of("pmcheck")
    assert namespace, "no pmcheck process with a PMIX_NAMESPACE"
    sent = send_datagrams(vc, "n3", sorted(targets),
                          garbage_datagrams(seed=7, count=3000, name_key=fnv1a64(namespace)))
    time.sleep(0.5)
    after = pm_ports()
    assert after and job.running(), "the job ended before the datagrams were read: raise --count"
    # What the kernel discarded (a full socket buffer) never reached PM.
    kernel = sum(after.values()) - sum(targets.values())
    res = job.wait()
    report(f"{sent} foreign datagrams sent to rank 0", res)
    check(res)
    drops = {r: res.ranks[r]["drops"] for r in res.ranks}
    print(f"drops: {drops} of {sent} sent; discarded by the kernel: {kernel}")
    assert sent - kernel <= drops[0] <= sent, f"{drops} of {sent} sent, {kernel} lost in the kernel"
    assert drops[1] == 0, f"rank 1 received no foreign datagram, yet dropped some: {drops}"
