"""Entering a node: which cluster, which node, and the nsenter command line.

A command runs in a node by joining the namespaces of the node's holder (net,
UTS, mount) with nsenter, then a small sh changes back to the caller's working
directory (joining a mount namespace resets it to /) and execs the command
exactly as given.  vcluster itself execs that command line, so stdin, stdout,
stderr, signals and the exit status are the command's own, and the
environment is passed on unchanged, except that on a cluster running score
SCORE_CONFIG names the node's configuration (unless it names a file outside
the cluster's service directory).
"""

import os
import sys

from . import holder, naming, rootfs, score, state, system
from .errors import VclusterError


def pick_cluster(name=None, target=None):
    """The state of the cluster meant by --name, $VCLUSTER_NAME, or the target.

    Without a name, the cluster is the only one up, or the only one that has a
    node called `target` (an address or a qualified name such as n1.vc is
    unique even when several clusters are up)."""
    name = name or os.environ.get("VCLUSTER_NAME") or None
    if name:
        naming.validate_cluster_name(name)
        current = state.load(name)
        if current is None:
            raise VclusterError(f"cluster {name} is not up (start it with 'vcluster up --name {name}')")
        return current
    clusters = [s for s in map(state.load, state.names()) if s]
    if not clusters:
        raise VclusterError("no virtual cluster is up; start one with 'vcluster up'")
    if len(clusters) == 1:
        return clusters[0]
    names = ", ".join(s["name"] for s in clusters)
    if target is not None:
        matching = [s for s in clusters if state.layout(s).resolve(target)]
        if len(matching) == 1:
            return matching[0]
        if not matching:
            raise VclusterError(f"no node {target!r} in any cluster that is up ({names})")
    raise VclusterError(f"several clusters are up ({names}); choose one with --name NAME "
                        "or the environment variable VCLUSTER_NAME")


def resolve_node(current, target):
    """(layout, node) for a node name, nI-netK name, qualified name or address."""
    layout = state.layout(current)
    node = layout.resolve(target)
    if node is None:
        raise VclusterError(
            f"no node {target!r} in cluster {layout.name}: it has nodes n1 to n{len(layout.nodes)} "
            f"(a node is named nI, nI-netK, nI.{layout.name} or by one of its addresses)")
    return layout, node


def holder_pid(current, layout, node):
    """PID of the node's live holder; the state file's PID is checked first."""
    pid = state.holder_pid(current, node.name)
    if holder.verify(pid, layout.name, node.name, node.netns):
        return pid
    pid = holder.find(layout.name).get((layout.name, node.name))
    if holder.verify(pid, layout.name, node.name, node.netns):
        return pid
    raise VclusterError(f"node {node.name} of cluster {layout.name} is not running (its holder "
                        f"process is gone); run 'vcluster down --name {layout.name}' and "
                        "'vcluster up' again")


# nsenter's own --wd opens the directory before entering the mount namespace,
# which would leave the command's cwd in the host's mount tree; cd by path
# inside the node instead.  "$@" runs the command without reinterpreting it.
_CHDIR_AND_EXEC = 'cd -- "$1" || exit 126; shift; exec "$@"'


def command(pid, argv):
    """The argv that runs `argv` inside the node of holder `pid`, in our cwd."""
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was deleted
        cwd = "/"
    return [system.tool("nsenter"), f"--target={pid}", "--net", "--uts", "--mount", "--",
            "/bin/sh", "-c", _CHDIR_AND_EXEC, "vcluster", cwd] + list(argv)


def machine_command(pid, node, argv):
    """The argv that runs `argv` as root on the root-file-system node of
    holder `pid`: the node's own root, a clean environment, cwd /root."""
    init = rootfs.init_pid(pid)
    if not init:
        raise VclusterError(f"node {node} has no running system (its PID 1 is gone)")
    return rootfs.enter_argv(init) + ["sh", "-c", 'cd /root 2>/dev/null; exec "$@"', "vcluster"] \
        + list(argv)


def exec_in(name, target, argv):
    """Replace this process by `argv` running inside node `target`; no return."""
    system.require_root()
    system.require_tools("nsenter")
    current = pick_cluster(name, target)
    layout, node = resolve_node(current, target)
    pid = holder_pid(current, layout, node)
    if current.get("rootfs"):
        full, env = machine_command(pid, node.name, argv), {}
    else:
        full = command(pid, argv)
        env = score.exec_environment(current, node.name, os.environ)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(full[0], full, env)
