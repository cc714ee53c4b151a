"""Holder processes: one per node, owning the node's UTS and mount namespaces.

A network namespace can be named (/run/netns/...), but a UTS namespace with the
node's host name and a mount namespace with the node's /etc/hosts and /sys
cannot, so one small process per node keeps them alive:

    ip netns exec NETNS          enter the netns; new mount namespace with
                                 /etc/netns/NETNS/hosts over /etc/hosts and a
                                 sysfs that shows the node's interfaces
      unshare --uts              new UTS namespace
        bash -c '...'            set the host name, report ready,
          exec -a TAG sleep infinity   and wait forever as "vcluster-holder NAME nI"

Entering a node is `nsenter --target HOLDER --net --uts --mount`.  The tag in
argv[0] lets `down` find holders without the state file; a PID is only trusted
if its tag and its network namespace both match, so a recycled PID is never
mistaken for a holder.
"""

import contextlib
import os
import select
import subprocess
import time

from . import naming, procs, state, system
from .errors import VclusterError

READY_TIMEOUT = 15

# $1 = host name, $2 = tag.  The host name is written to /proc rather than set
# with hostname(1) to need one tool fewer; it applies to the new UTS namespace.
_SCRIPT = ('printf %s "$1" > /proc/sys/kernel/hostname && echo ready && '
           'exec -a "$2" sleep infinity </dev/null >/dev/null 2>&1')


def start(layout):
    """Start the holders of every node; return {node name: pid}.

    All holders start in parallel and are waited for together; if any fails,
    the ones started are killed and an error explains which node failed."""
    argv_base = [system.tool("ip"), "netns", "exec"]
    unshare, bash = system.tool("unshare"), system.tool("bash")
    started = {}
    try:
        for node in layout.nodes:
            argv = argv_base + [node.netns, unshare, "--uts", "--", bash, "-c", _SCRIPT,
                                "vcluster-holder", node.name, naming.holder_tag(layout.name, node.name)]
            # A session of its own: a terminal's ^C to `vcluster up` must not reach
            # the holders; cwd / so that a holder never keeps a directory busy.
            started[node.name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd="/", start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        deadline = time.monotonic() + READY_TIMEOUT
        for name, proc in started.items():
            _wait_ready(name, proc, deadline)
            # "ready" comes just before the exec into the tagged sleep; wait for
            # the tag so that verify() holds as soon as start() returns.
            tag = naming.holder_tag(layout.name, name)
            while procs.argv0(proc.pid) != tag and proc.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.005)
        return {name: proc.pid for name, proc in started.items()}
    except BaseException:
        for proc in started.values():
            with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait(timeout=5)
        raise


def _wait_ready(name, proc, deadline):
    remaining = max(0.0, deadline - time.monotonic())
    ready, _, _ = select.select([proc.stdout], [], [], remaining)
    line = proc.stdout.readline() if ready else b""
    if line.strip() != b"ready":
        if not ready:
            raise VclusterError(f"holder of node {name} did not start within {READY_TIMEOUT}s")
        proc.wait(timeout=5)
        err = proc.stderr.read().decode(errors="replace").strip()
        raise VclusterError(f"holder of node {name} failed to start: {err or 'no message'}")
    # The holder has redirected its stdio to /dev/null; our pipe ends are
    # closed so that nothing of `vcluster up` outlives it.
    proc.stdout.close()
    proc.stderr.close()


def find(cluster=None):
    """{(cluster, node): pid} of the holder processes running now, of
    either kind."""
    found = {}
    for pid in procs.pids():
        argv0 = procs.argv0(pid)
        parsed = naming.parse_holder_tag(argv0) if argv0 else None
        if parsed and (cluster is None or parsed[0] == cluster):
            found[parsed] = pid
    return found


def live_nodes(current):
    """The names of the nodes of a cluster's state `current` whose holder
    process is alive (none: whoever made the cluster is gone)."""
    return [n.name for n in state.layout(current).nodes
            if verify(state.holder_pid(current, n.name), current["name"], n.name, n.netns)]


def verify(pid, cluster, node, netns):
    """True if `pid` is the live holder of (cluster, node) inside `netns`,
    of either kind (namespace-only or root-file-system node)."""
    if not pid or procs.argv0(pid) not in (naming.holder_tag(cluster, node),
                                           naming.node_tag(cluster, node)):
        return False
    ns = procs.netns_id(f"/run/netns/{netns}")
    return ns is not None and procs.netns_id(f"/proc/{pid}/ns/net") == ns
