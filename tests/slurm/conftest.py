"""Fixtures of the Slurm tests."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def workdir():
    """A directory every node sees (the nodes share the host's files)."""
    d = tempfile.mkdtemp(prefix="score-slurm-")
    os.chmod(d, 0o755)
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
