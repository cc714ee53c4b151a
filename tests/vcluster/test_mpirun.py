"""Open MPI's mpirun starts processes on vcluster nodes through `vcluster rsh`."""

import os
import shutil
import subprocess

import pytest

from conftest import VCLUSTER

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None,
                                reason="Open MPI is not installed (openmpi-bin, scripts/install-deps.sh)")


def mpirun(vc, *args, agent=None):
    """mpirun over all nodes; the cluster is named by VCLUSTER_NAME unless `agent` names it."""
    argv = ["mpirun", "--allow-run-as-root", "--host", ",".join(vc.nodes),
            "--mca", "plm_rsh_agent", agent or f"{VCLUSTER} rsh", *args]
    env = vc.env if agent is None else {k: v for k, v in os.environ.items() if k != "VCLUSTER_NAME"}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_mpirun_runs_on_the_nodes(vcluster):
    vc = vcluster(nodes=2)
    proc = mpirun(vc, "hostname")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.split()) == ["n1", "n2"]


def test_mpirun_with_the_cluster_named_in_the_agent_and_interfaces_pinned(vcluster):
    """The documented recipe for several clusters: --name in the agent string,
    Open MPI's own TCP traffic pinned to the cluster's network 0."""
    vc = vcluster(nodes=3, nics=2)
    net0 = vc.state["networks"][0]["subnet"]
    proc = mpirun(vc, "--mca", "oob_tcp_if_include", net0, "--mca", "btl_tcp_if_include", net0,
                  "sh", "-c", 'echo "$(hostname) $OMPI_COMM_WORLD_RANK"',
                  agent=f"{VCLUSTER} rsh --name {vc.name}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["n1 0", "n2 1", "n3 2"]
