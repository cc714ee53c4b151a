"""`vcluster up`: create a cluster, or confirm that the same one is up.

Order of construction (each step is one or a few batched tool calls):

  1. in the root namespace, one `ip -batch`: the node namespaces, one bridge
     per network with the host's address, one veth pair per node and network
     whose node end is created directly inside the node's namespace;
  2. in every node, one `ip -n NETNS -batch`: loopback up, ethK up with its
     address;
  3. with --rate, a tbf qdisc on both ends of every veth (`tc -batch`), so each
     direction of each link is limited: the host end shapes bridge-to-node
     traffic, the node end node-to-bridge traffic;
  4. host name tables (nodes and /etc/hosts);
  5. one holder process per node (UTS and mount namespaces), or, with
     --rootfs, the cluster's apt proxy and one booted Debian machine per
     node (aptproxy.py, machines.py);
  6. the state file, written last: a state file means a complete cluster.

Any failure, or ^C, rolls back by running the ordinary teardown, which finds
whatever was made by name.
"""

import contextlib
import datetime
import ipaddress
import signal

from . import addressing, aptproxy, holder, hosts, log, machines, naming, state, system, teardown
from .addressing import Layout
from .errors import VclusterError
from .shape import format_rate

TBF_LATENCY = "20ms"


def up(name, shape, subnet=None, rootfs=None):
    """Bring cluster `name` up with `shape`; return (changed, state dict).

    `rootfs`: None for namespace-only nodes, else {"image": DIR, "repo": DIR
    or None, "archive": URI or None}: nodes with a root file system of their
    own."""
    system.require_root()
    system.require_tools("ip", "tc", "unshare", "nsenter", "bash", "sleep")
    with state.lock():
        current = _existing(name, shape, subnet, rootfs)
        if current is not None:
            log.step(f"cluster {name} is already up with {shape.describe()}; nothing to do")
            return False, current
        found = teardown.discover(name)
        if not found.empty():
            raise VclusterError(f"cluster {name} has leftovers of an earlier run without a "
                                f"state file ({found.summary()}); run 'vcluster down --name {name}' first")
        layout = Layout(name, shape, _choose_subnet(name, shape, subnet))
        log.step(f"creating cluster {name}: {shape.describe()}, subnet {layout.subnet}")
        try:
            pids, extra = _create(layout, rootfs)
            record = layout.to_dict()
            record.update(version=state.VERSION,
                          created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                          **extra)
            for node in record["nodes"]:
                node["holder_pid"] = pids[node["name"]]
            state.save(record)
        except BaseException as e:
            log.step(f"creating cluster {name} failed ({e or type(e).__name__}); rolling back")
            with _signals_deferred():
                teardown.remove(name, quiet=True)
            raise
        log.step(f"cluster {name} is up: nodes {layout.nodes[0].name}..{layout.nodes[-1].name}, "
                 f"networks " + ", ".join(str(n.subnet) for n in layout.networks))
        return True, record


@contextlib.contextmanager
def _signals_deferred():
    """Let a rollback finish even if ^C or SIGTERM arrives again meanwhile.

    Blocked signals stay pending and are delivered when the rollback is done;
    the tools run meanwhile inherit the mask, so a terminal's ^C spares them too."""
    signals = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _existing(name, shape, subnet, rootfs=None):
    """The state of an identical healthy cluster, or None if there is none.

    Raises if a cluster of that name is up with another shape or is damaged.
    A state file whose cluster is entirely gone (e.g. after a reboot, if /run
    is not a tmpfs) is removed and ignored."""
    current = state.load(name)
    if current is None:
        return None
    layout = state.layout(current)
    live = holder.live_nodes(current)
    if not live and teardown.discover(name, include_state=False).empty():
        log.step(f"removing stale state file of cluster {name} (nothing of it is left)")
        state.remove(name)
        return None
    if layout.shape != shape or (subnet is not None and layout.subnet != subnet):
        raise VclusterError(
            f"cluster {name} is up with {layout.shape.describe()} on {layout.subnet}, "
            f"not {shape.describe()}{'' if subnet is None else ' on ' + str(subnet)}; "
            f"run 'vcluster down --name {name}' first")
    kind = "root-file-system" if current.get("rootfs") else "namespace-only"
    if bool(current.get("rootfs")) != bool(rootfs):
        raise VclusterError(f"cluster {name} is up with {kind} nodes; run "
                            f"'vcluster down --name {name}' first")
    if len(live) != len(layout.nodes):
        dead = [n.name for n in layout.nodes if n.name not in live]
        raise VclusterError(f"cluster {name} is damaged: node(s) {', '.join(dead)} have no "
                            f"holder process; run 'vcluster down --name {name}' first")
    return current


def _choose_subnet(name, shape, requested):
    links = system.list_links()
    cluster_links = {}
    for link in links:
        owner = naming.parse_link_alias(link["alias"])
        if owner:
            cluster_links[link["ifname"]] = owner
    routes = system.ipv4_routes()
    taken = {}
    for other in state.names():
        st = state.load(other)
        if st and other != name:
            taken[ipaddress.ip_network(st["subnet"])] = other
    # A cluster whose state file is gone still holds its bridges' subnets.
    for r in routes:
        owner = cluster_links.get(r.get("dev"))
        if owner and r.get("dst", "default") != "default":
            net = ipaddress.ip_network(r["dst"], strict=False).supernet(new_prefix=16)
            taken.setdefault(net, owner)
    return addressing.choose_subnet(requested, shape.nics,
                                    addressing.foreign_routes(routes, cluster_links), taken)


def _create(layout, rootfs=None):
    shape = layout.shape
    n_links = len(layout.nodes) * len(layout.networks)
    log.step(f"creating {_count(len(layout.nodes), 'namespace')}, "
             f"{_count(len(layout.networks), 'bridge')}, {_count(n_links, 'veth pair')}")
    system.batch("ip", _root_lines(layout))
    log.step("configuring node interfaces")
    system.batches("ip", [(node.netns, _node_lines(node)) for node in layout.nodes])
    if shape.rate is not None:
        log.step(f"limiting every link to {format_rate(shape.rate)} in each direction (tc tbf)")
        qdisc = _tbf(shape)
        system.batch("tc", [f"qdisc add dev {nic.host_ifname} root {qdisc}"
                            for node in layout.nodes for nic in node.nics])
        system.batches("tc", [(node.netns, [f"qdisc add dev {nic.ifname} root {qdisc}" for nic in node.nics])
                              for node in layout.nodes])
    log.step("writing host tables (/etc/netns/*/hosts, /etc/hosts)")
    hosts.install_node_files(layout)
    hosts.set_host_block(layout)
    if rootfs is None:
        log.step("starting one holder process per node (host name, mount namespace)")
        return holder.start(layout), {}
    address = layout.networks[0].host_address
    log.step(f"starting the apt proxy (apt-cacher-ng) on {address}:{aptproxy.PORT}"
             + (f", serving {rootfs['repo']}" if rootfs["repo"] else ""))
    proxy_pid = aptproxy.start(layout.name, address, rootfs["repo"], rootfs.get("archive"))
    aptproxy.fetch_check(address, rootfs.get("archive"))
    pids = machines.start(layout, rootfs["image"], rootfs["repo"])
    return pids, {"rootfs": {"image": rootfs["image"], "repo": rootfs["repo"],
                             "archive": rootfs.get("archive"),
                             "apt_proxy": aptproxy.proxy_url(address), "apt_proxy_pid": proxy_pid,
                             "ssh_key": str(machines.key_path(layout.name)),
                             "known_hosts": str(machines.known_hosts_path(layout.name))}}



def _root_lines(layout):
    mtu, alias = layout.shape.mtu, naming.link_alias(layout.name)
    lines = [f"netns add {node.netns}" for node in layout.nodes]
    for net in layout.networks:
        lines += [f"link add name {net.bridge} mtu {mtu} type bridge",
                  f"link set dev {net.bridge} alias {alias}",
                  f"addr add {net.host_address}/{net.subnet.prefixlen} dev {net.bridge}",
                  f"link set dev {net.bridge} up"]
    for node in layout.nodes:
        for nic in node.nics:
            bridge = layout.networks[nic.network].bridge
            lines += [f"link add name {nic.host_ifname} mtu {mtu} type veth "
                      f"peer name {nic.ifname} mtu {mtu} netns {node.netns}",
                      f"link set dev {nic.host_ifname} alias {alias}",
                      f"link set dev {nic.host_ifname} master {bridge} up"]
    return lines


def _node_lines(node):
    lines = ["link set dev lo up"]
    for nic in node.nics:
        lines += [f"link set dev {nic.ifname} up",
                  f"addr add {nic.address}/24 dev {nic.ifname}"]
    return lines


def _tbf(shape):
    """A token bucket for `shape.rate`.

    The bucket holds 4 ms of traffic, but at least one MTU-sized frame: large
    enough for TCP to reach the rate, small enough that bursts above it stay
    short.  Packets may wait up to TBF_LATENCY in the queue."""
    burst = max(shape.mtu + 64, shape.rate // 8 * 4 // 1000)
    return f"tbf rate {shape.rate}bit burst {burst} latency {TBF_LATENCY}"


def _count(n, thing):
    return f"{n} {thing}{'' if n == 1 else 's'}"
