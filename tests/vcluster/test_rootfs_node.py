"""A root-file-system node (vclusterlib/rootfs.py): the node image through an
overlay, systemd as PID 1 in namespaces of its own, sshd with the node's own
host keys; powered off, it leaves no process, mount, cgroup or directory."""

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import VCLUSTER
from vclusterlib import rootfs, score

IMAGE_TIMEOUT = 1200


@pytest.fixture(autouse=True)
def _root(require_root):
    pass


@pytest.fixture
def netns():
    """A network namespace of the test's own, with loopback up."""
    name = f"vct-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def node(netns):
    """One node of a cluster named after the test, started and always
    stopped and removed again; yields (cluster, node, holder pid, cgroup)."""
    image = subprocess.run([str(VCLUSTER), "image"], capture_output=True, text=True,
                           timeout=IMAGE_TIMEOUT)
    assert image.returncode == 0, image.stderr
    cluster = f"r{uuid.uuid4().hex[:6]}"
    cgroup = os.path.join(score.cgroup_dir(cluster), "n1")
    rootfs.prepare(cluster, "n1", "127.0.0.1 localhost\n10.0.0.1 n1\n",
                   "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHVjbHVzdGVydGVzdGtleXZjbHVzdGVydGVzdGs "
                   "test")
    holder = None
    try:
        holder = rootfs.start(cluster, "n1", netns, image.stdout.strip(), cgroup)
        yield cluster, "n1", holder, cgroup
    finally:
        if holder:
            rootfs.stop(cluster, "n1", holder)
        rootfs.remove(cluster, "n1")
        score.remove_cgroup_tree(score.cgroup_dir(cluster))


def inside(holder, *cmd):
    init = rootfs.init_pid(holder)
    assert init, "the node has no PID 1"
    return subprocess.run(rootfs.enter_argv(init) + list(cmd), capture_output=True, text=True,
                          timeout=60)


def test_a_node_boots_systemd_with_its_own_identity_and_powers_off_clean(node):
    cluster, name, holder, cgroup = node
    state = rootfs.wait_ready(cluster, name, holder)
    assert state in ("running", "degraded"), state
    # Its own PID 1, host name, machine id and file system.
    out = inside(holder, "sh", "-c", "cat /proc/1/comm; hostname; cat /etc/machine-id; "
                                     "cat /run/systemd/container; findmnt -no FSTYPE /")
    assert out.returncode == 0, out.stderr
    comm, host, machine_id, container, rootfs_type = out.stdout.split()
    assert (comm, host, rootfs_type) == ("systemd", name, "overlay")
    # systemd knows it runs in a container (systemd-detect-virt: container-other).
    assert len(machine_id) == 32 and container == rootfs.CONTAINER
    # Nothing failed (sshd has the node's own host keys).
    failed = inside(holder, "systemctl", "list-units", "--failed", "--plain", "--no-legend")
    assert failed.stdout.strip() == "", failed.stdout
    assert inside(holder, "systemctl", "is-active", "ssh.service").stdout.strip() == "active"
    key = inside(holder, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
    assert key.startswith("ssh-ed25519 ") and key.strip().endswith(f"root@{name}")
    # The node's processes are in the node's cgroup, systemd's tree below it.
    assert (Path(cgroup) / "init.scope").is_dir()
    # A file written in the node lands in its upper layer, not in the image.
    inside(holder, "sh", "-c", "echo hello > /root/written")
    upper = Path(rootfs.node_dir(cluster, name)) / "upper"
    assert (upper / "root" / "written").read_text() == "hello\n"

    # Powered off by its systemd, in time; nothing of it stays mounted.
    assert rootfs.stop(cluster, name, holder) is True
    assert not Path(f"/proc/{holder}").exists() or \
        Path(f"/proc/{holder}/stat").read_text().split(") ")[1][0] == "Z"
    d = rootfs.node_dir(cluster, name)
    mounts = Path("/proc/self/mountinfo").read_text()
    assert d not in mounts
    assert_nothing_left(cluster, name)


def assert_nothing_left(cluster, name):
    d = rootfs.node_dir(cluster, name)
    assert d not in Path("/proc/self/mountinfo").read_text()
    rootfs.remove(cluster, name)
    assert not os.path.exists(d)
    assert not score.remove_cgroup_tree(score.cgroup_dir(cluster))
    assert not score.cgroup_dir(cluster).exists()
    # No cgroup of systemd's in the host's v1 hierarchies.
    v1 = [p for p in Path("/sys/fs/cgroup").glob("*/init.scope")
          if p.stat().st_mtime > time.time() - 600 and p.parent.name != "unified"]
    assert not v1, v1


def test_a_node_whose_holder_is_killed_takes_its_processes_and_mounts_along(node):
    """What a crash of vcluster's side leaves: SIGKILL to the holder ends
    the node (--kill-child), and with its mount namespace every mount."""
    cluster, name, holder, _ = node
    rootfs.wait_ready(cluster, name, holder)
    init = rootfs.init_pid(holder)
    os.kill(holder, 9)
    deadline = time.monotonic() + 20
    while Path(f"/proc/{init}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{init}").exists(), "the node's systemd survived its holder"
    assert_nothing_left(cluster, name)
