"""Unmodified Open MPI programs over PM through the libfabric provider pm
(mpi/, docs/mpi/guide.md): libfabric's own fi_info lists it, and real MPI
programs (tests/programs/mpi_transfer.c, mpi_errors.c) run over it on one
node (PM's shm device, and its udp device on loopback) and across
virtual-cluster nodes (udp over two NICs), with PM's counters showing that
the traffic went through PM."""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from scored.score import build_mpi_program, build_program

from .mpijob import (PROVIDER_DIR, Run, across, one_sided_over_pm_args, over_pm_args,
                     striped_over_both_nics, watch)

pytestmark = pytest.mark.skipif(shutil.which("mpicc") is None,
                                reason="Open MPI is not installed (libopenmpi-dev, "
                                       "scripts/install-deps.sh)")

LOCAL = ["mpirun", "--oversubscribe", "--bind-to", "none"]


def local_pm_env(device, **extra):
    """PM's knobs for a run on this host over `device` (udp on loopback)."""
    env = {"PM_DEVICE": device, **extra}
    if device == "udp":
        env["PM_UDP_NICS"] = "127.0.0.1"
    return env


@pytest.fixture(scope="module")
def programs():
    assert (PROVIDER_DIR / "libpm-fi.so").exists(), f"{PROVIDER_DIR}/libpm-fi.so: run `make`"
    d = tempfile.mkdtemp(prefix="score-mpi-")
    try:
        progs = {name: build_mpi_program(d, name)
                 for name in ("mpi_transfer", "mpi_errors", "mpi_peerdeath", "mpi_onesided")}
        progs["mpi_second_ep"] = build_program(d, "mpi_second_ep", cc=("mpicc",),
                                               flags=("-lfabric",))
        yield progs
    finally:
        shutil.rmtree(d, ignore_errors=True)


def fi_info(*args):
    assert shutil.which("fi_info"), "fi_info is missing (libfabric-bin, scripts/install-deps.sh)"
    return subprocess.run(["fi_info", *args], capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, FI_PROVIDER_PATH=str(PROVIDER_DIR)))


def test_fi_info_lists_the_provider_and_what_it_lacks():
    proc = fi_info("-p", "pm", "-v")
    assert proc.returncode == 0, proc.stderr
    assert "provider: pm" in proc.stdout or "prov_name: pm" in proc.stdout, proc.stdout
    assert "type: FI_EP_RDM" in proc.stdout
    assert "FI_TAGGED" in proc.stdout and "FI_DIRECTED_RECV" in proc.stdout
    assert "data_progress: FI_PROGRESS_MANUAL" in proc.stdout
    # A capability it does not have is refused in fi_info, not later.
    proc = fi_info("-p", "pm", "-c", "FI_RMA_EVENT")
    assert proc.returncode != 0, f"FI_RMA_EVENT should not be offered: {proc.stdout}"
    # FI_RMA and FI_ATOMIC are, to a caller that accepts its memory
    # registration mode.
    for cap in ("FI_RMA", "FI_ATOMIC"):
        proc = fi_info("-p", "pm", "-c", cap, "-v")
        assert proc.returncode == 0, proc.stderr
        assert cap in proc.stdout, proc.stdout
        assert "FI_MR_VIRT_ADDR" in proc.stdout and "FI_MR_PROV_KEY" in proc.stdout, proc.stdout
    proc = fi_info("-p", "pm", "-t", "FI_EP_MSG")
    assert proc.returncode != 0, proc.stdout


@pytest.mark.parametrize("device, nranks", [("shm", 2), ("shm", 4), ("udp", 2), ("udp", 4)])
def test_mpi_program_over_pm_on_one_node(programs, stats_dir, device, nranks):
    run = Run([*LOCAL, "-n", nranks,
               *over_pm_args(**local_pm_env(device, PM_STATS_DIR=stats_dir)),
               programs["mpi_transfer"], "--linger-ms", "4000"])
    # Up to 4 MiB goes through the provider's rendezvous: PM reads, which
    # every rank has done before it lingers.
    ctxs = watch(run, stats_dir, nranks, "rma_reads")
    assert run.returncode == 0, run.describe()
    assert f"mpi_transfer: {nranks} ranks passed" in run.stdout, run.describe()
    assert ctxs is not None, \
        f"pminfo never showed {nranks} PM contexts that had read remotely\n{run.describe()}"
    assert sorted(c["rank"] for c in ctxs) == list(range(nranks))
    assert all(c["device"] == device for c in ctxs), ctxs


@pytest.mark.parametrize("device, nranks", [("shm", 2), ("shm", 4), ("udp", 2), ("udp", 4)])
def test_a_second_endpoint_shares_the_process_pm_context_and_does_rma(programs, device, nranks):
    """Besides MPI's endpoint (mtl ofi, index 0) each rank opens one of its
    own (index 1, as btl ofi would): tagged messages between the second
    endpoints, eager and rendezvous, interleaved with MPI collectives on the
    first, each reach the right endpoint with the right source; then FI_RMA
    on it (fi_write/fi_read and their msg forms into registered windows,
    checked by owner and reader, a counter, error completions for a bad key
    and range)."""
    pm_env = local_pm_env(device)
    run = Run([*LOCAL, "-n", nranks, *over_pm_args(**pm_env),
               programs["mpi_second_ep"]]).wait()
    assert run.returncode == 0, run.describe()
    assert f"mpi_second_ep: {nranks} ranks passed" in run.stdout, run.describe()


@pytest.mark.parametrize("device, nranks", [("shm", 4), ("udp", 3)])
def test_one_sided_mpi_over_pm_through_btl_ofi_and_osc_rdma(programs, stats_dir, device, nranks):
    """MPI_Put/Get/Accumulate with fences and MPI_Fetch_and_op under
    MPI_Win_lock_all, through Open MPI's osc rdma over its btl ofi on the
    provider pm: fi_write, fi_read and fi_atomic/fi_fetch_atomic/
    fi_compare_atomic as PM's remote memory and atomics; every rank's PM
    context has written remotely."""
    run = Run([*LOCAL, "-n", nranks,
               *over_pm_args(**local_pm_env(device, PM_STATS_DIR=stats_dir)),
               *one_sided_over_pm_args(), programs["mpi_onesided"], "--linger-ms", "4000"])
    ctxs = watch(run, stats_dir, nranks, "rma_writes")
    assert run.returncode == 0, run.describe()
    assert f"mpi_onesided: {nranks} ranks passed" in run.stdout, run.describe()
    assert ctxs is not None, \
        f"pminfo never showed {nranks} PM contexts that had written remotely\n{run.describe()}"


@pytest.mark.parametrize("device", ["shm", "udp"])
def test_truncation_cancel_and_probe_as_mpi_defines_them(programs, device):
    """MPI_ERR_TRUNCATE for a short buffer (eager and rendezvous sizes), a
    cancelled receive, Iprobe/Probe/Mprobe, Ssend: mpi_errors checks each."""
    pm_env = local_pm_env(device)
    run = Run([*LOCAL, "-n", 2, *over_pm_args(**pm_env), programs["mpi_errors"]]).wait()
    assert run.returncode == 0, run.describe()
    assert "mpi_errors: passed" in run.stdout, run.describe()


def test_a_dead_peer_fails_the_receive_instead_of_hanging(programs):
    """Rank 1 exits without closing anything; rank 0's MPI_Recv from it
    returns an error (PM sees the death on its node and the provider fails
    what waits on that peer)."""
    run = Run([*LOCAL, "-n", 2, "--mca", "orte_allowed_exit_without_sync", "1",
               *over_pm_args(PM_DEVICE="shm"), programs["mpi_peerdeath"]], timeout=60).wait()
    assert "mpi_peerdeath: the receive failed" in run.stdout, run.describe()


@pytest.mark.parametrize("ppn, net", [(1, "udp"), (2, "udp"), (2, "eth")])
def test_mpi_program_over_pm_across_nodes(two_nodes, programs, ppn, net):
    """2 nodes x ppn ranks: PM's network device `net` between the nodes (udp,
    or eth: raw Ethernet frames, PM_NET_DEVICE=eth), striped over both NICs;
    with 2 ranks a node, shm between them as well.  The provider says which
    device reaches each peer (FI_LOG_LEVEL=info)."""
    vc = two_nodes
    # About 50 MB go each way in large packets.
    with striped_over_both_nics(vc):
        run = Run([*across(vc, ppn), *over_pm_args(PM_NET_DEVICE=net, FI_LOG_LEVEL="info"),
                   programs["mpi_transfer"]], env=vc.env, timeout=120).wait()
        assert run.returncode == 0, run.describe()
        assert f"mpi_transfer: {2 * ppn} ranks passed" in run.stdout, run.describe()
    assert f"through PM's {net} device" in run.stderr, run.describe()
    if ppn == 2:
        assert "through PM's shm device" in run.stderr, run.describe()


# --- HPC Challenge (Debian's hpcc, built with Open MPI) over pm ------------------

HPCC_INPUT = Path("/usr/share/doc/hpcc/examples/_hpccinf.txt")


def hpcc_dir(n):
    """A working directory with hpcc's example input, the problem made small
    (N = n) so that the whole suite takes seconds."""
    assert shutil.which("hpcc"), "hpcc is missing (scripts/install-deps.sh)"
    d = Path(tempfile.mkdtemp(prefix="score-hpcc-"))
    os.chmod(d, 0o777)
    lines = HPCC_INPUT.read_text().splitlines()
    assert lines[5].split()[-1] == "Ns", lines[5]
    lines[5] = f"{n}          Ns"
    (d / "hpccinf.txt").write_text("\n".join(lines) + "\n")
    return d


def assert_hpcc_checks_pass(d, run, nranks):
    out = (d / "hpccoutf.txt").read_text(errors="replace")
    summary = dict(l.split("=", 1) for l in out.splitlines() if "=" in l and " " not in l)
    assert run.returncode == 0, run.describe()
    assert summary.get("Success") == "1", f"hpcc says it failed:\n{out[-3000:]}"
    assert summary.get("CommWorldProcs") == str(nranks), summary.get("CommWorldProcs")
    assert "FAILED" not in out, out
    for key in ("MPIRandomAccess_Errors", "MPIRandomAccess_LCG_Errors"):
        assert float(summary.get(key, "nan")) == 0, (key, summary.get(key))
    assert float(summary["PTRANS_residual"]) == 0, summary["PTRANS_residual"]
    assert float(summary["MPIFFT_maxErr"]) < 1e-10, summary["MPIFFT_maxErr"]
    print(f"\nhpcc over pm, {nranks} ranks: HPL {summary['HPL_Tflops']} Tflops, "
          f"PTRANS {summary['PTRANS_GBs']} GB/s, "
          f"RandomRing {summary.get('RandomlyOrderedRingLatency_usec')} us")


def test_hpcc_checks_pass_over_pm_on_one_node():
    d = hpcc_dir(500)
    try:
        run = Run([*LOCAL, "-n", 4, "--mca", "mpi_yield_when_idle", "1", *over_pm_args(), "hpcc"],
                  timeout=240, cwd=d).wait()
        assert_hpcc_checks_pass(d, run, 4)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_hpcc_checks_pass_over_pm_across_nodes(two_nodes):
    """2 nodes x 2 ranks: udp between the nodes over both NICs, shm within."""
    vc = two_nodes
    d = hpcc_dir(500)
    try:
        run = Run([*across(vc, 2), "--mca", "mpi_yield_when_idle", "1", *over_pm_args(), "hpcc"],
                  env=vc.env, timeout=240, cwd=d).wait()
        assert_hpcc_checks_pass(d, run, 4)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --- libfabric's own tools between two processes started by hand -------------------
#
# No launcher: the provider opens a detached PM context (docs/pm/guide.md,
# "Detached contexts"), fi_pingpong exchanges the endpoints' names over its
# own TCP socket and inserts them with fi_av_insert.


def test_fi_info_offers_untagged_messages():
    proc = fi_info("-p", "pm", "-c", "FI_MSG", "-v")
    assert proc.returncode == 0, proc.stderr
    assert "FI_MSG" in proc.stdout and "type: FI_EP_RDM" in proc.stdout, proc.stdout


def by_hand_env(stats_dir):
    """The environment of a process started by hand: no PMIx server, the
    provider found by FI_PROVIDER_PATH, PM's udp on loopback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMIX_")}
    env.update(FI_PROVIDER_PATH=str(PROVIDER_DIR), PM_UDP_NICS="127.0.0.1",
               PM_STATS_DIR=stats_dir, FI_LOG_LEVEL="info")
    return env


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port, tcp_table):
    """Whether some socket listens on TCP port (IPv4), from a /proc/net/tcp."""
    for line in tcp_table.splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A" and int(local.split(":")[1], 16) == port:
            return True
    return False


def run_pingpong(args, stats_dir, limit=90.0, vc=None, nodes=None, **pm_env):
    """fi_pingpong's server and client over pm, on 127.0.0.1 or, with vc, the
    server on nodes[0] and the client on nodes[1] (reaching the server by its
    first network); both must end by themselves within limit seconds.
    Returns (server, client) as (returncode, stdout, stderr)."""
    assert shutil.which("fi_pingpong"), "fi_pingpong is missing (libfabric-bin)"
    port = free_tcp_port()
    env = {**by_hand_env(stats_dir), **pm_env}
    base = ["fi_pingpong", "-p", "pm", "-e", "rdm", *args]
    if vc:
        del env["PM_UDP_NICS"]          # every NIC of the node: trunking
        start = lambda node, argv: vc.popen(node, *argv, env=env, text=True)
        tcp_table = lambda: vc.exec(nodes[0], "cat", "/proc/net/tcp", check=True).stdout
        server_at = vc.address(nodes[0], 0)
    else:
        start = lambda node, argv: subprocess.Popen(argv, env=env, text=True,
                                                    stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE)
        tcp_table = lambda: Path("/proc/net/tcp").read_text()
        server_at = "127.0.0.1"
        nodes = [None, None]
    procs = []
    try:
        procs.append(start(nodes[0], [*base, "-B", str(port)]))
        deadline = time.monotonic() + 15
        while not listening(port, tcp_table()):
            assert procs[0].poll() is None, procs[0].communicate()
            assert time.monotonic() < deadline, "fi_pingpong's server never listened"
            time.sleep(0.05)
        procs.append(start(nodes[1], [*base, "-P", str(port), server_at]))
        deadline = time.monotonic() + limit
        results = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                pytest.fail(f"fi_pingpong (pid {p.pid}) did not end within {limit} s:\n"
                            f"{out}\n{err[-3000:]}")
            results.append((p.returncode, out, err))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def assert_pingpong_passed(server, client, device="udp"):
    """Both ended well over detached contexts, each reaching the other
    through PM's `device` (the provider says so at FI_LOG_LEVEL=info)."""
    for role, (rc, out, err) in (("server", server), ("client", client)):
        assert rc == 0, f"{role} failed ({rc}):\n{out}\n{err[-3000:]}"
        assert "usec/xfer" in out, f"{role} printed no results:\n{out}\n{err[-3000:]}"
        assert "PM context opened detached" in err, f"{role}:\n{err[-3000:]}"
        assert f"PM peer 1: through PM's {device} device" in err, f"{role}:\n{err[-3000:]}"
    # What the client counted is what the server counted (fi_pingpong
    # prints "#sent" and "=#ack" when they agree).
    rows = [l for l in client[1].splitlines() if l[:1].isdigit()]
    assert rows and all("=" in r for r in rows), client[1]


@pytest.mark.parametrize("args", [
    # Every size from 1 byte to 6 MiB, eager and rendezvous, data checked.
    ["-S", "all", "-I", "5", "-c"],
    # Many small messages each way, tagged this time (fi_tsend/fi_trecv).
    ["-m", "tagged", "-S", "1024", "-I", "2000", "-c"],
], ids=["msg-all-sizes", "tagged-1k"])
@pytest.mark.parametrize("device", ["shm", "udp"])
def test_fi_pingpong_between_two_processes_started_by_hand(stats_dir, args, device):
    """fi_pingpong -p pm -e rdm completes in both directions: each side
    sends and receives every iteration, and with -c checks every byte it
    receives; addresses come from fi_getname/fi_av_insert and there is no
    PMIx launcher (detached PM contexts).  By default the two processes of
    this host reach each other through PM's shm (composite device);
    PM_DEVICE=udp takes loopback."""
    pm_env = {"PM_DEVICE": "udp"} if device == "udp" else {}
    server, client = run_pingpong(args, stats_dir, **pm_env)
    assert_pingpong_passed(server, client, device)


@pytest.mark.parametrize("net", ["udp", "eth"])
def test_fi_pingpong_across_nodes_over_two_nics(two_nodes, stats_dir, net):
    """The same between two virtual-cluster nodes started by hand: detached
    contexts over PM's network device `net` (udp, or eth: raw frames, the
    peer's MAC learnt from the kernel's neighbour table), their large
    messages striped over both NICs."""
    vc = two_nodes
    first, second = vc.nodes[0], vc.nodes[1]
    # Some 20 MB go each way in large packets.
    with striped_over_both_nics(vc, [first, second]):
        server, client = run_pingpong(["-S", "all", "-I", "5", "-c"], stats_dir, vc=vc,
                                      nodes=[first, second], PM_NET_DEVICE=net)
        assert_pingpong_passed(server, client, net)

