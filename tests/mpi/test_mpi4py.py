"""mpi4py's own test suite over pm against libfabric's tcp provider under
mpirun (mpi4py_suite.py says how they are judged): 4 ranks on one node
(PM's shm device; every pair of them talks, so 2 ranks would add nothing but
half a minute of the suite's time budget), and 2 virtual-cluster nodes with
2 ranks each (PM's udp device over two NICs between the nodes, shm within
each; every rank has peers of both kinds, so 1 rank per node would add
nothing but time)."""

import pytest

from .mpi4py_suite import assert_pm_passes_what_tcp_passes, provider_args, run_suite, suite_dir
from .mpijob import across


@pytest.fixture(scope="module")
def testdir():
    with suite_dir() as d:
        yield d


LOCAL = ["mpirun", "--oversubscribe", "--bind-to", "none"]


@pytest.mark.parametrize("nranks", [4])
def test_mpi4py_on_one_node(testdir, nranks):
    tcp = run_suite(testdir, [*LOCAL, "-n", nranks, *provider_args("tcp")],
                    f"tcp, {nranks} ranks on one node", nranks)
    pm = run_suite(testdir, [*LOCAL, "-n", nranks, *provider_args("pm")],
                   f"pm, {nranks} ranks on one node", nranks)
    assert_pm_passes_what_tcp_passes(pm, tcp)


@pytest.mark.parametrize("ppn", [2])
def test_mpi4py_across_two_nodes(testdir, two_nodes, ppn):
    vc = two_nodes
    nranks = 2 * ppn
    tcp = run_suite(testdir, [*across(vc, ppn), *provider_args("tcp"), "-x", "FI_TCP_IFACE=eth0"],
                    f"tcp, 2 nodes x {ppn}", nranks, env=vc.env)
    pm = run_suite(testdir, [*across(vc, ppn), *provider_args("pm")],
                   f"pm, 2 nodes x {ppn} (udp over 2 NICs)", nranks, env=vc.env)
    assert_pm_passes_what_tcp_passes(pm, tcp)
