"""Running MPI programs over the libfabric provider pm (mpi/, issue 12).

`over_pm_args()` is the mpirun command line that selects PM for Open MPI's
point-to-point traffic: pml cm, mtl ofi, provider pm, found through
FI_PROVIDER_PATH in build/lib/libfabric.  Command-line MCA values override
Debian's /etc/openmpi/openmpi-mca-params.conf (`mtl = ^ofi`), so no system
file is edited.  `run()` starts mpirun in its own session and, whatever
happens, ends the whole session by its process group when the time is up.
"""

import json
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from conftest import REPO_ROOT, VCLUSTER
from pm.pmjob import grown, nic_counters

BUILD = Path(os.environ.get("SCORE_BUILD", REPO_ROOT / "build"))
PROVIDER_DIR = BUILD / "lib" / "libfabric"
PMINFO = BUILD / "bin" / "pminfo"
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def over_pm_args(**pm_env):
    """mpirun arguments: Open MPI's traffic over the provider pm, with PM's
    knobs (PM_DEVICE=..., PM_UDP_NICS=...) passed to every rank."""
    args = ["--mca", "pml", "cm", "--mca", "mtl", "ofi",
            "--mca", "mtl_ofi_provider_include", "pm",
            "-x", f"FI_PROVIDER_PATH={PROVIDER_DIR}"]
    for k, v in pm_env.items():
        args += ["-x", f"{k}={v}"]
    return args


# One-sided MPI over PM too: Open MPI's osc rdma over its btl ofi on the
# provider pm (FI_RMA, FI_ATOMIC).  osc rdma's accumulate by atomic memory
# operations aborts inside Open MPI 4.1.4's btl ofi (to_fi_op: an op it
# announces and cannot map) with libfabric's sockets provider as with pm,
# so accumulates take its lock + get + put path, whose lock is pm atomics.
ONE_SIDED_OVER_PM = {"OMPI_MCA_btl": "self,ofi", "OMPI_MCA_btl_ofi_provider_include": "pm",
                     "OMPI_MCA_osc": "rdma", "OMPI_MCA_osc_rdma_btls": "ofi",
                     "OMPI_MCA_osc_rdma_acc_use_amo": "0"}


def one_sided_over_pm_args():
    """ONE_SIDED_OVER_PM as mpirun arguments (for the ranks)."""
    return [a for k, v in ONE_SIDED_OVER_PM.items() for a in ("-x", f"{k}={v}")]


class Run:
    """One mpirun in the background, in its own session."""

    def __init__(self, argv, env=None, timeout=90, cwd=None):
        self.argv = [str(a) for a in argv]
        self.timeout = timeout
        self.start = time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=dict(os.environ, **MPI_ENV, **(env or {})),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=cwd,
                                     start_new_session=True)

    def wait(self):
        left = max(1.0, self.timeout - (time.monotonic() - self.start))
        try:
            self.stdout, self.stderr = self.proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            self.kill()
            self.stdout, self.stderr = self.proc.communicate()
            self.stderr += f"\n(test: mpirun killed after {self.timeout} s)"
        return self

    def running(self):
        return self.proc.poll() is None

    def kill(self):
        """SIGTERM to mpirun's whole session (it takes its ranks down), then SIGKILL."""
        if self.proc.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue

    @property
    def returncode(self):
        return self.proc.returncode

    def describe(self):
        return (f"{' '.join(self.argv)}\nexit {self.proc.returncode}\n"
                f"stdout: {self.stdout}\nstderr: {self.stderr[-4000:]}")


def pm_contexts(stats_dir):
    """The PM contexts pminfo sees in stats_dir: a list of its JSON objects."""
    proc = subprocess.run([str(PMINFO), "--contexts", "--json"], capture_output=True, text=True,
                          timeout=30, env=dict(os.environ, PM_STATS_DIR=str(stats_dir)))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["contexts"]


def wait_for_contexts(stats_dir, n, run, limit=60.0, done=lambda c: c["counters"]["msgs_sent"] > 0):
    """Poll pminfo until n contexts exist and `done(context)` holds for each
    (by default: it has sent something); None when mpirun ended or time ran
    out first.  A check of what the program did must wait for that, not
    for the first message: the counters are read while the ranks run."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and run.running():
        ctxs = pm_contexts(stats_dir)
        if len(ctxs) == n and all(done(c) for c in ctxs):
            return ctxs
        time.sleep(0.2)
    return None


def watch(run, stats_dir, n, counter):
    """Wait for n PM contexts in stats_dir whose `counter` has moved, then
    for the run to end: the contexts as pminfo saw them, None when they
    never all showed it while the run lived."""
    try:
        return wait_for_contexts(stats_dir, n, run, done=lambda c: c["counters"][counter] > 0)
    finally:
        run.wait()


@contextmanager
def striped_over_both_nics(vc, nodes=None):
    """Around a run between virtual-cluster nodes: when the block ends
    without error, eth0 and eth1 of each of `nodes` (all of vc's by
    default) have each sent more than 200 packets meanwhile, i.e. PM
    striped the large messages over both NICs (eth1 carries nothing
    else: the launchers' own traffic stays on net 0)."""
    nodes = list(nodes or vc.nodes)
    before = {n: nic_counters(vc, n) for n in nodes}
    yield
    after = {n: nic_counters(vc, n) for n in nodes}
    for node in nodes:
        for nic in ("eth0", "eth1"):
            assert grown(before[node], after[node], nic) > 200, (node, nic, before, after)


def across(vc, ppn, nodes=None):
    """mpirun over `nodes` of vc (all by default), ppn ranks each (Open
    MPI's own traffic on net 0); the caller adds its options, the program
    and env=vc.env."""
    nodes = list(nodes or vc.nodes)
    net0 = vc.state["networks"][0]["subnet"]
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
            "--host", ",".join(f"{n}.{vc.name}:{ppn}" for n in nodes),
            "--mca", "plm_rsh_agent", f"{VCLUSTER} rsh --name {vc.name}",
            "--mca", "oob_tcp_if_include", net0, "-n", str(len(nodes) * ppn)]
