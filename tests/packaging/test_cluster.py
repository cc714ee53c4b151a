"""score installed the way a site installs it (docs/admin/packages.md), on a
cluster of 4 root-file-system nodes (`vcluster up --rootfs`): apt installs
the packages from the local repository through the cluster's proxy, systemd
runs the master and the agents from the installed units, a 4x2 PM job runs
from the installed files alone; an upgrade keeps the edited configuration
and restarts the daemons; `systemctl stop` ends them cleanly; a purge leaves
nothing of score."""

import json
import shutil
import subprocess
import time

import pytest

from conftest import VCLUSTER, run_vcluster, unique_cluster_name

from .conftest import NEXT_VERSION, VERSION

NODES = [f"n{i}" for i in range(1, 5)]
UP_TIMEOUT = 1500
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Use-Pty=0"
PACKAGES = "scored score-client pm-tools"


def config():
    """/etc/score/scored.toml of `node`, edited from the packaged one: the
    master on n1, 2 slots per node, root may run jobs (the test is root)."""
    return (
        "set -e; f=/etc/score/scored.toml; "
        "sed -i -e 's/^allow_root_jobs = false$/allow_root_jobs = true/' "
        "-e 's/^# nodes = .*/nodes = [\"n1\", \"n2\", \"n3\", \"n4\"]/' "
        "-e 's|^master = \"http://head:7100\".*|master = \"http://n1:7100\"|' "
        "-e 's/^slots = 0 .*/slots = 2/' "
        "-e 's|^# master = \"http://head:7100\".*|master = \"http://n1:7100\"|' $f; "
        "echo '# edited by the test' >> $f; "
        "grep -qx 'allow_root_jobs = true' $f && grep -qx 'slots = 2' $f")


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
    repository (the upgrade adds the next version to it)."""
    repo = debs[0] / "cluster-repo"
    shutil.copytree(debs[0] / "repo", repo)
    name = unique_cluster_name()
    try:
        up = run_vcluster("up", "--name", name, "--nodes", len(NODES), "--rootfs", "--repo", repo,
                          timeout=UP_TIMEOUT)
        assert up.returncode == 0, up.stderr
        yield Cluster(name, repo)
    finally:
        down = run_vcluster("down", "--name", name, timeout=180)
        assert down.returncode == 0, down.stderr


def test_installed_packages_run_a_pm_job_upgrade_stop_and_purge(cluster, next_debs):
    c = cluster
    # Installed from the repository (Debian's packages through the proxy).
    versions = c.everywhere(f"apt-get -q update >/dev/null && {APT} install {PACKAGES} >/dev/null"
                            " && dpkg-query -W -f '${Version}\\n' scored score-client pm-tools")
    assert all(v.split() == [VERSION] * 3 for v in versions.values()), versions

    # One MUNGE key for the cluster (n1's), configuration, units enabled.
    key = c.on("n1", "base64 -w0 /etc/munge/munge.key").stdout.strip()
    c.everywhere(f"echo {key} | base64 -d > /etc/munge/munge.key && "
                 "chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key && "
                 f"systemctl restart munge && {config()}")
    c.on("n1", "systemctl enable --now scored-master")
    c.everywhere("systemctl enable --now scored-agent")
    c.wait_nodes_up()

    # A 4x2 PM job from the head, with nothing but installed files.
    job = c.on("n1", "command -v scrun; command -v pmcheck; "
                     "scrun -nodes=4x2 pmcheck --pattern all --quiet; echo status=$?", timeout=300)
    assert job.stdout.split()[:2] == ["/usr/bin/scrun", "/usr/bin/pmcheck"], job.stdout
    assert job.stdout.strip().endswith("status=0"), job.stdout + job.stderr
    assert "/work" not in job.stdout and "build/" not in job.stdout

    # Upgrade: the edited configuration stays, the daemons restart.
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

    # systemctl stop: a clean end, not a failure.
    c.on("n4", "systemctl stop scored-agent")
    out = c.on("n4", "systemctl show -p ActiveState -p Result -p ExecMainStatus "
                     "scored-agent").stdout.split()
    assert sorted(out) == ["ActiveState=inactive", "ExecMainStatus=0", "Result=success"], out
    c.on("n1", "systemctl stop scored-master")
    out = c.on("n1", "systemctl show -p ActiveState -p Result scored-master").stdout.split()
    assert sorted(out) == ["ActiveState=inactive", "Result=success"], out

    # Purged: nothing of score stays on the node.
    c.on("n4", f"{APT} purge {PACKAGES} libpm0 >/dev/null")
    left = c.on("n4", "for p in /etc/score /var/lib/scored /run/score /usr/sbin/scored "
                      "/usr/lib/score /usr/bin/scrun /usr/bin/pmcheck "
                      "/etc/systemd/system/multi-user.target.wants/scored-agent.service; do "
                      "[ -e $p ] || [ -L $p ] && echo $p; done; "
                      "dpkg -l | awk '$2 ~ /^(scored|score-client|pm-tools|libpm0)$/'; true").stdout
    assert left.strip() == "", left
