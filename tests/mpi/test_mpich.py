"""Unmodified MPICH programs over PM: the `mpich` wheel (pinned, installed
into a venv under build/ by mpich.py), its own mpicc and hydra mpiexec, the
provider pm loaded by the wheel's libfabric from FI_PROVIDER_PATH
(docs/mpi/guide.md, "MPICH").  hydra speaks PMI, not PMIx, so every rank
opens a detached PM context (PM's composite device: shm to the ranks on its
host, udp to the others) and finds its peers by fi_av_insert of the names
MPICH exchanged through PMI; MPIR_CVAR_NOLOCAL=1 sends the traffic between
ranks of one node through the provider too.  PM's counters
(pminfo --json) show it went through PM.

Across two virtual-cluster nodes hydra starts its proxies through `vcluster
rsh` (its ssh launcher with -launcher-exec), and PM stripes the large
messages over both NICs.

mpi4py's own suite (4.1.1, the wheel that loads against this MPICH) runs
under hydra across two nodes over pm and over libfabric's tcp provider in
the wheel's libfabric, the same settings otherwise: every test that passes
with tcp passes with pm.

Skipped only when the wheels cannot be fetched (no network)."""

import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import VCLUSTER

from .mpi4py_suite import assert_pm_passes_what_tcp_passes, run_suite, suite_dir
from .mpich import (MPI4PY_SDIST_SHA256, MPI4PY_VERSION, MPICH_API_1_18, hydra_across, install,
                    install_mpi4py, mpich_env, rsh_script)
from .mpijob import BUILD, PROVIDER_DIR, Run, striped_over_both_nics, watch
from .wheels import build_program, compile_program


@pytest.fixture(scope="module")
def mpich():
    return install()


@pytest.fixture(scope="module")
def programs(mpich):
    d = tempfile.mkdtemp(prefix="score-mpich-")
    try:
        yield {name: build_program(mpich, d, name)
               for name in ("mpi_transfer", "mpi_errors", "mpi_onesided")}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def mpiexec(mpich, nranks, argv, timeout=60, **pm_env):
    """The wheel's mpiexec on this host over pm (PM's shm between the
    ranks; udp, when PM_DEVICE=udp asks for it, on loopback), in its own
    session: Run kills it, its proxies and ranks by its PID."""
    env = mpich_env(PM_UDP_NICS="127.0.0.1", **pm_env)
    return Run([mpich / "bin" / "mpiexec", "-n", nranks, *argv], env=env, timeout=timeout)


@pytest.mark.parametrize("device, nranks", [("shm", 2), ("shm", 4), ("udp", 2)])
def test_mpich_program_over_pm_on_one_node(mpich, programs, stats_dir, device, nranks):
    """The token ring, every size from 0 to 4 MiB to both neighbours (eager
    and the provider's rendezvous, bytes checked), any-source receives and
    collectives; meanwhile pminfo sees one detached context per rank, each
    with peers for the whole job, that has moved the large messages by PM's
    remote reads: by default on PM's composite device, whose udp sockets
    then carry nothing (shm between the ranks of the host); with
    PM_DEVICE=udp, over loopback."""
    extra = {"PM_DEVICE": "udp"} if device == "udp" else {}
    run = mpiexec(mpich, nranks, [programs["mpi_transfer"], "--linger-ms", "3000"],
                  PM_STATS_DIR=stats_dir, **extra)
    ctxs = watch(run, stats_dir, nranks, "rma_reads")
    assert run.returncode == 0, run.describe()
    assert f"mpi_transfer: {nranks} ranks passed" in run.stdout, run.describe()
    assert ctxs is not None, \
        f"pminfo never showed {nranks} PM contexts that had read remotely\n{run.describe()}"
    for c in ctxs:
        assert c["job"].startswith("detached."), c
        assert c["size"] == nranks, c          # itself and every peer inserted
        assert c["counters"]["msgs_recv"] > 0 and c["counters"]["drops"] == 0, c
        udp_packets = sum(n["rx_packets"] + n["tx_packets"] for n in c["nics"])
        if device == "shm":
            assert c["device"] == "composite" and udp_packets == 0, c
        else:
            assert c["device"] == "udp" and udp_packets > 0, c
    assert len({c["pid"] for c in ctxs}) == nranks, ctxs


def wheel_libfabric_env(mpich):
    """os.environ with the wheel's libfabric (2.5.1) first on the library
    path and no FI_ variable but those that select the provider pm."""
    libdir = mpich / "lib" / "mpich"
    assert (libdir / "libfabric.so.1").exists(), libdir
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FI_", "PMIX_"))}
    env.update(LD_LIBRARY_PATH=str(libdir), FI_PROVIDER="pm",
               FI_PROVIDER_PATH=str(PROVIDER_DIR))
    return env


def test_getinfo_answers_api_2_requests_under_the_wheels_libfabric(mpich):
    """The provider's unit test of getinfo in its API 2.x mode, run under
    the wheel's libfabric (2.5.1) instead of the system's 1.17: 2.x's
    tagged-only and exact directed receives, tag formats, peer groups,
    authorization keys per endpoint and counter ranges, through the core's
    newest symbols."""
    test = BUILD / "meson" / "mpi" / "tests" / "test_getinfo"
    run = subprocess.run([str(test), str(PROVIDER_DIR), "--api2"],
                         env=wheel_libfabric_env(mpich), capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "getinfo API 2.x tests passed (libfabric 2.5)" in run.stdout, run.stdout


@pytest.mark.parametrize("mode", ["tagged", "exact", "endpoints"])
def test_api_2_directed_receives(mpich, mode, tmp_path):
    """fi_directed (tests/programs) under the wheel's libfabric at API 2.5:
    with FI_TAGGED_DIRECTED_RECV alone, a tagged receive from one sender
    does not take another sender's earlier message of the same tag; with
    FI_EXACT_DIRECTED_RECV, a receive from FI_ADDR_UNSPEC is refused; and
    (endpoints) the two senders may be two endpoints of one process: an
    address names an endpoint, not a process.  Processes of this host over
    detached PM contexts, no launcher."""
    exe = compile_program(tmp_path, "fi_directed", flags=("-lfabric",))
    run = subprocess.run([str(exe), mode], env=wheel_libfabric_env(mpich),
                         capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"fi_directed: {mode} passed" in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize("api", ["2.5", "1.18"])
def test_mpich_truncation_cancel_and_probe(mpich, programs, api):
    """MPI_ERR_TRUNCATE, a cancelled receive, Iprobe/Probe/Mprobe and Ssend,
    as MPICH defines them, over pm; at the API MPICH asks by default (its
    libfabric's, 2.5) and at 1.18 (MPICH_API_1_18), each answered in its own
    terms: the provider says which API each rank's fabric was opened for."""
    versions = MPICH_API_1_18 if api == "1.18" else {}
    run = mpiexec(mpich, 2, [programs["mpi_errors"]], FI_LOG_LEVEL="info",
                  **versions).wait()
    assert run.returncode == 0, run.describe()
    assert "mpi_errors: passed" in run.stdout, run.describe()
    opened = [ln for ln in run.stderr.splitlines() if "fabric opened for API" in ln]
    assert len(opened) == 2 and all(ln.endswith(f"API {api}") for ln in opened), \
        f"{opened}\n{run.describe()}"


def test_mpich_one_sided_through_active_messages(mpich, programs):
    """MPI_Put/Get/Accumulate with fences: with no FI_RMA in the provider,
    MPICH sends them as active messages (FI_MSG) into buffers it posts with
    FI_MULTI_RECV; the run uses buffers up, and MPICH reposts them (the
    provider says how many at close, FI_LOG_LEVEL=info)."""
    run = mpiexec(mpich, 2, [programs["mpi_onesided"]], FI_LOG_LEVEL="info").wait()
    assert run.returncode == 0, run.describe()
    assert "mpi_onesided: 2 ranks passed" in run.stdout, run.describe()
    used = [int(line.split(" buffers used up")[0].rsplit(" ", 1)[1])
            for line in run.stderr.splitlines() if "buffers used up" in line]
    assert len(used) == 2 and all(n >= 1 for n in used), \
        f"multi-receive buffers used up per rank: {used}\n{run.describe()}"


@pytest.fixture(scope="module")
def rsh(two_nodes):
    """hydra's ssh launcher for the two nodes (mpich.rsh_script)."""
    with rsh_script(two_nodes, VCLUSTER) as script:
        yield script


@pytest.mark.parametrize("net", ["udp", "eth"])
def test_mpich_across_two_nodes_over_two_nics(mpich, programs, two_nodes, rsh, net):
    """2 nodes x 2 ranks under hydra: detached contexts on every NIC of each
    node (PM's network device `net`: udp, or eth, whose peers' MACs come
    from the kernel's neighbour table; trunking), so the megabytes between
    the nodes go over both NICs; eth1 carries nothing else (hydra's own
    traffic stays on net 0).  The provider says which device reaches each
    peer: shm on the node, `net` to the other."""
    vc = two_nodes
    with striped_over_both_nics(vc):
        run = Run([*hydra_across(mpich, vc, rsh, 2), programs["mpi_transfer"]],
                  env=mpich_env(PM_NET_DEVICE=net, FI_LOG_LEVEL="info"), timeout=90).wait()
        assert run.returncode == 0, run.describe()
        assert "mpi_transfer: 4 ranks passed" in run.stdout, run.describe()
    assert f"through PM's {net} device" in run.stderr, run.describe()
    assert "through PM's shm device" in run.stderr, run.describe()


def assert_suite_passes_over_pm_what_it_passes_over_tcp(mpich, prefix, shape, pm_path,
                                                        tcp_iface, nranks=2):
    """mpi4py 4.1.1's suite under hydra (`prefix`: mpiexec and its shape,
    nranks ranks), once over the tcp provider of the wheel's own libfabric
    on tcp_iface and once over pm (`pm_path` says which of PM's devices
    carry it), the same MPICH settings and exclusions otherwise
    (mpi4py_runner.py): every test that passes with tcp passes with pm."""
    python = install_mpi4py(mpich)
    with suite_dir(MPI4PY_VERSION, MPI4PY_SDIST_SHA256) as testdir:
        tcp = run_suite(testdir, prefix, f"MPICH, tcp, hydra, {shape}", nranks, python=python,
                        env=mpich_env(FI_PROVIDER="tcp", FI_TCP_IFACE=tcp_iface))
        pm = run_suite(testdir, prefix, f"MPICH, pm, hydra, {shape} ({pm_path})", nranks,
                       python=python, env=mpich_env())
    assert_pm_passes_what_tcp_passes(pm, tcp)


@pytest.mark.long
def test_mpi4py_under_mpich_across_two_nodes_passes_what_tcp_passes(mpich, two_nodes, rsh):
    """mpi4py 4.1.1's suite under the MPICH wheel on 2 virtual-cluster nodes
    x 1 rank, under hydra: with pm (detached contexts, PM's udp over both
    NICs of each node) every test passes that passes with the tcp provider
    of the wheel's own libfabric (on eth0); the next test runs it on one
    host (shm), and tests/scored/test_mpi_over_pm.py under scrun.  Long
    (make test-long), to keep make test in its half hour: make test runs
    the same shape, 2 nodes x 1 over both NICs, as a scrun job
    (tests/scored/test_mpi_over_pm.py)."""
    assert_suite_passes_over_pm_what_it_passes_over_tcp(
        mpich, hydra_across(mpich, two_nodes, rsh, 1), "2 nodes x 1", "udp over 2 NICs", "eth0")


@pytest.mark.long
def test_mpi4py_under_mpich_on_one_node_passes_what_tcp_passes(mpich):
    """The same suite with 2 ranks on this host under hydra: with pm the
    ranks' detached contexts reach each other through PM's shm (composite
    device), against the wheel's tcp provider on loopback.  Long (make
    test-long), to keep make test in its half hour: make test runs MPICH's
    suite across two nodes (above, and 2x1 under scrun)."""
    assert_suite_passes_over_pm_what_it_passes_over_tcp(
        mpich, [mpich / "bin" / "mpiexec", "-n", 2], "one node x 2", "shm", "lo")
