"""The address plan of a cluster and the check against the host's routes.

A cluster owns one /16; network K is its K-th /24; node nI has host number I on
every network and the host's port on each network has .254:

    cluster subnet 10.250.0.0/16
      network 0    10.250.0.0/24   n1 = 10.250.0.1  n2 = 10.250.0.2  host = 10.250.0.254
      network 1    10.250.1.0/24   n1 = 10.250.1.1  ...

By default a cluster takes the first /16 of 10.250.0.0/16 ... 10.255.0.0/16 that
no other cluster holds and whose used /24s overlap no route of the host (any
table; default routes excepted), so a cluster never hides a real network.
`--subnet` picks another /16 explicitly.
"""

import ipaddress
from dataclasses import dataclass, field

from . import naming
from .errors import VclusterError

POOL = [ipaddress.ip_network(f"10.{octet}.0.0/16") for octet in range(250, 256)]
HOST_NUMBER = 254


@dataclass
class Network:
    index: int
    subnet: ipaddress.IPv4Network
    bridge: str
    host_address: str


@dataclass
class Nic:
    network: int
    ifname: str          # inside the node
    host_ifname: str     # the bridge port, in the switch namespace
    address: str


@dataclass
class Node:
    name: str
    index: int
    netns: str
    nics: list = field(default_factory=list)

    def names_on(self, net):
        """Host names of this node's address on network `net`."""
        names = [naming.network_alias(self.name, net)]
        return [self.name] + names if net == 0 else names


class Layout:
    """Every name and address of a cluster, derived from name, shape and subnet."""

    def __init__(self, name, shape, subnet):
        self.name = name
        self.shape = shape
        self.subnet = ipaddress.ip_network(subnet)
        # The namespace of the bridges (build.py, "The switch").
        self.switch_netns = naming.switch_netns_name(name)
        self.networks = []
        for k, net in enumerate(network_subnets(self.subnet, shape.nics)):
            self.networks.append(Network(k, net, naming.bridge_name(name, k),
                                         str(net.network_address + HOST_NUMBER)))
        self.nodes = []
        for i in range(1, shape.nodes + 1):
            node = naming.node_name(i)
            nics = [Nic(k, naming.node_ifname(k), naming.host_veth_name(name, node, k),
                        str(net.subnet.network_address + i))
                    for k, net in enumerate(self.networks)]
            self.nodes.append(Node(node, i, naming.netns_name(name, node), nics))

    def node(self, name):
        for node in self.nodes:
            if node.name == name:
                return node
        return None

    def resolve(self, target):
        """The node a host name or address designates, or None.

        Accepted: n3, n3-net1, n3.NAME, n3-net1.NAME, or an address of the node."""
        suffix = "." + self.name
        if target.endswith(suffix):
            target = target[:-len(suffix)]
        for node in self.nodes:
            for nic in node.nics:
                if target in node.names_on(nic.network) or target == nic.address:
                    return node
        return None

    def hosts_entries(self, qualified_too=True):
        """(address, [names]) for every node on every network and the host."""
        entries = []
        for net in self.networks:
            for node in self.nodes:
                names = node.names_on(net.index)
                if qualified_too:
                    names += [f"{n}.{self.name}" for n in names]
                entries.append((node.nics[net.index].address, names))
        return entries

    def host_entries(self):
        """(address, [names]) of the host's end of each bridge, as nodes see it."""
        entries = []
        for net in self.networks:
            names = (["host"] if net.index == 0 else []) + [f"host-net{net.index}"]
            entries.append((net.host_address, names + [f"{n}.{self.name}" for n in names]))
        return entries

    def to_dict(self):
        return {
            "name": self.name,
            "shape": self.shape.to_dict(),
            "subnet": str(self.subnet),
            "switch_netns": self.switch_netns,
            "networks": [{"index": n.index, "subnet": str(n.subnet), "bridge": n.bridge,
                          "host_address": n.host_address} for n in self.networks],
            "nodes": [{"name": n.name, "netns": n.netns,
                       "nics": [{"network": c.network, "ifname": c.ifname,
                                 "host_ifname": c.host_ifname, "address": c.address}
                                for c in n.nics]} for n in self.nodes],
        }


def network_subnets(subnet, nics):
    return list(subnet.subnets(new_prefix=24))[:nics]


def parse_subnet(text):
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as e:
        raise VclusterError(f"bad --subnet {text!r}: {e}") from None
    if net.version != 4 or net.prefixlen != 16:
        raise VclusterError(f"bad --subnet {text!r}: must be an IPv4 /16 such as 10.250.0.0/16")
    return net


def foreign_routes(routes, cluster_links):
    """(network, description) of host routes that are not vcluster's own.

    `cluster_links` maps the interface names of vcluster links to their cluster,
    so that routes through another cluster's bridges count as that cluster's
    (they are reported by `taken`, not as foreign)."""
    result = []
    for r in routes:
        dst = r.get("dst", "")
        if dst == "default" or r.get("dev") in cluster_links:
            continue
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        where = f" dev {r['dev']}" if r.get("dev") else ""
        table = f" table {r['table']}" if r.get("table") not in (None, "main") else ""
        kind = r.get("type", "unicast")
        kind = "" if kind == "unicast" else kind + " "
        result.append((net, f"{kind}{dst}{where}{table}"))
    return result


def conflicts(subnet, nics, routes):
    """Descriptions of the routes that overlap the /24s a cluster would use."""
    used = network_subnets(subnet, nics)
    return sorted({desc for net, desc in routes if net.version == 4
                   and any(net.overlaps(u) for u in used)})


def choose_subnet(requested, nics, routes, taken):
    """The /16 for a new cluster.

    requested: an IPv4Network from --subnet, or None for the default pool
    routes:    foreign_routes() of the host
    taken:     {IPv4Network: cluster name} of the clusters already up
    """
    if requested is not None:
        if requested in taken:
            raise VclusterError(f"subnet {requested} is used by cluster {taken[requested]}")
        found = conflicts(requested, nics, routes)
        if found:
            raise VclusterError(f"subnet {requested} overlaps host routes: {'; '.join(found)}; "
                                "choose another with --subnet")
        return requested
    reasons = []
    for candidate in POOL:
        if candidate in taken:
            reasons.append(f"{candidate} is used by cluster {taken[candidate]}")
            continue
        found = conflicts(candidate, nics, routes)
        if found:
            reasons.append(f"{candidate} overlaps host routes: {'; '.join(found)}")
            continue
        return candidate
    raise VclusterError("no free subnet in the default plan (10.250.0.0/16 to 10.255.0.0/16): "
                        + "; ".join(reasons) + "; choose one with --subnet")
