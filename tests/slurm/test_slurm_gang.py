"""Slurm's own gang scheduling on the virtual cluster (`vcluster up
--with-slurm --slurm-gang`): the baseline scored's gang scheduling is
measured against (scripts/bench_slurm_gang.py).  Two PM jobs submitted at
once share both nodes: Slurm runs one and suspends the other (squeue shows
them R and S on the same nodes at the same time), and both end correct."""

import shutil
import pytest

from pm.pmjob import PMCHECK, wait_for

from .slurmjob import pmcheck_results, slurm_tool

pytestmark = pytest.mark.skipif(shutil.which("srun") is None or shutil.which("slurmctld") is None,
                                reason="Slurm is not installed (slurmctld, slurmd, slurm-client: "
                                       "scripts/install-deps.sh)")


def test_two_jobs_take_turns_on_the_same_nodes_and_both_end_correct(vcluster, workdir):
    vc = vcluster(nodes=2, nics=1, with_slurm=True, slurm_gang=True)
    conf = {line.split("=", 1)[0].strip(): line.split("=", 1)[1].strip()
            for line in slurm_tool(vc, "scontrol", "show", "config").stdout.splitlines()
            if "=" in line}
    assert set(conf["PreemptMode"].split(",")) == {"GANG", "SUSPEND"}, conf["PreemptMode"]
    assert conf["SchedulerTimeSlice"] == "5 sec", conf["SchedulerTimeSlice"]
    # Slurm may suspend a job as soon as it starts; an srun that asks for
    # its step meanwhile is refused ("step creation temporarily disabled")
    # and tries again only a minute later.  The script waits until its job
    # runs, so that the test does not sit out that back-off (60 s here).
    script = workdir / "job.sh"
    script.write_text("#!/bin/sh\n"
                      "i=0\n"
                      "while [ \"$(squeue -h -j \"$SLURM_JOB_ID\" -o %t)\" != R ] && "
                      "[ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done\n"
                      f"exec srun --mpi=pmix {PMCHECK} --pattern all --count 200000 "
                      "--sizes 8-512 --timeout 120\n")
    jobs = []
    for _ in range(2):
        proc = slurm_tool(vc, "sbatch", "--parsable", "-N", 2, "-n", 2,
                          "-o", f"{workdir}/out.%j", str(script))
        assert proc.returncode == 0, proc.stderr
        jobs.append(proc.stdout.strip().split(";")[0])
    try:
        def states():
            out = slurm_tool(vc, "squeue", "-h", "-o", "%i %t %N").stdout.split("\n")
            return {line.split()[0]: line.split()[1:] for line in out if line.strip()}

        def one_running_one_suspended():
            st = states()
            return sorted(v[0] for v in st.values()) == ["R", "S"] and \
                len({tuple(v[1:]) for v in st.values()}) == 1
        wait_for("one job running and the other suspended on the same nodes",
                 one_running_one_suspended, timeout=30, interval=0.2)
        wait_for("both jobs finished", lambda: not states(), timeout=240, interval=0.5)
    finally:
        slurm_tool(vc, "scancel", *jobs)
    for job in jobs:
        text = (workdir / f"out.{job}").read_text()
        results = pmcheck_results(text)
        assert len(results) == 2 and all(r["ok"] and r["errors"] == 0 for r in results), text
        assert all(r["received"] == r["sent"] == 200000 for r in results), text
