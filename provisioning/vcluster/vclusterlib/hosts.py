"""Host name tables: one per node, and a marked block in the host's /etc/hosts.

Inside a node, /etc/hosts is /etc/netns/<netns>/hosts: `ip netns exec`, which
starts the node's holder, bind-mounts that file over /etc/hosts in the node's
mount namespace, and every process entering the node shares that namespace.

In the root namespace the cluster's names live between
`# BEGIN vcluster NAME` and `# END vcluster NAME` in /etc/hosts.  Both files are
rewritten in place, never replaced by rename: a bind mount (of the node file,
or of /etc/hosts itself in containers) keeps pointing at the old inode.
"""

import re
import shutil
from pathlib import Path

from . import naming

ETC_HOSTS = Path("/etc/hosts")
ETC_NETNS = Path("/etc/netns")

_LOCALHOST = ("127.0.0.1\tlocalhost\n"
              "::1\tlocalhost ip6-localhost ip6-loopback\n"
              "ff02::1\tip6-allnodes\n"
              "ff02::2\tip6-allrouters\n")


def _lines(entries):
    return "".join(f"{addr}\t{' '.join(names)}\n" for addr, names in entries)


def node_hosts_text(layout):
    """The whole /etc/hosts of every node of `layout`.

    A node's own name resolves to its network-0 address (not 127.0.1.1 as on a
    Debian desktop) because cluster software publishes the address of its host
    name to its peers."""
    return (_LOCALHOST
            + f"# vcluster {layout.name}: nodes, then the host's end of each bridge\n"
            + _lines(layout.hosts_entries())
            + _lines(layout.host_entries()))


def node_dir(netns):
    return ETC_NETNS / netns


def install_node_files(layout):
    text = node_hosts_text(layout)
    for node in layout.nodes:
        d = node_dir(node.netns)
        d.mkdir(parents=True, exist_ok=True)
        _write_in_place(d / "hosts", text)


def node_dirs(cluster):
    """Existing /etc/netns directories of `cluster` (discovery by name)."""
    if not ETC_NETNS.is_dir():
        return []
    return sorted(p for p in ETC_NETNS.iterdir()
                  if naming.parse_netns_name(p.name) and naming.parse_netns_name(p.name)[0] == cluster)


def remove_node_dirs(cluster):
    for d in node_dirs(cluster):
        shutil.rmtree(d, ignore_errors=True)


def _markers(cluster):
    return f"# BEGIN vcluster {cluster}", f"# END vcluster {cluster}"


def host_block(layout):
    begin, end = _markers(layout.name)
    return f"{begin}\n{_lines(layout.hosts_entries())}{end}\n"


def _without_block(text, cluster):
    begin, end = _markers(cluster)
    pattern = re.compile(rf"^{re.escape(begin)}\n.*?^{re.escape(end)}\n?", re.M | re.S)
    return pattern.sub("", text)


def set_host_block(layout):
    text = _without_block(_read(ETC_HOSTS), layout.name)
    if text and not text.endswith("\n"):
        text += "\n"
    _write_in_place(ETC_HOSTS, text + host_block(layout))


def remove_host_block(cluster):
    """Remove the cluster's block; True if there was one."""
    text = _read(ETC_HOSTS)
    new = _without_block(text, cluster)
    if new != text:
        _write_in_place(ETC_HOSTS, new)
        return True
    return False


def host_block_clusters():
    """Names of the clusters that have a block in /etc/hosts."""
    return re.findall(r"^# BEGIN vcluster ([a-z][a-z0-9]*)$", _read(ETC_HOSTS), re.M)


def _read(path):
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _write_in_place(path, text):
    with open(path, "r+" if path.exists() else "w") as f:
        f.write(text)
        f.truncate()
