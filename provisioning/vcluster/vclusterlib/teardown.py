"""`vcluster down`: find everything of a cluster and remove it.

Discovery never trusts the state file alone; it looks for each kind of object
by its name (see naming.py), so `down` cleans up after a crash, a half-built
`up`, a deleted or stale state file:

    nodes       root-file-system nodes (holders tagged vcluster-node NAME nI)
                are powered off first (their systemd stops their services),
                SIGKILL after a bounded wait; then their directories under
                /var/lib/score/vcluster/NAME/ go (rootfs.py)
    processes   every process whose network namespace is a node's, holders
                included: SIGTERM, a bounded wait, then SIGKILL, by PID
    links       root-namespace links with alias vcluster:NAME, or with a
                NAME-brK / NAME-nI-K name and kind bridge or veth
                (deleting a veth's host end deletes its node end)
    namespaces  /run/netns/vcluster-NAME-nI
    files       /etc/netns/vcluster-NAME-nI/, the block in /etc/hosts, the
                state file
    services    munged, scored and apt-cacher-ng processes whose command line
                names a path under /run/score/vcluster/NAME/ (see score.py), the cgroup
                <cgroup2>/score-vcluster-NAME and that directory
    Slurm       slurmctld and slurmd processes whose command line names the
                cluster's slurm.conf, and the cgroup v1 directories slurm_nI
                of its nodes (see slurm.py)

Services go first (slurmd, slurmctld, agents, master, munged), then the other
processes, while their network still works, so that daemons can shut
down cleanly.  Namespaces go before links: the kernel removes all interfaces
of a dying namespace in one batch (and with them the veths' host ends), while
deleting veths one by one waits for an RCU grace period each (64 x 8 veths:
0.3 s against 10 s).  The host ends vanish asynchronously, so teardown waits
for them (bounded) and then deletes whatever is left, bridges last.
"""

import os
import shutil
import time
from dataclasses import dataclass, field

from . import holder, hosts, log, naming, procs, rootfs, score, slurm, state, system
from .errors import VclusterError

DEFAULT_GRACE = 3.0
VETH_WAIT = 10.0


@dataclass
class Found:
    name: str
    netns: list = field(default_factory=list)
    links: list = field(default_factory=list)       # (ifname, kind)
    holders: dict = field(default_factory=dict)     # node -> pid
    node_dirs: list = field(default_factory=list)
    host_block: bool = False
    state_file: bool = False
    services: dict = field(default_factory=dict)   # pid -> (role, node)
    service_dir: bool = False
    cgroup: bool = False
    slurm: dict = field(default_factory=dict)      # pid -> "slurmctld" | "slurmd"
    slurm_cgroups: bool = False                    # cgroup v1 slurm_nI of this cluster
    rootfs_dirs: list = field(default_factory=list)  # root-file-system nodes' directories

    def empty(self):
        return not (self.netns or self.links or self.holders or self.node_dirs or self.rootfs_dirs
                    or self.host_block or self.state_file or self.services
                    or self.service_dir or self.cgroup or self.slurm or self.slurm_cgroups)

    def summary(self):
        parts = [_count(len(items), *words) for items, words in (
            (self.netns, ("namespace", "namespaces")),
            (self.links, ("link", "links")),
            (self.holders, ("holder process", "holder processes")),
            (self.node_dirs, ("/etc/netns directory", "/etc/netns directories")),
            (self.rootfs_dirs, ("node root file system", "node root file systems")),
            (self.services, ("munged/scored process", "munged/scored processes")),
            (self.slurm, ("Slurm daemon", "Slurm daemons"))) if items]
        parts += [what for present, what in ((self.host_block, "/etc/hosts block"),
                                             (self.state_file, "state file"),
                                             (self.service_dir, "service directory"),
                                             (self.cgroup, "cgroup"),
                                             (self.slurm_cgroups, "Slurm cgroups")) if present]
        return ", ".join(parts) or "nothing"


def _count(n, singular, plural):
    return f"{n} {singular if n == 1 else plural}"


def discover(name, include_state=True):
    """Everything of cluster `name` that exists now."""
    found = Found(name)
    found.netns = sorted(ns for ns in system.list_netns()
                         if (naming.parse_netns_name(ns) or ("",))[0] == name)
    alias = naming.link_alias(name)
    found.links = [(link["ifname"], link["kind"]) for link in system.list_links()
                   if link["alias"] == alias
                   or (naming.is_cluster_link_name(name, link["ifname"])
                       and link["kind"] in ("bridge", "veth"))]
    found.holders = {node: pid for (_, node), pid in holder.find(name).items()}
    found.node_dirs = hosts.node_dirs(name)
    found.rootfs_dirs = rootfs.node_dirs(name)
    found.host_block = name in hosts.host_block_clusters()
    found.state_file = include_state and state.exists(name)
    found.services = score.find(name)
    found.slurm = slurm.find(name)
    found.slurm_cgroups = bool(slurm.node_cgroups(slurm.node_names(name)))
    found.service_dir = score.service_dir(name).exists()
    cgroup = score.cgroup_dir(name)
    found.cgroup = bool(cgroup and cgroup.exists())
    return found


def all_clusters():
    """Names of every cluster of which anything exists."""
    names = set(state.names()) | set(hosts.host_block_clusters())
    names |= {parsed[0] for parsed in map(naming.parse_netns_name, system.list_netns()) if parsed}
    names |= {naming.parse_link_alias(link["alias"]) for link in system.list_links()} - {None}
    names |= {cluster for cluster, _ in holder.find()}
    names |= score.clusters_with_leftovers()
    if os.path.isdir(rootfs.BASE):
        names |= {n for n in os.listdir(rootfs.BASE) if naming._NAME_RE.match(n)}
    if hosts.ETC_NETNS.is_dir():
        names |= {parsed[0] for parsed in map(naming.parse_netns_name,
                                              (p.name for p in hosts.ETC_NETNS.iterdir())) if parsed}
    return sorted(names)


def down(name, grace=DEFAULT_GRACE):
    """Remove cluster `name`; return True if there was anything to remove."""
    system.require_root()
    system.require_tools("ip")
    with state.lock():
        found = discover(name)
        if found.empty():
            log.step(f"cluster {name} is not up; nothing to do")
            return False
        log.step(f"removing cluster {name}: {found.summary()}")
        _remove(found, grace)
        left = discover(name)
        if not left.empty():
            raise VclusterError(f"cluster {name} could not be removed completely: {left.summary()} "
                                "remain; see the messages above")
        log.step(f"cluster {name} is down")
        return True


def remove(name, quiet=False, grace=DEFAULT_GRACE):
    """Remove whatever exists of `name` without the checks of down() (rollback of up)."""
    try:
        _remove(discover(name), grace)
    except VclusterError as e:
        if not quiet:
            raise
        log.warn(f"rollback of cluster {name} incomplete: {e}")


def _existing_links():
    return {link["ifname"] for link in system.list_links()}


def _wait_for_veths_to_go(found, timeout=VETH_WAIT):
    """Wait until the kernel's namespace cleanup has removed the veths' host ends."""
    veths = {ifname for ifname, kind in found.links if kind == "veth"}
    deadline = time.monotonic() + timeout
    while veths & _existing_links() and time.monotonic() < deadline:
        time.sleep(0.05)


def _remove(found, grace):
    machines = {node: pid for node, pid in found.holders.items()
                if naming.is_node_tag(procs.argv0(pid))}
    if machines:
        log.step(f"powering off {len(machines)} node(s) (their systemd stops their services; "
                 f"SIGKILL after {rootfs.STOP_TIMEOUT} s)")
        killed = set(machines) - rootfs.stop_all(found.name, machines)
        if killed:
            log.warn("node(s) that did not power off in time, killed: " + ", ".join(sorted(killed)))
    if found.slurm:
        survivors = slurm.stop(found.name, grace)
        if survivors:
            log.warn("Slurm daemons that ignored SIGKILL: " + ", ".join(map(str, survivors)))
    if found.services:
        survivors = score.stop(found.name, grace)
        if survivors:
            log.warn("services that ignored SIGKILL: " + ", ".join(map(str, survivors)))
    ns_ids = {procs.netns_id(f"/run/netns/{ns}") for ns in found.netns}
    ns_ids |= {procs.netns_id(f"/proc/{pid}/ns/net") for pid in found.holders.values()}
    # Never the host's own namespace, whatever a broken holder may claim.
    ns_ids -= {None, procs.netns_id("/proc/1/ns/net")}
    inside = procs.in_namespaces(ns_ids)
    if inside:
        log.step(f"ending {len(inside)} process(es) in the nodes (SIGTERM, then SIGKILL after {grace:g}s)")
    survivors = procs.terminate(ns_ids, grace=grace)
    if survivors:
        log.warn("processes that ignored SIGKILL: " + ", ".join(map(str, survivors)))

    if found.netns:
        log.step(f"deleting {len(found.netns)} network namespaces")
        system.batch("ip", [f"netns del {ns}" for ns in found.netns], force=True)
        _wait_for_veths_to_go(found)
    links = [link for link in found.links if link[0] in _existing_links()]
    if links:
        log.step(f"deleting {len(links)} links")
        links.sort(key=lambda link: link[1] == "bridge")  # bridges after their ports
        system.batch("ip", [f"link del dev {ifname}" for ifname, _ in links], force=True)
    if found.slurm_cgroups:
        try:
            slurm.teardown(found.name, grace)
        except VclusterError as e:
            log.warn(str(e))
    if found.cgroup:
        try:
            score.remove_cgroups(found.name)
        except VclusterError as e:
            log.warn(str(e))
    if found.service_dir:
        shutil.rmtree(score.service_dir(found.name), ignore_errors=True)
    for d in found.rootfs_dirs:
        try:
            rootfs.remove(found.name, os.path.basename(d))
        except VclusterError as e:
            log.warn(str(e))
    hosts.remove_node_dirs(found.name)
    hosts.remove_host_block(found.name)
    state.remove(found.name)
