"""mpi4py's own test suite over pm against libfabric's tcp provider under
mpirun (mpi4py_suite.py says how they are judged), on 2 virtual-cluster
nodes with 2 ranks each: every rank has a peer on its node (PM's shm device)
and peers on the other node (PM's udp device over two NICs), so a run on
one node alone would add nothing but a minute of the suite's time budget.
tests/scored/test_mpi_over_pm.py runs the same suite as a scrun job.

One-sided MPI goes over pm too when Open MPI's osc rdma runs over its btl
ofi (mpijob.ONE_SIDED_OVER_PM): mpi4py's one-sided modules then pass whole
over pm.  libfabric's own providers cannot be the reference there (checked
by hand, docs/mpi/guide.md): with tcp;ofi_rxm btl ofi finds every peer
unreachable, and with sockets the accumulate tests hang."""

import pytest

from .mpi4py_suite import assert_pm_passes_what_tcp_passes, provider_args, run_suite, suite_dir
from .mpijob import across, one_sided_over_pm_args


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


ONE_SIDED_MODULES = r"^test_(rma|rma_nb|win)\."


def test_mpi4py_one_sided_over_pm_across_two_nodes(testdir, two_nodes):
    """test_rma, test_rma_nb and test_win on 2 nodes x 2 ranks: every rank
    has a peer on its node (PM's shm device: atomics by the caller, under
    the owner's lock) and peers on the other (udp: atomics run by the
    owner's progress under the same lock), so both kinds meet on the same
    words; all pass but the exclusions of mpi4py_runner.py."""
    vc = two_nodes
    pm = run_suite(testdir, [*across(vc, 2), *provider_args("pm"), *one_sided_over_pm_args()],
                   "pm one-sided (osc rdma, btl ofi), 2 nodes x 2", 4, env=vc.env,
                   only=ONE_SIDED_MODULES)
    assert not pm.broken(), f"failed or errors: {sorted(pm.broken())}\n{pm.details()}"
    assert len(pm.passed()) >= 100, f"only {len(pm.passed())} tests passed"
    print(f"\n{pm.what}: {len(pm.passed())} passed")
