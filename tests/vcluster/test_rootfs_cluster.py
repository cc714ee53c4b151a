"""A cluster of root-file-system nodes (`vcluster up --rootfs`): Debian
machines with systemd as PID 1, reached with ssh (host keys checked) and by
Ansible through `vcluster inventory`, installing packages only through the
cluster's apt proxy; `down` leaves nothing, even after a crash."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from ansible_output import recap
from conftest import REPO_ROOT, run_vcluster, unique_cluster_name
from vclusterlib import aptproxy, machines, procs, rootfs, score, state

UP_TIMEOUT = 1500        # a cold image build included
NODES = 2


@pytest.fixture(scope="module")
def machines_cluster(require_root):
    """A 2-node, 2-network cluster of root-file-system nodes for the module;
    always taken down, whatever happens."""
    name = unique_cluster_name()
    try:
        proc = run_vcluster("up", "--json", "--name", name, "--nodes", NODES, "--nics", 2,
                            "--rootfs", timeout=UP_TIMEOUT)
        assert proc.returncode == 0, proc.stderr
        yield name, json.loads(proc.stdout)["cluster"]
    finally:
        down = run_vcluster("down", "--name", name, timeout=120)
        assert down.returncode == 0, down.stderr


def on(name, node, *cmd, timeout=300):
    return run_vcluster("exec", "--name", name, node, "--", *cmd, timeout=timeout)


def ssh(name, node, command):
    return subprocess.run(["ssh", *machines.ssh_options(name), f"root@{node}", command],
                          capture_output=True, text=True, timeout=60)


def test_nodes_are_machines_with_systemd_their_own_names_and_no_route_out(machines_cluster):
    name, record = machines_cluster
    assert record["rootfs"]["image"].startswith("/var/cache/score/vcluster/images/")
    for i in range(1, NODES + 1):
        node = f"n{i}"
        out = on(name, node, "sh", "-c", "cat /proc/1/comm; hostname; systemctl is-system-running;"
                                         " findmnt -no FSTYPE /")
        assert out.returncode == 0, out.stderr
        seen, said = out.stdout.split(), out.stdout
        if seen[2:3] == ["degraded"]:
            why = on(name, node, "sh", "-c", "systemctl --failed --no-legend --plain; "
                                             "journalctl -b -p warning --no-pager | tail -40")
            said += f"failed units and the boot's warnings:\n{why.stdout}{why.stderr}"
        assert seen == ["systemd", node, "running", "overlay"], said
        # No default route: the apt proxy on the host is the only way out.
        routes = on(name, node, "ip", "-4", "route")
        assert "default" not in routes.stdout and f"10." in routes.stdout, routes.stdout
    # The nodes' device nodes are their own: what their systemd does to
    # them (it makes the console root:tty 0620) never reaches the host's.
    st = os.stat("/dev/null")
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o666, 0, 0), oct(st.st_mode)
    console = on(name, "n1", "stat", "-c", "%t:%T", "/dev/console")
    assert console.stdout.strip() == "1:3", console.stdout
    # Every node reaches the other on both networks.
    ping = on(name, "n1", "ping", "-c1", "-W2", "n2-net1")
    assert ping.returncode == 0, ping.stdout + ping.stderr


def test_ssh_reaches_every_node_with_its_host_key_checked(machines_cluster):
    name, record = machines_cluster
    for i in range(1, NODES + 1):
        r = ssh(name, f"n{i}", "hostname")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"n{i}"
    # A host key that is not the node's is refused (StrictHostKeyChecking).
    known = Path(record["rootfs"]["known_hosts"])
    saved = known.read_text()
    try:
        lines = saved.splitlines()
        n1 = [ln for ln in lines if ln.startswith("n1,")]
        n2 = [ln for ln in lines if ln.startswith("n2,")]
        swapped = [n1[0].split(" ", 1)[0] + " " + n2[0].split(" ", 1)[1]]
        known.write_text("\n".join(swapped) + "\n")
        r = ssh(name, "n1", "true")
        assert r.returncode != 0 and "host key" in r.stderr.lower(), r.stderr
    finally:
        known.write_text(saved)


def test_apt_installs_through_the_proxy_only(machines_cluster):
    name, _ = machines_cluster
    r = on(name, "n1", "sh", "-c", "DEBIAN_FRONTEND=noninteractive apt-get install -y -q hello "
                                   "&& hello", timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Hello, world!" in r.stdout
    # Without the proxy, nothing outside is reachable: no route.
    direct = on(name, "n2", "python3", "-c",
                "import socket\n"
                "try:\n socket.create_connection(('151.101.2.132', 80), timeout=5)\n"
                "except OSError as e:\n print(e.errno, e.strerror)\n")
    assert direct.stdout.startswith("101 "), direct.stdout + direct.stderr  # ENETUNREACH


def test_ansible_reaches_every_node_through_the_inventory(machines_cluster, tmp_path):
    name, _ = machines_cluster
    inv = run_vcluster("inventory", "--name", name)
    assert inv.returncode == 0, inv.stderr
    path = tmp_path / "inventory.yml"
    path.write_text(inv.stdout)
    parsed = json.loads(run_vcluster("inventory", "--name", name, "--json").stdout)
    groups = parsed["all"]["children"]
    assert list(groups["head"]["hosts"]) == ["n1"]
    assert sorted(groups["compute"]["hosts"]) == ["n1", "n2"]
    assert sorted(groups["ethernet_trunk"]["hosts"]) == ["n1", "n2"]
    assert [n["nic"] for n in parsed["all"]["hosts"]["n2"]["score_networks"]] == ["eth0", "eth1"]
    r = subprocess.run(["ansible", "-i", str(path), "all", "-m", "ping", "-o"],
                       capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="True"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == NODES, r.stdout


# The role score_common alone, its apt update bounded to a few seconds.
COMMON_PLAY = """
- name: What every node needs first
  hosts: all
  become: true
  roles:
    - role: score_common
      vars:
        score_common_apt_timeout: 10
        score_common_time_sync: false
        score_common_apt_repository: deb http://deb.debian.org/debian bookworm-updates main
"""
RETRY = "FAILED - RETRYING: [n1]: Update apt's lists"
# The whole run (the lines it prints are read as they come).
PLAY_TIMEOUT = 300


def test_a_hung_apt_update_is_ended_and_tried_again(machines_cluster, tmp_path):
    """score_common's apt update on a node whose proxy does not answer (its
    packets to the proxy dropped) is ended at score_common_apt_timeout,
    nothing of it left running (it would keep apt's lists locked), and tried
    again, which passes once the proxy answers: the run succeeds and the
    other node never retried."""
    name, _ = machines_cluster
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(run_vcluster("inventory", "--name", name).stdout)
    play = tmp_path / "common.yml"
    play.write_text(COMMON_PLAY)
    netns = next(n["netns"] for n in state.load(name)["nodes"] if n["name"] == "n1")
    table = "score-test-hang"

    def nft(script):
        subprocess.run(["ip", "netns", "exec", netns, "nft", "-f", "-"], input=script,
                       text=True, check=True, timeout=30)

    nft(f"table inet {table} {{ chain out {{ type filter hook output priority 0; "
        f"tcp dport {aptproxy.PORT} drop; }}; }}")
    blocked, left = True, None
    proc = subprocess.Popen(["timeout", str(PLAY_TIMEOUT), "ansible-playbook", "-i",
                             str(inventory), str(play)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, ANSIBLE_ROLES_PATH=str(REPO_ROOT / "roles"),
                                     ANSIBLE_PIPELINING="True"),
                            start_new_session=True)
    lines = []
    try:
        # The first try given up (the next one starts 5 s later): nothing
        # of it runs any more, and the proxy answers again.
        for line in proc.stdout:
            lines.append(line)
            if blocked and line.startswith(RETRY):
                left = on(name, "n1", "sh", "-c",
                          "pgrep -a apt-get; pgrep -af /usr/lib/apt/[m]ethods/; true").stdout
                nft(f"delete table inet {table}")
                blocked = False
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        if blocked:
            nft(f"delete table inet {table}")
        for node in ("n1", "n2"):
            on(name, node, "rm", "-f", "/etc/apt/sources.list.d/score.list")
    out = "".join(lines)
    assert proc.returncode == 0, out[-4000:]
    assert not blocked, "the update was not tried again:\n" + out[-4000:]
    assert left == "", f"the first try still runs on n1:\n{left}"
    assert "FAILED - RETRYING: [n2]" not in out, out[-4000:]
    failed = {host: counters["failed"] for host, counters in recap(out).items()}
    assert failed == {"n1": 0, "n2": 0}, out[-3000:]


def test_up_again_changes_nothing_and_other_kinds_are_refused(machines_cluster):
    name, record = machines_cluster
    again = run_vcluster("up", "--json", "--name", name, "--nodes", NODES, "--nics", 2, "--rootfs")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["changed"] is False
    other = run_vcluster("up", "--name", name, "--nodes", NODES, "--nics", 2)
    assert other.returncode == 1 and "root-file-system" in other.stderr, other.stderr
    both = run_vcluster("up", "--name", name, "--nodes", NODES, "--rootfs", "--with-score")
    assert both.returncode == 2 and "packages" in both.stderr, both.stderr
    no_inv = run_vcluster("score-up", "--name", name)
    assert no_inv.returncode == 1 and "packages" in no_inv.stderr, no_inv.stderr


def test_bad_input_is_refused_and_leaves_nothing(require_root, tmp_path):
    name = unique_cluster_name()
    try:
        not_repo = run_vcluster("up", "--name", name, "--nodes", 1, "--rootfs", "--repo", tmp_path)
        assert not_repo.returncode == 2 and "not an apt repository" in not_repo.stderr, \
            not_repo.stderr
        # An archive the proxy cannot reach: up fails, says so, rolls back.
        unreachable = run_vcluster("up", "--name", name, "--nodes", 1, "--rootfs",
                                   "--archive", "http://127.0.0.1:9/debian", timeout=UP_TIMEOUT)
        assert unreachable.returncode == 1, unreachable.stderr
        assert "cannot reach the Debian archive (http://127.0.0.1:9/debian)" in unreachable.stderr, \
            unreachable.stderr
        assert_nothing_left(name)
    finally:
        down = run_vcluster("down", "--name", name, timeout=120)
    assert down.returncode == 0 and "nothing to do" in down.stderr, down.stderr


def test_a_crashed_cluster_is_removed_by_down_without_leftovers(require_root):
    """vcluster killed with its nodes half-built: no state file, the nodes'
    holders and the apt proxy SIGKILLed.  One `down` removes everything."""
    name = unique_cluster_name()
    try:
        up = run_vcluster("up", "--json", "--name", name, "--nodes", 1, "--rootfs",
                          timeout=UP_TIMEOUT)
        assert up.returncode == 0, up.stderr
        record = json.loads(up.stdout)["cluster"]
        os.kill(record["rootfs"]["apt_proxy_pid"], 9)
        os.kill(record["nodes"][0]["holder_pid"], 9)
        Path(f"/run/score/vcluster/{name}.json").unlink()
        deadline = time.monotonic() + 20
        while not procs.exited(record["nodes"][0]["holder_pid"]) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        down = run_vcluster("down", "--name", name, timeout=120)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(name)


def assert_nothing_left(name):
    assert rootfs.node_dirs(name) == []
    assert not Path(rootfs.BASE, name).exists()
    assert f"{rootfs.BASE}/{name}/" not in Path("/proc/self/mountinfo").read_text()
    assert not [p for p in procs.pids() if name in " ".join(procs.argv(p) or [])]
    cg = score.cgroup_dir(name)
    assert cg is None or not cg.exists()
    assert not score.service_dir(name).exists()
