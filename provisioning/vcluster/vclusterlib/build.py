"""`vcluster up`: create a cluster, or confirm that the same one is up.

Order of construction (each step is one or a few batched tool calls):

  1. in the root namespace, one `ip -batch`: the node namespaces and the
     switch namespace; per network, the host's port, a veth pair whose root
     end has the host's address and whose other end goes to the switch; one
     veth pair per node and network, its node end created directly inside
     the node's namespace, its other end moved to the switch;
  2. in the switch, one `ip -n NETNS -batch`: a bridge per network and its
     ports; br_netfilter off there (below);
     in every node, one `ip -n NETNS -batch`: loopback up, ethK up with its
     address;
  3. with --rate, a tbf qdisc on both ends of every veth (`tc -batch`), so each
     direction of each link is limited: the bridge's end (in the switch)
     shapes bridge-to-node traffic, the node end node-to-bridge traffic;
  4. host name tables (nodes and /etc/hosts);
  5. one holder process per node (UTS and mount namespaces), or, with
     --rootfs, the cluster's apt proxy and one booted Debian machine per
     node (aptproxy.py, machines.py);
  6. the state file, written last: a state file means a complete cluster.

Any failure, or ^C, rolls back by running the ordinary teardown, which finds
whatever was made by name.

The switch.  The bridges live in a namespace of their own, not in the
host's, so that the host's br_netfilter, when loaded with
net.bridge.bridge-nf-call-iptables=1 (the kernel's default, and what
container runtimes ask for), does not pass every IPv4 frame between two
nodes through the host's netfilter hooks: no switch does, and it costs each
frame of PM's udp device and of TCP some of a microsecond, which PM's eth
frames (an EtherType of their own) never pay.  br_netfilter's settings are
per namespace; the switch's are turned off.
"""

import contextlib
import datetime
import ipaddress
import os
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
    n_links = (len(layout.nodes) + 1) * len(layout.networks)
    log.step(f"creating {_count(len(layout.nodes), 'node namespace')} and the switch's, "
             f"{_count(len(layout.networks), 'bridge')}, {_count(n_links, 'veth pair')}")
    system.batch("ip", _root_lines(layout))
    switch = layout.switch_netns
    log.step("configuring the switch and the node interfaces")
    system.batches("ip", [(switch, _switch_lines(layout))]
                   + [(node.netns, _node_lines(node)) for node in layout.nodes])
    _bridge_netfilter_off(switch)
    if shape.rate is not None:
        log.step(f"limiting every link to {format_rate(shape.rate)} in each direction (tc tbf)")
        qdisc = _tbf(shape)
        system.batches("tc", [(switch, [f"qdisc add dev {nic.host_ifname} root {qdisc}"
                                        for node in layout.nodes for nic in node.nics])]
                       + [(node.netns, [f"qdisc add dev {nic.ifname} root {qdisc}" for nic in node.nics])
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
    mtu, alias, switch = layout.shape.mtu, naming.link_alias(layout.name), layout.switch_netns
    lines = [f"netns add {node.netns}" for node in layout.nodes] + [f"netns add {switch}"]
    for net in layout.networks:
        lines += [f"link add name {net.bridge} mtu {mtu} type veth "
                  f"peer name {naming.switch_uplink_name(net.index)} mtu {mtu} netns {switch}",
                  f"link set dev {net.bridge} alias {alias}",
                  f"addr add {net.host_address}/{net.subnet.prefixlen} dev {net.bridge}",
                  f"link set dev {net.bridge} up"]
    for node in layout.nodes:
        for nic in node.nics:
            # Made here, where a name already taken fails the way it always
            # did, then moved to the switch.
            lines += [f"link add name {nic.host_ifname} mtu {mtu} type veth "
                      f"peer name {nic.ifname} mtu {mtu} netns {node.netns}",
                      f"link set dev {nic.host_ifname} alias {alias}",
                      f"link set dev {nic.host_ifname} netns {switch}"]
    return lines


def _switch_lines(layout):
    mtu = layout.shape.mtu
    lines = ["link set dev lo up"]
    for net in layout.networks:
        bridge = naming.switch_bridge_name(net.index)
        lines += [f"link add name {bridge} mtu {mtu} type bridge",
                  f"link set dev {bridge} up",
                  f"link set dev {naming.switch_uplink_name(net.index)} master {bridge} up"]
    for node in layout.nodes:
        for nic in node.nics:
            lines.append(f"link set dev {nic.host_ifname} "
                         f"master {naming.switch_bridge_name(nic.network)} up")
    return lines


def _bridge_netfilter_off(switch):
    """br_netfilter's hooks off for the switch's bridges (module docstring,
    "The switch").  Without the module there are none: nothing to do."""
    names = [f"net.bridge.bridge-nf-call-{t}=0" for t in ("iptables", "ip6tables", "arptables")]
    if os.path.isdir("/proc/sys/net/bridge"):
        system.run(["ip", "netns", "exec", switch, "sysctl", "-q", "-w", *names])


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
