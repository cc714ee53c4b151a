"""Fixtures of the PM tests: pmcheck jobs that are always ended, the cluster
they share, and the `slow` marker (slow tests still run by default;
`-m "not slow"` leaves them out)."""

import shutil

import pytest

from .pmjob import PMCHECK, Job


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes tens of seconds; runs by default "
                                       "(leave out with -m 'not slow')")


@pytest.fixture(scope="session")
def mpirun_available():
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed (openmpi-bin, scripts/install-deps.sh)")
    assert PMCHECK.exists(), f"{PMCHECK} is missing: run `make build` first"


@pytest.fixture
def jobs(mpirun_available):
    """Factory: jobs(vc, nodes, apps, slots=1) -> Job; every job still running
    at the end of the test is ended by its PID."""
    started = []

    def start(vc, nodes, apps, slots=1):
        job = Job(vc, nodes, apps, slots)
        started.append(job)
        return job

    try:
        yield start
    finally:
        for job in started:
            job.kill()


@pytest.fixture(scope="module")
def pair_cluster(vcluster_module, mpirun_available):
    """3 nodes x 2 NICs, shared by the tests of a module that leave the network
    as they found it: jobs run on n1 and n2, n3 plays a stranger."""
    return vcluster_module(nodes=3, nics=2)
