"""provisioning/vcluster.yml brings the cluster up and down idempotently and
passes ansible-lint's production profile."""

import os
import re
import shutil
import subprocess

import pytest

from .checks import leftovers
from conftest import REPO_ROOT

PLAYBOOK = REPO_ROOT / "provisioning" / "vcluster.yml"
ENV = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false",
           ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_RETRY_FILES_ENABLED="false")


def playbook(*extra_vars):
    """Run the playbook; return (exit status, {'changed': N, 'failed': N, ...}, output)."""
    argv = ["ansible-playbook", str(PLAYBOOK)]
    for var in extra_vars:
        argv += ["-e", var]
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=180)
    recap = dict((k, int(v)) for k, v in re.findall(r"\b(ok|changed|failed|skipped)=(\d+)", proc.stdout))
    return proc.returncode, recap, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                    reason="ansible-playbook is not installed (ansible-core, scripts/install-deps.sh)")
def test_playbook_is_idempotent_both_ways(cluster_name, vcluster_cli):
    shape = [f"vcluster_name={cluster_name}", "vcluster_nodes=3", "vcluster_nics=2",
             "vcluster_rate=1gbit", "vcluster_mtu=9000"]
    rc, recap, out = playbook(*shape)
    assert rc == 0 and recap["changed"] == 1, out
    status = vcluster_cli("status", "--name", cluster_name, "--json")
    assert status.returncode == 0, status.stderr
    assert '"rate": "1gbit"' in status.stdout and '"mtu": 9000' in status.stdout

    rc, recap, out = playbook(*shape)
    assert rc == 0 and recap["changed"] == 0, out

    rc, recap, out = playbook(f"vcluster_name={cluster_name}", "vcluster_nodes=4")
    assert rc != 0 and recap["failed"] == 1, out
    assert "is up with 3 nodes × 2 NICs" in out

    rc, recap, out = playbook(f"vcluster_name={cluster_name}", "vcluster_state=absent")
    assert rc == 0 and recap["changed"] == 1, out
    assert leftovers(cluster_name) == []

    rc, recap, out = playbook(f"vcluster_name={cluster_name}", "vcluster_state=absent")
    assert rc == 0 and recap["changed"] == 0, out


@pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                    reason="ansible-playbook is not installed (ansible-core, scripts/install-deps.sh)")
def test_playbook_rejects_an_unknown_state(require_root):
    rc, recap, out = playbook("vcluster_state=gone")
    assert rc != 0 and recap["failed"] == 1
    assert "vcluster_state must be present or absent, not 'gone'" in out


@pytest.mark.skipif(shutil.which("ansible-lint") is None,
                    reason="ansible-lint is not installed (scripts/install-deps.sh)")
def test_playbook_passes_ansible_lint_production_profile():
    proc = subprocess.run(["ansible-lint", "--nocolor", "--profile", "production", str(PLAYBOOK)],
                          cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
