"""The mpi benchmark suite: unmodified Open MPI programs over PM (the
libfabric provider pm, BUILD/lib/libfabric/libpm-fi.so) against Open MPI's
own transports and against PM itself, on one node and between two nodes.

Called by scripts/bench (suite "mpi").  Every MPI figure is Debian's NetPIPE
(NPopenmpi) under Open MPI's mpirun; every PM figure is pmbench.  In one run,
ctx.rounds times, the rows taking turns (the order reversed every other round
so that a drift of the machine does not always favour the same side):

  on this host (two ranks, plain mpirun):
    pm_shm       MPI over pm: pml cm + mtl ofi, provider pm, PM_DEVICE=shm
    vader        Open MPI's ob1 + vader BTL
    pmbench_shm  native PM: pmbench --device shm
  between n1 and n2 of one virtual cluster (bmpi, 10.246.0.0/16, one NIC,
  unlimited link, MTU 1500: pm-udp's "unlimited link" case), up once for
  the suite and always taken down:
    pm_udp       MPI over pm, PM_DEVICE=udp PM_UDP_NICS=eth0
    tcp          Open MPI's ob1 + tcp BTL on net0
    rxm          pml cm + mtl ofi over libfabric's own "tcp;ofi_rxm" (a
                 failure to run is recorded in the row, not fatal)
    pmbench_udp  native PM: pmbench --device udp, PM_UDP_NICS=eth0
    fi_udp       libfabric alone over pm, no MPI: fi_pingpong (libfabric-bin,
                 FI_EP_RDM, FI_MSG) between a server in n1 and a client in
                 n2, PM_DEVICE=udp PM_UDP_NICS=eth0, best of PM_REPS runs:
                 between pmbench_udp and pm_udp, it splits what MPI over pm
                 adds into libfabric's API with the provider, and Open MPI
    pm_eth       MPI over pm, PM_NET_DEVICE=eth PM_UDP_NICS=eth0: PM's eth
                 device (raw Ethernet frames, a receive ring) under composite
    pmbench_eth  native PM: pmbench --device composite, PM_NET_DEVICE=eth
    sockperf_udp, sockperf_tcp  the kernel alone: sockperf ping-pong over
                 UDP and over TCP, 14 B (its smallest message), both sides
                 busy-polling (bench_udp.sockperf, as the pm-udp suite runs
                 it): what any transport over a UDP socket (PM's udp device)
                 or a TCP socket (the tcp BTL, tcp;ofi_rxm) starts from
  on a second virtual cluster (bmpi2, 10.243.0.0/16, 4 nodes with two NICs,
  every link limited to 1 Gbit/s, MTU 1500), up for the whole suite too:
    pm_trunk     MPI over pm, n1 to n2, PM_UDP_NICS=eth0,eth1 (trunking)
    pm_link      MPI over pm, n1 to n2, PM_UDP_NICS=eth0 (one link)
    pm_eth_trunk, pm_eth_link  the same two over the eth device
    tcp_trunk    Open MPI's ob1 + tcp BTL on both networks
                 (NetPIPE stream at 64 KiB, 1 MiB and 4 MiB)
    hpcc_pm      HPC Challenge (Debian's hpcc, its example input: N 1000, 2 x 2)
                 on the 4 nodes, one rank each, over pm on both NICs
    hpcc_tcp     the same over ob1 + tcp on both networks

Sizes: 8 B ping-pong (one-way latency, round trip / 2) and stream bandwidth
at 64 KiB and 1 MiB; NetPIPE runs one size per invocation (-l S -u S -p 0,
ping-pong, or stream with -s) and its np.out is read from a temporary
working directory; pmbench runs pingpong and stream at all three sizes,
receiver copying (--recv copy), and each round takes its best repetition
against NetPIPE's best trial, as the pm-shm suite does.  Rank 0 runs on CPU 0
and rank 1 on CPU 1 (taskset, mpirun --bind-to none), NetPIPE and pmbench
alike, on one node as between the nodes (bench_udp.pin()).

Targets (issue 12, "Performance"), judged on the rounds' ratios with
scripts/bench_stats.py (PASS only when the whole spread is on the right side):
MPI over pm on a node at most 10 % or 0.3 us (whichever is more) above
native pmbench --device shm, at most 1.2 x vader's latency and at least
0.9 x vader's 1 MiB bandwidth; between 2 nodes at most 10 % above native
pmbench --device udp and at most 0.5 x the latency of ob1 + tcp and of
tcp;ofi_rxm; on two 1 Gbit/s NICs, 64 KiB to 4 MiB, MPI over pm on both at
least 1.9 x itself on one, and at least the tcp BTL on both.  Each of the
2-node targets is judged for both of PM's network devices, udp and eth, the
eth device against native PM on eth.  hpcc's
PingPong, RandomRing and PTRANS over pm against ob1 + tcp are reported as
ratios (no target).  docs/mpi/bench.md has the method; its table is written by
scripts/bench_report.py from BUILD/bench/mpi.json.
"""
import hashlib
import itertools
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench_netpipe import NetpipeError, rows as netpipe_rows
from bench_stats import spread, verdict
from bench_udp import SOCKPERF_PORTS, SOCKPERF_SIZE, VCLUSTER, Cluster, cell, pin, sockperf

NAME = "bmpi"                  # no other suite or test uses it
SUBNET = "10.246.0.0/16"       # outside vcluster's default 10.250-10.255; restart has .247
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# Two NICs: the trunk rows and hpcc run on a second cluster, 4 nodes with 2
# NICs each, every link limited to 1 Gbit/s (the issue's "two 1 Gbit/s NICs").
TRUNK_NAME = "bmpi2"            # no other suite or test uses it
TRUNK_SUBNET = "10.243.0.0/16"  # outside vcluster's default 10.250-10.255 and the other suites'
TRUNK_RATE = "1gbit"
TRUNK_NODES = 4
TRUNK_SIZES = [65536, 1 << 20, 4 << 20]
QUICK_TRUNK_SIZES = [1 << 20]
HPCC_INPUT = Path("/usr/share/doc/hpcc/examples/_hpccinf.txt")   # N 1000, P x Q = 2 x 2
HPCC_TIMEOUT = 300
# hpcc's summary (hpccoutf.txt) figures the suite reports: (key, title,
# unit, better) - better is "lower" or "higher".
HPCC_METRICS = [
    ("MaxPingPongLatency_usec", "PingPong latency, the worst pair", "µs", "lower"),
    ("MinPingPongBandwidth_GBytes", "PingPong bandwidth, the worst pair", "GB/s", "higher"),
    ("RandomlyOrderedRingLatency_usec", "RandomRing latency", "µs", "lower"),
    ("RandomlyOrderedRingBandwidth_GBytes", "RandomRing bandwidth", "GB/s", "higher"),
    ("PTRANS_GBs", "PTRANS", "GB/s", "higher"),
]
LAT_SIZE = 8
BW_SIZES = [65536, 1 << 20]
# fi_pingpong's out-of-band TCP ports in n1 (its own default is 47592), one
# after the other so that no run meets the last one's connection in
# TIME_WAIT, and its iterations per run: about 0.1 s at these latencies, as
# NetPIPE's trials.
FI_PINGPONG_PORTS = range(47593, 47693)
FI_PINGPONG_ITERS = 10000
FI_PINGPONG_LISTEN_S = 15
QUICK_BW_SIZES = [1 << 20]
PM_REPS = 3                    # NetPIPE's TRIALS in Debian's build: best of 3
QUICK_PM_REPS = 1
PM_MIN_TIME = 0.1              # NetPIPE's trials last about 0.1 s too
RUN_TIMEOUT = 90               # s for one mpirun (it takes 1-3 s)
UP_TIMEOUT = 180               # s for vcluster up
DOWN_TIMEOUT = 60              # s for vcluster down
PM_MCA = ["--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "mtl_ofi_provider_include", "pm"]

# (key, title, where, program, required).  A row that is not required may
# fail to run without failing the suite.  where: "node" (this host),
# "cluster" (bmpi: n1, n2, one unlimited NIC), "trunk" (bmpi2: n1 and n2 of
# 4 nodes with two 1 Gbit/s NICs), "trunk4" (bmpi2: its 4 nodes, one rank
# each).  program: netpipe (latency and bandwidth), stream (NetPIPE's
# stream only, at the trunk sizes), pmbench, hpcc.
ROWS = [
    ("pm_shm", "MPI over pm (PM_DEVICE=shm)", "node", "netpipe", True),
    ("vader", "Open MPI ob1 + vader", "node", "netpipe", True),
    ("pmbench_shm", "native pmbench --device shm", "node", "pmbench", True),
    ("pm_udp", "MPI over pm (PM_DEVICE=udp)", "cluster", "netpipe", True),
    ("tcp", "Open MPI ob1 + tcp BTL", "cluster", "netpipe", True),
    ("rxm", "mtl ofi over tcp;ofi_rxm", "cluster", "netpipe", False),
    ("pmbench_udp", "native pmbench --device udp", "cluster", "pmbench", True),
    ("fi_udp", "libfabric alone over pm: fi_pingpong (PM_DEVICE=udp)", "cluster", "fi_pingpong",
     True),
    ("pm_eth", "MPI over pm (PM_NET_DEVICE=eth)", "cluster", "netpipe", True),
    ("pmbench_eth", "native pmbench, PM_NET_DEVICE=eth", "cluster", "pmbench", True),
    ("sockperf_udp", f"raw UDP: sockperf ping-pong ({SOCKPERF_SIZE} B, its smallest)", "cluster",
     "sockperf", True),
    ("sockperf_tcp", f"raw TCP: sockperf ping-pong --tcp ({SOCKPERF_SIZE} B)", "cluster",
     "sockperf", True),
    ("pm_trunk", "MPI over pm, both NICs (PM_UDP_NICS=eth0,eth1)", "trunk", "stream", True),
    ("pm_link", "MPI over pm, one NIC (PM_UDP_NICS=eth0)", "trunk", "stream", True),
    ("pm_eth_trunk", "MPI over pm, eth device, both NICs", "trunk", "stream", True),
    ("pm_eth_link", "MPI over pm, eth device, one NIC", "trunk", "stream", True),
    ("tcp_trunk", "Open MPI ob1 + tcp BTL, both NICs", "trunk", "stream", True),
    ("hpcc_pm", "hpcc over pm, both NICs", "trunk4", "hpcc", True),
    ("hpcc_tcp", "hpcc over ob1 + tcp BTL, both NICs", "trunk4", "hpcc", True),
]


class Failed(Exception):
    """One command of a row did not run or gave no result."""


def row_setup(key, ctx, cl):
    """(MCA arguments, environment forwarded to the ranks with -x, pmbench
    device) of a row."""
    provider = {"FI_PROVIDER_PATH": str(ctx.build / "lib" / "libfabric")}
    if key == "pm_shm":
        return PM_MCA, dict(provider, PM_DEVICE="shm"), None
    if key == "vader":
        return ["--mca", "pml", "ob1", "--mca", "btl", "self,vader"], {}, None
    if key == "pmbench_shm":
        return [], {}, "shm"
    if key == "pm_udp":
        return PM_MCA, dict(provider, PM_DEVICE="udp", PM_UDP_NICS="eth0"), None
    if key == "tcp":
        return ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp",
                "--mca", "btl_tcp_if_include", cl.subnet(0)], {}, None
    if key == "rxm":
        # FI_TCP_IFACE keeps libfabric's tcp provider on net0, as
        # PM_UDP_NICS and btl_tcp_if_include do for the others.
        return ["--mca", "pml", "cm", "--mca", "mtl", "ofi",
                "--mca", "mtl_ofi_provider_include", "tcp;ofi_rxm"], {"FI_TCP_IFACE": "eth0"}, None
    if key == "pmbench_udp":
        return [], {"PM_UDP_NICS": "eth0"}, "udp"
    # The eth device reaches other nodes only: under composite (the
    # default device), which PM_NET_DEVICE points at it.
    if key in ("pm_eth", "pm_eth_link"):
        return PM_MCA, dict(provider, PM_NET_DEVICE="eth", PM_UDP_NICS="eth0"), None
    if key == "pmbench_eth":
        return [], {"PM_NET_DEVICE": "eth", "PM_UDP_NICS": "eth0"}, "composite"
    if key == "pm_eth_trunk":
        return PM_MCA, dict(provider, PM_NET_DEVICE="eth", PM_UDP_NICS="eth0,eth1"), None
    if key in ("pm_trunk", "hpcc_pm"):
        return PM_MCA, dict(provider, PM_DEVICE="udp", PM_UDP_NICS="eth0,eth1"), None
    if key == "pm_link":
        return PM_MCA, dict(provider, PM_DEVICE="udp", PM_UDP_NICS="eth0"), None
    if key in ("tcp_trunk", "hpcc_tcp"):
        return ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp",
                "--mca", "btl_tcp_if_include", f"{cl.subnet(0)},{cl.subnet(1)}"], {}, None
    raise KeyError(key)


def mpirun(ctx, cl, mca, env, program):
    """mpirun of two ranks, rank 0 pinned to CPU 0 and rank 1 to CPU 1 (in
    n1 and n2 of the cluster `cl`, or on this host when cl is None); the
    environment is forwarded with -x in each app context (a -x of the first
    one does not reach the second)."""
    argv = ["mpirun", "--bind-to", "none"]
    if cl is not None:
        argv += ["--mca", "plm_rsh_agent", f"{VCLUSTER} rsh --name {cl.name}",
                 "--mca", "oob_tcp_if_include", cl.subnet(0)]
    argv += mca
    forward = [a for k in sorted(env) for a in ("-x", f"{k}={env[k]}")]
    for i, node in enumerate(("n1", "n2")):
        argv += ([":"] if i else []) + (["--host", node] if cl is not None else []) + [
            "-n", "1", *forward, *pin(node), *ctx.wrap, *program]
    return argv


def end_session(proc):
    """SIGTERM to the whole session of a command this suite started (mpirun
    takes its daemons and ranks down with it), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(text, lines=20):
    return "\n".join((text or "").strip().splitlines()[-lines:])


def run_cmd(ctx, what, argv, cwd=None, timeout=RUN_TIMEOUT):
    """Run argv in its own session, at most `timeout` s; (stdout, stderr).
    Recorded in ctx.commands with its outcome; Failed unless it exits 0."""
    rec = {"what": what, "argv": [str(a) for a in argv], "cwd": str(cwd) if cwd else None,
           "env": {}, "timeout_s": timeout}
    ctx.commands.append(rec)
    print(f"  $ {' '.join(rec['argv'])}", flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(rec["argv"], cwd=cwd, env=dict(os.environ, **MPI_ENV),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as e:
        rec["status"] = "not started"
        raise Failed(f"{what}: {e}") from e
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end_session(proc)
        out, err = proc.communicate()
        rec.update(status="timeout", seconds=round(time.monotonic() - start, 2))
        raise Failed(f"{what}: no result after {timeout} s\n{tail(err or out)}") from None
    rec.update(status=proc.returncode, seconds=round(time.monotonic() - start, 2))
    if proc.returncode != 0:
        raise Failed(f"{what}: exit status {proc.returncode}\n{tail(err or out)}")
    return out, err


def netpipe(ctx, cl, key, mca, env, size, stream):
    """NPopenmpi at one size, ping-pong or stream (-s); the seconds np.out
    gives (ping-pong: round trip / 2; stream: the receiver's time per
    message; NetPIPE keeps the best of its trials), as bench_netpipe reads
    them."""
    mode = "stream" if stream else "pingpong"
    program = ["NPopenmpi", "-l", str(size), "-u", str(size), "-p", "0", "-o", "np.out"]
    if stream:
        program.append("-s")
    with tempfile.TemporaryDirectory(prefix="bench-np-") as tmp:
        run_cmd(ctx, f"{key}: NetPIPE {mode} {size} B", mpirun(ctx, cl, mca, env, program), cwd=tmp)
        out = Path(tmp) / "np.out"
        text = out.read_text() if out.exists() else ""
    try:
        for row in netpipe_rows(text):
            if row["bytes"] == size:
                return row
    except NetpipeError as e:
        raise Failed(f"{key}: NetPIPE {mode} {size} B: {e}") from None
    raise Failed(f"{key}: NetPIPE {mode} {size} B: no row for {size} B in np.out "
                 f"({text.strip()[:200] or 'missing or empty'})")


def measure_netpipe(ctx, cl, key, bw_sizes):
    mca, env, _ = row_setup(key, ctx, cl)
    lat = netpipe(ctx, cl, key, mca, env, LAT_SIZE, stream=False)
    out = {"latency_us": {str(LAT_SIZE): lat["seconds"] * 1e6}, "bandwidth_MBps": {},
           "netpipe": {"pingpong": [lat], "stream": []}}
    for size in bw_sizes:
        row = netpipe(ctx, cl, key, mca, env, size, stream=True)
        out["netpipe"]["stream"].append(row)
        out["bandwidth_MBps"][str(size)] = size / row["seconds"] / 1e6
    return out


def tcp_listening(cl, node, port):
    """Whether a socket listens on TCP port (IPv4) in node."""
    proc = subprocess.run(cl.exec_argv(node, "cat", "/proc/net/tcp"), capture_output=True,
                          text=True, timeout=10)
    for line in proc.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
            return True
    return False


_fi_pingpong_runs = itertools.count()


def fi_pingpong(ctx, cl, key):
    """One fi_pingpong over the pm provider: its server in n1, its client
    in n2 (each pinned as the ranks are), the two exchanging their names
    over fi_pingpong's own TCP socket; the client's usec/xfer (a round trip
    / 2, as NetPIPE's latency) at LAT_SIZE bytes."""
    env = ["env", f"FI_PROVIDER_PATH={ctx.build / 'lib' / 'libfabric'}", "PM_DEVICE=udp",
           "PM_UDP_NICS=eth0"]
    base = ["fi_pingpong", "-p", "pm", "-e", "rdm", "-S", str(LAT_SIZE),
            "-I", str(FI_PINGPONG_ITERS)]
    port = FI_PINGPONG_PORTS[next(_fi_pingpong_runs) % len(FI_PINGPONG_PORTS)]
    server_argv = [*env, *pin("n1"), *ctx.wrap, *base, "-B", str(port)]
    ctx.commands.append({"what": f"{key}: fi_pingpong server (n1)",
                         "argv": cl.exec_argv("n1", *server_argv), "cwd": None})
    server = cl.background("n1", *server_argv)
    try:
        deadline = time.monotonic() + FI_PINGPONG_LISTEN_S
        while not tcp_listening(cl, "n1", port):
            if server.poll() is not None:
                raise Failed(f"{key}: fi_pingpong's server ended ({server.returncode}) "
                             "before it listened")
            if time.monotonic() > deadline:
                raise Failed(f"{key}: fi_pingpong's server did not listen within "
                             f"{FI_PINGPONG_LISTEN_S} s")
            time.sleep(0.05)
        out, _ = run_cmd(ctx, f"{key}: fi_pingpong client (n2)", cl.exec_argv(
            "n2", *env, *pin("n2"), *ctx.wrap, *base, "-P", str(port),
            cl.address("n1")))
    finally:
        cl.stop(server)
    # bytes, iters, total, bytes moved, time, MB/sec, usec/xfer, Mxfers/sec
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 8 and fields[0] == str(LAT_SIZE):
            return float(fields[6])
    raise Failed(f"{key}: fi_pingpong printed no result for {LAT_SIZE} B\n{tail(out)}")


def measure_fi_pingpong(ctx, cl, key, reps):
    """The best of reps fi_pingpong runs, as NetPIPE keeps its best trial
    and the suite pmbench's best repetition."""
    runs = [fi_pingpong(ctx, cl, key) for _ in range(reps)]
    return {"latency_us": {str(LAT_SIZE): min(runs)}, "bandwidth_MBps": {},
            "fi_pingpong": {"usec_per_xfer": runs, "iterations": FI_PINGPONG_ITERS}}


def measure_sockperf(ctx, cl, key):
    """sockperf's average one-way latency, recorded at its own message size
    (row_lat_size)."""
    try:
        tcp = key == "sockperf_tcp"
        rec = sockperf(ctx, cl, tcp, SOCKPERF_PORTS["tcp" if tcp else "udp"])
    except Exception as e:      # scripts/bench's BenchError (a command failed) and the rest
        raise Failed(f"{type(e).__name__}: {e}") from e
    return {"latency_us": {str(SOCKPERF_SIZE): rec["avg_us"]}, "bandwidth_MBps": {},
            "sockperf": rec}


def measure_stream(ctx, cl, key, sizes):
    """NetPIPE's stream bandwidth only, at each of sizes."""
    mca, env, _ = row_setup(key, ctx, cl)
    out = {"bandwidth_MBps": {}, "netpipe": {"pingpong": [], "stream": []}}
    for size in sizes:
        row = netpipe(ctx, cl, key, mca, env, size, stream=True)
        out["netpipe"]["stream"].append(row)
        out["bandwidth_MBps"][str(size)] = size / row["seconds"] / 1e6
    return out


def measure_hpcc(ctx, cl, key):
    """hpcc with its example input (N 1000, 2 x 2) on the cluster's 4 nodes,
    one rank each, not pinned (4 ranks share 2 CPUs: both rows alike, with
    mpi_yield_when_idle so that a waiting rank gives its CPU up); the
    summary's figures, after hpcc's own checks passed."""
    mca, env, _ = row_setup(key, ctx, cl)
    forward = [a for k in sorted(env) for a in ("-x", f"{k}={env[k]}")]
    argv = ["mpirun", "--bind-to", "none",
            "--mca", "plm_rsh_agent", f"{VCLUSTER} rsh --name {cl.name}",
            "--mca", "oob_tcp_if_include", cl.subnet(0), "--mca", "mpi_yield_when_idle", "1",
            *mca, "--host", ",".join(f"n{i + 1}" for i in range(TRUNK_NODES)),
            "-n", str(TRUNK_NODES), *forward, *ctx.wrap, "hpcc"]
    with tempfile.TemporaryDirectory(prefix="bench-hpcc-") as tmp:
        os.chmod(tmp, 0o755)
        (Path(tmp) / "hpccinf.txt").write_text(HPCC_INPUT.read_text())
        run_cmd(ctx, f"{key}: hpcc", argv, cwd=tmp, timeout=HPCC_TIMEOUT)
        out = Path(tmp) / "hpccoutf.txt"
        text = out.read_text(errors="replace") if out.exists() else ""
    summary = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln and " " not in ln)
    if summary.get("Success") != "1" or "FAILED" in text:
        raise Failed(f"{key}: hpcc's own checks did not pass (Success={summary.get('Success')})"
                     f"\n{tail(text)}")
    if summary.get("CommWorldProcs") != str(TRUNK_NODES):
        raise Failed(f"{key}: hpcc ran {summary.get('CommWorldProcs')} ranks, not {TRUNK_NODES}")
    figures = {}
    for metric, *_ in HPCC_METRICS:
        try:
            figures[metric] = float(summary[metric])
        except (KeyError, ValueError):
            raise Failed(f"{key}: hpcc's summary has no {metric}") from None
    return {"hpcc": figures}


def measure_pmbench(ctx, cl, key, bw_sizes, reps):
    _, env, device = row_setup(key, ctx, cl)
    sizes = sorted({LAT_SIZE, *bw_sizes})
    program = [str(ctx.bin / "pmbench"), "--device", device, "--test", "pingpong,stream",
               "--sizes", ",".join(map(str, sizes)), "--reps", str(reps),
               "--min-time", str(PM_MIN_TIME), "--recv", "copy", "--json"]
    out, _ = run_cmd(ctx, f"{key}: pmbench --device {device}", mpirun(ctx, cl, [], env, program))
    records = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError as e:
                raise Failed(f"{key}: pmbench printed bad JSON: {line[:120]}") from e

    def find(test, size):
        for r in records:
            if r.get("test") == test and r.get("size") == size:
                return r
        raise Failed(f"{key}: pmbench gave no {test} record for {size} B")

    # The best repetition, as NetPIPE keeps its best trial.
    result = {"latency_us": {str(LAT_SIZE): find("pingpong", LAT_SIZE)["latency_us"]["min"]},
              "bandwidth_MBps": {str(s): find("stream", s)["bandwidth_MBps"]["max"]
                                 for s in bw_sizes},
              "records": records}
    first = find("pingpong", LAT_SIZE)
    result["device"] = first.get("device")
    result["peer_device"] = first.get("peer_device")
    result["cpu_ids"] = [first.get("cpu", {}).get(r, {}).get("cpu_id")
                         for r in ("rank0", "rank1")]
    return result


def read_cpu_jiffies():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def idle_probe(seconds=1.0):
    """Percentage of CPU time the machine spent idle over `seconds`."""
    b0, t0 = read_cpu_jiffies()
    time.sleep(seconds)
    b1, t1 = read_cpu_jiffies()
    return round(100.0 * (1 - (b1 - b0) / (t1 - t0)), 1) if t1 > t0 else None


def file_records(paths):
    """Size, modification time and SHA-256 of each file, by its name (None
    for one that cannot be read); links are followed.  The suites record
    what they measured with it (bench_mpi, bench_dsm)."""
    out = {}
    for path in paths:
        try:
            real = path.resolve()
            st = real.stat()
            digest = hashlib.sha256(real.read_bytes()).hexdigest()
        except OSError:
            out[path.name] = None
            continue
        out[path.name] = {"path": str(real), "bytes": st.st_size, "sha256": digest,
                          "mtime": time.strftime("%Y-%m-%dT%H:%M:%S+00:00",
                                                 time.gmtime(st.st_mtime))}
    return out


def binaries(ctx):
    """What was measured: size, modification time and SHA-256 of the
    provider, libpm and pmbench (the tree is shared: they may be rebuilt
    while the suite runs)."""
    return file_records((ctx.build / "lib" / "libfabric" / "libpm-fi.so",
                         ctx.build / "lib" / "libpm.so", ctx.bin / "pmbench"))


def package_version(pkg):
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None


class BoundedCluster(Cluster):
    """bench_udp's Cluster with every vcluster command bounded in time and
    recorded; always taken down."""

    def __init__(self, ctx, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ctx = ctx

    def _vcluster(self, what, args, timeout):
        argv = [str(VCLUSTER), *args]
        rec = {"what": what, "argv": argv, "cwd": None, "env": {}, "timeout_s": timeout}
        self.ctx.commands.append(rec)
        print(f"  $ {' '.join(argv)}", flush=True)
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            rec.update(status="timeout", seconds=round(time.monotonic() - start, 2))
            raise
        rec.update(status=proc.returncode, seconds=round(time.monotonic() - start, 2))
        return proc

    def __enter__(self):
        self._vcluster("vcluster down (a leftover)", ["down", "--name", self.name], DOWN_TIMEOUT)
        try:
            proc = self._vcluster("vcluster up", self.args, UP_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            self.__exit__()
            raise RuntimeError(f"vcluster {' '.join(self.args)}: no answer after "
                               f"{UP_TIMEOUT} s") from e
        if proc.returncode != 0:
            self.__exit__()
            raise RuntimeError(f"vcluster {' '.join(self.args)}: {proc.stderr.strip()}")
        self.state = json.loads(proc.stdout)["cluster"]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            self.stop(p)
        try:
            proc = self._vcluster("vcluster down", ["down", "--name", self.name], DOWN_TIMEOUT)
            if proc.returncode != 0:
                print(f"mpi: vcluster down --name {self.name}: {proc.stderr.strip()}",
                      flush=True)
        except subprocess.TimeoutExpired:
            print(f"mpi: vcluster down --name {self.name} did not finish in {DOWN_TIMEOUT} s",
                  flush=True)


# ---------------------------------------------------------------- targets

def row_lat_size(key):
    """The message size of a row's latency: sockperf's smallest is larger
    than the suite's."""
    return SOCKPERF_SIZE if key.startswith("sockperf_") else LAT_SIZE


def lat(r, key):
    m = r.get(key) or {}
    return (m.get("latency_us") or {}).get(str(row_lat_size(key)))


def bw(r, key, size):
    m = r.get(key) or {}
    return (m.get("bandwidth_MBps") or {}).get(str(size))


def allowance(native):
    """The issue's "within 10 % or 0.3 us" of a native latency, as the
    highest latency it allows: native + max(10 %, 0.3 us)."""
    return native + max(0.1 * native, 0.3) if native else None


def _div(a, b):
    return a / b if a is not None and b else None


# (key, what, the rows it needs, sample of a round, op, bound, target as the
# issue words it).
TARGETS = [
    ("node_native", "on a node: MPI over pm, 8 B latency ÷ (pmbench --device shm + max(10 %, "
     "0.3 µs))", ("pm_shm", "pmbench_shm"),
     lambda r: _div(lat(r, "pm_shm"), allowance(lat(r, "pmbench_shm"))), "<=", 1.0,
     "within 10 % or 0.3 µs of native pmbench --device shm"),
    ("node_vader_latency", "on a node: MPI over pm ÷ ob1 + vader, 8 B latency",
     ("pm_shm", "vader"), lambda r: _div(lat(r, "pm_shm"), lat(r, "vader")), "<=", 1.2,
     "≤ 1.2 × ob1 + vader's latency"),
    ("node_vader_bandwidth", "on a node: MPI over pm ÷ ob1 + vader, 1 MiB bandwidth",
     ("pm_shm", "vader"), lambda r: _div(bw(r, "pm_shm", 1 << 20), bw(r, "vader", 1 << 20)),
     ">=", 0.9, "≥ 0.9 × ob1 + vader's 1 MiB bandwidth"),
]


def _net_targets():
    """The 2-node latency targets, for each of PM's network devices: MPI
    over pm against native PM on the same device, the tcp BTL and
    tcp;ofi_rxm."""
    out = []
    for dev, mpi, native, native_what, native_issue in (
            ("", "pm_udp", "pmbench_udp", "pmbench --device udp",
             "within 10 % of native pmbench --device udp"),
            ("eth_", "pm_eth", "pmbench_eth", "pmbench on eth",
             "within 10 % of native PM (on the eth device)")):
        over = " on eth" if dev else ""
        out += [
            (f"net_{dev}native", f"2 nodes: MPI over pm{over} ÷ {native_what}, 8 B latency",
             (mpi, native), lambda r, a=mpi, b=native: _div(lat(r, a), lat(r, b)), "<=", 1.1,
             native_issue),
            (f"net_{dev}tcp", f"2 nodes: MPI over pm{over} ÷ ob1 + tcp BTL, 8 B latency",
             (mpi, "tcp"), lambda r, a=mpi: _div(lat(r, a), lat(r, "tcp")), "<=", 0.5,
             "≤ 0.5 × ob1 + tcp BTL's latency"),
            (f"net_{dev}rxm", f"2 nodes: MPI over pm{over} ÷ mtl ofi over tcp;ofi_rxm, 8 B "
             "latency", (mpi, "rxm"), lambda r, a=mpi: _div(lat(r, a), lat(r, "rxm")), "<=",
             0.5, "≤ 0.5 × tcp;ofi_rxm's latency"),
        ]
    return out



def hpcc(r, key, metric):
    return ((r.get(key) or {}).get("hpcc") or {}).get(metric)


def _trunk_targets():
    out = []
    for dev, both, one in (("", "pm_trunk", "pm_link"), ("eth_", "pm_eth_trunk", "pm_eth_link")):
        over = " on eth" if dev else ""
        for size in TRUNK_SIZES:
            label = f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
            out += [
                (f"trunk_{dev}link_{size}", f"2 NICs of 1 Gbit/s: MPI over pm{over} on both ÷ "
                 f"on one, {label} bandwidth", (both, one),
                 lambda r, s=size, a=both, b=one: _div(bw(r, a, s), bw(r, b, s)), ">=", 1.9,
                 "≥ 1.9 × one link (64 KiB-4 MiB on two 1 Gbit/s NICs)"),
                (f"trunk_{dev}tcp_{size}", f"2 NICs of 1 Gbit/s: MPI over pm{over} ÷ ob1 + tcp "
                 f"BTL, both NICs each, {label} bandwidth", (both, "tcp_trunk"),
                 lambda r, s=size, a=both: _div(bw(r, a, s), bw(r, "tcp_trunk", s)), ">=", 1.0,
                 "≥ the tcp BTL over both NICs"),
            ]
    return out


TARGETS += _net_targets() + _trunk_targets()

# Informational ratios, round by round (no target).
INFO = [
    ("node_native_latency", "on a node: MPI over pm ÷ pmbench --device shm, 8 B latency",
     lambda r: _div(lat(r, "pm_shm"), lat(r, "pmbench_shm"))),
    ("node_native_difference", "on a node: MPI over pm − pmbench --device shm, 8 B latency, µs",
     lambda r: lat(r, "pm_shm") - lat(r, "pmbench_shm")
     if lat(r, "pm_shm") is not None and lat(r, "pmbench_shm") is not None else None),
    ("node_native_bw64k", "on a node: MPI over pm ÷ pmbench --device shm, 64 KiB bandwidth",
     lambda r: _div(bw(r, "pm_shm", 65536), bw(r, "pmbench_shm", 65536))),
    ("node_native_bw1m", "on a node: MPI over pm ÷ pmbench --device shm, 1 MiB bandwidth",
     lambda r: _div(bw(r, "pm_shm", 1 << 20), bw(r, "pmbench_shm", 1 << 20))),
    ("node_vader_bw64k", "on a node: MPI over pm ÷ ob1 + vader, 64 KiB bandwidth",
     lambda r: _div(bw(r, "pm_shm", 65536), bw(r, "vader", 65536))),
    ("node_native_vader", "on a node: pmbench --device shm ÷ ob1 + vader, 8 B latency (PM's "
     "own ratio)", lambda r: _div(lat(r, "pmbench_shm"), lat(r, "vader"))),
    ("net_native_difference", "2 nodes: MPI over pm − pmbench --device udp, 8 B latency, µs",
     lambda r: lat(r, "pm_udp") - lat(r, "pmbench_udp")
     if lat(r, "pm_udp") is not None and lat(r, "pmbench_udp") is not None else None),
    ("net_fi_native_difference", "2 nodes: fi_pingpong over pm − pmbench --device udp, 8 B "
     "latency, µs (what libfabric's API and the provider add to PM)",
     lambda r: lat(r, "fi_udp") - lat(r, "pmbench_udp")
     if lat(r, "fi_udp") is not None and lat(r, "pmbench_udp") is not None else None),
    ("net_mpi_fi_difference", "2 nodes: MPI over pm − fi_pingpong over pm, 8 B latency, µs "
     "(what Open MPI's pml cm and mtl ofi, and NetPIPE, add to them)",
     lambda r: lat(r, "pm_udp") - lat(r, "fi_udp")
     if lat(r, "pm_udp") is not None and lat(r, "fi_udp") is not None else None),
    ("net_native_tcp", "2 nodes: pmbench --device udp ÷ ob1 + tcp BTL, 8 B latency (PM's own "
     "ratio)", lambda r: _div(lat(r, "pmbench_udp"), lat(r, "tcp"))),
    ("net_native_rxm", "2 nodes: pmbench --device udp ÷ tcp;ofi_rxm, 8 B latency (PM's own "
     "ratio)", lambda r: _div(lat(r, "pmbench_udp"), lat(r, "rxm"))),
    ("net_sockperf_udp_tcp", "2 nodes: sockperf UDP ÷ ob1 + tcp BTL, latency: the kernel's UDP "
     "path alone, the floor of MPI over pm on udp ÷ the tcp BTL (PM's udp device is a UDP "
     "socket)", lambda r: _div(lat(r, "sockperf_udp"), lat(r, "tcp"))),
    ("net_sockperf_udp_rxm", "2 nodes: sockperf UDP ÷ tcp;ofi_rxm, latency (the same floor "
     "against rxm)", lambda r: _div(lat(r, "sockperf_udp"), lat(r, "rxm"))),
    ("net_native_sockperf", "2 nodes: pmbench --device udp ÷ sockperf UDP, latency (PM's "
     "protocol over the UDP socket it sends on)",
     lambda r: _div(lat(r, "pmbench_udp"), lat(r, "sockperf_udp"))),
    ("net_tcp_sockperf", "2 nodes: ob1 + tcp BTL ÷ sockperf TCP, latency (what Open MPI adds to "
     "the kernel's TCP)", lambda r: _div(lat(r, "tcp"), lat(r, "sockperf_tcp"))),
    ("net_eth_native_tcp", "2 nodes: pmbench on eth ÷ ob1 + tcp BTL, 8 B latency (PM's own "
     "ratio)", lambda r: _div(lat(r, "pmbench_eth"), lat(r, "tcp"))),
    ("net_eth_udp", "2 nodes: MPI over pm on eth ÷ MPI over pm on udp, 8 B latency",
     lambda r: _div(lat(r, "pm_eth"), lat(r, "pm_udp"))),
    ("net_eth_bw1m", "2 nodes: MPI over pm on eth ÷ on udp, 1 MiB bandwidth (unlimited veth: "
     "udp has GSO and GRO, eth a frame per packet)",
     lambda r: _div(bw(r, "pm_eth", 1 << 20), bw(r, "pm_udp", 1 << 20))),
    ("net_native_bw1m", "2 nodes: MPI over pm ÷ pmbench --device udp, 1 MiB bandwidth",
     lambda r: _div(bw(r, "pm_udp", 1 << 20), bw(r, "pmbench_udp", 1 << 20))),
    ("net_tcp_bw1m", "2 nodes: MPI over pm ÷ ob1 + tcp BTL, 1 MiB bandwidth",
     lambda r: _div(bw(r, "pm_udp", 1 << 20), bw(r, "tcp", 1 << 20))),
    ("net_rxm_bw1m", "2 nodes: MPI over pm ÷ tcp;ofi_rxm, 1 MiB bandwidth",
     lambda r: _div(bw(r, "pm_udp", 1 << 20), bw(r, "rxm", 1 << 20))),
] + [
    (f"hpcc_{metric}", f"hpcc on 4 nodes × 1 rank, 2 NICs of 1 Gbit/s: {title} ({unit}), "
     f"over pm ÷ over ob1 + tcp ({better} is better)",
     lambda r, m=metric: _div(hpcc(r, "hpcc_pm", m), hpcc(r, "hpcc_tcp", m)))
    for metric, title, unit, better in HPCC_METRICS
]


def summarise(doc):
    rounds = doc["rounds"]
    titles = {k: t for k, t, *_ in ROWS}
    results = {}
    for key, title, where, program, required in ROWS:
        runs = [r.get(key) or {"failed": True, "error": "not run"} for r in rounds]
        errors = [x["error"] for x in runs if x.get("failed")]
        res = {"title": title, "where": where, "program": program, "required": required,
               "failed": bool(errors), "error": errors[0] if errors else None,
               "rounds_without_result": len(errors)}
        samples = [lat(r, key) for r in rounds]
        res["latency_us"] = dict(spread(samples), samples=samples)
        res["bandwidth_MBps"] = {}
        sizes = doc["trunk_sizes"] if where == "trunk" else doc["bw_sizes"]
        for size in sizes if program != "hpcc" else ():
            samples = [bw(r, key, size) for r in rounds]
            res["bandwidth_MBps"][str(size)] = dict(spread(samples), samples=samples)
        if program == "hpcc":
            res["hpcc"] = {}
            for metric, *_ in HPCC_METRICS:
                samples = [hpcc(r, key, metric) for r in rounds]
                res["hpcc"][metric] = dict(spread(samples), samples=samples)
        results[key] = res
    doc["results"] = results
    doc["targets"] = []
    for key, what, needs, fn, op, bound, issue in TARGETS:
        samples = [fn(r) for r in rounds]
        v = verdict(samples, op, bound)
        v.update(key=key, what=what, issue=issue, needs=list(needs), samples=samples)
        broken = [n for n in needs if n in results and results[n]["failed"]]
        if broken:
            v["why"] = "; ".join(f"{titles[n]} had no result in "
                                 f"{results[n]['rounds_without_result']} of {len(rounds)} round(s)"
                                 for n in broken)
            if v["n"] == 0:
                v["verdict"] = "n/a"
        doc["targets"].append(v)
    doc["info"] = []
    for key, what, fn in INFO:
        samples = [fn(r) for r in rounds]
        doc["info"].append(dict(spread(samples), key=key, what=what, samples=samples))


def run_suite(ctx):
    rounds = ctx.rounds
    bw_sizes = QUICK_BW_SIZES if ctx.quick else BW_SIZES
    trunk_sizes = QUICK_TRUNK_SIZES if ctx.quick else TRUNK_SIZES
    reps = QUICK_PM_REPS if ctx.quick else PM_REPS
    for need, hint in (("mpirun", "openmpi-bin"), ("NPopenmpi", "netpipe-openmpi"),
                       ("hpcc", "hpcc"), ("sockperf", "sockperf"),
                       ("fi_pingpong", "libfabric-bin")):
        if not any((Path(d) / need).exists() for d in os.environ.get("PATH", "").split(":")):
            raise RuntimeError(f"{need} missing: scripts/install-deps.sh installs {hint}")
    for need in (ctx.bin / "pmbench", ctx.build / "lib" / "libfabric" / "libpm-fi.so"):
        if not need.exists():
            raise RuntimeError(f"{need} missing: run make")
    cpus = len(os.sched_getaffinity(0))
    if not HPCC_INPUT.exists():
        raise RuntimeError(f"{HPCC_INPUT} missing: scripts/install-deps.sh installs hpcc")
    doc = {"suite": "mpi", "lat_size": LAT_SIZE, "bw_sizes": bw_sizes,
           "trunk_sizes": trunk_sizes, "pm_reps": reps,
           "pm_min_time_s": PM_MIN_TIME, "recv": "copy", "run_timeout_s": RUN_TIMEOUT,
           "fi_pingpong_iters": FI_PINGPONG_ITERS,
           "cluster": {"name": NAME, "subnet": SUBNET, "nodes": 2, "nics": 1,
                       "rate": "unlimited", "mtu": 1500},
           "trunk_cluster": {"name": TRUNK_NAME, "subnet": TRUNK_SUBNET, "nodes": TRUNK_NODES,
                             "nics": 2, "rate": TRUNK_RATE, "mtu": 1500},
           "hpcc": {"input": str(HPCC_INPUT), "ranks": TRUNK_NODES,
                    "metrics": [{"key": k, "title": t, "unit": u, "better": b}
                                for k, t, u, b in HPCC_METRICS]},
           "placement": ("rank 0 on CPU 0, rank 1 on CPU 1 (taskset -c, mpirun --bind-to none)"
                         if cpus >= 2 else "one CPU: both ranks share it (no taskset)"),
           "versions": {p: package_version(p) for p in ("openmpi-bin", "netpipe-openmpi",
                                                        "libfabric1", "hpcc")},
           "rows": [{"key": k, "title": t, "where": w, "program": p, "required": req}
                    for k, t, w, p, req in ROWS],
           "rounds": [], "failed": False, "errors": []}
    print(f"mpi: {cpus} CPUs, {rounds} round(s); {doc['placement']}", flush=True)
    doc["binaries"] = binaries(ctx)
    doc["idle_before_pct"] = idle_probe()
    dead = {}                 # row -> the round it failed in: not run again
    try:
        with BoundedCluster(ctx, NAME, nodes=2, nics=1, extra=["--subnet", SUBNET]) as cl, \
                BoundedCluster(ctx, TRUNK_NAME, nodes=TRUNK_NODES, nics=2, rate=TRUNK_RATE,
                               extra=["--subnet", TRUNK_SUBNET]) as trunk:
            doc["cluster"]["net0"] = cl.subnet(0)
            doc["trunk_cluster"]["nets"] = [trunk.subnet(0), trunk.subnet(1)]
            clusters = {"node": None, "cluster": cl, "trunk": trunk, "trunk4": trunk}
            for i in range(rounds):
                print(f"mpi round {i + 1}/{rounds}", flush=True)
                rnd = {}
                order = ROWS if i % 2 == 0 else list(reversed(ROWS))
                for key, title, where, program, required in order:
                    if key in dead:
                        rnd[key] = {"failed": True, "skipped": True,
                                    "error": f"not run: failed in round {dead[key] + 1}"}
                        continue
                    c = clusters[where]
                    try:
                        if program == "netpipe":
                            rnd[key] = measure_netpipe(ctx, c, key, bw_sizes)
                        elif program == "stream":
                            rnd[key] = measure_stream(ctx, c, key, trunk_sizes)
                        elif program == "hpcc":
                            rnd[key] = measure_hpcc(ctx, c, key)
                        elif program == "sockperf":
                            rnd[key] = measure_sockperf(ctx, c, key)
                        elif program == "fi_pingpong":
                            rnd[key] = measure_fi_pingpong(ctx, c, key, reps)
                        else:
                            rnd[key] = measure_pmbench(ctx, c, key, bw_sizes, reps)
                    except Failed as e:
                        print(f"mpi: {title}: FAILED{'' if required else ' (not fatal)'}: {e}",
                              flush=True)
                        rnd[key] = {"failed": True, "error": str(e)}
                        dead[key] = i
                doc["rounds"].append(rnd)
    finally:
        doc["idle_after_pct"] = idle_probe()
        after = binaries(ctx)
        doc["binaries_rebuilt"] = sorted(k for k in after if after[k] != doc["binaries"].get(k))
        summarise(doc)
    for key, title, where, program, required in ROWS:
        res = doc["results"][key]
        if res["failed"] and required:
            doc["failed"] = True
            doc["errors"].append(f"{title}: {res['error'].splitlines()[0]}")
    print_tables(doc)
    return doc


def run(ctx):
    """scripts/bench's entry point."""
    return run_suite(ctx)


# ---------------------------------------------------------------- printing

def size_label(size):
    return f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB"


def print_tables(doc):
    n = len(doc["rounds"])
    sizes = doc["bw_sizes"]
    print(f"\n  MPI over PM against Open MPI's transports and native PM: median [min-max] of "
          f"{n} round(s); latency one-way µs (8 B ping-pong), bandwidth stream MB/s")
    head = f"  {'':8} {'row':32} {'8 B latency µs':>22}" + "".join(
        f" {str(s >> 10) + ' KiB MB/s' if s < 1 << 20 else str(s >> 20) + ' MiB MB/s':>22}"
        for s in sizes)
    print(head)

    def failed(res):
        if not res["failed"]:
            return ""
        return (f"  FAILED ({res['rounds_without_result']} round(s) without a result): "
                + res["error"].splitlines()[0][:100])

    results = doc["results"]
    for key, res in results.items():
        if res["where"] not in ("node", "cluster"):
            continue
        where = "node" if res["where"] == "node" else "2 nodes"
        print(f"  {where:8} {res['title']:32} {cell(res['latency_us'], '.2f'):>22}" + "".join(
            f" {cell(res['bandwidth_MBps'][str(s)], '.0f'):>22}" for s in sizes) + failed(res))
    tsizes = doc["trunk_sizes"]
    print(f"\n  two NICs of 1 Gbit/s ({doc['trunk_cluster']['name']}, n1 to n2): stream MB/s")
    print(f"  {'row':48}" + "".join(f" {size_label(s) + ' MB/s':>22}" for s in tsizes))
    for key, res in results.items():
        if res["where"] == "trunk":
            print(f"  {res['title']:48}" + "".join(
                f" {cell(res['bandwidth_MBps'][str(s)], '.0f'):>22}" for s in tsizes) + failed(res))
    print(f"\n  hpcc on {doc['hpcc']['ranks']} nodes x 1 rank, two NICs of 1 Gbit/s")
    hpcc_rows = [k for k, r in results.items() if r["where"] == "trunk4"]
    print(f"  {'figure':44}" + "".join(f" {results[k]['title'][:30]:>30}" for k in hpcc_rows))
    for m in doc["hpcc"]["metrics"]:
        print(f"  {m['title'] + ' ' + m['unit']:44}" + "".join(
            f" {cell(results[k]['hpcc'][m['key']], '.4g'):>30}" for k in hpcc_rows))
    for k in hpcc_rows:
        if results[k]["failed"]:
            print(f"  {results[k]['title']}:{failed(results[k])}")
    print()
    for v in doc["targets"]:
        why = f" ({v['why']})" if v.get("why") else ""
        print(f"  {v['what']:84s} {cell(v, '.3f'):24s} (target {v['target']}) "
              f"{v['verdict']}{why}")
    for v in doc["info"]:
        if not v["n"]:
            continue
        print(f"  {v['what']:84s} {cell(v, '.3f'):24s} (informational)")
    if doc.get("binaries_rebuilt"):
        print(f"  WARNING: {', '.join(doc['binaries_rebuilt'])} changed while the suite ran "
              "(rebuilt by someone else): the rounds may have measured different builds.")
    for when in ("before", "after"):
        idle = doc.get(f"idle_{when}_pct")
        if idle is not None and idle < 90:
            print(f"  WARNING: the machine was only {idle:.0f}% idle {when} the runs: other "
                  "processes competed for the CPUs and the numbers are noisy.")
