"""Bad input fails with a non-zero exit status and a message that says what
is wrong; it never leaves anything behind."""

import subprocess

import pytest

from .checks import leftovers
from conftest import VCLUSTER


@pytest.fixture(autouse=True)
def _root(require_root):
    """Checks run in order (syntax, then root); as root every message below is reachable."""


@pytest.mark.parametrize("args, message", [
    (["--nodes", "0"], "--nodes must be between 1 and 64, not 0"),
    (["--nodes", "65"], "--nodes must be between 1 and 64, not 65"),
    (["--nodes", "two"], "not a whole number: 'two'"),
    (["--nodes", "2", "--nics", "0"], "--nics must be between 1 and 8, not 0"),
    (["--nodes", "2", "--nics", "9"], "--nics must be between 1 and 8, not 9"),
    (["--nodes", "2", "--rate", "fast"], "bad rate 'fast'"),
    (["--nodes", "2", "--rate", "100m"], "bad rate '100m'"),
    (["--nodes", "2", "--rate", "1bit"], "must lie between 8kbit and 400gbit"),
    (["--nodes", "2", "--mtu", "100"], "--mtu must be between 1280 and 65535, not 100"),
    (["--nodes", "2", "--subnet", "10.1.0.0/24"], "must be an IPv4 /16"),
])
def test_up_rejects_bad_arguments(vcluster_cli, cluster_name, args, message):
    proc = vcluster_cli("up", "--name", cluster_name, *args)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert proc.stderr.startswith("vcluster: error:") or "usage:" in proc.stderr
    assert leftovers(cluster_name) == []


@pytest.mark.parametrize("name", ["Bad", "bad-name", "1abc", "toolongname", "a_b", ""])
def test_up_rejects_bad_names(vcluster_cli, name):
    proc = vcluster_cli("up", "--name", name, "--nodes", "1")
    assert proc.returncode == 1
    assert f"invalid cluster name {name!r}" in proc.stderr
    assert "15 characters" in proc.stderr


def test_up_rejects_a_subnet_that_overlaps_a_host_route(vcluster_cli, cluster_name):
    # Every host has the local route 127.0.0.0/8 on lo.
    proc = vcluster_cli("up", "--name", cluster_name, "--nodes", "1", "--subnet", "127.0.0.0/16")
    assert proc.returncode == 1
    assert "subnet 127.0.0.0/16 overlaps host routes: local 127.0.0.0/8 dev lo table local" \
        in proc.stderr
    assert leftovers(cluster_name) == []


def test_up_of_a_different_shape_fails_and_keeps_the_cluster(vcluster, vcluster_cli):
    vc = vcluster(nodes=2, nics=1)
    proc = vcluster_cli("up", "--name", vc.name, "--nodes", "4", "--nics", "2")
    assert proc.returncode == 1
    assert (f"cluster {vc.name} is up with 2 nodes × 1 NIC (rate unlimited, MTU 1500)"
            in proc.stderr)
    assert f"run 'vcluster down --name {vc.name}' first" in proc.stderr
    assert vc.exec("n2", "hostname").stdout.strip() == "n2"


def test_exec_and_rsh_reject_an_unknown_node(vcluster, vcluster_cli):
    vc = vcluster(nodes=2)
    for target, args in (("n3", ["exec", "--name", vc.name, "n3", "--", "true"]),
                         ("host", ["exec", "--name", vc.name, "host", "--", "true"]),
                         ("n3", ["rsh", "--name", vc.name, "n3", "true"]),
                         ("10.1.2.3", ["rsh", "--name", vc.name, "-x", "10.1.2.3", "true"])):
        proc = vcluster_cli(*args)
        assert proc.returncode == 1, args
        assert f"no node '{target}' in cluster {vc.name}: it has nodes n1 to n2" in proc.stderr


def test_exec_in_a_cluster_that_is_not_up(vcluster_cli, cluster_name):
    proc = vcluster_cli("exec", "--name", cluster_name, "n1", "--", "true")
    assert proc.returncode == 1
    assert f"cluster {cluster_name} is not up" in proc.stderr


def test_exec_without_a_command(vcluster_cli, cluster_name):
    proc = vcluster_cli("exec", "--name", cluster_name, "n1")
    assert proc.returncode == 2
    assert "no command given" in proc.stderr


def test_rsh_rejects_unknown_options_and_missing_node(vcluster_cli):
    proc = vcluster_cli("rsh", "-Z", "n1", "true")
    assert proc.returncode == 1 and "unknown option -Z" in proc.stderr
    proc = vcluster_cli("rsh", "-x")
    assert proc.returncode == 1 and "no node given" in proc.stderr
    proc = vcluster_cli("rsh", "-l")
    assert proc.returncode == 1 and "option -l needs an argument" in proc.stderr


def test_commands_require_root(cluster_name):
    """Run as nobody: every command that touches the system refuses clearly."""
    for args in (["up", "--name", cluster_name, "--nodes", "1"],
                 ["down", "--name", cluster_name],
                 ["exec", "--name", cluster_name, "n1", "--", "true"],
                 ["rsh", "--name", cluster_name, "n1", "true"],
                 ["status"]):
        proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                               "/usr/bin/python3", str(VCLUSTER), *args],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 1, args
        assert "must be run as root" in proc.stderr, proc.stderr
