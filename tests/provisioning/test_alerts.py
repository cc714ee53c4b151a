"""score's alert rules (roles/score_monitoring/files/alerts.yml) are valid and
each behaves as its test in alerts.test.yml says: fires when it should, not
before its `for:`, and stays quiet when all is well (promtool test rules)."""

import subprocess

from conftest import REPO_ROOT

FILES = REPO_ROOT / "roles" / "score_monitoring" / "files"


def test_the_alert_rules_are_valid():
    proc = subprocess.run(["promtool", "check", "rules", str(FILES / "alerts.yml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 rules found" in proc.stdout + proc.stderr


def test_every_alert_rule_passes_its_test():
    proc = subprocess.run(["promtool", "test", "rules", "alerts.test.yml"], cwd=FILES,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tested = (FILES / "alerts.test.yml").read_text()
    rules = [line.split(":", 1)[1].strip() for line in (FILES / "alerts.yml").read_text().splitlines()
             if line.strip().startswith("- alert:")]
    for rule in rules:
        assert f"alertname: {rule}" in tested, f"{rule} has no test"
