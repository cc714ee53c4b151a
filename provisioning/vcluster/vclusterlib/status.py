"""`vcluster status`: what is up, and what runs in each node."""

import json

from . import holder, naming, procs, score, state, system, teardown
from .shape import format_rate

NOT_UP = 3  # exit status of `status --name NAME` for a cluster that is not up (as LSB)


def gather(name):
    """A JSON-ready report of cluster `name`, or None if it has no state file."""
    current = state.load(name)
    if current is None:
        return None
    layout = state.layout(current)
    report = dict(current)
    netns_of = {}
    nodes = []
    for entry, node in zip(current["nodes"], layout.nodes):
        pid = entry.get("holder_pid")
        running = holder.verify(pid, name, node.name, node.netns)
        ns = procs.netns_id(f"/run/netns/{node.netns}")
        if ns:
            netns_of[ns] = node.name
        nodes.append(dict(entry, running=running, processes=[]))
    by_name = {n["name"]: n for n in nodes}
    holder_pids = {n.get("holder_pid") for n in nodes}
    for pid, ns in sorted(procs.in_namespaces(set(netns_of)).items()):
        if pid not in holder_pids and procs.alive(pid):
            by_name[netns_of[ns]]["processes"].append({"pid": pid, "command": procs.cmdline(pid)})
    report["nodes"] = nodes
    report["healthy"] = all(n["running"] for n in nodes)
    if current.get("score"):
        munge_ok, scored_ok, problems = score.running(current)
        report["score"] = dict(current["score"], munge_running=munge_ok,
                               scored_running=scored_ok, not_running=problems,
                               env=score.environment(current))
    return report


def leftovers(known, only=None):
    """{name: summary} of clusters of which objects exist but no usable state file."""
    return {name: teardown.discover(name).summary() for name in teardown.all_clusters()
            if name not in known and only in (None, name)}


def show(name=None, as_json=False, out=print):
    """Print the status of one cluster or of all; return the exit status."""
    # Other users' /proc/PID/ns entries are unreadable: without root every
    # node would look dead, so refuse rather than report wrongly.
    system.require_root()
    if name:
        naming.validate_cluster_name(name)
    reports = [r for r in map(gather, [name] if name else state.names()) if r]
    extra = leftovers({r["name"] for r in reports}, only=name)
    if as_json:
        out(json.dumps({"clusters": reports,
                        "leftovers": [{"name": k, "objects": v} for k, v in sorted(extra.items())]},
                       indent=2))
    else:
        for report in reports:
            out(_render(report))
        for other, summary in sorted(extra.items()):
            out(f"cluster {other}: leftovers without a state file ({summary}); "
                f"remove them with 'vcluster down --name {other}'")
        if not reports and not extra:
            out(f"cluster {name} is not up" if name else "no virtual cluster is up")
    if name and not reports:
        return NOT_UP
    return 0


def _render(report):
    shape = report["shape"]
    lines = [f"cluster {report['name']}: {shape['nodes']} nodes × {shape['nics']} NICs, "
             f"rate {format_rate(shape['rate_bps'])}, MTU {shape['mtu']}, subnet {report['subnet']}, "
             f"up since {report['created']}"
             + ("" if report["healthy"] else "  [DAMAGED: some holders are gone]")]
    lines.append("  networks:")
    for net in report["networks"]:
        lines.append(f"    net{net['index']}  {net['subnet']:<16} host port {net['bridge']:<12} "
                     f"{net['host_address']}")
    lines.append("  nodes:")
    for node in report["nodes"]:
        state_word = f"holder {node['holder_pid']}" if node["running"] else "NOT RUNNING"
        nics = "  ".join(f"{nic['ifname']} {nic['address']}" for nic in node["nics"])
        lines.append(f"    {node['name']:<4} {state_word:<14} {nics}")
        for p in node["processes"]:
            lines.append(f"         {p['pid']:>7}  {p['command']}")
    svc = report.get("score")
    if svc:
        lines.append("  services:" + ("" if not svc["not_running"] else
                                      "  [NOT RUNNING: " + ", ".join(svc["not_running"]) + "]"))
        lines.append(f"    munged   {len(svc.get('munged') or {})} daemons, key {svc.get('key')}")
        scored = svc.get("scored")
        if scored:
            lines.append(f"    scored   master {scored['master']} at {scored['url']}, "
                         f"{len(scored['agents'])} agents, binaries {scored['bin']}")
        for key, value in svc["env"].items():
            lines.append(f"    export {key}={value}")
    return "\n".join(lines)

