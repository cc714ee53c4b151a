"""Nodes with a root file system of their own, systemd as their PID 1.

A root-file-system node runs the node image (image.py) through an overlay:
the image read-only below, the node's own upper layer above, in
BASE/CLUSTER/NODE/.  Its processes live in namespaces of their own: the
cluster's network namespace of the node, and new PID, mount, UTS, IPC and
cgroup namespaces.  The process tree, as the host sees it:

    vcluster-node CLUSTER NODE    `unshare --pid --fork --kill-child --mount ...`,
                                  renamed: the tag by which `down` finds it
      /lib/systemd/systemd        PID 1 of the node

Every mount of the node (the overlay, /proc, /sys, /dev, /run, /tmp, the
cgroup2 file system) is made inside the node's mount namespace, so when the
node's processes are gone its mounts are gone too: a crash of vcluster
leaves nothing mounted on the host, only the tagged process (found and
stopped by `down`), the node's directory and its cgroup.

What systemd needs here, as systemd-nspawn provides it: `container=` in its
environment; /proc; a read-only /sys; a tmpfs /dev with the usual device
nodes and a devpts of its own (newinstance); tmpfs /run and /tmp; and, on
this hybrid host, a cgroup2 file system at /sys/fs/cgroup, mounted inside a
cgroup namespace rooted at the node's cgroup before systemd starts (else
systemd mounts the v1 hierarchies and writes into the host's v1 trees).
systemd powers the node off on SIGRTMIN+4.
"""

import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import time

from . import naming, procs, system
from .errors import VclusterError

BASE = "/var/lib/score/vcluster"
READY_TIMEOUT = 90
STOP_TIMEOUT = 30
CONTAINER = "vcluster"

# Run by the node's first process (PID 1 of its PID namespace) with
# $1 root, $2 image, $3 upper, $4 work, $5 cgroup, $6 host name.
_SCRIPT = r'''
set -e
R=$1
echo 0 > "$5/cgroup.procs"
mount -t overlay overlay -o "lowerdir=$2,upperdir=$3,workdir=$4" "$R"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
mount -t tmpfs -o mode=755,nosuid,size=65536k tmpfs "$R/dev"
# Device nodes of the node's own (mknod), never the host's bound in: the
# node's systemd chowns and chmods some (its console to root:tty 0620), and
# that must not reach the host's /dev/null.
mknod -m 666 "$R/dev/null" c 1 3
mknod -m 666 "$R/dev/zero" c 1 5
mknod -m 666 "$R/dev/full" c 1 7
mknod -m 666 "$R/dev/random" c 1 8
mknod -m 666 "$R/dev/urandom" c 1 9
mknod -m 666 "$R/dev/tty" c 5 0
# No terminal is attached: the console writes to nowhere.
mknod -m 600 "$R/dev/console" c 1 3
mkdir -p "$R/dev/pts" "$R/dev/shm" "$R/dev/mqueue"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$R/run"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/tmp"
hostname "$6"
# pivot_root, not chroot: the kernel refuses user namespaces to a chrooted
# process, and services sandboxed by systemd (PrivateUsers=, as Debian's
# prometheus.service) need them.  The host's tree is then detached.
mkdir "$R/tmp/.host"
cd "$R"
pivot_root . tmp/.host
exec unshare --cgroup /bin/sh -c \
    'cd / && umount -l /tmp/.host && rmdir /tmp/.host &&
     mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup &&
     exec /usr/bin/env -i container='"{container}"' /lib/systemd/systemd'
'''.replace("{container}", CONTAINER)


def node_dir(cluster, node):
    return os.path.join(BASE, cluster, node)


def tag(cluster, node):
    return naming.node_tag(cluster, node)


def prepare(cluster, node, hosts_text, authorized_key):
    """The node's directory with its identity in its upper layer: host name,
    machine id, ssh host keys, /etc/hosts, root's authorized key; and the
    console getty masked (below)."""
    d = node_dir(cluster, node)
    if os.path.exists(d):
        raise VclusterError(f"{d} exists: a node of cluster {cluster} was not removed "
                            f"(vcluster down --name {cluster})")
    upper = os.path.join(d, "upper")
    for sub in ("upper", "work", "root"):
        os.makedirs(os.path.join(d, sub), mode=0o755)
    etc = os.path.join(upper, "etc")
    os.makedirs(os.path.join(etc, "ssh"), mode=0o755)
    _write(os.path.join(etc, "hostname"), node + "\n")
    _write(os.path.join(etc, "machine-id"), secrets.token_hex(16) + "\n", 0o444)
    _write(os.path.join(etc, "hosts"), hosts_text)
    keygen = system.tool("ssh-keygen")
    for kind in ("ed25519", "ecdsa", "rsa"):
        system.run([keygen, "-q", "-t", kind, "-N", "", "-C", f"root@{node}",
                    "-f", os.path.join(etc, "ssh", f"ssh_host_{kind}_key")])
    # The node's console is a log file, not a terminal: the getty that
    # systemd's getty generator starts in a container fails on it, is
    # restarted until its start limit, and then leaves the node degraded
    # some ten seconds after boot.  Masked.
    units = os.path.join(etc, "systemd", "system")
    os.makedirs(units, mode=0o755)
    os.symlink("/dev/null", os.path.join(units, "console-getty.service"))
    ssh_dir = os.path.join(upper, "root", ".ssh")
    os.makedirs(ssh_dir, mode=0o700)
    _write(os.path.join(ssh_dir, "authorized_keys"), authorized_key.rstrip("\n") + "\n", 0o600)
    return d


def start(cluster, node, netns, image, cgroup):
    """Start the node: returns the PID of its tagged holder process; the
    node's systemd is its only child."""
    d = node_dir(cluster, node)
    unshare, sh = system.tool("unshare"), system.tool("sh")
    os.makedirs(cgroup, exist_ok=True)
    netns_path = f"/run/netns/{netns}"
    fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        proc = subprocess.Popen(
            [tag(cluster, node), "--pid", "--fork", "--kill-child", "--mount", "--uts", "--ipc",
             "--propagation", "private", "--", sh, "-c", _SCRIPT, "vcluster-node-setup",
             os.path.join(d, "root"), image, os.path.join(d, "upper"), os.path.join(d, "work"),
             cgroup, node],
            executable=unshare, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(d, "console.log"), "ab"), cwd="/",
            start_new_session=True, preexec_fn=lambda: _setns(fd),
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    finally:
        os.close(fd)
    return proc.pid


def init_pid(holder):
    """The node's PID 1 as the host sees it (the holder's child), or None."""
    try:
        with open(f"/proc/{holder}/task/{holder}/children") as f:
            children = f.read().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def enter_argv(init):
    """nsenter's argument list to run a command as root inside the node."""
    return [system.tool("nsenter"), f"--target={init}", "--mount", "--uts", "--ipc", "--net",
            "--pid", "--cgroup", "--root", "--wd", "--",
            "/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LC_ALL=C.UTF-8", "HOME=/root"]


def wait_ready(cluster, node, holder, timeout=READY_TIMEOUT):
    """Wait until the node's systemd has finished starting up (state running
    or degraded); returns the state.  A node that dies or does not get there
    in time is an error quoting its console."""
    deadline = time.monotonic() + timeout
    state = "no systemd yet"
    while time.monotonic() < deadline:
        if procs.exited(holder):
            raise VclusterError(f"node {node} of cluster {cluster} stopped while starting: "
                                + _console(cluster, node))
        init = init_pid(holder)
        if init and _comm(init) == "systemd":
            proc = subprocess.run(enter_argv(init) + ["systemctl", "is-system-running"],
                                  capture_output=True, text=True, timeout=30)
            state = proc.stdout.strip() or proc.stderr.strip()
            if state in ("running", "degraded"):
                return state
        time.sleep(0.2)
    raise VclusterError(f"node {node} of cluster {cluster}: systemd did not finish starting "
                        f"within {timeout} s (state: {state}); " + _console(cluster, node))


def failed_units(holder):
    """What `systemctl --failed` lists in the node (one line per unit), or
    why it could not be asked."""
    init = init_pid(holder)
    if not init:
        return "no systemd in the node"
    proc = subprocess.run(enter_argv(init) + ["systemctl", "--failed", "--no-legend", "--plain"],
                          capture_output=True, text=True, timeout=30)
    return proc.stdout.strip() or proc.stderr.strip() or "none listed"


def stop(cluster, node, holder, timeout=STOP_TIMEOUT):
    """Power the node off (SIGRTMIN+4 to its systemd), SIGKILL it after
    `timeout`; returns True if it powered off by itself."""
    return node in stop_all(cluster, {node: holder}, timeout)


def stop_all(cluster, holders, timeout=STOP_TIMEOUT):
    """Power off every node of {node: holder pid} at once; SIGKILL those
    still there after `timeout`.  Returns the nodes that powered off by
    themselves (or were not running)."""
    clean = set()
    running = {}
    for node, holder in holders.items():
        if procs.exited(holder) or procs.argv0(holder) != tag(cluster, node):
            clean.add(node)
            continue
        running[node] = holder
        init = init_pid(holder)
        if init:
            try:
                os.kill(init, signal.SIGRTMIN + 4)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    while running and time.monotonic() < deadline:
        for node in [n for n, h in running.items() if procs.exited(h)]:
            clean.add(node)
            del running[node]
        time.sleep(0.1)
    # --kill-child: the node's PID 1, and with it every process of the node,
    # dies with the holder.
    for holder in running.values():
        try:
            os.kill(holder, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(not procs.exited(h) for h in running.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return clean


def node_dirs(cluster):
    """The node directories of `cluster` under BASE (upper layers)."""
    top = os.path.join(BASE, cluster)
    if not os.path.isdir(top):
        return []
    return sorted(os.path.join(top, d) for d in os.listdir(top))


def remove(cluster, node):
    """The node's directory (its upper layer: everything it installed)."""
    d = node_dir(cluster, node)
    if _mounted_under(d):
        raise VclusterError(f"{d} still has mounts; not removed")
    shutil.rmtree(d, ignore_errors=True)
    parent = os.path.dirname(d)
    if os.path.isdir(parent) and not os.listdir(parent):
        os.rmdir(parent)


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def _mounted_under(d):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4].startswith(d + "/") or line.split()[4] == d for line in f)


def _console(cluster, node):
    path = os.path.join(node_dir(cluster, node), "console.log")
    try:
        with open(path, errors="replace") as f:
            tail = f.read()[-600:].strip()
    except OSError:
        tail = ""
    return f"its console ({path}) says: {tail}" if tail else f"nothing on its console ({path})"


def _write(path, text, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)


_CLONE_NEWNET = 0x40000000


def _setns(fd):
    """In the child before exec: join the node's network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        os._exit(127)
