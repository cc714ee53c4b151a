"""Slurm on a cluster: slurmctld on the host, one slurmd per node.

`vcluster up --with-slurm`, `vcluster slurm-up`, `slurm-down` and the
SLURM_CONF of `vcluster env` are built on this module.  Debian's slurm-wlm
(22.05) runs as it would on a site, with the cluster's own munged (score.py
starts MUNGE first).  Its files live in the cluster's service directory:

    slurm/slurm.conf        the one configuration of every daemon and client
    slurm/cgroup.conf       which cgroup plugin (see cgroup_mode)
    slurm/plugstack.conf    SPANK plugins: score's (srun --score-gang), when it is built
    slurm/ctld/             slurmctld's StateSaveLocation, log and PID file
    slurm/nI/spool/         node nI's SlurmdSpoolDir
    slurm/nI/tmp/           node nI's TmpFS (the PMIx plugin's client
                            directories: shared, two nodes would clash)
    slurm/nI/slurmd.log     slurmd's log (and .pid)

Facts this layout rests on (checked on Debian bookworm):
- slurmd enters its node with `nsenter --net=/run/netns/NS --uts=...`: the
  node's network and host name, but the host's mount namespace, because the
  node's own (ip netns exec's) has a fresh /sys without the cgroup file
  systems slurmd's proctrack plugin needs.  It starts as `slurmd -D -N nI`.
- slurm.conf names one MUNGE socket for every daemon (AuthInfo), so all of
  them use the head's munged; every munged of the cluster has the same key.
- Several slurmds on one host share the cgroup v1 hierarchy under the names
  slurm_nI: only one cluster at a time may run Slurm (up refuses a second).
- slurmctld listens on every address: its port depends on the cluster's
  subnet so that clusters do not collide (ports()).

Stopping never depends on the state file: the daemons are found by their
command lines, which name this cluster's slurm.conf.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from . import log, procs, score, state, system
from .errors import VclusterError

READY_TIMEOUT = 30.0
DEFAULT_GRACE = 3.0
PARTITION = "vc"
SCORE_PARTITION = "score"     # jobs share nodes; scored time-shares them
SCORE_OVERSUBSCRIBE = 4       # as many as scored's default gang_slots
CGROUP_V1 = Path("/sys/fs/cgroup")
# What `up` runs (system.tool knows their Debian packages).
TOOLS = ("slurmctld", "slurmd", "sinfo")


class Paths:
    """Every Slurm file of cluster `name`."""

    def __init__(self, name):
        self.dir = score.service_dir(name) / "slurm"
        self.conf = self.dir / "slurm.conf"
        self.cgroup_conf = self.dir / "cgroup.conf"
        self.plugstack = self.dir / "plugstack.conf"
        self.ctld = self.dir / "ctld"

    def node(self, node):
        return self.dir / node

    def slurmd_log(self, node):
        return self.dir / node / "slurmd.log"


def ports(layout):
    """(slurmctld port, slurmd port): slurmctld binds every address of the
    host, so each cluster gets its own, from the second octet of its /16;
    a slurmd binds inside its node's network namespace."""
    second_octet = int(str(layout.networks[0].subnet).split(".")[1])
    return 6900 + second_octet, 6818


def cgroup_mode(root=CGROUP_V1):
    """"v1" when the host has the cgroup v1 freezer (proctrack/cgroup works,
    hybrid hosts included); else "none" (proctrack/linuxproc).  Slurm 22.05
    refuses hybrid hosts for cgroup/v2, and on a pure v2 host its cgroup/v2
    plugin wants slurmd in a cgroup delegated by systemd, which a slurmd in a
    namespace node does not have."""
    return "v1" if (root / "freezer" / "cgroup.procs").exists() else "none"


def hardware():
    """The host's node line from `slurmd -C` (every node shares the host's CPUs)."""
    proc = subprocess.run([system.tool("slurmd"), "-C"], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)
    words = dict(w.split("=", 1) for w in proc.stdout.split() if "=" in w)
    keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    if proc.returncode != 0 or not all(k in words for k in keys):
        return f"CPUs={os.cpu_count() or 1}"
    return " ".join(f"{k}={words[k]}" for k in keys)


# Slurm's own gang scheduling (the baseline scored is measured against):
# SUSPEND,GANG needs preempt/partition_prio (with preempt/none slurmctld
# refuses to start); 5 s is the smallest time slice Slurm 22.05 takes
# (smaller values silently become 30); FORCE:2 lets two jobs share a node.
GANG_TIME_SLICE = 5
GANG_LINES = ("PreemptType=preempt/partition_prio", "PreemptMode=SUSPEND,GANG",
              f"SchedulerTimeSlice={GANG_TIME_SLICE}")
GANG_PARTITION = "OverSubscribe=FORCE:2"


def plugin_line(name, score_bin=None):
    """plugstack.conf's line for score's SPANK plugin (`srun --score-gang`),
    built beside scored (BIN/../lib/slurm/spank_score.so), or None.  The
    plugin finds each node's agent by its adoption socket in the agent's
    state directory (%h: the node's host name, nI)."""
    bin_dir = Path(score_bin) if score_bin else score.DEFAULT_BIN
    plugin = bin_dir.parent / "lib" / "slurm" / "spank_score.so"
    if not plugin.is_file():
        return None
    paths = score.Paths(name)
    return (f"required {plugin} socket={paths.agent_state_dir('%h') / 'adopt.sock'} "
            f"scrun={bin_dir / 'scrun'} config={paths.client_config}")


def configs(layout, paths, mode, hw, host=None, gang=False, plugin=None):
    """{path: text} of slurm.conf, cgroup.conf and plugstack.conf; gang:
    Slurm's own gang scheduling, two jobs per node taking turns; plugin:
    plugstack.conf's line for score's SPANK plugin (plugin_line)."""
    host = host or socket.gethostname().split(".")[0]
    ctld_port, slurmd_port = ports(layout)
    head_addr = layout.networks[0].host_address
    munge = score.Paths(layout.name).socket(score.HEAD)
    nodes = ",".join(n.name for n in layout.nodes)
    lines = [
        f"# Slurm of the virtual cluster {layout.name}: written by `vcluster up --with-slurm`",
        "# (or slurm-up), removed by `vcluster down`.  Reference: docs/admin/slurm.md.",
        f"ClusterName=vc{layout.name}",
        # slurmctld runs only where SlurmctldHost names the host it is on.
        f"SlurmctldHost={host}({head_addr})",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge}",
        f"StateSaveLocation={paths.ctld}",
        f"SlurmctldPidFile={paths.ctld}/slurmctld.pid",
        f"SlurmctldLogFile={paths.ctld}/slurmctld.log",
        f"SlurmdSpoolDir={paths.dir}/%n/spool",
        f"SlurmdPidFile={paths.dir}/%n/slurmd.pid",
        f"SlurmdLogFile={paths.dir}/%n/slurmd.log",
        f"TmpFS={paths.dir}/%n/tmp",
        f"PlugStackConfig={paths.plugstack}",
        "MailProg=/bin/true",
        f"ProctrackType={'proctrack/cgroup' if mode == 'v1' else 'proctrack/linuxproc'}",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        # Whole nodes, as scored gives them.
        "SelectType=select/linear",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=30",
        # A request no partition can ever hold is refused, not queued forever.
        "EnforcePartLimits=ALL",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
    ]
    if gang:
        lines += GANG_LINES
    lines += [f"NodeName={n.name} NodeHostname={n.name} NodeAddr={n.nics[0].address} {hw} "
              "State=UNKNOWN" for n in layout.nodes]
    lines.append(f"PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP"
                 + (f" {GANG_PARTITION}" if gang else ""))
    if not gang:
        # For `srun -p score --score-gang`: Slurm lets jobs share nodes and
        # scored's matrix time-shares them (docs/admin/slurm.md).
        lines.append(f"PartitionName={SCORE_PARTITION} Nodes={nodes} Default=NO "
                     f"MaxTime=INFINITE State=UP OverSubscribe=FORCE:{SCORE_OVERSUBSCRIBE}")
    cgroup = ["# Which cgroup plugin: see cgroup_mode() in provisioning/vcluster/vclusterlib/slurm.py"]
    if mode == "v1":
        cgroup += ["CgroupPlugin=cgroup/v1", f"CgroupMountpoint={CGROUP_V1}",
                   "ConstrainCores=no", "ConstrainRAMSpace=no", "ConstrainDevices=no"]
    return {paths.conf: "\n".join(lines) + "\n",
            paths.cgroup_conf: "\n".join(cgroup) + "\n",
            paths.plugstack: "# SPANK plugins of the virtual cluster (docs/admin/slurm.md)\n"
            + (plugin + "\n" if plugin else "")}


# --- finding and stopping ---------------------------------------------------

def classify(argv, name):
    """"slurmctld" or "slurmd" for a daemon of cluster `name`, else None."""
    if not argv or os.path.basename(argv[0]) not in ("slurmctld", "slurmd"):
        return None
    conf = str(Paths(name).conf)
    if conf not in argv:
        return None
    return os.path.basename(argv[0])


def find(name):
    """{pid: role} of the live Slurm daemons of cluster `name`."""
    return procs.matching(lambda argv: classify(argv, name))


def clusters_running():
    """Names of the clusters whose Slurm daemons are alive."""
    names = set()
    if state.STATE_DIR.is_dir():
        for d in state.STATE_DIR.iterdir():
            if (d / "slurm").is_dir() and find(d.name):
                names.add(d.name)
    return names


def stop(name, grace=DEFAULT_GRACE):
    """slurmd first (their steps end with them), then slurmctld; by PID.
    Returns the PIDs that survived SIGKILL."""
    survivors = []
    for role in ("slurmd", "slurmctld"):
        pids = [pid for pid, r in find(name).items() if r == role]
        if pids:
            log.step(f"stopping {len(pids)} {role} process(es) of cluster {name}")
            survivors += procs.terminate_pids(
                pids, lambda pid: classify(procs.argv(pid), name) is not None, grace)
    return survivors


def node_cgroups(nodes, root=CGROUP_V1):
    """The cgroup v1 directories slurmd made for `nodes` (slurm_nI under
    each controller)."""
    found = []
    if not root.is_dir():
        return found
    for ctrl in root.iterdir():
        for node in nodes:
            d = ctrl / f"slurm_{node}"
            if d.is_dir() and not d.is_symlink():
                found.append(d)
    return found


def remove_cgroups(nodes, wait=5.0):
    """Remove slurm_nI bottom-up, killing what is still in it (by PID)."""
    failures = [f for top in node_cgroups(nodes) for f in score.remove_cgroup_tree(top, wait)]
    if failures:
        raise VclusterError("cannot remove Slurm's cgroups: " + "; ".join(failures))


def node_names(name):
    """The nodes that have a Slurm directory (for cleaning up without a state)."""
    d = Paths(name).dir
    return sorted(p.name for p in d.iterdir() if p.is_dir() and p.name != "ctld") \
        if d.is_dir() else []


def teardown(name, grace=DEFAULT_GRACE, keep_dir=False):
    survivors = stop(name, grace)
    if survivors:
        log.warn("Slurm daemons that ignored SIGKILL: " + ", ".join(map(str, survivors)))
    nodes = node_names(name)
    # The names slurm_nI are shared by every cluster (module doc): leave
    # them to a cluster whose Slurm still runs.
    if nodes and not clusters_running() - {name}:
        remove_cgroups(nodes)
    if not keep_dir:
        shutil.rmtree(Paths(name).dir, ignore_errors=True)


# --- starting ---------------------------------------------------------------

def _in_node(holder_pid, netns, argv):
    """The node's network and host name, the host's mounts (module doc)."""
    return [system.tool("nsenter"), f"--net=/run/netns/{netns}",
            f"--uts=/proc/{holder_pid}/ns/uts", "--"] + list(argv)


def start(current, layout, paths, timeout=READY_TIMEOUT, gang=False):
    """Write the configuration, start slurmctld and the slurmds, wait until
    every node is idle.  Returns {"slurmctld": pid, "slurmd": {node: pid}, ...}."""
    mode = cgroup_mode()
    shutil.rmtree(paths.dir, ignore_errors=True)
    paths.ctld.mkdir(parents=True, mode=0o700)
    for node in layout.nodes:
        for sub in ("spool", "tmp"):
            (paths.node(node.name) / sub).mkdir(parents=True)
        os.chmod(paths.node(node.name) / "tmp", 0o1777)
    score_bin = ((current.get("score") or {}).get("scored") or {}).get("bin")
    plugin = plugin_line(layout.name, score_bin)
    for path, text in configs(layout, paths, mode, hardware(), gang=gang, plugin=plugin).items():
        path.write_text(text)
    ctld_port, _ = ports(layout)
    log.step(f"starting slurmctld on port {ctld_port} and {len(layout.nodes)} slurmd "
             f"(proctrack {'cgroup v1' if mode == 'v1' else 'linuxproc'}"
             f"{f', gang scheduling every {GANG_TIME_SLICE} s' if gang else ''})")
    ctld = [system.tool("slurmctld"), "-D", "-f", str(paths.conf)]
    started = {score.HEAD: score.start_daemon(ctld, paths.ctld / "slurmctld.out", "slurmctld")}
    for node in layout.nodes:
        hpid = score._holder(current, layout, node)
        argv = _in_node(hpid, node.netns, [system.tool("slurmd"), "-D", "-f", str(paths.conf),
                                           "-N", node.name])
        started[node.name] = score.start_daemon(argv, paths.node(node.name) / "slurmd.out",
                                                f"slurmd {node.name}")
    wait_idle(layout, paths, started, timeout)
    return {"slurmctld": started[score.HEAD].pid,
            "slurmd": {n: p.pid for n, p in started.items() if n != score.HEAD},
            "conf": str(paths.conf), "cgroup": mode, "port": ctld_port, "gang": gang}


def node_states(conf):
    """{node: state} from sinfo, or (None, why) when it cannot say."""
    try:
        proc = subprocess.run([system.tool("sinfo"), "-h", "-N", "-o", "%N %T"],
                              env=dict(os.environ, SLURM_CONF=str(conf)), capture_output=True,
                              text=True, timeout=10, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "sinfo did not answer within 10 s"
    if proc.returncode != 0:
        return None, f"sinfo exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return dict(line.split()[:2] for line in proc.stdout.splitlines() if len(line.split()) >= 2), ""


def wait_idle(layout, paths, started, timeout=READY_TIMEOUT):
    """Until sinfo shows every node idle (bounded)."""
    want = {n.name for n in layout.nodes}

    def probe():
        states, why = node_states(paths.conf)
        if states is None:
            return False, why
        bad = {n: states.get(n, "unknown") for n in want if states.get(n) != "idle"}
        return not bad, "nodes not idle: " + ", ".join(f"{n} {s}" for n, s in sorted(bad.items()))

    def died(node, rc):
        logfile = paths.ctld / "slurmctld.log" if node == score.HEAD else paths.slurmd_log(node)
        what = "slurmctld" if node == score.HEAD else f"slurmd of {node}"
        return f"{what} exited with status {rc}; {logfile}: {score.tail_of(logfile)}"

    def failed(last):
        return (f"Slurm did not come up within {timeout:g} s ({last}); see "
                f"{paths.ctld}/slurmctld.log and {paths.dir}/nI/slurmd.log")
    score.wait_for_daemons(started, probe, died, timeout, failed)


def running(current):
    """(ok, problems) of the Slurm daemons a state records."""
    name = current["name"]
    rec = current.get("slurm") or {}
    if not rec:
        return False, []
    problems = []
    if not _verify(rec.get("slurmctld"), name, "slurmctld"):
        problems.append("slurmctld")
    problems += [f"slurmd of {n}" for n, pid in (rec.get("slurmd") or {}).items()
                 if not _verify(pid, name, "slurmd")]
    return not problems, problems


def _verify(pid, name, role):
    return bool(pid) and procs.alive(pid) and classify(procs.argv(pid), name) == role


def up(name, timeout=READY_TIMEOUT, gang=False):
    """Start Slurm on cluster `name` (MUNGE must run: score.up first), with
    its own gang scheduling if `gang`.  Idempotent.  Returns (changed, state)."""
    system.require_root()
    system.require_tools(*TOOLS)
    with state.lock():
        current = state.load(name)
        if current is None:
            raise VclusterError(f"cluster {name} is not up (start it with 'vcluster up --name {name}')")
        if not (current.get("score") or {}).get("munged"):
            raise VclusterError(f"MUNGE is not running on cluster {name}: Slurm needs it "
                                f"('vcluster score-up --munge-only --name {name}')")
        others = clusters_running() - {name}
        if others:
            raise VclusterError(f"Slurm already runs on cluster {', '.join(sorted(others))}: "
                                "the slurmds of two clusters would share the cgroups slurm_nI; "
                                f"'vcluster slurm-down --name {sorted(others)[0]}' first")
        ok, problems = running(current)
        if ok and bool(current["slurm"].get("gang")) != gang:
            raise VclusterError(f"Slurm already runs on cluster {name} "
                                f"{'with' if current['slurm'].get('gang') else 'without'} its gang "
                                f"scheduling; 'vcluster slurm-down --name {name}' first", 2)
        if ok:
            log.step(f"Slurm is already running on cluster {name}; nothing to do")
            return False, current
        layout = state.layout(current)
        paths = Paths(name)
        if problems:
            log.step(f"restarting Slurm on cluster {name} ({', '.join(problems)} not running)")
        teardown(name, keep_dir=False)
        try:
            current["slurm"] = start(current, layout, paths, timeout, gang)
        except BaseException as e:
            log.step(f"starting Slurm on cluster {name} failed ({e or type(e).__name__}); "
                     f"stopping what was started (the logs stay in {paths.dir})")
            with contextlib.suppress(VclusterError):
                teardown(name, keep_dir=True)
            current.pop("slurm", None)
            state.save(current)
            raise
        state.save(current)
        log.step(f"Slurm is running on cluster {name}: export SLURM_CONF={paths.conf}")
        return True, current


def down(name, grace=DEFAULT_GRACE):
    """Stop Slurm on cluster `name`; the network and MUNGE stay up."""
    system.require_root()
    with state.lock():
        current = state.load(name)
        if not find(name) and not Paths(name).dir.exists():
            log.step(f"Slurm is not running on cluster {name}; nothing to do")
            return False
        teardown(name, grace)
        if current is not None and current.pop("slurm", None) is not None:
            state.save(current)
        log.step(f"Slurm on cluster {name} is stopped")
        return True
