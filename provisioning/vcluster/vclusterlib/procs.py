"""Finding and ending the processes that run inside a node.

A process belongs to a node if its network namespace is the node's: the
nsfs inode behind /proc/PID/ns/net equals the one behind /run/netns/<netns>.
That catches everything, however it was started (vcluster exec, rsh from
mpirun, a daemon that forked away), and never anything outside the node.
Processes are only ever signalled by PID, after checking that they are still
inside the node.
"""

import os
import signal
import time


def pids():
    """PIDs of all processes, except this one."""
    me = os.getpid()
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) != me]


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # the process is gone or is a kernel thread
        return None


def argv0(pid):
    data = _read(f"/proc/{pid}/cmdline")
    return data.split(b"\0", 1)[0].decode(errors="replace") if data else None


def argv(pid):
    """The command line of a process as a list; [] for a kernel thread, a
    zombie or a process that is gone."""
    data = _read(f"/proc/{pid}/cmdline")
    return [a.decode(errors="replace") for a in data.rstrip(b"\0").split(b"\0")] if data else []


def cmdline(pid):
    data = _read(f"/proc/{pid}/cmdline")
    if not data:
        comm = _read(f"/proc/{pid}/comm")
        return f"[{comm.decode(errors='replace').strip()}]" if comm else "?"
    return " ".join(part.decode(errors="replace") for part in data.rstrip(b"\0").split(b"\0"))


def exited(pid):
    """True once every thread of the process is gone, and with them its
    files and sockets.  A killed process's main thread shows as a zombie
    while its other threads may still be tearing down (alive() is already
    False then): a daemon restarted at that moment can find its port taken."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) <= 1 and not alive(pid)
    except OSError:
        return True


def netns_id(path):
    """(device, inode) of a network namespace file, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def alive(pid):
    """True unless the process is gone or a zombie (whose namespaces are released)."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return False
    # The state follows the parenthesised command, which may itself hold ')'.
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] != b"Z"


def in_namespaces(ns_ids, exclude=()):
    """{pid: netns id} of the processes whose network namespace is in ns_ids."""
    found = {}
    for pid in pids():
        if pid in exclude:
            continue
        ns = netns_id(f"/proc/{pid}/ns/net")
        if ns in ns_ids:
            found[pid] = ns
    return found


def terminate(ns_ids, grace=3.0, kill_wait=3.0):
    """End every process inside the given network namespaces.

    SIGTERM first and up to `grace` seconds to exit (children forked meanwhile
    are found by re-scanning and get SIGTERM too), then SIGKILL.  Returns the
    PIDs that survived even SIGKILL within `kill_wait` seconds (normally none:
    only a process stuck in the kernel survives)."""
    if not ns_ids:
        return []
    exclude = {os.getppid()}  # `down` run from a shell inside a node
    _signal_all(ns_ids, exclude, signal.SIGTERM, grace)
    return _signal_all(ns_ids, exclude, signal.SIGKILL, kill_wait)


def _signal_all(ns_ids, exclude, sig, wait):
    deadline = time.monotonic() + wait
    signalled = set()
    while True:
        current = [pid for pid in in_namespaces(ns_ids, exclude) if alive(pid)]
        if not current:
            return []
        for pid in current:
            if pid not in signalled:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
                signalled.add(pid)
        if time.monotonic() >= deadline:
            return current
        time.sleep(0.05)


def matching(classify):
    """{pid: classify(argv)} of the live processes for which it is not None
    (the daemons of one cluster, told by their command lines)."""
    found = {}
    for pid in pids():
        what = classify(argv(pid))
        if what and alive(pid):
            found[pid] = what
    return found


def terminate_pids(targets, still_ours, grace, kill_wait=3.0):
    """SIGTERM, up to `grace` s, then SIGKILL, to those of `targets` for
    which still_ours(pid) holds (a recycled PID is left alone).  Returns the
    PIDs that survived SIGKILL."""
    def ours():
        return [pid for pid in targets if alive(pid) and still_ours(pid)]

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, kill_wait)):
        for pid in ours():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while ours() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not ours():
            return []
    return ours()
