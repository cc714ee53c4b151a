"""Fixtures of the scored tests: one virtual cluster of 4 nodes running real
munged and scored, shared by the modules of this directory that leave it as
they found it (`shared_cluster`, package scope), and `score`, the clients
against it, which after every test ends what the test started and waits
until the master has no active job.  A module that breaks its cluster (an
agent killed) brings up its own with `vcluster_module`.

Needs root, munged, and scored/scrun/scorectl built (`make build`; another
build with SCORE_TEST_BIN=DIR)."""

import os
import shutil

import pytest

from conftest import ClusterFactory

from .score import SCORE_BIN, Score

NODES = 4


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes tens of seconds; runs by default "
                                       "(leave out with -m 'not slow')")


def _require_score():
    if not shutil.which("munged", path="/usr/sbin:/sbin:" + os.environ.get("PATH", "")):
        pytest.skip("munged is not installed (apt-get install munge)")
    missing = [p for p in ("scored", "scrun", "scorectl") if not (SCORE_BIN / p).is_file()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not built in {SCORE_BIN} (make build)")


@pytest.fixture(scope="package")
def shared_cluster(require_root):
    """4 nodes with MUNGE and scored, up for the whole directory."""
    _require_score()
    factory = ClusterFactory()
    try:
        yield factory(nodes=NODES, with_score=True, score_bin=SCORE_BIN)
    finally:
        factory.close()


@pytest.fixture
def score(shared_cluster):
    s = Score(shared_cluster)
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def own_score(own_cluster):
    """Score on the module's own cluster (own_cluster), cleaned up after
    each test."""
    s = Score(own_cluster)
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture(scope="module")
def own_cluster_factory(vcluster_module):
    """Factory: own_cluster_factory(score_master=None) -> a cluster of 4
    nodes with MUNGE and scored for one module (a configuration of its own,
    or tests that break it); down when the module ends."""
    _require_score()

    def make(score_master=None):
        return vcluster_module(nodes=NODES, with_score=True, score_bin=SCORE_BIN,
                               score_master=score_master)
    return make


@pytest.fixture(scope="module")
def own_cluster(own_cluster_factory):
    """4 nodes with MUNGE and scored for one module that may break it."""
    return own_cluster_factory()
