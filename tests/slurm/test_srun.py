"""Slurm on the virtual cluster (issue 13, docs/admin/slurm.md): Debian's real
slurmctld, one slurmd per node and the cluster's munged, started by
`vcluster up --with-slurm`.  `srun --mpi=pmix` starts PM programs and Open MPI
programs over PM across the nodes, over both NICs, exactly as scrun does;
sbatch, exit statuses, signals and scancel behave as Slurm defines them; bad
input (an unknown option value, an impossible request, a dead slurmd) gives a
clear error and leaves nothing running."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_vcluster
from mpi.mpijob import BUILD, PROVIDER_DIR, pm_contexts
from pm.pmjob import PMCHECK, grown, nic_counters, wait_for
from scored.score import build_mpi_program

from vclusterlib import procs, slurm as vslurm

from .slurmjob import pmcheck_results, processes_with_argv, slurm_tool, srun, wait_idle

pytestmark = pytest.mark.skipif(shutil.which("srun") is None or shutil.which("slurmctld") is None,
                                reason="Slurm is not installed (slurmctld, slurmd, slurm-client: "
                                       "scripts/install-deps.sh)")

NODES = 4
PMDSM_CHECK = BUILD / "bin" / "pmdsm-check"


@pytest.fixture(scope="module")
def cluster(vcluster_module):
    """4 nodes × 2 NICs running Slurm, shared by the module's tests."""
    return vcluster_module(nodes=NODES, nics=2, with_slurm=True)


def test_srun_runs_tasks_on_every_node(cluster):
    proc = srun(cluster, "-N", NODES, "-n", 2 * NODES, "hostname")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == sorted([f"n{i}" for i in range(1, NODES + 1)] * 2)
    wait_idle(cluster)


def test_pm_program_under_srun_pmix_trunks_over_both_nics(cluster):
    """srun --mpi=pmix starts pmcheck's 8 ranks, ranks dealt cyclically so
    that every peer of a rank pair is on another node: PM's udp device,
    striped over both NICs, with the job key drawn through Slurm's PMIx."""
    before = {n: nic_counters(cluster, n) for n in cluster.nodes}
    proc = srun(cluster, "--mpi=pmix", "-N", NODES, "-n", 2 * NODES, "-m", "cyclic",
                PMCHECK, "--pattern", "all", "--count", 3000)
    assert proc.returncode == 0, proc.stderr
    results = pmcheck_results(proc.stdout)
    assert sorted(r["rank"] for r in results) == list(range(2 * NODES)), proc.stdout
    for r in results:
        assert r["ok"] and r["errors"] == 0 and r["received"] == r["sent"] > 0, r
        assert r["device"] == "udp", r       # rank ^ 1 is on the next node
        assert r["drops"] == 0, r
    after = {n: nic_counters(cluster, n) for n in cluster.nodes}
    for n in cluster.nodes:
        for nic in ("eth0", "eth1"):
            assert grown(before[n], after[n], nic) > 1000, \
                f"{n} {nic} sent {grown(before[n], after[n], nic)} packets: no trunking"
    wait_idle(cluster)


def test_pm_shm_and_udp_in_one_srun_job(cluster):
    """Block placement puts rank pairs on one node: shm between them, udp
    to the others, as under scrun."""
    proc = srun(cluster, "--mpi=pmix", "-N", 2, "-n", 4, PMCHECK, "--pattern", "all",
                "--count", 2000)
    assert proc.returncode == 0, proc.stderr
    results = pmcheck_results(proc.stdout)
    assert len(results) == 4 and all(r["ok"] and r["errors"] == 0 for r in results), proc.stdout
    assert {r["device"] for r in results} == {"shm"}, results   # rank ^ 1 shares the node
    wait_idle(cluster)


def test_dsm_program_under_srun_pmix(cluster):
    """libpmdsm under srun --mpi=pmix (docs/dsm/guide.md): pmdsm-check's
    generated race-free program on 4 ranks, 2 per node (shm within a node,
    udp between them), checked against the sequential result by rank 0."""
    assert PMDSM_CHECK.exists(), f"{PMDSM_CHECK} is missing: make build"
    proc = srun(cluster, "--mpi=pmix", "-N", 2, "-n", 4, PMDSM_CHECK, "--seed", 13,
                "--rounds", 4, env={"PMDSM_HEAP_SIZE": "64M"})
    assert proc.returncode == 0, proc.stderr
    results = pmcheck_results(proc.stdout)
    assert len(results) == 1, proc.stdout          # rank 0's line
    assert results[0]["ok"] is True and results[0]["ranks"] == 4, results
    wait_idle(cluster)


def test_open_mpi_program_over_pm_under_srun(cluster, workdir):
    """An unmodified Open MPI program, started by srun (no mpirun), runs over
    the provider pm: PM contexts with traffic and rendezvous reads."""
    program = build_mpi_program(str(workdir), "mpi_transfer")
    stats = workdir / "pmstats"
    stats.mkdir()
    env = {"OMPI_MCA_pml": "cm", "OMPI_MCA_mtl": "ofi", "OMPI_MCA_mtl_ofi_provider_include": "pm",
           "FI_PROVIDER_PATH": str(PROVIDER_DIR), "PM_STATS_DIR": str(stats)}
    argv = ["srun", "--mpi=pmix", "-N", NODES, "-n", NODES, "-m", "cyclic",
            program, "--max-size", 1 << 20, "--laps", 40, "--linger-ms", 3000]
    job = subprocess.Popen([str(a) for a in argv],
                           env=dict(cluster.slurm_env(), **{k: str(v) for k, v in env.items()}),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/tmp",
                           start_new_session=True)
    try:
        seen = []

        def contexts_with_traffic():
            ctxs = pm_contexts(stats)
            if len(ctxs) == NODES:
                seen[:] = ctxs
                if all(c["counters"]["msgs_sent"] > 0 for c in ctxs) and \
                        sum(c["counters"]["rma_reads"] for c in ctxs) > 0:
                    return True
            return job.poll() is not None
        wait_for("PM contexts of the 4 ranks with traffic and rendezvous reads",
                 contexts_with_traffic, timeout=90)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.wait()
    assert job.returncode == 0, err
    assert f"mpi_transfer: {NODES} ranks passed" in out, out + err
    assert len(seen) == NODES, f"pminfo saw {len(seen)} PM contexts: the MPI did not use PM"
    assert sum(c["counters"]["rma_reads"] for c in seen) > 0, seen   # rendezvous over PM
    wait_idle(cluster)


def test_sbatch_script_runs_pmcheck(cluster, workdir):
    script = workdir / "job.sh"
    script.write_text("#!/bin/sh\n"
                      f"#SBATCH -N 2\n#SBATCH -n 4\n#SBATCH -o {workdir}/out.%j\n"
                      f"srun --mpi=pmix {PMCHECK} --pattern ring --count 500\n"
                      "echo batch-done $SLURM_JOB_NUM_NODES\n")
    proc = slurm_tool(cluster, "sbatch", "--wait", "--parsable", str(script), timeout=120)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    text = (workdir / f"out.{job_id}").read_text()
    results = pmcheck_results(text)
    assert len(results) == 4 and all(r["ok"] for r in results), text
    assert "batch-done 2" in text
    wait_idle(cluster)


@pytest.mark.parametrize("command, status, says", [
    ("exit 3", 3, "Exited with exit code 3"),
    ("kill -TERM $$", 128 + 15, "Terminated"),
    ("kill -KILL $$", 128 + 9, "Killed"),
])
def test_exit_status_and_signals_as_slurm_defines_them(cluster, command, status, says):
    proc = srun(cluster, "-N", 1, "sh", "-c", command)
    assert proc.returncode == status, proc.stderr
    assert says in proc.stderr
    wait_idle(cluster)


def test_scancel_ends_every_task_on_every_node(cluster, workdir):
    marker = ["sleep", "4321"]
    script = workdir / "long.sh"
    script.write_text(f"#!/bin/sh\nsrun -N {NODES} -n {NODES} sleep 4321\n")
    proc = slurm_tool(cluster, "sbatch", "--parsable", "-N", NODES, "-o", "/dev/null", str(script))
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    try:
        wait_for(f"{NODES} tasks of job {job_id}",
                 lambda: len(processes_with_argv(marker)) == NODES, timeout=60)
        cancel = slurm_tool(cluster, "scancel", job_id)
        assert cancel.returncode == 0, cancel.stderr
        wait_for("every task gone", lambda: not processes_with_argv(marker), timeout=30)
        wait_for(f"job {job_id} gone from squeue",
                 lambda: job_id not in slurm_tool(cluster, "squeue", "-h", "-o", "%i").stdout,
                 timeout=60)
        # Nothing of the job is left in Slurm's process-tracking cgroups.
        leftover = [str(d) for d in vslurm.node_cgroups(cluster.nodes)
                    for d in d.rglob(f"job_{job_id}")]
        assert not leftover, leftover
    finally:
        slurm_tool(cluster, "scancel", job_id)
    wait_idle(cluster)


def test_bad_requests_are_refused_with_a_reason(cluster):
    bogus = srun(cluster, "--mpi=bogus", "-N", 1, "hostname")
    assert bogus.returncode != 0
    assert "Invalid MPI type 'bogus'" in bogus.stderr, bogus.stderr
    too_many = srun(cluster, "-N", NODES + 1, "hostname", timeout=30)
    assert too_many.returncode != 0
    assert "Unable to allocate resources" in too_many.stderr, too_many.stderr
    assert slurm_tool(cluster, "squeue", "-h").stdout.strip() == "", "a refused job was queued"


def test_a_dead_slurmd_fails_the_step_and_slurm_up_restarts_it(cluster):
    """Last in the module: it kills a slurmd (by PID) and restarts Slurm."""
    state = json.loads(Path(f"/run/score/vcluster/{cluster.name}.json").read_text())
    pid = state["slurm"]["slurmd"]["n4"]
    assert vslurm.classify(procs.argv(pid), cluster.name) == "slurmd"
    os.kill(pid, 15)
    wait_for("slurmd of n4 gone", lambda: not procs.alive(pid), timeout=10)
    proc = srun(cluster, "-N", NODES, "-n", NODES, "sleep", "3", timeout=60)
    assert proc.returncode != 0
    assert "failed on node n4" in proc.stderr, proc.stderr
    wait_for("no task left of the failed step",
             lambda: not processes_with_argv(["sleep", "3"]), timeout=30)
    up = run_vcluster("slurm-up", "--name", cluster.name, timeout=90)
    assert up.returncode == 0, up.stderr
    assert "slurmd of n4 not running" in up.stderr
    wait_idle(cluster)
    again = srun(cluster, "-N", NODES, "hostname")
    assert again.returncode == 0, again.stderr
