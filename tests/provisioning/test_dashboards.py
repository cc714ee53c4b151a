"""score's Grafana dashboards (roles/score_monitoring/files/grafana/,
written by scripts/grafana_dashboards.py) are what the script writes, and
type-check against Grafana's own schema: @grafana/schema's dashboard model
with each panel's options narrowed to its plugin's schema, checked by tsc
(both pinned in tests/provisioning/grafana_schema/, installed into
build/grafana-schema by `make grafana-schema`).  Their queries run against
a live Prometheus in tests/packaging/test_cluster.py."""

import json
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
    assert names == ["score-cluster.json", "score-gang.json", "score-jobs.json",
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
