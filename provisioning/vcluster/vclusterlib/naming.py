"""Names of everything vcluster creates.

Every object carries the cluster name so that several clusters can be up at
once and so that `down` can find the objects of a cluster by name alone, even
when its state file is gone:

    network namespace   vcluster-NAME-nI        (one per node)
    switch namespace    vcluster-NAME-sw        (the cluster's bridges, nothing else)
    bridge              brK                     (one per network, in the switch namespace)
    host's port         NAME-brK                (veth in the root namespace, with the
                                                 host's address; its peer upK is a port
                                                 of brK)
    veth, switch end    NAME-nI-K               (node I on network K, a port of brK)
    veth, node end      ethK                    (inside node I's namespace)
    link alias          vcluster:NAME           (set on every root-namespace link)
    holder process      argv[0] = "vcluster-holder NAME nI"

Linux limits interface names to 15 bytes; the longest name above is
NAME-nII-K, so NAME has at most 15 - 6 = 9 characters.  NAME may not contain
'-' so that the prefix "vcluster-NAME-" of one cluster is never a prefix of
another cluster's names.
"""

import re

from .errors import VclusterError

DEFAULT_CLUSTER = "vc"
MAX_NAME_LEN = 9
MAX_NODES = 64
MAX_NICS = 8

_NAME_RE = re.compile(r"[a-z][a-z0-9]*\Z")
NETNS_PREFIX = "vcluster-"
HOLDER_ARGV0 = "vcluster-holder"
# The holder of a node with a root file system of its own (rootfs.py).
NODE_ARGV0 = "vcluster-node"
_NETNS_RE = re.compile(r"vcluster-([a-z][a-z0-9]*)-(n[0-9]+|sw)\Z")
# The namespace of a cluster's bridges, in the place of a node's name.
SWITCH = "sw"


def validate_cluster_name(name):
    if not name or len(name) > MAX_NAME_LEN or not _NAME_RE.match(name):
        raise VclusterError(
            f"invalid cluster name {name!r}: use 1 to {MAX_NAME_LEN} lowercase "
            "letters and digits, starting with a letter (the name becomes part of "
            "interface names, which Linux limits to 15 characters)")
    return name


def node_name(index):
    """Host name of node `index` (1-based)."""
    return f"n{index}"


def node_index(node):
    """1-based index of a node name such as 'n3', or None."""
    m = re.fullmatch(r"n([1-9][0-9]*)", node)
    return int(m.group(1)) if m else None


def network_alias(node, net):
    """Name of `node`'s address on network `net`: n1-net1."""
    return f"{node}-net{net}"


def netns_name(cluster, node):
    return f"{NETNS_PREFIX}{cluster}-{node}"


def switch_netns_name(cluster):
    """The namespace that holds the cluster's bridges: frames between nodes
    cross it, and only it (build.py, "The switch")."""
    return netns_name(cluster, SWITCH)


def parse_netns_name(ns):
    """(cluster, node) for a vcluster namespace name, else None; node is
    SWITCH for the switch namespace."""
    m = _NETNS_RE.match(ns)
    return (m.group(1), m.group(2)) if m else None


def bridge_name(cluster, net):
    """The host's port on network `net` (a veth end with the host's address)."""
    return f"{cluster}-br{net}"


def switch_bridge_name(net):
    """The bridge of network `net`, inside the switch namespace."""
    return f"br{net}"


def switch_uplink_name(net):
    """The switch's end of the host's port on network `net`."""
    return f"up{net}"


def host_veth_name(cluster, node, net):
    return f"{cluster}-{node}-{net}"


def node_ifname(net):
    return f"eth{net}"


def link_alias(cluster):
    return f"vcluster:{cluster}"


def parse_link_alias(alias):
    """Cluster name of a link alias 'vcluster:NAME', else None."""
    if alias and alias.startswith("vcluster:"):
        name = alias[len("vcluster:"):]
        return name if _NAME_RE.match(name) else None
    return None


def is_cluster_link_name(cluster, ifname):
    """True if `ifname` has the shape of a root-namespace link of `cluster`.

    Used, together with the link kind, to find links created before their alias
    was set (a crash between the two steps)."""
    c = re.escape(cluster)
    return bool(re.fullmatch(rf"{c}-br[0-9]|{c}-n[0-9]+-[0-9]", ifname))


def holder_tag(cluster, node):
    """argv[0] of a node's holder process, visible in ps and /proc/PID/cmdline."""
    return f"{HOLDER_ARGV0} {cluster} {node}"


def node_tag(cluster, node):
    """argv[0] of the holder of a root-file-system node (its PID 1's parent)."""
    return f"{NODE_ARGV0} {cluster} {node}"


def parse_holder_tag(argv0):
    """(cluster, node) for the argv[0] of a holder of either kind, else None."""
    parts = argv0.split(" ")
    if len(parts) == 3 and parts[0] in (HOLDER_ARGV0, NODE_ARGV0) and _NAME_RE.match(parts[1]) \
            and node_index(parts[2]):
        return parts[1], parts[2]
    return None


def is_node_tag(argv0):
    """True if argv0 is the tag of a root-file-system node's holder."""
    return bool(argv0) and argv0.startswith(NODE_ARGV0 + " ") and parse_holder_tag(argv0) is not None
