"""Fixtures of the DSM tests: one virtual cluster of 4 nodes with 2 NICs
each (PM's udp device stripes over both between nodes, shm within a node),
real munged and scored with a quantum of 100 ms (two jobs that share their
nodes switch often), shared by the directory; and `score`, tests/scored's
clients against it (scored.score.Score), which after every test ends what
the test started and waits until the master has no active job.

Needs root, munged, and `make build` (scored, scrun, scorectl, libpmdsm,
pmdsm-check and the examples in build/)."""

import os
import shutil

import pytest

from conftest import ClusterFactory
from scored.score import SCORE_BIN, Score

NODES = 4
NICS = 2
MASTER = {"quantum_ms": 100, "quiesce_timeout_ms": 500}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes tens of seconds; runs by default "
                                       "(leave out with -m 'not slow')")


@pytest.fixture(scope="package")
def dsm_cluster(require_root):
    """4 nodes x 2 NICs with MUNGE and scored, up for the whole directory."""
    if not shutil.which("munged", path="/usr/sbin:/sbin:" + os.environ.get("PATH", "")):
        pytest.skip("munged is not installed (apt-get install munge)")
    missing = [p for p in ("scored", "scrun", "scorectl") if not (SCORE_BIN / p).is_file()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not built in {SCORE_BIN} (make build)")
    factory = ClusterFactory()
    try:
        yield factory(nodes=NODES, nics=NICS, with_score=True, score_bin=SCORE_BIN,
                      score_master=MASTER)
    finally:
        factory.close()


@pytest.fixture
def score(dsm_cluster):
    s = Score(dsm_cluster)
    try:
        yield s
    finally:
        s.cleanup()
