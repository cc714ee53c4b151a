"""mpi4py's own test suite over pm against libfabric's tcp provider under
mpirun (mpi4py_suite.py says how they are judged), on 2 virtual-cluster
nodes with 2 ranks each: every rank has a peer on its node (PM's shm device)
and peers on the other node (PM's udp device over two NICs), so a run on
one node alone would add nothing but a minute of the suite's time budget.
tests/scored/test_mpi_over_pm.py runs the same suite as a scrun job."""

import pytest

from .mpi4py_suite import assert_pm_passes_what_tcp_passes, provider_args, run_suite, suite_dir
from .mpijob import across


@pytest.fixture(scope="module")
def testdir():
    with suite_dir() as d:
        yield d


@pytest.mark.parametrize("ppn", [2])
def test_mpi4py_across_two_nodes(testdir, two_nodes, ppn):
    vc = two_nodes
    nranks = 2 * ppn
    tcp = run_suite(testdir, [*across(vc, ppn), *provider_args("tcp"), "-x", "FI_TCP_IFACE=eth0"],
                    f"tcp, 2 nodes x {ppn}", nranks, env=vc.env)
    pm = run_suite(testdir, [*across(vc, ppn), *provider_args("pm")],
                   f"pm, 2 nodes x {ppn} (udp over 2 NICs)", nranks, env=vc.env)
    assert_pm_passes_what_tcp_passes(pm, tcp)
