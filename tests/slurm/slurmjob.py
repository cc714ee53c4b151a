"""Running things under the virtual cluster's Slurm (tests/slurm): srun and
the other clients with the cluster's SLURM_CONF, and what the tests read
back (pmcheck's records, Slurm's node states, processes by command line)."""

import json
import os
import subprocess

from pm.pmjob import wait_for

from vclusterlib import procs, slurm as vslurm


def srun(vc, *args, timeout=90, env=None, cwd="/tmp"):
    """srun on the host with the cluster's SLURM_CONF; a CompletedProcess."""
    return subprocess.run(["srun", *map(str, args)], env=dict(vc.slurm_env(), **(env or {})),
                          capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def slurm_tool(vc, tool, *args, timeout=30):
    return subprocess.run([tool, *map(str, args)], env=vc.slurm_env(), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def node_states(vc):
    states, why = vslurm.node_states(vc.slurm_env()["SLURM_CONF"])
    assert states is not None, why
    return states


def wait_idle(vc, timeout=60):
    """Until every node is idle again (a finished job's nodes complete first)."""
    wait_for("every Slurm node idle",
             lambda: set(node_states(vc).values()) == {"idle"}, timeout=timeout, interval=0.2)


def pmcheck_results(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def processes_with_argv(argv):
    """Live processes running argv (slurmstepd execs the program by its full path)."""
    def same(a):
        return len(a) == len(argv) and os.path.basename(a[0]) == argv[0] and a[1:] == argv[1:]
    return [pid for pid in procs.pids() if same(procs.argv(pid)) and procs.alive(pid)]
