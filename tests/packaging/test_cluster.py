"""score installed the way a site installs it (docs/admin/provisioning.md,
docs/admin/packages.md), on a cluster of 4 root-file-system nodes with two
networks (`vcluster up --rootfs`): `ansible-playbook provisioning/site.yml`
with vcluster's inventory takes the bare nodes to a cluster (apt installs
the packages from the local repository through the cluster's proxy, one
MUNGE key, systemd runs the master and the agents from the installed
units), a second run changes nothing, a wrong variable is refused before
any change; a 4x2 PM job runs from the installed files alone, and between
nodes over PM's eth device (the agents open the ranks' raw sockets:
scored_pm_net_device); an upgrade
keeps the edited configuration and restarts the daemons; `systemctl stop`
ends them cleanly; a purge leaves nothing of score."""

import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
import warnings
from pathlib import Path

import pytest

from ansible_output import changed_tasks, failed_tasks, recap
from conftest import REPO_ROOT, VCLUSTER, run_vcluster, unique_cluster_name
from pm import pmjob
from vclusterlib import aptproxy

from .conftest import NEXT_VERSION, VERSION

NODES = [f"n{i}" for i in range(1, 5)]
# How long two loops of jobs may run for the dashboards' queries.
LOAD_SECONDS = 180
LOAD = ("while [ ! -e /run/stop-load ]; do "
        "scrun -nodes=4x2 pmcheck --pattern all --count 20000 --quiet >/dev/null || exit 1; done")
UP_TIMEOUT = 1500
# ansible-playbook's limits: one task (the longest is an apt transaction
# that fetches through a cold proxy cache), one whole run.
TASK_TIMEOUT = 600
PLAYBOOK_TIMEOUT = 900
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Use-Pty=0"
PACKAGES = "scored score-client pm-tools"
SITE = REPO_ROOT / "provisioning" / "site.yml"
# What this test needs of the roles beyond their defaults: root runs the
# jobs (the test is root), a short scrape interval.  Slots per node come
# from the topology (role score_smp: one per core).  And PM's eth device
# for the jobs (scored_pm_net_device): the installed agents load the
# installed libpm and open each rank's raw sockets, so the jobs below go
# over eth between the nodes.  An apt update that hangs is ended after a
# minute, not the role's 5, and tried again; one that works takes some 5 s
# here.  (It hung in about 1 run in 2 while the four nodes updated at once:
# apt-cacher-ng answered one of them with an error, and apt then waited
# forever; vcluster's inventory now has them take turns.)
EXTRA_VARS = ["-e", "scored_allow_root_jobs=true", "-e", "score_monitoring_interval=5s",
              "-e", "scored_pm_net_device=eth", "-e", "score_common_apt_timeout=60"]
# score_rdma alone on n4, forced (there is no RDMA hardware here).
RDMA_PLAY = """
- name: RDMA settings on a node without the hardware
  hosts: n4
  become: true
  roles:
    - role: score_rdma
      vars:
        score_rdma_force: true
        score_rdma_ipoib:
          - {nic: ib0, address: 192.168.100.4, prefix: 24, subnet: 192.168.100.0/24}
"""
# The roles that own the networks' settings (/etc/hosts; PM's NIC list,
# MTUs and addresses), alone on every node.
NETWORK_PLAY = """
- name: The networks of every node
  hosts: all
  become: true
  roles:
    - role: score_common
    - role: score_network
"""
PROMETHEUS = "http://n1:9090"


class Cluster:
    def __init__(self, name, repo):
        self.name, self.repo = name, repo

    def on(self, node, script, check=True, timeout=600):
        proc = run_vcluster("exec", "--name", self.name, node, "--", "sh", "-c", script,
                            timeout=timeout)
        if check:
            assert proc.returncode == 0, f"{node}: {script}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    def everywhere(self, script, timeout=600):
        """Run `script` on every node at once; returns {node: stdout}."""
        procs = {n: subprocess.Popen([str(VCLUSTER), "exec", "--name", self.name, n, "--",
                                      "sh", "-c", script],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in NODES}
        out = {}
        for n, p in procs.items():
            stdout, stderr = p.communicate(timeout=timeout)
            assert p.returncode == 0, f"{n}: {script}\n{stdout[-3000:]}\n{stderr[-3000:]}"
            out[n] = stdout
        return out

    def playbook(self, inventory, *extra, playbook=SITE):
        # The MUNGE key in the test's directory, not in the repository's.
        key = ["-e", f"munge_key_file={inventory.parent / 'credentials' / 'munge.key'}"]
        # A play of the test's own finds the roles of the repository.
        # Pipelining: a module runs over the ssh connection it came on, not
        # a copy, a run and a removal each (docs/admin/provisioning.md).
        # A task that hangs fails by its name (ANSIBLE_TASK_TIMEOUT) before
        # the whole run's limit, so a hang says where it was.
        env = dict(os.environ, ANSIBLE_ROLES_PATH=str(REPO_ROOT / "roles"),
                   ANSIBLE_PIPELINING="True", ANSIBLE_TASK_TIMEOUT=str(TASK_TIMEOUT))
        argv = ["ansible-playbook", "-i", str(inventory), str(playbook), *EXTRA_VARS, *key, *extra]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=PLAYBOOK_TIMEOUT,
                                  env=env)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
            raise AssertionError(f"ansible-playbook {playbook.name} ran over {PLAYBOOK_TIMEOUT} s; "
                                 f"the end of its output:\n{(out or '')[-4000:]}") from None

    def report(self, run):
        """What to show of a failed ansible-playbook run: every task that
        failed and on which host, with its message (a tail alone may hold
        only another host's retries); what apt is still running on those
        hosts and the end of the apt proxy's logs (apt's own messages say
        little: "Failed to update apt cache: unknown reason"); then the end
        of the output."""
        failures = failed_tasks(run.stdout)
        hosts = {host for host, _ in failures}
        text = "failed tasks:\n" + "\n".join(what for _, what in failures)
        for host in sorted(hosts & set(NODES)):
            ps = self.on(host, "ps -eo pid,etimes,args | grep -E 'apt|dpkg|http' | grep -v grep",
                         check=False, timeout=30)
            text += f"\n\napt's processes on {host}:\n{ps.stdout}"
        logs = aptproxy.conf_dir(self.name)
        for log in ("apt-cacher.err", "apt-cacher.log"):
            try:
                lines = (logs / log).read_text(errors="replace").splitlines()
            except OSError as e:
                lines = [str(e)]
            text += f"\n\nthe end of the proxy's {log}:\n" + "\n".join(lines[-25:])
        return (text + "\n\nthe end of the output:\n" + run.stdout[-4000:]
                + run.stderr[-2000:])

    def prometheus(self, path, timeout=120, until=lambda doc: True, what="Prometheus"):
        """GET Prometheus's API on n1 (from the host) until `until(doc)`."""
        address = self.address("n1")
        deadline = time.monotonic() + timeout
        doc = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{address}:9090{path}", timeout=5) as r:
                    doc = json.load(r)
                if until(doc):
                    return doc
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"{what}: not within {timeout} s; last answer: {doc}")

    def address(self, node):
        state = json.loads(Path(f"/run/score/vcluster/{self.name}.json").read_text())
        return next(n["nics"][0]["address"] for n in state["nodes"] if n["name"] == node)

    def main_pid(self, node, unit):
        return int(self.on(node, f"systemctl show -p MainPID --value {unit}").stdout)

    def wait_nodes_up(self, timeout=60):
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            r = self.on("n1", "scorectl --json nodes", check=False)
            last = r.stdout + r.stderr
            if r.returncode == 0:
                nodes = json.loads(r.stdout)
                nodes = nodes.get("nodes", nodes) if isinstance(nodes, dict) else nodes
                if sum(1 for n in nodes if n.get("state") == "up") == len(NODES):
                    return
            time.sleep(0.5)
        raise AssertionError(f"not every node is up after {timeout} s: {last}")


@pytest.fixture(scope="module")
def cluster(require_root, debs):
    """4 root-file-system nodes whose apt sees a copy of the packages'
    repository (the upgrade adds the next version to it).  The nodes come
    up (the node image, cold, is built first) while the packages build;
    the repository, empty until then, gets them before any test runs."""
    repo = Path(tempfile.mkdtemp(prefix="score-cluster-repo-", dir=REPO_ROOT / "build"))
    (repo / "Packages").write_text("")
    name = unique_cluster_name()
    try:
        up = run_vcluster("up", "--name", name, "--nodes", len(NODES), "--nics", 2, "--rootfs",
                          "--repo", repo, timeout=UP_TIMEOUT)
        assert up.returncode == 0, up.stderr
        built = debs.result()[0] / "repo"
        for f in built.iterdir():
            shutil.copy(f, repo)
        yield Cluster(name, repo)
    finally:
        down = run_vcluster("down", "--name", name, timeout=180)
        shutil.rmtree(repo, ignore_errors=True)
        assert down.returncode == 0, down.stderr


def grafana_queries():
    """(dashboard, panel, PromQL) of every panel, from the dashboards' one
    source, scripts/grafana_dashboards.py."""
    spec = importlib.util.spec_from_file_location(
        "grafana_dashboards", REPO_ROOT / "scripts" / "grafana_dashboards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # 1m: four scrapes at the test's 5 s interval, as Grafana's
    # $__rate_interval would be.
    return list(module.panel_queries("1m"))


def check_dashboard_queries(c):
    """Every panel's query returns a number (not only NaN) from Prometheus
    while two loops of 4x2 jobs share the nodes in turns: PM traffic on
    both NICs, gang switches with quiesces, jobs launching and ending."""
    loops = [subprocess.Popen([str(VCLUSTER), "exec", "--name", c.name, "n1", "--", "timeout",
                               str(LOAD_SECONDS), "sh", "-c", LOAD],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
             for _ in range(2)]
    pending = {(uid, title, expr): None for uid, title, expr in grafana_queries()}
    address = c.address("n1")
    try:
        deadline = time.monotonic() + LOAD_SECONDS - 30
        while pending and time.monotonic() < deadline:
            for q in list(pending):
                url = f"http://{address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": q[2]})
                try:
                    with urllib.request.urlopen(url, timeout=10) as r:
                        doc = json.load(r)
                except OSError as e:
                    pending[q] = str(e)
                    continue
                values = [float(v["value"][1]) for v in doc["data"]["result"]]
                if any(not math.isnan(v) for v in values):
                    del pending[q]
                else:
                    pending[q] = values
            assert all(p.poll() is None for p in loops), "a job of the load failed: " + \
                "".join(p.stderr.read() for p in loops if p.poll() is not None)
            time.sleep(2)
    finally:
        c.on("n1", "touch /run/stop-load")
        for p in loops:
            try:
                p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        c.on("n1", "rm -f /run/stop-load")
    assert not pending, "dashboard queries without data:\n" + "\n".join(
        f"{uid} / {title}: {expr} -> {last}" for (uid, title, expr), last in pending.items())


class Phases:
    """Prints how long each phase of the long test took (shown with its
    output when it fails, and with -s)."""
    def __init__(self):
        self.start = self.last = time.monotonic()

    def __call__(self, what):
        now = time.monotonic()
        print(f"[{now - self.start:7.1f} s] {what}: {now - self.last:.1f} s", flush=True)
        self.last = now


HOSTS_TASK = "score_common : Name every node on each of its networks"


def fact_address(inventory, host, net):
    """The address of `host` on network `net` in a vcluster inventory."""
    return inventory["all"]["hosts"][host]["score_networks"][net]["address"]


def test_site_yml_installs_a_cluster_that_runs_upgrades_stops_and_purges(cluster, next_debs,
                                                                          tmp_path):
    c = cluster
    phase = Phases()
    inventory = tmp_path / "inventory.yml"
    inv = run_vcluster("inventory", "--name", c.name, "--json")
    assert inv.returncode == 0, inv.stderr
    # n3 is said to be an RDMA node; it has no device.
    hosts = json.loads(inv.stdout)
    hosts["all"]["children"]["rdma"]["hosts"] = {"n3": {}}
    inventory.write_text(json.dumps(hosts))

    # A wrong variable is refused before anything changes.
    wrong = c.playbook(inventory, "-e", "scored_slots=lots")
    assert wrong.returncode != 0
    assert "scored_slots" in wrong.stdout and "int" in wrong.stdout, wrong.stdout[-3000:]
    # Refused by the first play, which only checks: no role ran.
    assert "PLAY [Every node of the cluster]" not in wrong.stdout, wrong.stdout[-3000:]
    assert "is not installed" in c.on("n1", "dpkg -s scored 2>&1 || true").stdout
    phase("wrong variable refused")

    # From bare nodes to a cluster; then nothing left to change.
    first = c.playbook(inventory)
    assert first.returncode == 0, c.report(first)
    assert all(h["failed"] == 0 and h["unreachable"] == 0 for h in recap(first.stdout).values())
    # (Waits retry by design: slurmd registering.)
    retried = [line for line in first.stdout.splitlines()
               if line.startswith("FAILED - RETRYING") and ": Wait for" not in line]
    if retried:
        # A task tried again (score_common's apt update after a hang): the
        # run passed, but the suite's output should say so.
        warnings.warn("site.yml tried tasks again: " + "; ".join(retried))
    phase("first site run")
    # A second run changes nothing, and a --check run would change nothing
    # and fails nowhere.  Both on the head and the node said to be an RDMA
    # node: between them they take every path of the roles (n2 and n4 are
    # n3 but for score_rdma), and a run on all four costs the suite 35 s
    # more on 2 cores (a task costs each node about 0.4 s of CPU).  The
    # limited run writes what a full one does (docs/admin/provisioning.md).
    for extra, what in (([], "second site run"), (["--check"], "--check run")):
        rerun = c.playbook(inventory, *extra, "--limit", "n1,n3")
        assert rerun.returncode == 0, c.report(rerun)
        counters = recap(rerun.stdout)
        assert sorted(counters) == ["n1", "n3"], rerun.stdout[-3000:]
        assert all(h["changed"] == 0 and h["failed"] == 0 for h in counters.values()), \
            rerun.stdout[-5000:]
        phase(what)
    pm_conf = c.everywhere("cat /etc/score/pm.conf | grep -v '^#'")
    assert all(v.split() == ["nic", "eth0", "nic", "eth1"] for v in pm_conf.values()), pm_conf
    # score_rdma on n3 found no device, said so and changed nothing.
    assert "n3 has no RDMA device" in first.stdout, first.stdout[-5000:]
    assert c.on("n3", "test ! -e /etc/security/limits.d/90-score-rdma.conf && "
                      "! dpkg-query -W rdma-core 2>/dev/null && echo untouched").stdout.split() \
        == ["untouched"]

    # score_common: every node named on each network; PM's socket buffers.
    n1_eth1 = c.on("n4", "getent hosts n1-eth1; sysctl -n net.core.rmem_max").stdout.split()
    assert n1_eth1 == [fact_address(hosts, "n1", 1), "n1-eth1", "4194304"], n1_eth1

    # score_smp's topology: Slurm's own view of the node, and scored's slots
    # and rank binding.
    fact = json.loads(c.on("n2", "cat /etc/ansible/facts.d/score_smp.fact").stdout)
    slurmd = c.on("n2", "slurmd -C | head -1").stdout.split()
    # The same line but for the memory, rounded down to whole GiB.
    ours = dict(w.split("=", 1) for w in fact["slurm_node"].split())
    theirs = dict(w.split("=", 1) for w in slurmd)
    real = int(theirs.pop("RealMemory"))
    assert int(ours.pop("RealMemory")) == real // 1024 * 1024, (fact, slurmd)
    assert ours == theirs, (fact, slurmd)
    assert fact["slots"] == fact["topology"]["cores"] and len(fact["cpus"]) == fact["slots"], fact
    toml = c.on("n2", "grep -E '^(slots|cpus) =' /etc/score/scored.toml").stdout.splitlines()
    assert toml == [f"slots = {fact['slots']}", f"cpus = {json.dumps(fact['cpus'])}"], toml

    # Prometheus on the head scrapes every node_exporter, agent and the master.
    def all_up(doc):
        targets = doc["data"]["activeTargets"]
        return len(targets) == 2 + 2 * len(NODES) and all(t["health"] == "up" for t in targets)
    c.prometheus("/api/v1/targets", until=all_up, what="every target up")

    versions = c.everywhere("dpkg-query -W -f '${Version}\\n' scored score-client pm-tools")
    assert all(v.split() == [VERSION] * 3 for v in versions.values()), versions
    c.wait_nodes_up()
    phase("targets and nodes up")

    # A 4x2 PM job from the head, with nothing but installed files.
    job = c.on("n1", "command -v scrun; command -v pmcheck; "
                     "scrun -nodes=4x2 pmcheck --pattern all --quiet; echo status=$?", timeout=300)
    assert job.stdout.split()[:2] == ["/usr/bin/scrun", "/usr/bin/pmcheck"], job.stdout
    assert job.stdout.strip().endswith("status=0"), job.stdout + job.stderr
    assert "/work" not in job.stdout and "build/" not in job.stdout
    # Between nodes over eth: the agents loaded the installed libpm and
    # opened the ranks' raw sockets (scored_pm_net_device).
    pair = c.on("n1", "scrun -nodes=2x1 pmcheck --pattern all --count 2000", timeout=120)
    devices = {rank: r["device"] for rank, r in pmjob.parse(pair.stdout).items()}
    assert devices == {0: "eth", 1: "eth"}, pair.stdout + pair.stderr
    phase("scrun 4x2")

    # Slurm from the roles: PMIx steps of PM programs on every node.
    srun = c.on("n1", "srun --mpi=pmix -N4 pmcheck --pattern all --quiet; echo status=$?",
                timeout=300)
    assert srun.stdout.strip().endswith("status=0"), srun.stdout + srun.stderr
    results = [json.loads(line) for line in srun.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3] and all(r["ok"] for r in results), \
        srun.stdout
    phase("srun")

    # Grafana's provisioning on the head, and every panel's query answered
    # by the live Prometheus while jobs run.
    files = c.on("n1", "ls /etc/grafana/provisioning/datasources /etc/grafana/provisioning/dashboards "
                       "/var/lib/grafana/dashboards/score").stdout.split()
    assert {"score.yaml", "score-cluster.json", "score-pm-network.json"} <= set(files), files
    assert "url: http://n1:9090" in c.on("n1", "cat /etc/grafana/provisioning/datasources/score.yaml").stdout
    check_dashboard_queries(c)
    phase("dashboard queries")

    # Upgrade: the edited configuration stays, the daemons restart.
    c.everywhere("echo '# edited by the test' >> /etc/score/scored.toml")
    before = {n: c.main_pid(n, "scored-agent") for n in NODES}
    master_before = c.main_pid("n1", "scored-master")
    for deb in next_debs[1].values():
        shutil.copy(deb, c.repo)
    subprocess.run("dpkg-scanpackages --multiversion . > Packages 2>/dev/null && "
                   "gzip -9kfn Packages", shell=True, cwd=c.repo, check=True)
    c.everywhere(f"apt-get -q update >/dev/null && {APT} install --only-upgrade {PACKAGES} "
                 "libpm0 >/dev/null")
    for n in NODES:
        out = c.on(n, "dpkg-query -W -f '${Version}\\n' scored; "
                      "grep -c '^# edited by the test$' /etc/score/scored.toml; "
                      "systemctl is-active scored-agent").stdout.split()
        assert out == [NEXT_VERSION, "1", "active"], (n, out)
        assert c.main_pid(n, "scored-agent") not in (0, before[n]), n
    assert c.main_pid("n1", "scored-master") not in (0, master_before)
    c.wait_nodes_up()
    job = c.on("n1", "scrun -nodes=4x1 hostname | sort | tr '\\n' ' '", timeout=120)
    assert job.stdout.split() == NODES, job.stdout + job.stderr
    phase("upgrade")

    # systemctl stop: a clean end, not a failure.
    c.on("n4", "systemctl stop scored-agent")
    out = c.on("n4", "systemctl show -p ActiveState -p Result -p ExecMainStatus "
                     "scored-agent").stdout.split()
    assert sorted(out) == ["ActiveState=inactive", "ExecMainStatus=0", "Result=success"], out
    phase("agent stopped")

    # score_rdma forced on n4: packages, limits, the IPoIB file; then
    # nothing to change.  (While the stopped agent's AgentLost counts its
    # 30 s, below: the role leaves the agent alone.)
    play = tmp_path / "rdma.yml"
    play.write_text(RDMA_PLAY)
    for run in range(2):
        rdma = c.playbook(inventory, playbook=play)
        assert rdma.returncode == 0, c.report(rdma)
        assert recap(rdma.stdout)["n4"]["changed"] == (0 if run else 3), rdma.stdout[-5000:]
    out = c.on("n4", "dpkg-query -W -f '${Status}\\n' rdma-core ibverbs-providers; "
                     "cat /etc/security/limits.d/90-score-rdma.conf "
                     "/etc/systemd/network/60-score-ib0.network").stdout
    assert out.count("install ok installed") == 2, out
    assert "memlock    unlimited" in out and "Address=192.168.100.4/24" in out, out
    assert "Mode=connected" in out and "MTUBytes=65520" in out, out
    phase("rdma forced")

    # The networks' roles alone (a full run costs a minute more, and the
    # second run above showed the other roles idempotent), while AgentLost's
    # 30 s run (below): in the inventory n4 loses its second NIC and its
    # eth0 goes down to an MTU of 1400.  n4 changes its PM list and MTU; the
    # other nodes drop n4-eth1 from /etc/hosts and change nothing else, and
    # every node still reaches n4 with unfragmented datagrams of the smaller
    # MTU.  (PM runs no job after this.)
    network_play = tmp_path / "network.yml"
    network_play.write_text(NETWORK_PLAY)
    fewer = json.loads(run_vcluster("inventory", "--name", c.name, "--json").stdout)
    fewer["all"]["hosts"]["n4"]["score_networks"] = fewer["all"]["hosts"]["n4"]["score_networks"][:1]
    fewer["all"]["hosts"]["n4"]["score_networks"][0]["mtu"] = 1400
    inventory.write_text(json.dumps(fewer))
    net = c.playbook(inventory, playbook=network_play)
    assert net.returncode == 0, c.report(net)
    changed = changed_tasks(net.stdout)
    assert "score_network : Write PM's NIC list" in changed["n4"], changed
    assert all(changed.get(h, []) == [HOSTS_TASK] for h in ("n1", "n2", "n3")), changed
    assert c.on("n4", "grep -v '^#' /etc/score/pm.conf").stdout.split() == ["nic", "eth0"]
    assert c.on("n1", "getent hosts n4-eth1 || echo none").stdout.split() == ["none"]
    assert "eth0 -> n4 (" in net.stdout and ", 1372 bytes)" in net.stdout, net.stdout[-3000:]
    assert " mtu 1400 " in c.on("n4", "ip link show eth0").stdout
    assert "MTUBytes=1400" in c.on("n4", "cat /etc/systemd/network/60-score-eth0.network").stdout
    phase("NIC removal and MTU")

    # Its agent gone, n4 fires AgentLost (for: 30s) in Prometheus.
    def lost(doc):
        return any(a["labels"].get("alertname") == "AgentLost" and a["state"] == "firing"
                   and a["labels"].get("instance") == "n4:7102" for a in doc["data"]["alerts"])
    c.prometheus("/api/v1/alerts", timeout=120, until=lost, what="AgentLost firing for n4")
    c.on("n1", "systemctl stop scored-master")
    out = c.on("n1", "systemctl show -p ActiveState -p Result scored-master").stdout.split()
    assert sorted(out) == ["ActiveState=inactive", "Result=success"], out
    phase("AgentLost and master stopped")

    # Purged: nothing of score stays on the node.
    c.on("n4", f"{APT} purge {PACKAGES} libpm0 >/dev/null")
    # /etc/score/pm.conf is the role score_network's, not a package's.
    assert c.on("n4", "ls -A /etc/score").stdout.split() == ["pm.conf"]
    c.on("n4", "rm /etc/score/pm.conf && rmdir /etc/score")
    left = c.on("n4", "for p in /etc/score /var/lib/scored /run/score /usr/sbin/scored "
                      "/usr/lib/score /usr/bin/scrun /usr/bin/pmcheck "
                      "/etc/systemd/system/multi-user.target.wants/scored-agent.service; do "
                      "[ -e $p ] || [ -L $p ] && echo $p; done; "
                      "dpkg -l | awk '$2 ~ /^(scored|score-client|pm-tools|libpm0)$/'; true").stdout
    assert left.strip() == "", left
    phase("purge")
