"""Fixtures of the MPI tests."""

import shutil
import tempfile

import pytest


@pytest.fixture(scope="module")
def two_nodes(vcluster_module):
    """2 virtual-cluster nodes with 2 NICs each, shared by a module's tests."""
    return vcluster_module(nodes=2, nics=2)


@pytest.fixture
def stats_dir():
    """A PM_STATS_DIR of the test's own, where the ranks' PM contexts
    publish their statistics pages for pminfo to read."""
    d = tempfile.mkdtemp(prefix="score-pmstats-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
