"""The pm-udp benchmark suite: PM's udp device between two nodes of the
virtual cluster, side by side with raw UDP and TCP on the same links.

Called by scripts/bench (suite "pm-udp").  What it measures, on the same
vcluster links in one run, ctx.rounds times, the two sides taking turns:

  latency     pmbench ping-pong 14 B (and 8 B) over one NIC on an unlimited
              link, against sockperf ping-pong 14 B (its smallest message)
              over UDP and over TCP, both sides of both busy-polling
              (sockperf server and client --nonblocked; PM spins in
              pm_wait() for PM_SPIN_US before it sleeps);
  line rate   pmbench stream 64 KiB over one 1 Gbit/s link (MTU 9000 and
              MTU 1500), against iperf3 TCP on the same link;
  trunking    pmbench stream 64 KiB over 2 and 3 such links, against one;
  loss        pmbench stream 64 KiB with 1 % of the UDP packets dropped
              (nftables in both nodes), against no loss;
  unlimited   pmbench stream 64 KiB on an unlimited link, against iperf3 TCP.

pmbench's receiver copies every payload out (--recv copy), as sockperf's and
iperf3's receivers read into a buffer.  Targets (the issue's), judged on the
rounds' ratios (scripts/bench_stats.py: PASS only when the whole spread is on
the right side): latency at most 1.2 x sockperf UDP and below sockperf TCP;
95 % of the line rate; 0.9 x N on N links; with 1 % loss at least half the
lossless bandwidth.  docs/pm/bench-udp.md has the method; its tables are
written by scripts/bench_report.py from BUILD/bench/pm-udp.json.
"""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from bench_stats import spread, verdict

ROOT = Path(__file__).resolve().parent.parent
VCLUSTER = ROOT / "provisioning" / "vcluster" / "vcluster"
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
LINE_RATE_MBPS = 1e9 / 8 / 1e6          # 1 Gbit/s in MB/s (10^6 bytes)
STREAM_SIZE = 65536
SOCKPERF_SIZE = 14                      # sockperf's smallest message
SOCKPERF_SECONDS = 3
# sockperf's server port, by protocol (the mpi suite runs the same pair).
SOCKPERF_PORTS = {"udp": 11111, "tcp": 11112}
IPERF_SECONDS = 3


class Cluster:
    """A virtual cluster for the suite's lifetime; always taken down."""

    def __init__(self, name, nodes, nics, rate=None, mtu=None, extra=()):
        self.name = name
        args = ["up", "--json", "--name", name, "--nodes", str(nodes), "--nics", str(nics),
                *extra]
        if rate:
            args += ["--rate", rate]
        if mtu:
            args += ["--mtu", str(mtu)]
        self.args = args
        self.procs = []

    def __enter__(self):
        subprocess.run([str(VCLUSTER), "down", "--name", self.name], capture_output=True)
        proc = subprocess.run([str(VCLUSTER), *self.args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"vcluster {' '.join(self.args)}: {proc.stderr.strip()}")
        self.state = json.loads(proc.stdout)["cluster"]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            self.stop(p)
        subprocess.run([str(VCLUSTER), "down", "--name", self.name], capture_output=True)

    def address(self, node, net=0):
        for n in self.state["nodes"]:
            if n["name"] == node:
                return n["nics"][net]["address"]
        raise KeyError(node)

    def client_config(self):
        """SCORE_CONFIG for clients on the host (a cluster up --with-score)."""
        proc = subprocess.run([str(VCLUSTER), "env", "--json", "--name", self.name],
                              capture_output=True, text=True, check=True)
        return json.loads(proc.stdout)["SCORE_CONFIG"]

    def subnet(self, net=0):
        return self.state["networks"][net]["subnet"]

    def exec_argv(self, node, *cmd):
        return [str(VCLUSTER), "exec", "--name", self.name, node, "--", *cmd]

    def background(self, node, *cmd):
        p = subprocess.Popen(self.exec_argv(node, *cmd), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p

    @staticmethod
    def stop(p):
        """End a process this suite started (by PID: SIGTERM, then SIGKILL)."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def mpirun(self, program, env=None):
        """mpirun of `program` with rank 0 in n1 and rank 1 in n2, each
        pinned like every other program of the suite (pin())."""
        argv = ["mpirun", "--bind-to", "none",
                "--mca", "plm_rsh_agent", f"{VCLUSTER} rsh --name {self.name}",
                "--mca", "oob_tcp_if_include", self.subnet(0)]
        forward = [a for k in sorted(env or {}) for a in ("-x", f"{k}={env[k]}")]
        for i, node in enumerate(("n1", "n2")):
            argv += ([":"] if i else []) + ["--host", node, "-n", "1", *forward,
                                            *pin(node), *program]
        return argv


# The two nodes share the machine's cores, and an unpinned pair of
# busy-polling processes is sometimes put on one core by the scheduler
# (each waits out the other's time slice: latencies many times higher).
# Every program of the suite runs its n1 side on CPU 0 and its n2 side on
# CPU 1, PM and the baselines alike (mpirun's own binding would count cores
# from 0 in each node and put both ranks on core 0).
PIN = {"n1": 0, "n2": 1}


def pin(node):
    if len(os.sched_getaffinity(0)) < 2:
        return []
    return ["taskset", "-c", str(PIN[node])]


def pmbench(ctx, cl, what, test, sizes, env, reps=5, iters=None):
    """pmbench between n1 and n2, the receiver copying each payload out
    (--recv copy), as sockperf's and iperf3's receivers read into a buffer;
    {size: JSON record}."""
    sizes = [sizes] if isinstance(sizes, int) else sizes
    program = ctx.wrap + [
        str(ctx.bin / "pmbench"), "--test", test, "--sizes", ",".join(map(str, sizes)),
        "--reps", str(reps), "--recv", "copy", "--json"]
    if iters:
        program += ["--iters", str(iters)]
    argv = cl.mpirun(program, env)
    proc = ctx.run(what, argv)
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec.get("test") == test and rec.get("size") in sizes:
                found[rec["size"]] = rec
    if set(sizes) - set(found):
        raise RuntimeError(f"{what}: no pmbench record for {sorted(set(sizes) - set(found))}")
    return found


def sockperf(ctx, cl, tcp, port):
    """sockperf ping-pong, both sides busy-polling (--nonblocked: the server
    and the client spin on non-blocking sockets, as PM spins in pm_wait())."""
    addr = cl.address("n1")
    proto = ["--tcp"] if tcp else []
    server_argv = [*pin("n1"), *ctx.wrap, "sockperf", "server", *proto, "-i", addr,
                   "-p", str(port), "--nonblocked"]
    ctx.commands.append({"what": f"sockperf server {'TCP' if tcp else 'UDP'} (n1)",
                         "argv": cl.exec_argv("n1", *server_argv), "cwd": None})
    server = cl.background("n1", *server_argv)
    time.sleep(0.5)
    try:
        proc = ctx.run(f"sockperf ping-pong {'TCP' if tcp else 'UDP'} (n2)",
                       cl.exec_argv("n2", *pin("n2"), *ctx.wrap, "sockperf", "ping-pong", *proto,
                                    "-i", addr, "-p", str(port), "-m", str(SOCKPERF_SIZE),
                                    "-t", str(SOCKPERF_SECONDS), "--nonblocked"))
    finally:
        cl.stop(server)
    text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    avg = re.search(r"avg-latency=([0-9.]+)", text)
    p50 = re.search(r"percentile 50\.000 =\s*([0-9.]+)", text)
    if not avg:
        raise RuntimeError("sockperf printed no latency")
    return {"avg_us": float(avg.group(1)), "p50_us": float(p50.group(1)) if p50 else None}


def iperf3(ctx, cl, port):
    addr = cl.address("n1")
    server_argv = [*pin("n1"), *ctx.wrap, "iperf3", "-s", "-1", "-B", addr, "-p", str(port)]
    ctx.commands.append({"what": "iperf3 server (n1)", "argv": cl.exec_argv("n1", *server_argv),
                         "cwd": None})
    server = cl.background("n1", *server_argv)
    time.sleep(0.5)
    try:
        proc = ctx.run("iperf3 TCP (n2)", cl.exec_argv("n2", *pin("n2"), *ctx.wrap, "iperf3",
                                                       "-c", addr,
                                                       "-p", str(port), "-t", str(IPERF_SECONDS),
                                                       "-J"))
    finally:
        cl.stop(server)
    bps = json.loads(proc.stdout)["end"]["sum_received"]["bits_per_second"]
    return {"MBps": bps / 8 / 1e6}


LOSS_TABLE = "pmbench"


def set_loss(cl, percent):
    """Drop `percent` % of the UDP packets arriving in n1 and n2 (nftables),
    or stop dropping (percent 0)."""
    for node in ("n1", "n2"):
        subprocess.run(cl.exec_argv(node, "nft", "delete", "table", "inet", LOSS_TABLE),
                       capture_output=True)
    if not percent:
        return
    rules = (f"add table inet {LOSS_TABLE}\n"
             f"add chain inet {LOSS_TABLE} input {{ type filter hook input priority 0; }}\n"
             f"add rule inet {LOSS_TABLE} input meta l4proto udp numgen random mod 100 < "
             f"{percent} drop\n")
    for node in ("n1", "n2"):
        subprocess.run(cl.exec_argv(node, "nft", "-f", "-"), input=rules, text=True, check=True)


def bw(rec):
    return rec["bandwidth_MBps"]["median"]


def lat(rec):
    return rec["latency_us"]["median"]


def interleaved(i, steps):
    """Run (key, fn) steps in order, reversed every other round, so that a
    drift of the machine does not always favour the same side."""
    out = {}
    for key, fn in (reversed(steps) if i % 2 else steps):
        out[key] = fn()
    return out


# What the suite reports: (key, title, how to get the value from a round,
# target op, bound).  A round is a dict of the measurements of that round.
def _ratio(a, b):
    return a / b if a is not None and b else None


MEASURES = [
    ("pm_latency_14", "PM ping-pong 14 B, µs", lambda r: lat(r["pm_latency"][SOCKPERF_SIZE])),
    ("pm_latency_8", "PM ping-pong 8 B, µs", lambda r: lat(r["pm_latency"][8])),
    ("sockperf_udp", "sockperf UDP ping-pong 14 B, average µs",
     lambda r: r["sockperf_udp"]["avg_us"]),
    ("sockperf_udp_p50", "sockperf UDP ping-pong 14 B, median µs",
     lambda r: r["sockperf_udp"]["p50_us"]),
    ("sockperf_tcp", "sockperf TCP ping-pong 14 B, average µs",
     lambda r: r["sockperf_tcp"]["avg_us"]),
    ("pm_stream_1link", "PM stream 64 KiB, 1 link (1 Gbit/s, MTU 9000), MB/s",
     lambda r: bw(r["pm_stream_1link"])),
    ("pm_stream_2link", "PM stream 64 KiB, 2 links, MB/s", lambda r: bw(r["pm_stream_2link"])),
    ("pm_stream_3link", "PM stream 64 KiB, 3 links, MB/s", lambda r: bw(r["pm_stream_3link"])),
    ("pm_stream_loss1", "PM stream 64 KiB, 1 link, 1 % loss, MB/s",
     lambda r: bw(r["pm_stream_loss1"])),
    ("iperf3_1g", "iperf3 TCP, 1 link (MTU 9000), MB/s", lambda r: r["iperf3_1g"]["MBps"]),
    ("pm_stream_mtu1500", "PM stream 64 KiB, 1 link (1 Gbit/s, MTU 1500), MB/s",
     lambda r: bw(r["pm_stream_mtu1500"])),
    ("iperf3_1g_mtu1500", "iperf3 TCP, 1 link (MTU 1500), MB/s",
     lambda r: r["iperf3_1g_mtu1500"]["MBps"]),
    ("pm_stream_unlimited", "PM stream 64 KiB, unlimited link, MB/s",
     lambda r: bw(r["pm_stream_unlimited"])),
    ("iperf3_unlimited", "iperf3 TCP, unlimited link, MB/s",
     lambda r: r["iperf3_unlimited"]["MBps"]),
]

TARGETS = [
    ("latency_vs_udp", "PM / sockperf UDP latency, 14 B (averages), both busy-polling",
     lambda r: _ratio(lat(r["pm_latency"][SOCKPERF_SIZE]), r["sockperf_udp"]["avg_us"]),
     "<=", 1.2),
    ("latency_vs_tcp", "PM / sockperf TCP latency, 14 B (averages), both busy-polling",
     lambda r: _ratio(lat(r["pm_latency"][SOCKPERF_SIZE]), r["sockperf_tcp"]["avg_us"]),
     "<", 1.0),
    ("line_rate_9000", "1 Gbit/s, MTU 9000: PM's share of the line rate",
     lambda r: bw(r["pm_stream_1link"]) / LINE_RATE_MBPS, ">=", 0.95),
    ("line_rate_1500", "1 Gbit/s, MTU 1500: PM's share of the line rate (ceiling 0.951)",
     lambda r: bw(r["pm_stream_mtu1500"]) / LINE_RATE_MBPS, ">=", 0.95),
    ("trunk_2", "trunking: 2 links / 1 link",
     lambda r: bw(r["pm_stream_2link"]) / bw(r["pm_stream_1link"]), ">=", 1.8),
    ("trunk_3", "trunking: 3 links / 1 link",
     lambda r: bw(r["pm_stream_3link"]) / bw(r["pm_stream_1link"]), ">=", 2.7),
    ("loss_1pct", "1 % loss / no loss",
     lambda r: bw(r["pm_stream_loss1"]) / bw(r["pm_stream_1link"]), ">=", 0.5),
    ("unlimited_vs_tcp", "unlimited link: PM / iperf3 TCP",
     lambda r: _ratio(bw(r["pm_stream_unlimited"]), r["iperf3_unlimited"]["MBps"]),
     None, None),
]


def run(ctx):
    rounds = ctx.rounds
    doc = {"suite": "pm-udp", "stream_size": STREAM_SIZE, "latency_sizes": [8, SOCKPERF_SIZE],
           "line_rate_MBps": LINE_RATE_MBPS, "recv": "copy",
           "rounds": [{} for _ in range(rounds)], "measures": {}, "verdicts": []}
    one = {"PM_UDP_NICS": "eth0"}

    # Jumbo frames: the per-packet cost of one machine emulating the
    # network stays below the line rate (see docs/pm/bench-udp.md).
    with Cluster("bu9k", nodes=2, nics=3, rate="1gbit", mtu=9000) as cl:
        for i, r in enumerate(doc["rounds"]):
            print(f"bu9k round {i + 1}/{rounds}", flush=True)
            steps = [("iperf3_1g", lambda: iperf3(ctx, cl, 5201))]
            for n, nics in ((1, "eth0"), (2, "eth0,eth1"), (3, "eth0,eth1,eth2")):
                steps.append((f"pm_stream_{n}link", lambda n=n, nics=nics: pmbench(
                    ctx, cl, f"pmbench stream 64 KiB, {n} link(s)", "stream", STREAM_SIZE,
                    {"PM_UDP_NICS": nics})[STREAM_SIZE]))
            r.update(interleaved(i, steps))
            set_loss(cl, 1)
            # A fixed count, at least the lossless run's: calibrating under
            # loss can settle on a batch so short that the link's token
            # bucket (burst) carries it at memory speed.
            iters = max(400, r["pm_stream_1link"]["iterations"])
            try:
                r["pm_stream_loss1"] = pmbench(ctx, cl, "pmbench stream 64 KiB, 1 % loss",
                                               "stream", STREAM_SIZE, one,
                                               iters=iters)[STREAM_SIZE]
            finally:
                set_loss(cl, 0)

    with Cluster("bu15", nodes=2, nics=1, rate="1gbit", mtu=1500) as cl:
        for i, r in enumerate(doc["rounds"]):
            print(f"bu15 round {i + 1}/{rounds}", flush=True)
            r.update(interleaved(i, [
                ("pm_stream_mtu1500", lambda: pmbench(ctx, cl, "pmbench stream 64 KiB, MTU 1500",
                                                      "stream", STREAM_SIZE, one)[STREAM_SIZE]),
                ("iperf3_1g_mtu1500", lambda: iperf3(ctx, cl, 5202))]))

    # Latency on an unlimited link (no token bucket on the way), as the
    # issue measured it; and bandwidth against TCP there.
    with Cluster("buinf", nodes=2, nics=1) as cl:
        for i, r in enumerate(doc["rounds"]):
            print(f"buinf round {i + 1}/{rounds}", flush=True)
            r.update(interleaved(i, [
                ("pm_latency", lambda: pmbench(ctx, cl, "pmbench pingpong 8 and 14 B, unlimited",
                                               "pingpong", [8, SOCKPERF_SIZE], one)),
                ("sockperf_udp", lambda: sockperf(ctx, cl, False, SOCKPERF_PORTS["udp"])),
                ("sockperf_tcp", lambda: sockperf(ctx, cl, True, SOCKPERF_PORTS["tcp"])),
                ("pm_stream_unlimited", lambda: pmbench(
                    ctx, cl, "pmbench stream 64 KiB, unlimited", "stream", STREAM_SIZE,
                    one)[STREAM_SIZE]),
                ("iperf3_unlimited", lambda: iperf3(ctx, cl, 5203))]))
        # JSON keys are strings.
        for r in doc["rounds"]:
            r["pm_latency"] = {str(k): v for k, v in r["pm_latency"].items()}

    def value(fn, r):
        return fn(dict(r, pm_latency={int(k): v for k, v in r["pm_latency"].items()}))

    for key, title, fn in MEASURES:
        samples = [value(fn, r) for r in doc["rounds"]]
        doc["measures"][key] = dict(spread(samples), title=title, samples=samples)
    for key, title, fn, op, bound in TARGETS:
        samples = [value(fn, r) for r in doc["rounds"]]
        v = verdict(samples, op, bound) if op else dict(spread(samples), verdict="info",
                                                        target=None)
        v.update(key=key, what=title, samples=samples)
        doc["verdicts"].append(v)
    print_tables(doc)
    return doc


def cell(s, spec=".2f"):
    """A spread as "median [min-max]" ("-" when nothing was measured); the
    suites print theirs with it (bench_mpi, bench_dsm)."""
    if not s or s.get("median") is None:
        return "-"
    if s["n"] == 1:
        return format(s["median"], spec)
    return f"{format(s['median'], spec)} [{format(s['lo'], spec)}-{format(s['hi'], spec)}]"


def print_tables(doc):
    n = len(doc["rounds"])
    print(f"\n  PM udp against raw UDP/TCP on the same vcluster links: median [min-max] of "
          f"{n} round(s)")
    for key, title, _ in MEASURES:
        print(f"  {title:60s} {cell(doc['measures'][key], '.2f')}")
    print()
    for v in doc["verdicts"]:
        target = f"(target {v['target']})" if v["target"] else ""
        print(f"  {v['what']:70s} {cell(v, '.3f'):24s} {target:14s} {v['verdict']}")
