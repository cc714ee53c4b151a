"""Fixtures of the MPI tests."""

import pytest


@pytest.fixture(scope="module")
def two_nodes(vcluster_module):
    """2 virtual-cluster nodes with 2 NICs each, shared by a module's tests."""
    return vcluster_module(nodes=2, nics=2)
