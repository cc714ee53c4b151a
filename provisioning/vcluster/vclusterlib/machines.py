"""The root-file-system nodes of a cluster (`vcluster up --rootfs`).

Each node is a small Debian machine (rootfs.py: the image through an
overlay, systemd as PID 1).  What makes them one cluster, prepared in each
node's upper layer before it boots:

  - /etc/hosts with every node and network (hosts.node_hosts_text);
  - ssh: per-node host keys (rootfs.prepare); one key pair for the cluster,
    /run/score/vcluster/NAME/ssh/id_ed25519, authorised for root on every
    node together with root's own public keys on the host; a known_hosts
    file listing every node's host key under each of its names, so ssh and
    Ansible check host keys strictly;
  - apt: the cluster's proxy on the host (aptproxy.py) for Debian's archive
    and the project's local repository; no other route out.

The nodes boot in parallel; `start` returns when every systemd has finished
starting up.
"""

import os

from . import aptproxy, hosts, log, rootfs, score, system
from .errors import VclusterError


def ssh_dir(name):
    return score.service_dir(name) / "ssh"


def key_path(name):
    return ssh_dir(name) / "id_ed25519"


def known_hosts_path(name):
    return ssh_dir(name) / "known_hosts"


def _cluster_key(name):
    """The cluster's key pair (made once); returns its public key."""
    d = ssh_dir(name)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = key_path(name)
    if not key.exists():
        system.run([system.tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "",
                    "-C", f"vcluster-{name}", "-f", str(key)])
    return key.with_suffix(".pub").read_text().strip()


def _host_keys():
    """root's own public keys on the host, authorised on the nodes too."""
    d = os.path.expanduser("~root/.ssh")
    keys = []
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if f.startswith("id_") and f.endswith(".pub"):
            with open(os.path.join(d, f)) as fh:
                keys.append(fh.read().strip())
    return keys


def _write_upper(upper, files):
    for rel, text in files.items():
        path = os.path.join(upper, rel)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def start(layout, image_path, repo):
    """Prepare and boot every node of `layout`; returns {node: holder pid}.
    On failure the nodes started so far keep running: the caller's rollback
    (teardown) powers them off and removes their directories."""
    authorized = "\n".join([_cluster_key(layout.name)] + _host_keys())
    hosts_text = hosts.node_hosts_text(layout)
    proxy_address = layout.networks[0].host_address
    apt_files = aptproxy.node_apt_files(proxy_address, repo is not None)
    cgroups = score.cgroup_dir(layout.name)
    if cgroups is None:
        raise VclusterError("no cgroup2 file system on the host: root-file-system nodes need one "
                            "for their systemd")
    log.step(f"preparing {len(layout.nodes)} node(s): upper layers, host keys, apt through "
             f"{aptproxy.proxy_url(proxy_address)}")
    for node in layout.nodes:
        d = rootfs.prepare(layout.name, node.name, hosts_text, authorized)
        _write_upper(os.path.join(d, "upper"), apt_files)
    _write_known_hosts(layout)
    log.step(f"booting {len(layout.nodes)} node(s) (systemd as PID 1)")
    pids = {}
    for node in layout.nodes:
        pids[node.name] = rootfs.start(layout.name, node.name, node.netns, image_path,
                                       str(cgroups / node.name))
    for node in layout.nodes:
        if rootfs.wait_ready(layout.name, node.name, pids[node.name]) == "degraded":
            # Up all the same (a node is usable with a unit failed), but
            # said: the failed units, and `journalctl -u` in the node has why.
            log.warn(f"node {node.name} started degraded; failed units: "
                     + rootfs.failed_units(pids[node.name]).replace("\n", "; "))
    return pids


def _write_known_hosts(layout):
    """Every node's host keys under every name and address it has."""
    lines = []
    for node in layout.nodes:
        names = []
        for nic in node.nics:
            names += node.names_on(nic.network)
            names += [f"{n}.{layout.name}" for n in node.names_on(nic.network)]
            names.append(nic.address)
        etc_ssh = os.path.join(rootfs.node_dir(layout.name, node.name), "upper", "etc", "ssh")
        for f in sorted(os.listdir(etc_ssh)):
            if f.startswith("ssh_host_") and f.endswith("_key.pub"):
                with open(os.path.join(etc_ssh, f)) as fh:
                    kind, key = fh.read().split()[:2]
                lines.append(f"{','.join(names)} {kind} {key}")
    known_hosts_path(layout.name).write_text("\n".join(lines) + "\n")


def ssh_options(name):
    """ssh options that reach the nodes of cluster `name` as root."""
    # Keepalives: a connection whose peer went silent ends within a minute
    # (ssh exits 255, which Ansible reports and may retry) instead of
    # waiting out TCP's retransmissions, some 15 minutes.
    return ["-i", str(key_path(name)), "-o", f"UserKnownHostsFile={known_hosts_path(name)}",
            "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
