"""score's Grafana dashboards (roles/score_monitoring/files/grafana/,
written by scripts/grafana_dashboards.py) are what the script writes, and
type-check against Grafana's own schema: @grafana/schema's dashboard model
with each panel's options narrowed to its plugin's schema, checked by tsc
(both pinned in tests/provisioning/grafana_schema/, installed into
build/grafana-schema by `make grafana-schema`).  Their queries run against
a live Prometheus in tests/packaging/test_cluster.py."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

GRAFANA = REPO_ROOT / "roles" / "score_monitoring" / "files" / "grafana"
DASHBOARDS = GRAFANA / "dashboards"
SCHEMA_SRC = REPO_ROOT / "tests" / "provisioning" / "grafana_schema"
SCHEMA_BUILD = REPO_ROOT / "build" / "grafana-schema"
GENERATOR = REPO_ROOT / "scripts" / "grafana_dashboards.py"


def test_the_dashboards_are_what_the_script_writes():
    proc = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in DASHBOARDS.glob("*.json"))
    assert names == ["score-cluster.json", "score-dsm.json", "score-gang.json", "score-jobs.json",
                     "score-node.json", "score-pm-network.json"], names


def type_check(tmp_path, dashboards):
    """tsc over `dashboards` ({name: JSON text}), each written as
    `<json> satisfies ScoreDashboard`; returns the CompletedProcess."""
    tsc = SCHEMA_BUILD / "node_modules" / ".bin" / "tsc"
    assert tsc.exists(), f"{tsc} is missing: run `make grafana-schema`"
    work = tmp_path / "check"
    work.mkdir()
    for f in ("score-dashboard.ts", "tsconfig.json"):
        shutil.copy(SCHEMA_SRC / f, work / f)
    (work / "node_modules").symlink_to(SCHEMA_BUILD / "node_modules")
    lines = ["import type { ScoreDashboard } from './score-dashboard';"]
    for i, (name, text) in enumerate(sorted(dashboards.items())):
        lines.append(f"// {name}\nexport const dashboard{i} = {text.strip()} satisfies ScoreDashboard;")
    (work / "check.ts").write_text("\n".join(lines) + "\n")
    return subprocess.run([str(tsc), "-p", str(work)], capture_output=True, text=True,
                          timeout=300)


def test_the_dashboards_type_check_against_grafanas_schema(tmp_path):
    proc = type_check(tmp_path, {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")})
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("mistake", ["enum", "type", "unknown key", "panel plugin"])
def test_the_type_check_refuses_a_wrong_dashboard(tmp_path, mistake):
    doc = json.loads((DASHBOARDS / "score-gang.json").read_text())
    stat = next(p for p in doc["panels"] if p["type"] == "stat")
    if mistake == "enum":
        stat["options"]["graphMode"] = "areas"
    elif mistake == "type":
        stat["gridPos"]["w"] = "4"
    elif mistake == "unknown key":
        stat["fieldConfig"]["defaults"]["units"] = "s"
    else:
        stat["type"] = "timeseries"          # its options are a stat's
    proc = type_check(tmp_path, {"wrong.json": json.dumps(doc)})
    assert proc.returncode != 0 and "error TS" in proc.stdout, proc.stdout + proc.stderr


def test_every_panel_queries_the_provisioned_data_source():
    datasource = (REPO_ROOT / "roles" / "score_monitoring" / "templates" / "grafana" /
                  "datasource.yaml.j2").read_text()
    assert "uid: score-prometheus" in datasource
    for path in DASHBOARDS.glob("*.json"):
        doc = json.loads(path.read_text())
        for panel in doc["panels"]:
            refs = [panel["datasource"]] + [t["datasource"] for t in panel["targets"]]
            assert all(r == {"type": "prometheus", "uid": "score-prometheus"} for r in refs), \
                (path.name, panel["title"])
            assert panel["targets"] and all(t["expr"] for t in panel["targets"])
        ids = [p["id"] for p in doc["panels"]]
        assert len(ids) == len(set(ids)), path.name


def generator():
    spec = importlib.util.spec_from_file_location("grafana_dashboards", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dsm_queries():
    """(panel, PromQL) of the DSM dashboard, variables set to every value."""
    return [(title, expr) for uid, title, expr in generator().panel_queries("1m")
            if uid == "score-dsm"]


def test_the_dsm_panels_read_what_libpmdsm_publishes():
    """The DSM publishes the fields of struct pmdsm_stats (dsm/include/
    pmdsm.h) under their names (layer dsm), which the agent exports as
    score_dsm_<field>_total, *_ns as *_seconds (docs/admin/monitoring.md):
    every score_dsm_ metric of the dashboards is one of those."""
    header = (REPO_ROOT / "dsm" / "include" / "pmdsm.h").read_text()
    body = re.search(r"struct pmdsm_stats \{(.*?)\};", header, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = re.findall(r"\b([a-z_0-9]+)\s*[,;]", body)
    assert "read_faults" in fields and "lock_ns" in fields, fields
    exported = {f"score_dsm_{f[:-3]}_seconds_total" if f.endswith("_ns")
                else f"score_dsm_{f}_total" for f in fields}
    used = {m for _, expr in dsm_queries() for m in re.findall(r"score_dsm_\w+", expr)}
    for path in DASHBOARDS.glob("*.json"):
        used |= set(re.findall(r"score_dsm_\w+", path.read_text()))
    assert used and used <= exported, sorted(used - exported)


def promql_test(tmp_path, series, cases):
    """promtool test rules evaluating `cases` ([(expr, [(labels, value)])])
    at 5m over `series` ([(series, values)]) scraped every 15 s."""
    doc = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "15s",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "promql_expr_test": [{"expr": expr, "eval_time": "5m",
                              "exp_samples": [{"labels": labels, "value": value}
                                              for labels, value in samples]}
                             for expr, samples in cases]}]}
    path = tmp_path / "dsm.test.yml"
    path.write_text(json.dumps(doc))  # YAML is a superset of JSON
    return subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool is not installed (prometheus)")
def test_the_dsm_panels_show_0_without_a_dsm_program(tmp_path):
    """No DSM program, no score_dsm_ series: every DSM panel's query still
    returns one number, 0 (what the cluster test, which runs PM jobs only,
    requires of every panel)."""
    series = [('score_pm_contexts{node="n1"}', "1x30")]
    proc = promql_test(tmp_path, series, [(expr, [("{}", 0)]) for _, expr in dsm_queries()])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool is not installed (prometheus)")
def test_the_dsm_panels_show_the_dsm_programs(tmp_path):
    """With DSM processes on n1 (1 read fault/s, 10 % of the time in
    faults) and n2 (2/s, 30 %), the panels show them, and no 0 beside."""
    def labels(node, rank):
        return f'{{node="{node}",job="5",rank="{rank}",device="composite"}}'
    series = []
    for node, rank, faults, seconds in [("n1", 0, 15, 1.5), ("n2", 1, 30, 4.5)]:
        series += [(f"score_dsm_read_faults_total{labels(node, rank)}", f"0+{faults}x30"),
                   (f"score_dsm_write_faults_total{labels(node, rank)}", "0+0x30"),
                   (f"score_dsm_fault_seconds_total{labels(node, rank)}", f"0+{seconds}x30")]
    queries = dict(dsm_queries())
    faults = [expr for title, expr in dsm_queries() if title == "Page faults"][0]
    time = [expr for title, expr in dsm_queries()
            if title == "Where DSM processes spend their time"][0]
    proc = promql_test(tmp_path, series, [
        (queries["DSM processes"], [("{}", 2)]),
        (queries["Faults per second"], [("{}", 3)]),
        (faults, [('{node="n1"}', 1), ('{node="n2"}', 2)]),
        (time, [("{}", 0.2)]),
    ])
    assert proc.returncode == 0, proc.stdout + proc.stderr
