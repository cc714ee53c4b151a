"""`vcluster up --with-munge / --with-score`, score-up, score-down, env.

Three groups:
  - MUNGE: one munged per node (inside it) and one on the host, one key;
    these need only the munge package.
  - score with stand-ins: tests/vcluster/fake_score/{scored,scorectl} behave
    like the real programs as far as vcluster can see (configuration keys,
    registration, `scorectl nodes --json`, a populated job cgroup), so the
    orchestration is tested whatever state scored is in.
  - score for real: build/bin/scored, scorectl, scrun; skipped (with the reason,
    which fails a full `make test`) until they are built.
"""

import ast
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from conftest import REPO_ROOT

from .checks import leftovers, process_gone

FAKE_BIN = Path(__file__).resolve().parent / "fake_score"
# The real programs: build/bin, or SCORE_TEST_BIN (e.g. scored/target/debug).
REAL_BIN = Path(os.environ.get("SCORE_TEST_BIN") or REPO_ROOT / "build" / "bin")
STATE_DIR = Path("/run/score/vcluster")

_MUNGED = shutil.which("munged", path="/usr/sbin:/sbin:" + os.environ.get("PATH", ""))
needs_munge = pytest.mark.skipif(not _MUNGED, reason="munged is not installed (apt-get install munge)")
needs_scored = pytest.mark.skipif(not (REAL_BIN / "scored").is_file(),
                                  reason=f"{REAL_BIN}/scored is not built yet (make build)")

pytestmark = needs_munge


# --- independent checks ------------------------------------------------------

def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return []


def service_processes(name):
    """{pid: argv} of live processes whose command line names the service dir."""
    marker = f"/run/score/vcluster/{name}/".encode()
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        argv = _cmdline(pid)
        if any(marker in a for a in argv) and not process_gone(int(pid)):
            found[int(pid)] = [a.decode() for a in argv]
    return found


def cgroup2_mount():
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def cgroup_of(name):
    mount = cgroup2_mount()
    return mount / f"score-vcluster-{name}" if mount else None


def netns_inode(path):
    st = os.stat(path)
    return st.st_dev, st.st_ino


def all_leftovers(name):
    found = leftovers(name)
    found += [f"process {pid}: {' '.join(argv)}" for pid, argv in service_processes(name).items()]
    if (STATE_DIR / name).exists():
        found.append(f"service dir {STATE_DIR / name}")
    cg = cgroup_of(name)
    if cg and cg.exists():
        found.append(f"cgroup {cg}")
    return found


def munge_pids(vc):
    return {node: int((vc.service_dir / node / "munged.pid").read_text())
            for node in ["head"] + vc.nodes}


# --- MUNGE -------------------------------------------------------------------

def test_munged_runs_in_every_node_with_one_key(vcluster):
    vc = vcluster(nodes=3, with_munge=True)
    key = vc.service_dir / "munge.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o400
    assert key.stat().st_size >= 32
    pids = munge_pids(vc)
    assert vc.services["munged"] == pids
    for node, pid in pids.items():
        argv = _cmdline(pid)
        assert os.path.basename(argv[0]) == b"munged", argv
        assert f"--socket={vc.munge_socket(node)}".encode() in argv
        assert f"--key-file={key}".encode() in argv
        ns = "/proc/self/ns/net" if node == "head" else f"/run/netns/{vc.netns(node)}"
        assert netns_inode(f"/proc/{pid}/ns/net") == netns_inode(ns), node
    status = vc.status()
    assert status["score"]["munge_running"] and status["score"]["not_running"] == []
    assert "scored" not in {p["command"].split()[0] for p in status["nodes"][0]["processes"]}


def test_a_credential_made_in_one_node_decodes_in_another(vcluster):
    vc = vcluster(nodes=2, with_munge=True)
    cred = vc.exec("n1", "munge", "-n", "-S", vc.munge_socket("n1"), check=True).stdout
    out = vc.exec("n2", "unmunge", "-S", vc.munge_socket("n2"), input=cred, check=True).stdout
    assert "STATUS:          Success (0)" in out and "ENCODE_HOST:     n1" in out, out
    # ... and on the host, once per munged: each has its own replay cache.
    host = subprocess.run(["unmunge", "-S", vc.munge_socket("head")], input=cred, text=True,
                          capture_output=True, timeout=10)
    assert host.returncode == 0, host.stderr
    again = vc.exec("n2", "unmunge", "-S", vc.munge_socket("n2"), input=cred)
    assert again.returncode != 0 and "Replayed" in again.stdout + again.stderr


def test_another_clusters_key_is_refused(vcluster):
    """Every cluster has a key of its own: a credential of cluster a is good
    in a and refused as invalid (not replayed, not expired) in b."""
    a = vcluster(nodes=1, with_munge=True)
    b = vcluster(nodes=1, with_munge=True)
    assert (a.service_dir / "munge.key").read_bytes() != (b.service_dir / "munge.key").read_bytes()
    cred = a.exec("n1", "munge", "-n", "-S", a.munge_socket("n1"), check=True).stdout
    proc = b.exec("n1", "unmunge", "-S", b.munge_socket("n1"), input=cred)
    # unmunge's exit status is the munge error: 14, EMUNGE_CRED_INVALID.
    assert proc.returncode == 14, proc.stdout + proc.stderr
    assert "Invalid credential" in proc.stderr, proc.stderr
    ok = subprocess.run(["unmunge", "-S", a.munge_socket("head")], input=cred, text=True,
                        capture_output=True, timeout=10)
    assert ok.returncode == 0 and "STATUS:          Success (0)" in ok.stdout, ok.stderr


def test_up_with_munge_twice_changes_nothing(vcluster, vcluster_cli):
    vc = vcluster(nodes=2, with_munge=True)
    before = munge_pids(vc)
    again = vcluster_cli("up", "--json", "--name", vc.name, "--nodes", 2, "--with-munge")
    assert again.returncode == 0, again.stderr
    assert "MUNGE is already running" in again.stderr
    result = json.loads(again.stdout)
    assert result["changed"] is False
    assert result["cluster"]["score"]["munged"] == before == munge_pids(vc)


def test_munge_can_be_added_to_a_running_cluster_and_restarted(vcluster, vcluster_cli):
    vc = vcluster(nodes=2)
    proc = vcluster_cli("score-up", "--name", vc.name, "--munge-only", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changed"] is True
    pids = munge_pids(vc)
    os.kill(pids["n2"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while not process_gone(pids["n2"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    status = vc.status()
    assert status["score"]["not_running"] == ["munged of n2"]
    proc = vcluster_cli("score-up", "--name", vc.name, "--munge-only")
    assert proc.returncode == 0, proc.stderr
    assert "munged of n2 not running" in proc.stderr
    new = munge_pids(vc)
    assert all(not process_gone(pid) for pid in new.values())
    assert all(process_gone(pid) for pid in pids.values())
    assert vc.status()["score"]["munge_running"]


def test_down_leaves_no_munged(vcluster, vcluster_cli):
    vc = vcluster(nodes=3, with_munge=True)
    pids = munge_pids(vc)
    assert len(service_processes(vc.name)) == 4
    down = vcluster_cli("down", "--name", vc.name)
    assert down.returncode == 0, down.stderr
    assert all(process_gone(pid) for pid in pids.values())
    assert all_leftovers(vc.name) == []


def test_down_without_state_file_still_stops_munged(vcluster, vcluster_cli):
    vc = vcluster(nodes=2, with_munge=True)
    (STATE_DIR / f"{vc.name}.json").unlink()
    status = vcluster_cli("status", "--name", vc.name)
    assert "munged/scored processes" in status.stdout and "service directory" in status.stdout
    down = vcluster_cli("down", "--name", vc.name)
    assert down.returncode == 0, down.stderr
    assert all_leftovers(vc.name) == []


def test_score_down_keeps_the_network(vcluster, vcluster_cli):
    vc = vcluster(nodes=2, with_munge=True)
    proc = vcluster_cli("score-down", "--name", vc.name)
    assert proc.returncode == 0, proc.stderr
    assert service_processes(vc.name) == {}
    assert not vc.service_dir.exists()
    assert "score" not in vc.status()
    vc.exec("n1", "ping", "-n", "-q", "-c1", "-W1", vc.address("n2"), check=True)
    again = vcluster_cli("score-down", "--name", vc.name)
    assert again.returncode == 0 and "nothing to do" in again.stderr


def test_env_without_score_says_so(vcluster, vcluster_cli):
    vc = vcluster(nodes=1)
    proc = vcluster_cli("env", "--name", vc.name)
    assert proc.returncode == 0
    assert proc.stdout == f"export VCLUSTER_NAME={vc.name}\n"
    assert "score is not running" in proc.stderr


def test_with_score_needs_scored(vcluster_cli, cluster_name, tmp_path):
    proc = vcluster_cli("up", "--name", cluster_name, "--nodes", 1, "--with-score",
                        "--score-bin", tmp_path)
    assert proc.returncode == 1
    assert f"--score-bin {tmp_path}: no scored in it" in proc.stderr
    assert leftovers(cluster_name) == []  # checked before anything was built


# --- score, with the stand-ins -------------------------------------------------

def test_with_score_starts_master_and_agents(vcluster):
    vc = vcluster(nodes=2, with_score=True, score_bin=FAKE_BIN)
    head = vc.host_address()
    url = f"http://{head}:7100"
    master = tomllib.loads((vc.service_dir / "scored.toml").read_text())
    assert master["master"]["listen"] == f"{head}:7100"
    assert master["master"]["metrics_listen"] == f"{head}:7101"
    assert master["master"]["nodes"] == ["n1", "n2"]
    assert master["master"]["allow_root_jobs"] is True
    assert master["master"]["heartbeat_interval_ms"] == 500
    assert master["master"]["heartbeat_timeout_ms"] == 3000
    # Each cluster keeps its master's saved jobs to itself, private to root.
    state_dir = vc.service_dir / "head" / "state"
    assert master["master"]["state_dir"] == str(state_dir)
    assert state_dir.is_dir() and state_dir.stat().st_mode & 0o777 == 0o700
    assert master["munge"]["socket"] == vc.munge_socket("head")
    client = tomllib.loads((vc.service_dir / "client.toml").read_text())
    assert client == {"client": {"master": url}, "munge": {"socket": vc.munge_socket("head")}}
    cg = cgroup_of(vc.name)
    for node in vc.nodes:
        agent = tomllib.loads((vc.service_dir / node / "scored.toml").read_text())
        assert agent["agent"] == {"master": url, "node_name": node,
                                  "metrics_listen": f"{vc.address(node)}:7102",
                                  "cgroup_root": str(cg / node),
                                  "state_dir": str(vc.service_dir / node / "run")}
        assert agent["client"] == {"master": url}
        assert agent["munge"] == {"socket": vc.munge_socket(node)}
        assert (cg / node).is_dir()
        # The agent sees the same cgroup path inside the node.
        vc.exec(node, "test", "-d", str(cg / node / "job1"), check=True)

    scored = vc.services["scored"]
    assert scored["bin"] == str(FAKE_BIN) and scored["url"] == url
    assert netns_inode(f"/proc/{scored['master']}/ns/net") == netns_inode("/proc/self/ns/net")
    for node, pid in scored["agents"].items():
        assert netns_inode(f"/proc/{pid}/ns/net") == netns_inode(f"/run/netns/{vc.netns(node)}")
        assert b"agent" in _cmdline(pid)
        log = (vc.service_dir / node / "scored.log").read_text()
        assert f"registered (host name {node})" in log
    st = vc.status()["score"]
    assert st["scored_running"] and st["env"]["SCORE_CONFIG"] == str(vc.service_dir / "client.toml")

    nodes = subprocess.run([FAKE_BIN / "scorectl", "nodes", "--json"], env=vc.score_env(),
                           capture_output=True, text=True, timeout=10, check=True).stdout
    assert json.loads(nodes) == [{"name": "n1", "state": "up"}, {"name": "n2", "state": "up"}]


def test_exec_and_env_point_at_the_nodes_configuration(vcluster, vcluster_cli):
    vc = vcluster(nodes=2, with_score=True, score_bin=FAKE_BIN)
    out = vc.exec("n2", "sh", "-c", 'echo "$SCORE_CONFIG"', check=True).stdout
    assert out.strip() == str(vc.service_dir / "n2" / "scored.toml")
    mine = dict(vc.env, SCORE_CONFIG="/elsewhere.toml")
    out = vc.exec("n2", "sh", "-c", 'echo "$SCORE_CONFIG"', env=mine, check=True).stdout
    assert out.strip() == "/elsewhere.toml"
    text = vcluster_cli("env", "--name", vc.name)
    assert f"export SCORE_CONFIG={vc.service_dir}/client.toml\n" in text.stdout
    assert vc.score_env("n1")["SCORE_CONFIG"] == str(vc.service_dir / "n1" / "scored.toml")
    # scorectl inside a node, through the node's configuration and munged.
    proc = vc.exec("n1", str(FAKE_BIN / "scorectl"), "nodes", "--json", check=True)
    assert {n["state"] for n in json.loads(proc.stdout)} == {"up"}


def test_with_score_twice_changes_nothing(vcluster, vcluster_cli):
    vc = vcluster(nodes=2, with_score=True, score_bin=FAKE_BIN)
    again = vcluster_cli("up", "--json", "--name", vc.name, "--nodes", 2, "--with-score",
                         "--score-bin", FAKE_BIN)
    assert again.returncode == 0, again.stderr
    assert "score is already running" in again.stderr
    result = json.loads(again.stdout)
    assert result["changed"] is False
    assert result["cluster"]["score"] == vc.services


def test_down_stops_everything_and_removes_the_cgroups(vcluster, vcluster_cli):
    vc = vcluster(nodes=3, with_score=True, score_bin=FAKE_BIN)
    pids = set(service_processes(vc.name))
    assert len(pids) == 4 + 4  # munged x4, master, agents x3
    jobs = [int(p) for node in vc.nodes
            for p in (cgroup_of(vc.name) / node / "job1" / "cgroup.procs").read_text().split()]
    assert len(jobs) == 3
    down = vcluster_cli("down", "--name", vc.name)
    assert down.returncode == 0, down.stderr
    order = [line for line in down.stderr.splitlines() if "stopping" in line]
    assert ["agent" in order[0], "master" in order[1], "munged" in order[2]] == [True] * 3, order
    assert all(process_gone(pid) for pid in pids | set(jobs))
    assert all_leftovers(vc.name) == []


def test_down_kills_what_is_left_in_a_cgroup(vcluster, vcluster_cli):
    """A job process outside the node namespaces (as after a crash) still ends."""
    vc = vcluster(nodes=1, with_score=True, score_bin=FAKE_BIN)
    job = cgroup_of(vc.name) / "n1" / "job2"
    job.mkdir()
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (job / "cgroup.procs").write_text(str(sleeper.pid))
        (STATE_DIR / f"{vc.name}.json").unlink()
        down = vcluster_cli("down", "--name", vc.name)
        assert down.returncode == 0, down.stderr
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        assert all_leftovers(vc.name) == []
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def _bin_dir(tmp_path, agent_script):
    """A --score-bin whose scored runs `agent_script` (sh) for agents, the stand-in otherwise."""
    d = tmp_path / "bin"
    d.mkdir()
    (d / "scored").write_text(f'#!/bin/sh\nif [ "$1" = agent ]; then {agent_script}; fi\n'
                              f'exec {FAKE_BIN / "scored"} "$@"\n')
    (d / "scored").chmod(0o755)
    (d / "scorectl").symlink_to(FAKE_BIN / "scorectl")
    return d


def test_an_agent_that_dies_fails_up_with_its_log(vcluster, vcluster_cli, tmp_path):
    vc = vcluster(nodes=2)
    bindir = _bin_dir(tmp_path, 'echo "agent: cannot open the frobnicator" >&2; exit 3')
    proc = vcluster_cli("score-up", "--name", vc.name, "--score-bin", bindir)
    assert proc.returncode == 1
    assert "exited with status 3" in proc.stderr
    assert "cannot open the frobnicator" in proc.stderr
    assert f"{vc.service_dir}/n" in proc.stderr  # names the log file
    # What was started is stopped again; the logs and the network stay.
    assert service_processes(vc.name) == {}
    assert (vc.service_dir / "n1" / "scored.log").exists()
    cg = cgroup_of(vc.name)
    assert not (cg and cg.exists())
    assert "score" not in vc.status()
    vc.exec("n1", "ping", "-n", "-q", "-c1", "-W1", vc.address("n2"), check=True)


def test_readiness_timeout_names_the_logs(vcluster, vcluster_cli, tmp_path):
    vc = vcluster(nodes=1)
    bindir = _bin_dir(tmp_path, "exec sleep 300")  # an agent that never registers
    proc = vcluster_cli("score-up", "--name", vc.name, "--score-bin", bindir,
                        "--ready-timeout", "1")
    assert proc.returncode == 1
    assert "score did not come up within 1 s" in proc.stderr
    assert "n1 down" in proc.stderr
    assert f"{vc.service_dir}/head/scored.log" in proc.stderr
    assert f"{vc.service_dir}/n1/scored.log" in proc.stderr
    assert service_processes(vc.name) == {}


# --- score, for real ------------------------------------------------------------

@needs_scored
def test_real_score_comes_up_and_goes_down(vcluster, vcluster_cli):
    vc = vcluster(nodes=2, with_score=True, score_bin=REAL_BIN)
    env = vc.score_env()
    proc = subprocess.run([REAL_BIN / "scorectl", "nodes", "--json"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)
    assert sorted(n["name"] for n in nodes) == ["n1", "n2"]
    assert {n["state"] for n in nodes} == {"up"}
    pids = set(service_processes(vc.name))
    down = vcluster_cli("down", "--name", vc.name)
    assert down.returncode == 0, down.stderr
    assert all(process_gone(pid) for pid in pids)
    assert all_leftovers(vc.name) == []


@needs_scored
@pytest.mark.skipif(not (REAL_BIN / "scrun").is_file(),
                    reason=f"{REAL_BIN}/scrun is not built yet (make build)")
def test_real_scrun_runs_on_every_node(vcluster):
    vc = vcluster(nodes=2, with_score=True, score_bin=REAL_BIN)
    proc = subprocess.run([REAL_BIN / "scrun", "-nodes=2x1", "hostname"], env=vc.score_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["n1", "n2"]


# --- pure parts ------------------------------------------------------------------

def _score_module():
    import sys
    from conftest import VCLUSTER_DIR
    sys.path.insert(0, str(VCLUSTER_DIR))
    from vclusterlib import score
    return score


def test_the_stand_in_knows_every_key_of_scored():
    """fake_score/scored refuses unknown keys as scored does: its key list
    must be score-config's, section by section."""
    src = (REPO_ROOT / "scored/crates/score-config/src/lib.rs").read_text()
    real = {}
    for section, struct in (("master", "MasterConfig"), ("agent", "AgentConfig"),
                            ("client", "ClientConfig"), ("munge", "MungeConfig")):
        body = re.search(r"pub struct " + struct + r" \{(.*?)\n\}", src, re.S).group(1)
        real[section] = set(re.findall(r"^\s*pub (\w+):", body, re.M))
    text = (FAKE_BIN / "scored").read_text()
    fake = ast.literal_eval(re.search(r"^KEYS = (\{.*?\n\})", text, re.S | re.M).group(1))
    assert fake == real


def test_readiness_reads_scorectl_json():
    score = _score_module()
    want = {"n1", "n2"}
    assert score._nodes_up('[{"name":"n1","state":"up"},{"name":"n2","state":"UP"}]', want)[0]
    ok, why = score._nodes_up('[{"name":"n1","state":"down"}]', want)
    assert not ok and why == "nodes not up: n1 down, n2 unknown"
    assert not score._nodes_up("error: no master", want)[0]
    assert score._nodes_up('{"nodes": [{"name":"n1","state":"up"},{"name":"n2","state":"up"}]}',
                           want)[0]


def test_daemons_are_recognised_by_their_command_line():
    score = _score_module()
    d = "/run/score/vcluster/abc"
    assert score.classify(["/usr/sbin/munged", f"--socket={d}/n3/munge.socket"], "abc") == \
        ("munged", "n3")
    assert score.classify(["/x/scored", "agent", "--config", f"{d}/n1/scored.toml"], "abc") == \
        ("agent", "n1")
    assert score.classify(["/x/scored", "master", "--config", f"{d}/scored.toml"], "abc") == \
        ("master", "head")
    assert score.classify(["/usr/bin/python3", "/t/scored", "master", "--config",
                           f"{d}/scored.toml"], "abc") == ("master", "head")
    # Another cluster, another program, a name that only starts alike.
    assert score.classify(["/x/scored", "master", "--config", f"{d}/scored.toml"], "ab") is None
    assert score.classify(["tail", "-f", f"{d}/n1/scored.log"], "abc") is None
    assert score.classify([], "abc") is None
