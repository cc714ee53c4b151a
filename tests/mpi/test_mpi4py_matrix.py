"""mpi4py's own suite in every shape issue 12 names, under mpirun and
hydra: 2 and 4 ranks, on one node (PM's shm device) and across 2 and 4
virtual-cluster nodes (udp over 2 NICs), each against libfabric's tcp
provider under the same MPI, layout and exclusions (mpi4py_suite.py): every
test that passes with tcp passes with pm.

Marked long: `make test-long` runs it (some ten minutes here); `make test`
runs one shape of each MPI (2 nodes x 2 under Open MPI's mpirun in
test_mpi4py.py, 2 nodes x 1 under MPICH's hydra in test_mpich.py, whose
one node x 2 is long too) and the scrun shapes in
tests/scored/test_mpi_over_pm.py."""

import pytest

from conftest import VCLUSTER

from .mpi4py_suite import assert_pm_passes_what_tcp_passes, provider_args, run_suite, suite_dir
from .mpich import hydra_across, install, rsh_script
from .mpijob import across
from .test_mpich import assert_suite_passes_over_pm_what_it_passes_over_tcp

pytestmark = pytest.mark.long

NODES = ["n1", "n2", "n3", "n4"]
# (nodes, ranks per node): 2 and 4 ranks, one node and 2 and 4 nodes, but
# for the shapes make test runs (the module's docstring).
OPEN_MPI_SHAPES = [(1, 2), (1, 4), (2, 1), (4, 1)]
MPICH_SHAPES = [(1, 4), (2, 2), (4, 1)]
LOCAL_MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def shape_id(shape):
    return f"{shape[0]}x{shape[1]}"


@pytest.fixture(scope="module")
def four_nodes(vcluster_module):
    return vcluster_module(nodes=len(NODES), nics=2)


@pytest.fixture(scope="module")
def testdir():
    with suite_dir() as d:
        yield d


@pytest.fixture(scope="module")
def mpich():
    return install()


@pytest.fixture(scope="module")
def rsh(four_nodes):
    with rsh_script(four_nodes, VCLUSTER) as script:
        yield script


@pytest.mark.parametrize("shape", OPEN_MPI_SHAPES, ids=shape_id)
def test_open_mpi_mpirun(testdir, four_nodes, shape):
    """Debian's Open MPI (pml cm, mtl ofi) and mpi4py 3.1.4 under mpirun."""
    nodes, ppn = shape
    nranks = nodes * ppn
    if nodes == 1:
        prefix, env, iface = [*LOCAL_MPIRUN, "-n", str(ppn)], None, "lo"
    else:
        prefix, env, iface = across(four_nodes, ppn, NODES[:nodes]), four_nodes.env, "eth0"
    tcp = run_suite(testdir, [*prefix, *provider_args("tcp"), "-x", f"FI_TCP_IFACE={iface}"],
                    f"Open MPI, tcp, {shape_id(shape)}", nranks, env=env)
    pm = run_suite(testdir, [*prefix, *provider_args("pm")],
                   f"Open MPI, pm, {shape_id(shape)} ({'shm' if nodes == 1 else 'udp'})",
                   nranks, env=env)
    assert_pm_passes_what_tcp_passes(pm, tcp)


@pytest.mark.parametrize("shape", MPICH_SHAPES, ids=shape_id)
def test_mpich_hydra(mpich, four_nodes, rsh, shape):
    """The MPICH wheel and mpi4py 4.1.1 under hydra (detached contexts)."""
    nodes, ppn = shape
    if nodes == 1:
        prefix, iface = [mpich / "bin" / "mpiexec", "-n", ppn], "lo"
    else:
        prefix, iface = hydra_across(mpich, four_nodes, rsh, ppn, NODES[:nodes]), "eth0"
    assert_suite_passes_over_pm_what_it_passes_over_tcp(
        mpich, prefix, shape_id(shape), "shm" if nodes == 1 else "udp over 2 NICs", iface,
        nranks=nodes * ppn)
