"""Where a small message's time goes: PM's udp device against raw UDP.

Called by scripts/bench (suite "latency-breakdown").  Both sides run the same
way on the same unlimited vcluster link, both busy-polling, in one run:

  pm        pmbench ping-pong 8 B between n1 and n2 (PM_UDP_NICS=eth0,
            PM_SPIN_US large: PM never sleeps, as sockperf never does);
  raw UDP   sockperf ping-pong 14 B (its smallest), server and client with
            non-blocking sockets polled by recvfrom() (-F r --nonblocked).

Every process of both is sampled by `perf record -g -e cpu-clock` once the
exchange is under way.  A busy-polling process is on its core all the time,
so the share of its samples in a phase times the round-trip time is the time
that phase takes per round trip.  The phases, after the DP-II paper's 4-phase
model (seed 004: start-up, send, network, delivery), as the samples can tell
them apart by their call chains:

  startup    user-space work of the library and the program between two
             system calls (PM: protocol, headers, rings, the poll loop's
             bookkeeping; sockperf: its own loop), libc wrappers and clock
  send       the send system call, which on veth also carries the packet
             through the bridge into the peer's socket (the kernel half of
             the network time)
  delivery   receive system calls that returned data
  poll       receive system calls that found nothing, and yields: waiting
             for the peer, i.e. the peer's share of the round trip
  crossing   entering and leaving the kernel, for any system call (a sample
             there cannot tell which)
  other      anything else in the kernel (interrupts, timers, faults)

A receive that found data is told apart by the frames that copy and free
the datagram; a sample in the common part of a receive counts as poll, on
both sides alike.

What differs between PM and raw UDP is then visible phase by phase; the
table and the JSON give the time per round trip of each, and the ratio.
"""
import json
import re
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_stats import spread
from bench_udp import Cluster, pin

PHASES = ("startup", "send", "delivery", "poll", "crossing", "other")
PM_ITERS = 400000
SOCKPERF_SECONDS = 4
DELAY_MS = 1500          # perf starts this long after the program

# A system call's entry point may be inlined into the kernel's dispatcher
# (x64_sys_call): its __sys_/ksys_ body is matched as well.
SEND = ("__x64_sys_sendmmsg", "__x64_sys_sendto", "__x64_sys_sendmsg", "__x64_sys_write",
        "__sys_sendmmsg", "__sys_sendto", "__sys_sendmsg", "ksys_write")
RECV = ("__x64_sys_recvmmsg", "__x64_sys_recvfrom", "__x64_sys_recvmsg", "__x64_sys_read",
        "do_recvmmsg", "__sys_recvmmsg", "__sys_recvfrom", "__sys_recvmsg", "ksys_read")
YIELD = ("__x64_sys_sched_yield",)
# A receive that found data copies it out of a socket buffer.
RECV_DATA = ("skb_copy_datagram_iter", "__skb_datagram_iter", "_copy_to_iter",
             "skb_consume_udp", "__consume_stateless_skb", "skb_release_data",
             "udp_cmsg_recv", "ip_cmsg_recv_offset", "sock_recv_cmsgs", "put_cmsg",
             "__sock_recv_timestamp", "kfree_skbmem", "skb_free_head")
CROSSING = ("do_syscall_64", "entry_SYSCALL_64_after_hwframe", "syscall_exit_to_user_mode",
            "x64_sys_call")


def classify(frames):
    """The phase of one sample from its call chain (leaf first)."""
    names = [f[0] for f in frames]
    kernel = [f for f in frames if f[1] == "[kernel.kallsyms]"]
    if not kernel:
        return "startup"
    if any(n in SEND for n in names):
        return "send"
    if any(n in RECV for n in names):
        return "delivery" if any(n in RECV_DATA for n in names) else "poll"
    if any(n in YIELD for n in names):
        return "poll"
    if any(n in CROSSING for n in names) and not any(n.startswith(("__x64_sys_", "__sys_"))
                                                     for n in names):
        return "crossing"
    return "other"


def parse_perf_script(text, comm):
    """Counter of phases over the samples of processes named `comm`."""
    phases = Counter()
    for block in text.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if not lines or not lines[0].lstrip().startswith(comm):
            continue
        frames = []
        for ln in lines[1:]:
            m = re.match(r"\s*[0-9a-f]+\s+(\S+?)(?:\+0x[0-9a-f]+)?\s+\((.*)\)\s*$", ln)
            if m:
                frames.append((m.group(1), m.group(2)))
        if frames:
            phases[classify(frames)] += 1
    return phases


def perf_wrap(out):
    return ["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", "20000",
            "-D", str(DELAY_MS), "-o", str(out), "--"]


def phases_of(data, comm):
    text = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True,
                          text=True, check=False).stdout
    return parse_perf_script(text, comm)


def per_round_trip(phases, rtt_us):
    """us per round trip and process: both processes are busy all the
    time and do the same work (one send, one delivery), so a phase's share
    of their samples times the RTT; the phases sum to the RTT."""
    total = sum(phases.values())
    if total == 0:
        raise RuntimeError("perf recorded no samples")
    return {p: rtt_us * phases[p] / total for p in PHASES}


def pm_run(ctx, cl, tmp):
    """pmbench under mpirun, both ranks under perf; (rtt_us, phases)."""
    wrap = tmp / "wrap.sh"
    wrap.write_text("#!/bin/sh\nexec " + " ".join(perf_wrap(str(tmp) + "/pm.$OMPI_COMM_WORLD_RANK.data"))
                    + " \"$@\"\n")
    wrap.chmod(0o755)
    argv = cl.mpirun([str(wrap), str(ctx.bin / "pmbench"), "--test", "pingpong",
                      "--sizes", "8", "--iters", str(PM_ITERS), "--reps", "1",
                      "--recv", "copy", "--json"],
                     env={"PM_UDP_NICS": "eth0", "PM_SPIN_US": "100000000"})
    proc = ctx.run("pmbench ping-pong 8 B under perf", argv)
    rec = next(json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{"))
    rtt = 2 * rec["latency_us"]["median"]
    phases = Counter()
    for r in (0, 1):
        phases += phases_of(tmp / f"pm.{r}.data", "pmbench")
    return rtt, phases


def sockperf_run(ctx, cl, tmp):
    addr = cl.address("n1")
    feed = tmp / "feed"
    feed.write_text(f"U:{addr}:11113\n")
    server = cl.background("n1", *pin("n1"), *perf_wrap(tmp / "sp.server.data"), "sockperf", "server",
                           "-f", str(feed), "-F", "r", "--nonblocked")
    time.sleep(0.7)
    try:
        proc = ctx.run("sockperf ping-pong 14 B under perf",
                       cl.exec_argv("n2", *pin("n2"), *perf_wrap(tmp / "sp.client.data"), "sockperf",
                                    "ping-pong", "-f", str(feed), "-F", "r", "--nonblocked",
                                    "-m", "14", "-t", str(SOCKPERF_SECONDS)))
    finally:
        cl.stop(server)
    text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    m = re.search(r"percentile 50\.000 =\s*([0-9.]+)", text)
    if not m:
        raise RuntimeError("sockperf printed no latency")
    rtt = 2 * float(m.group(1))
    phases = phases_of(tmp / "sp.client.data", "sockperf") + \
        phases_of(tmp / "sp.server.data", "sockperf")
    return rtt, phases


def run(ctx):
    doc = {"method": __doc__.split("\n\n")[1], "phases": list(PHASES), "rounds": []}
    with Cluster("bdown", nodes=2, nics=1) as cl, tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        Path(tmp).chmod(0o755)
        for _ in range(ctx.rounds):
            pm_rtt, pm_ph = pm_run(ctx, cl, tmp)
            sp_rtt, sp_ph = sockperf_run(ctx, cl, tmp)
            doc["rounds"].append({
                "pm": {"rtt_us": pm_rtt, "samples": dict(pm_ph),
                       "per_rt_us": per_round_trip(pm_ph, pm_rtt)},
                "udp": {"rtt_us": sp_rtt, "samples": dict(sp_ph),
                        "per_rt_us": per_round_trip(sp_ph, sp_rtt)},
            })
    # Over the rounds, per side: each phase and the round trip ("rtt").
    doc["summary"] = {
        side: {p: spread(r[side]["rtt_us"] if p == "rtt" else r[side]["per_rt_us"][p]
                         for r in doc["rounds"])
               for p in (*PHASES, "rtt")}
        for side in ("pm", "udp")}
    print_table(doc)
    return doc


def print_table(doc):
    print("\nlatency breakdown: us per round trip and process (the phases sum to the RTT), "
          "median of the rounds")
    print(f"  {'phase':10s} {'PM':>8s} {'raw UDP':>8s} {'PM - UDP':>9s}")
    for p in (*PHASES, "rtt"):
        a, b = doc["summary"]["pm"][p]["median"], doc["summary"]["udp"][p]["median"]
        print(f"  {p:10s} {a:8.2f} {b:8.2f} {a - b:+9.2f}")
