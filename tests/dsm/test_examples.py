"""The example programs' own options, on this machine (dsm/examples/README.md).

- jacobi_mpi --barrier (every rank waits for all after each sweep, as the
  DSM version does): the same result as without it and as the sequential
  program, and its result line says so.
- --barrier belongs to the MPI version: the sequential and DSM versions
  refuse it with a usage error (exit 2) and a message naming it.

mpirun runs two ranks on this machine (Open MPI's own transports); every
command is bounded in time."""

import json
import os
import subprocess

from scored.score import BUILD_BIN

ARGS = ["-n", "256", "-i", "20", "-s", "7"]
TIMEOUT = 120
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", "2"]
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def result_line(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ, **ROOT_OK), check=False)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stderr}"
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert len(lines) == 1, f"{argv}: one result line expected:\n{proc.stdout}"
    return lines[0]


def test_jacobi_mpi_with_a_barrier_every_sweep_gives_the_sequential_result():
    seq = result_line([BUILD_BIN / "jacobi_seq", *ARGS])
    plain = result_line([*MPIRUN, BUILD_BIN / "jacobi_mpi", *ARGS, "--check"])
    barrier = result_line([*MPIRUN, BUILD_BIN / "jacobi_mpi", *ARGS, "--barrier", "--check"])
    assert barrier["checksum"] == plain["checksum"] == seq["checksum"]
    assert barrier.get("barrier") is True
    assert "barrier" not in plain
    assert barrier["ranks"] == 2


def test_barrier_is_an_option_of_the_mpi_version_only():
    for version in ("seq", "dsm"):
        proc = subprocess.run([BUILD_BIN / f"jacobi_{version}", *ARGS, "--barrier"],
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "unknown option --barrier" in proc.stderr
        assert proc.stdout == ""
