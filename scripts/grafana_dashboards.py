#!/usr/bin/env python3
"""Grafana dashboards of a score cluster, written as Grafana's JSON model.

The dashboards are defined here once; this script writes them to
roles/score_monitoring/files/grafana/dashboards/*.json, which the role
score_monitoring installs for Grafana's file provisioning
(docs/admin/monitoring.md).

    scripts/grafana_dashboards.py            write the JSON files
    scripts/grafana_dashboards.py --check    exit 1 if a file differs from
                                             what this script writes

Every query is checked twice by the tests (tests/provisioning/test_dashboards.py, tests/packaging/test_cluster.py): the JSON is
type-checked against Grafana's own schema (@grafana/schema, with tsc), and
each panel's query is run against a Prometheus scraping a live cluster that
runs jobs, and must return data.
"""

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "roles" / "score_monitoring" / "files" / "grafana" / "dashboards"
# The data source the role provisions (files/grafana/provisioning/datasources).
DATASOURCE = {"type": "prometheus", "uid": "score-prometheus"}
SCHEMA_VERSION = 41
GRID_WIDTH = 24
RATE = "$__rate_interval"


def query(expr, legend="", ref="A"):
    return {"refId": ref, "datasource": DATASOURCE, "expr": expr,
            "legendFormat": legend or "__auto", "range": True, "instant": False}


def field_defaults(unit, thresholds=None):
    steps = [{"color": "green", "value": None}]
    for value, color in thresholds or []:
        steps.append({"color": color, "value": value})
    return {"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
            "overrides": []}


def stat(title, expr, unit="none", thresholds=None, description=""):
    return {"type": "stat", "title": title, "description": description,
            "datasource": DATASOURCE, "targets": [query(expr)],
            "fieldConfig": field_defaults(unit, thresholds),
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "orientation": "auto", "textMode": "auto", "colorMode": "value",
                        "graphMode": "area", "justifyMode": "auto", "wideLayout": True,
                        "showPercentChange": False, "percentChangeColorMode": "standard"},
            "_size": (4, 4)}


def timeseries(title, targets, unit="none", description="", stacked=False, width=12):
    targets = [query(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)]
    fields = field_defaults(unit)
    fields["defaults"]["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                                    "showPoints": "never",
                                    "stacking": {"mode": "normal" if stacked else "none",
                                                 "group": "A"}}
    return {"type": "timeseries", "title": title, "description": description,
            "datasource": DATASOURCE, "targets": targets, "fieldConfig": fields,
            "options": {"legend": {"showLegend": True, "displayMode": "list",
                                   "placement": "bottom", "calcs": []},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "_size": (width, 8)}


def bargauge(title, expr, legend, unit="none", description=""):
    return {"type": "bargauge", "title": title, "description": description,
            "datasource": DATASOURCE, "targets": [query(expr, legend)],
            "fieldConfig": field_defaults(unit),
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "orientation": "horizontal", "displayMode": "gradient",
                        "valueMode": "color", "namePlacement": "auto", "showUnfilled": True,
                        "sizing": "auto", "minVizWidth": 8, "minVizHeight": 16,
                        "maxVizHeight": 300,
                        "legend": {"showLegend": False, "displayMode": "list",
                                   "placement": "bottom", "calcs": []}},
            "_size": (12, 8)}


def layout(panels):
    """gridPos for panels in reading order: left to right, wrapping rows."""
    x = y = row_height = 0
    for i, p in enumerate(panels, 1):
        w, h = p.pop("_size")
        if x + w > GRID_WIDTH:
            x, y, row_height = 0, y + row_height, 0
        p["id"] = i
        p["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
        x += w
        row_height = max(row_height, h)
    return panels


def label_variable(name, label, metric, label_name):
    """A multi-value variable of the values of one label of a metric."""
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": f"label_values({metric}, {label_name})", "refId": "variable"},
            "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"text": ["All"], "value": ["$__all"]}, "sort": 1, "hide": 0}


def dashboard(uid, title, description, panels, variables=()):
    return {"uid": uid, "title": title, "description": description,
            "tags": ["score"], "editable": False, "graphTooltip": 1,
            "schemaVersion": SCHEMA_VERSION, "version": 1, "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"}, "timezone": "browser",
            "annotations": {"list": []}, "links": [
                {"type": "dashboards", "tags": ["score"], "asDropdown": True,
                 "title": "score", "icon": "external link", "includeVars": False,
                 "keepTime": True, "targetBlank": False, "tooltip": "", "url": ""}],
            "templating": {"list": list(variables)},
            "panels": layout(panels)}


def cluster_overview():
    return dashboard("score-cluster", "score / Cluster overview",
                     "Nodes, jobs and load of the whole cluster.", [
        stat("Nodes up", 'sum(score_nodes{state="up"})',
             description="Nodes whose scored agent the master sees."),
        stat("Nodes down", 'sum(score_nodes{state="down"})', thresholds=[(1, "red")],
             description="Nodes the master has given up; their jobs failed."),
        stat("Nodes drained", 'sum(score_nodes{state="drained"})', thresholds=[(1, "orange")],
             description="Nodes taken out of scheduling by scorectl drain."),
        stat("Exporters down", 'count(up{job="node"} == 0) or vector(0)',
             thresholds=[(1, "red")], description="node_exporters Prometheus cannot scrape."),
        stat("Jobs running", 'sum(score_jobs{state="running"})'),
        stat("Jobs pending", 'sum(score_jobs{state="pending"})', thresholds=[(1, "orange")]),
        timeseries("Jobs by state", [("sum by (state) (score_jobs)", "{{state}}")],
                   stacked=True),
        timeseries("Load (1 min) per node", [("node_load1", "{{instance}}")]),
        timeseries("CPU busy per node",
                   [(f'1 - avg by (instance) (rate(node_cpu_seconds_total{{mode="idle"}}[{RATE}]))',
                     "{{instance}}")], unit="percentunit"),
        timeseries("Memory used per node",
                   [("node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes",
                     "{{instance}}")], unit="bytes"),
    ])


def node_detail():
    sel = 'instance=~"$instance"'
    return dashboard("score-node", "score / Node detail",
                     "One node as node_exporter sees it.", [
        timeseries("CPU by mode",
                   [(f'sum by (mode) (rate(node_cpu_seconds_total{{{sel},mode!="idle"}}[{RATE}]))',
                     "{{mode}}")], unit="short", stacked=True),
        timeseries("Load", [(f"node_load1{{{sel}}}", "1 min {{instance}}"),
                            (f"node_load5{{{sel}}}", "5 min {{instance}}"),
                            (f"node_load15{{{sel}}}", "15 min {{instance}}")]),
        timeseries("Memory",
                   [(f"node_memory_MemTotal_bytes{{{sel}}} - node_memory_MemAvailable_bytes{{{sel}}}",
                     "used {{instance}}"),
                    (f"node_memory_MemAvailable_bytes{{{sel}}}", "available {{instance}}")],
                   unit="bytes"),
        timeseries("Network received per NIC",
                   [(f'rate(node_network_receive_bytes_total{{{sel},device!="lo"}}[{RATE}])',
                     "{{instance}} {{device}}")], unit="Bps"),
        timeseries("Network sent per NIC",
                   [(f'rate(node_network_transmit_bytes_total{{{sel},device!="lo"}}[{RATE}])',
                     "{{instance}} {{device}}")], unit="Bps"),
        timeseries("Network errors and drops",
                   [(f'rate(node_network_receive_drop_total{{{sel},device!="lo"}}[{RATE}])'
                     f' + rate(node_network_receive_errs_total{{{sel},device!="lo"}}[{RATE}])',
                     "{{instance}} {{device}}")], unit="pps"),
        timeseries("Processes", [(f"node_procs_running{{{sel}}}", "running {{instance}}"),
                                 (f"node_procs_blocked{{{sel}}}", "blocked {{instance}}")]),
        timeseries("Context switches",
                   [(f"rate(node_context_switches_total{{{sel}}}[{RATE}])", "{{instance}}")],
                   unit="ops"),
    ], [label_variable("instance", "Node", "node_uname_info", "instance")])


def pm_network():
    sel = 'node=~"$node"'
    nic = 'device!="lo"'

    def per_node(metric):
        return f"sum by (node) (rate({metric}{{{sel}}}[{RATE}]))"
    return dashboard("score-pm", "score / PM network",
                     "PM's traffic, its trunked NICs and its reliability protocol.", [
        timeseries("PM payload sent per node", [(per_node("score_pm_sent_bytes_total"), "{{node}}")],
                   unit="Bps"),
        timeseries("PM payload received per node",
                   [(per_node("score_pm_received_bytes_total"), "{{node}}")], unit="Bps"),
        timeseries("Bytes sent per NIC (all traffic)",
                   [(f"sum by (instance, device) (rate(node_network_transmit_bytes_total{{{nic}}}[{RATE}]))",
                     "{{instance}} {{device}}")], unit="Bps",
                   description="PM stripes its traffic over the NICs of pm.conf; other traffic counts too."),
        timeseries("Trunk balance: share of each NIC",
                   [(f"sum by (instance, device) (rate(node_network_transmit_bytes_total{{{nic}}}[{RATE}]))"
                     f" / ignoring(device) group_left"
                     f" sum by (instance) (rate(node_network_transmit_bytes_total{{{nic}}}[{RATE}]))",
                     "{{instance}} {{device}}")], unit="percentunit",
                   description="Equal shares mean the trunk is balanced."),
        timeseries("PM messages per second",
                   [(per_node("score_pm_messages_sent_total"), "sent {{node}}"),
                    (per_node("score_pm_messages_received_total"), "received {{node}}")],
                   unit="ops"),
        timeseries("Retransmissions",
                   [(per_node("score_pm_retransmits_total"), "resent {{node}}"),
                    (per_node("score_pm_duplicates_total"), "duplicates {{node}}"),
                    (per_node("score_pm_rto_polls_total"), "timeout polls {{node}}")],
                   unit="pps", description="Network preemption drains before it freezes: "
                                           "a switch should cause none."),
        timeseries("Flow control: STOP, GO, LOSE",
                   [(per_node("score_pm_stops_total"), "STOP {{node}}"),
                    (per_node("score_pm_gos_total"), "GO {{node}}"),
                    (per_node("score_pm_loses_total"), "LOSE {{node}}"),
                    (per_node("score_pm_refused_resends_total"), "resent after STOP {{node}}")],
                   unit="pps"),
        timeseries("Bad packets dropped",
                   [(per_node("score_pm_drops_total"), "{{node}}")], unit="pps",
                   description="Malformed, foreign or unauthenticated packets PM dropped."),
        timeseries("Remote memory", [(per_node("score_pm_rma_bytes_total"), "{{node}}")],
                   unit="Bps"),
        timeseries("Open PM contexts", [(f"sum by (node) (score_pm_contexts{{{sel}}})", "{{node}}")]),
    ], [label_variable("node", "Node", "score_pm_contexts", "node")])


def dsm():
    """libpmdsm's counters, which its contexts publish in PM's statistics
    page (layer dsm) and the agents export as score_dsm_*_total.  They
    exist only while a DSM program runs: every query ends in
    `or on() vector(0)`, so that a panel shows 0 rather than "No data"
    when none does (and the cluster test, which runs no DSM job, gets a
    number)."""
    sel = 'node=~"$node"'
    none = " or on() vector(0)"

    def metric(counter):
        return f"score_dsm_{counter}_total{{{sel}}}"

    def per_node(counter):
        return f"sum by (node) (rate({metric(counter)}[{RATE}])){none}"

    def share(counter):
        return f"avg(rate({metric(counter)}[{RATE}])){none}"
    return dashboard("score-dsm", "score / DSM",
                     "The distributed shared memory (libpmdsm): faults, pages and diffs moved, "
                     "synchronization, and where its processes spend their time. "
                     "Empty (0) while no DSM program runs.", [
        stat("DSM processes", f"count({metric('read_faults')}){none}",
             description="Processes whose PM context publishes the DSM's counters."),
        stat("Faults per second",
             f"sum(rate({metric('read_faults')}[{RATE}])) + sum(rate({metric('write_faults')}[{RATE}])){none}",
             unit="ops"),
        stat("Fetched from homes", f"sum(rate({metric('fetch_bytes')}[{RATE}])){none}", unit="Bps"),
        stat("Diffs to homes", f"sum(rate({metric('diff_bytes')}[{RATE}])){none}", unit="Bps"),
        stat("Time in barriers", share("barrier_seconds"), unit="percentunit",
             description="Average share of a DSM process's time spent in barriers."),
        stat("Messages dropped (1 h)", f"sum(increase({metric('dropped')}[1h])){none}",
             thresholds=[(1, "red")],
             description="DSM messages dropped as malformed or not for their rank."),
        timeseries("Page faults", [(per_node("read_faults"), "read {{node}}"),
                                   (per_node("write_faults"), "write {{node}}")], unit="ops",
                   description="Read: an invalid page, fetched from its home. "
                               "Write: a page's first write since a release."),
        timeseries("DSM traffic", [(per_node("fetch_bytes"), "pages fetched {{node}}"),
                                   (per_node("diff_bytes"), "diffs sent {{node}}")], unit="Bps",
                   description="Whole pages fetched from their homes, and the diffs sent to them."),
        timeseries("Pages and diffs", [(per_node("pages_fetched"), "pages fetched {{node}}"),
                                       (per_node("read_ahead_pages"), "of them read ahead {{node}}"),
                                       (per_node("prefetched_pages"),
                                        "of them prefetched at barriers {{node}}"),
                                       (per_node("prefetch_opened"),
                                        "prefetched, opened as they landed {{node}}"),
                                       (per_node("prefetch_used"),
                                        "prefetched closed and read {{node}}"),
                                       (per_node("prefetch_overlapped"),
                                        "prefetched, left in flight {{node}}"),
                                       (per_node("prefetch_waits"),
                                        "waited for in flight {{node}}"),
                                       (per_node("pushed_pages"),
                                        "pushed to neighbours {{node}}"),
                                       (per_node("push_taken"),
                                        "taken from pushes {{node}}"),
                                       (per_node("diffs_sent"), "diffs sent {{node}}"),
                                       (per_node("diffs_applied"), "diffs applied {{node}}")],
                   unit="ops", description="Read ahead: pages fetched beside a faulted one "
                                           "(PMDSM_READ_AHEAD), part of the pages fetched. "
                                           "Prefetched: pages a barrier dropped, fetched again "
                                           "(PMDSM_PREFETCH), those opened as they landed, and "
                                           "of those left closed (one barrier in 8) the ones "
                                           "read since; "
                                           "left in flight: those whose read the barrier did not "
                                           "wait for (PMDSM_PREFETCH_MODE=overlap), and the "
                                           "accesses that waited for one. "
                                           "Pushed: pages homed on the node sent to the peers "
                                           "of a barrier of a few that read them; taken: pushed "
                                           "pages used instead of a fetch. "
                                           "Diffs applied: diffs other ranks sent to pages homed "
                                           "on this node."),
        timeseries("Coherence work", [(per_node("twins"), "twins {{node}}"),
                                      (per_node("invalidations"), "invalidations {{node}}"),
                                      (per_node("wp_scans"), "PAGEMAP_SCAN {{node}}"),
                                      (per_node("home_shared"),
                                       "home pages first copied elsewhere {{node}}"),
                                      (per_node("cold_pages"), "pages gone cold {{node}}"),
                                      (per_node("cold_writes"), "cold pages written {{node}}"),
                                      (per_node("home_asks"), "first-touch questions {{node}}")],
                   unit="ops", description="Twins: copies of pages before a write. Invalidations: "
                                           "cached pages dropped at an acquire. PAGEMAP_SCAN: "
                                           "write detection uffd-async. Home pages first copied "
                                           "elsewhere: pages homed on the node whose writes "
                                           "began to be watched. Gone cold: pages left "
                                           "unwritten for 8 to 16 releases, taken out of "
                                           "uffd-async's scans until written again. First-touch "
                                           "questions: round trips to the manager of a "
                                           "PMDSM_FIRST_TOUCH page."),
        timeseries("Synchronization", [(per_node("barriers"), "barriers {{node}}"),
                                       (per_node("locks"), "locks {{node}}"),
                                       (per_node("lock_remote"), "locks managed elsewhere {{node}}")],
                   unit="ops"),
        timeseries("Where DSM processes spend their time",
                   [(share("fault_seconds"), "faults"), (share("fetch_seconds"), "fetches"),
                    (share("release_seconds"), "releases"), (share("barrier_seconds"), "barriers"),
                    (share("lock_seconds"), "locks")], unit="percentunit",
                   description="Average share of a process's time in each. Fetches are part of "
                               "faults, releases part of barriers: the lines do not add up."),
        timeseries("Messages dropped", [(per_node("dropped"), "{{node}}")], unit="ops",
                   description="Malformed, or not for their rank."),
    ], [label_variable("node", "Node", "score_pm_contexts", "node")])


def quantile(q, metric):
    return f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket[{RATE}])))"


def gang_scheduling():
    return dashboard("score-gang", "score / Gang scheduling",
                     "scored's matrix: time slots, switches and network preemption.", [
        stat("Slots in use", "score_gang_slots",
             description="Rows (time slots) of the gang-scheduling matrix in use."),
        stat("Switches per minute", "sum(rate(score_gang_switches_total[5m])) * 60"),
        stat("Switch time p99", quantile(0.99, "score_gang_switch_seconds"), unit="s",
             thresholds=[(0.1, "orange")]),
        stat("Unanswered processes (1 h)",
             "sum(increase(score_gang_unanswered_processes_total[1h]))",
             thresholds=[(1, "orange")],
             description="Processes frozen without answering the quiesce request in time."),
        timeseries("Matrix occupancy", [("score_gang_slots", "slots"),
                                        ('sum(score_jobs{state="running"})', "running jobs")]),
        timeseries("Switches per second", [("rate(score_gang_switches_total[$__rate_interval])",
                                            "switches")], unit="ops"),
        timeseries("Switch time", [(quantile(0.5, "score_gang_switch_seconds"), "p50"),
                                   (quantile(0.99, "score_gang_switch_seconds"), "p99")],
                   unit="s", description="From the preempt request to every node frozen and thawed."),
        timeseries("Quiesce time", [(quantile(0.5, "score_gang_quiesce_seconds"), "p50"),
                                    (quantile(0.99, "score_gang_quiesce_seconds"), "p99")],
                   unit="s", description="Longest time a node's PM contexts took to quiesce."),
        timeseries("PM quiesces per node",
                   [(f"sum by (node) (rate(score_pm_quiesces_total[{RATE}]))", "{{node}}")],
                   unit="ops"),
        timeseries("Unanswered processes",
                   [(f"increase(score_gang_unanswered_processes_total[{RATE}])", "unanswered")]),
    ])


def jobs():
    return dashboard("score-jobs", "score / Jobs",
                     "The queue, launches and how jobs end.", [
        stat("Pending", 'sum(score_jobs{state="pending"})'),
        stat("Launching", 'sum(score_jobs{state="launching"})', thresholds=[(1, "orange")]),
        stat("Running", 'sum(score_jobs{state="running"})'),
        stat("Submitted (1 h)", "sum(increase(score_jobs_submitted_total[1h]))"),
        timeseries("Queue", [("sum by (state) (score_jobs)", "{{state}}")], stacked=True),
        timeseries("Launch time", [(quantile(0.5, "score_job_launch_seconds"), "p50"),
                                   (quantile(0.95, "score_job_launch_seconds"), "p95")],
                   unit="s", description="From launch to every node reporting its processes started."),
        timeseries("Queue wait", [(quantile(0.5, "score_job_queue_wait_seconds"), "p50"),
                                  (quantile(0.95, "score_job_queue_wait_seconds"), "p95")],
                   unit="s"),
        bargauge("Exit states (1 h)", "sum by (state) (increase(score_jobs_finished_total[1h]))",
                 "{{state}}"),
        timeseries("Processes per node", [("score_agent_processes", "{{node}}")]),
        timeseries("Output held by the master",
                   [("score_stdio_buffered_bytes", "{{direction}}"),
                    ("score_stdio_throttled_jobs", "throttled jobs {{direction}}")], unit="bytes"),
    ])


DASHBOARDS = {"cluster": cluster_overview, "node": node_detail, "pm-network": pm_network,
              "gang": gang_scheduling, "jobs": jobs, "dsm": dsm}


def panel_queries(rate_interval="1m"):
    """(dashboard uid, panel title, PromQL) of every panel's query, with
    Grafana's variables replaced as Grafana would with every value
    selected: what the live check runs against Prometheus."""
    for build in DASHBOARDS.values():
        d = build()
        names = [v["name"] for v in d["templating"]["list"]]
        for p in d["panels"]:
            for t in p["targets"]:
                expr = t["expr"].replace("$__rate_interval", rate_interval)
                for name in names:
                    expr = expr.replace(f"${name}", ".*")
                assert "$" not in expr, f"{d['uid']}/{p['title']}: a variable is left in {expr}"
                yield d["uid"], p["title"], expr


def render():
    return {f"score-{name}.json": json.dumps(build(), indent=2) + "\n"
            for name, build in DASHBOARDS.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a written file differs from what this script writes")
    parser.add_argument("--out", type=Path, default=OUT, help=f"directory (default {OUT})")
    args = parser.parse_args()
    files = render()
    if args.check:
        stale = [n for n, text in files.items()
                 if not (args.out / n).exists() or (args.out / n).read_text() != text]
        extra = sorted(p.name for p in args.out.glob("*.json") if p.name not in files)
        for n in stale + extra:
            print(f"grafana_dashboards: {args.out / n} is stale; run {sys.argv[0]}",
                  file=sys.stderr)
        return 1 if stale or extra else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        (args.out / n).write_text(text)
        print(f"wrote {args.out / n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
