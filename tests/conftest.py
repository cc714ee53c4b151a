"""Fixtures shared by the integration tests of score.

The central one is `vcluster`, a factory that brings up a virtual cluster
(provisioning/vcluster/vcluster) for one test and always takes it down again,
pass or fail:

    def test_ping(vcluster):
        vc = vcluster(nodes=2, nics=2, rate="1gbit")
        vc.exec("n1", "ping", "-c1", "-W1", vc.address("n2", net=1), check=True)

With `vcluster(nodes=2, with_score=True)` the cluster also runs munged on
every node and scored (master on the host, an agent per node), from
`score_bin` (default: build/bin, else PATH); `with_munge=True` starts munged
only; `with_slurm=True` adds slurmctld and a slurmd per node (`vc.slurm_env()`
holds SLURM_CONF).  `vc.score_env()` is the environment for scrun/scorectl on the host.

Every cluster gets a unique name (t<pid><counter>), so tests never touch a
cluster somebody else has up, and every process a test starts with
`vc.popen()` is killed by PID before the cluster goes down.  The tests need
root; without it they are skipped with that reason.
"""

import itertools
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
VCLUSTER_DIR = REPO_ROOT / "provisioning" / "vcluster"
VCLUSTER = VCLUSTER_DIR / "vcluster"
# vcluster's library (vclusterlib): its process helpers serve the tests too.
sys.path.insert(0, str(VCLUSTER_DIR))

# Bounds for every command a test runs; a hung tool fails the test, never the suite.
COMMAND_TIMEOUT = 60

_names = itertools.count()


# The directories whose tests do not wait on message latency (Ansible, apt,
# the virtual cluster's own lifecycle), run first and in this order; the
# others follow as collected.  While they run, the runner's builds at the
# idle priority (scripts/idle_job.py, SCORE_IDLE_JOBS) and the packages'
# build (tests/packaging/conftest.py) take the CPU they leave unused; the
# first test of another directory stops the runner's builds, whose cache
# footprint would slow every message of MPI, PM and the DSM.
UNHURRIED = ("provisioning", "vcluster", "packaging")


def _test_dir(item):
    parts = item.path.relative_to(REPO_ROOT / "tests").parts
    return parts[0] if len(parts) > 1 else ""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "long: a matrix that would not fit make test's half hour (the mpi4py "
        "suite in every shape of issue 12); make test-long runs these, make test leaves "
        "them out (-m 'not long') and runs one shape of each")


def pytest_collection_modifyitems(session, config, items):
    rank = {d: i for i, d in enumerate(UNHURRIED)}
    items.sort(key=lambda item: rank.get(_test_dir(item), len(UNHURRIED)))


_idle_jobs_stopped = False


def pytest_runtest_setup(item):
    global _idle_jobs_stopped
    if _idle_jobs_stopped or _test_dir(item) in UNHURRIED:
        return
    _idle_jobs_stopped = True
    for pgid in filter(None, os.environ.get("SCORE_IDLE_JOBS", "").split(",")):
        try:
            os.killpg(int(pgid), signal.SIGSTOP)
        except ProcessLookupError:
            pass  # finished already


def pytest_sessionstart(session):
    """Take down the clusters of earlier runs that were killed before they
    could (SIGKILL, the machine's session ended): clusters named as these
    tests name them (t<pid><counter>) with no live holder process left.  A
    concurrent run's clusters have live holders and stay."""
    if os.geteuid() != 0:
        return
    from vclusterlib import holder, state

    for name in state.names():
        current = state.load(name)
        if not re.fullmatch(r"t\d{5,}", name) or current is None or holder.live_nodes(current):
            continue
        proc = run_vcluster("down", "--name", name)
        print(f"took down cluster {name}, left by a killed run: exit {proc.returncode}",
              file=sys.stderr)


def run_vcluster(*args, timeout=COMMAND_TIMEOUT, input=None, env=None, cwd=None):
    """Run the vcluster tool; return the CompletedProcess (text, output captured)."""
    return subprocess.run([str(VCLUSTER), *map(str, args)], input=input, env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def unique_cluster_name():
    """A cluster name no other test (nor a concurrent run) uses: t + pid + counter."""
    return f"t{os.getpid() % 10000:04d}{next(_names)}"


def kill_by_pid(proc, timeout=5):
    """End a Popen'd process (SIGTERM, then SIGKILL) and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


class VirtualCluster:
    """A cluster that is up: its layout and ways to run things in its nodes."""

    def __init__(self, name, state):
        self.name = name
        self.state = state
        self.shape = state["shape"]
        self.nodes = [n["name"] for n in state["nodes"]]
        self.subnet = state["subnet"]
        self._popened = []
        # For tools that pick the cluster themselves (vcluster rsh under mpirun).
        self.env = dict(os.environ, VCLUSTER_NAME=name)

    def address(self, node, net=0):
        for entry in self.state["nodes"]:
            if entry["name"] == node:
                return entry["nics"][net]["address"]
        raise KeyError(node)

    def host_address(self, net=0):
        """The host's address on network `net` (its end of the bridge)."""
        return self.state["networks"][net]["host_address"]

    def bridge(self, net=0):
        return self.state["networks"][net]["bridge"]

    def netns(self, node):
        return next(n["netns"] for n in self.state["nodes"] if n["name"] == node)

    def switch_netns(self):
        """The namespace of the cluster's bridges."""
        return self.state["switch_netns"]

    def exec(self, node, *cmd, input=None, timeout=30, check=False, env=None, cwd=None):
        """Run cmd in `node` through `vcluster exec`; return the CompletedProcess."""
        proc = run_vcluster("exec", "--name", self.name, node, "--", *cmd,
                            input=input, timeout=timeout, env=env, cwd=cwd)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} on {node} exited {proc.returncode}: "
                                 f"{proc.stderr.strip()}")
        return proc

    def popen(self, node, *cmd, **kwargs):
        """Start cmd in `node` in the background; it is killed by PID at teardown."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        proc = subprocess.Popen([str(VCLUSTER), "exec", "--name", self.name, node, "--", *cmd],
                                start_new_session=True, **kwargs)
        self._popened.append(proc)
        return proc

    @property
    def services(self):
        """The "score" part of the state: munged and scored PIDs, paths (or {})."""
        return self.state.get("score") or {}

    @property
    def service_dir(self):
        return Path("/run/score/vcluster") / self.name

    def munge_socket(self, node="head"):
        return str(self.service_dir / node / "munge.socket")

    def score_env(self, node=None):
        """os.environ plus what `vcluster env` prints (SCORE_CONFIG, MUNGE_SOCKET, ...)."""
        args = ["env", "--json", "--name", self.name] + (["--node", node] if node else [])
        proc = run_vcluster(*args)
        assert proc.returncode == 0, proc.stderr
        return dict(self.env, **json.loads(proc.stdout))

    def slurm_env(self):
        """os.environ plus SLURM_CONF (and the rest of `vcluster env`)."""
        env = self.score_env()
        assert "SLURM_CONF" in env, f"Slurm does not run on cluster {self.name}"
        return env

    def status(self):
        proc = run_vcluster("status", "--name", self.name, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["clusters"][0]

    def kill_processes(self):
        for proc in self._popened:
            kill_by_pid(proc)
        self._popened.clear()

    def down(self):
        """Take the cluster down now (teardown does it anyway)."""
        self.kill_processes()
        proc = run_vcluster("down", "--name", self.name)
        assert proc.returncode == 0, f"vcluster down --name {self.name} failed: {proc.stderr}"
        return proc


@pytest.fixture(scope="session")
def repo_root():
    return REPO_ROOT


@pytest.fixture(scope="session")
def vcluster_tool():
    """Path of the vcluster program."""
    return VCLUSTER


@pytest.fixture(scope="session")
def vcluster_cli():
    """run_vcluster: call the tool with arguments, get a CompletedProcess."""
    return run_vcluster


@pytest.fixture(scope="session")
def require_root():
    if os.geteuid() != 0:
        pytest.skip("the virtual cluster needs root (network namespaces, bridges, tc)")


@pytest.fixture
def cluster_name(require_root):
    """A fresh cluster name; whatever a test makes under it is removed afterwards."""
    name = unique_cluster_name()
    yield name
    proc = run_vcluster("down", "--name", name)
    assert proc.returncode == 0, f"vcluster down --name {name} failed in teardown: {proc.stderr}"


class ClusterFactory:
    """Brings clusters up on request and takes all of them down at close()."""

    def __init__(self):
        self.names, self.clusters = [], []

    def __call__(self, nodes=2, nics=1, rate=None, mtu=None, with_score=False, with_munge=False,
                 score_bin=None, score_master=None, score_agent=None, with_slurm=False,
                 slurm_gang=False):
        name = unique_cluster_name()
        args = ["up", "--json", "--name", name, "--nodes", nodes, "--nics", nics]
        if rate:
            args += ["--rate", rate]
        if mtu:
            args += ["--mtu", mtu]
        if with_score:
            args.append("--with-score")
            if score_bin:
                args += ["--score-bin", score_bin]
            for option, keys in (("--score-master", score_master), ("--score-agent", score_agent)):
                for key, value in (keys or {}).items():
                    if isinstance(value, bool):
                        value = "true" if value else "false"
                    args += [option, f"{key}={value}"]
        elif with_munge:
            args.append("--with-munge")
        if with_slurm:
            args.append("--with-slurm")
            if slurm_gang:
                args.append("--slurm-gang")
        self.names.append(name)  # before `up`: close() also cleans a half-failed up
        proc = run_vcluster(*args, timeout=COMMAND_TIMEOUT + (30 if with_score else 0)
                            + (40 if with_slurm else 0))
        assert proc.returncode == 0, f"vcluster {' '.join(map(str, args))} failed: {proc.stderr}"
        cluster = VirtualCluster(name, json.loads(proc.stdout)["cluster"])
        self.clusters.append(cluster)
        return cluster

    def close(self):
        for cluster in self.clusters:
            cluster.kill_processes()
        failures = []
        for name in self.names:
            proc = run_vcluster("down", "--name", name)
            if proc.returncode != 0:
                failures.append(f"{name}: {proc.stderr.strip()}")
        assert not failures, "vcluster down failed in teardown: " + "; ".join(failures)


@pytest.fixture
def vcluster(require_root):
    """Factory: vcluster(nodes=2, nics=1, rate=None, mtu=None, with_score=False,
    with_munge=False, score_bin=None, score_master=None, score_agent=None,
    with_slurm=False, slurm_gang=False) -> VirtualCluster.
    score_master: {key: value} of scored.toml's [master], e.g. {"gang_slots": 1};
    score_agent: the same of every agent's [agent], e.g. {"pm_net_device": "eth"}.

    Every cluster it made is taken down when the test ends, pass or fail."""
    factory = ClusterFactory()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def vcluster_module(require_root):
    """The same factory, for clusters shared by the tests of one module."""
    factory = ClusterFactory()
    try:
        yield factory
    finally:
        factory.close()
