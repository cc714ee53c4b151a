"""exec and rsh behave like the commands they stand for: stdio, exit status,
environment and working directory pass through; rsh takes ssh's options and
runs its command words through a shell."""

import os
import subprocess

import pytest

from conftest import run_vcluster


@pytest.fixture(scope="module")
def vc(vcluster_module):
    """One cluster for the whole module: these tests do not change it."""
    return vcluster_module(nodes=2, nics=2)


def vexec(vc, *args, **kwargs):
    return run_vcluster("exec", "--name", vc.name, *args, **kwargs)


def rsh(vc, *args, **kwargs):
    kwargs.setdefault("env", vc.env)
    return run_vcluster("rsh", *args, **kwargs)


def test_exec_passes_the_exit_status(vc):
    assert vexec(vc, "n1", "--", "sh", "-c", "exit 7").returncode == 7
    assert vexec(vc, "n1", "--", "true").returncode == 0


def test_exec_passes_stdin_stdout_and_stderr(vc):
    proc = vexec(vc, "n2", "--", "sh", "-c", "tr a-z A-Z; echo oops >&2", input="hello\n")
    assert proc.returncode == 0
    assert proc.stdout == "HELLO\n"
    assert proc.stderr == "oops\n"


def test_exec_keeps_environment_and_working_directory(vc, tmp_path):
    env = dict(os.environ, SCORE_TEST_VALUE="forty two")
    proc = vexec(vc, "n1", "--", "sh", "-c", 'echo "$SCORE_TEST_VALUE"; pwd', env=env, cwd=tmp_path)
    assert proc.stdout.splitlines() == ["forty two", str(tmp_path)]


def test_exec_reports_a_missing_command(vc):
    proc = vexec(vc, "n1", "--", "no-such-command-here")
    assert proc.returncode == 127
    assert "no-such-command-here" in proc.stderr


def test_exec_accepts_node_names_and_addresses(vc):
    for target in ("n2", "n2-net1", f"n2.{vc.name}", f"n2-net1.{vc.name}", vc.address("n2", 1)):
        proc = vexec(vc, target, "--", "hostname")
        assert proc.stdout.strip() == "n2", f"{target}: {proc.stderr}"


def test_rsh_ignores_ssh_options_and_runs_a_shell_string(vc):
    proc = rsh(vc, "-x", "-o", "BatchMode=yes", "-l", "root", "-p22", "-nT", "n2",
               "echo $(hostname); exit 3")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "n2\n"


def test_rsh_joins_command_words_like_ssh(vc):
    proc = rsh(vc, "-x", "root@n1", "echo", "a", "  b", ";", "echo", "$((6*7))")
    assert proc.stdout.splitlines() == ["a b", "42"]


def test_rsh_passes_stdin(vc):
    proc = rsh(vc, "n1", "wc", "-l", input="1\n2\n3\n")
    assert proc.stdout.strip() == "3"


def test_rsh_with_name_option(vc):
    env = {k: v for k, v in os.environ.items() if k != "VCLUSTER_NAME"}
    proc = rsh(vc, "--name", vc.name, "-x", "n2-net1", "hostname", env=env)
    assert proc.stdout.strip() == "n2", proc.stderr


def test_processes_started_by_exec_run_inside_the_node(vc):
    inode = subprocess.run(["stat", "-L", "-c", "%i", f"/run/netns/{vc.netns('n1')}"],
                           capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    proc = vexec(vc, "n1", "--", "sh", "-c", "stat -L -c %i /proc/$$/ns/net")
    assert proc.stdout.strip() == inode
