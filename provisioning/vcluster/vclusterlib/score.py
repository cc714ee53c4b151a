"""Services on a cluster: MUNGE everywhere, and score (scored master + agents).

`vcluster up --with-munge|--with-score`, `vcluster score-up`, `score-down`
and `env` are built on this module.  Everything lives in the cluster's
service directory, /run/score/vcluster/NAME/ (SERVICE_DIR below):

    munge.key              the cluster's MUNGE key (0400), shared by all munged
    scored.toml            the master's configuration
    client.toml            for scrun/scorectl on the host: SCORE_CONFIG=...
    head/                  the host side (the "head node", root namespace)
      munge.socket  munged.pid  munged.log  munged.seed
      scored.log           the master's stdout and stderr
      state/               the master's state_dir (its jobs, for a restart of the master)
    nI/                    node nI
      munge.socket  munged.pid  munged.log  munged.seed
      scored.toml          the agent's configuration (also a [client] section)
      scored.log           the agent's stdout and stderr
      run/                 the agent's state_dir

Node daemons run inside the node, in the namespaces of its holder (network,
host name, mount); the master and the head's munged run on the host.  Before
an agent starts, the cgroup2 file system is mounted inside the node at the
host's path (a node's mount namespace has a fresh /sys without it), and
<cgroup2>/score-vcluster-NAME/nI is created as the agent's cgroup_root.

Like the rest of vcluster, stopping never depends on the state file: munged
and scored processes are found by their command lines, which all name a path
under SERVICE_DIR; the cgroups by their name.  Processes are signalled by PID
only, agents first, then the master, then munged.
"""

import contextlib
import datetime
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from . import holder, log, naming, procs, state, system
from .errors import VclusterError

REPO_ROOT = Path(__file__).resolve().parent.parent.parent.parent
DEFAULT_BIN = REPO_ROOT / "build" / "bin"

MASTER_PORT = 7100
MASTER_METRICS_PORT = 7101
AGENT_METRICS_PORT = 7102
HEARTBEAT_INTERVAL_MS = 500
HEARTBEAT_TIMEOUT_MS = 3000
READY_TIMEOUT = 20.0
MUNGED_TIMEOUT = 15.0
DEFAULT_GRACE = 3.0
KEY_BYTES = 1024
HEAD = "head"
CGROUP_PREFIX = "score-vcluster-"
MUNGED_PATHS = ("/usr/sbin", "/sbin", "/usr/local/sbin")


# --- where things are -------------------------------------------------------

def service_dir(name):
    return state.STATE_DIR / name


class Paths:
    """Every file of the services of cluster `name`."""

    def __init__(self, name):
        self.name = name
        self.dir = service_dir(name)
        self.key = self.dir / "munge.key"
        self.master_config = self.dir / "scored.toml"
        self.client_config = self.dir / "client.toml"

    @property
    def master_state_dir(self):
        return self.dir / HEAD / "state"

    def node_dir(self, node):
        return self.dir / node

    def socket(self, node):
        return self.dir / node / "munge.socket"

    def munged_file(self, node, what):
        return self.dir / node / f"munged.{what}"

    def scored_log(self, node):
        return self.dir / node / "scored.log"

    def agent_config(self, node):
        return self.dir / node / "scored.toml"

    def agent_state_dir(self, node):
        return self.dir / node / "run"

    def config_of(self, node):
        """The SCORE_CONFIG of a program running on `node` (head: the host)."""
        return self.client_config if node == HEAD else self.agent_config(node)


def cgroup2_mount(mounts="/proc/mounts"):
    """Where the cgroup v2 hierarchy is mounted on the host, or None."""
    try:
        with open(mounts) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[2] == "cgroup2":
                    return fields[1].replace("\\040", " ")
    except OSError:
        pass
    return None


def cgroup_dir(name, mount=None):
    mount = mount or cgroup2_mount()
    return Path(mount) / f"{CGROUP_PREFIX}{name}" if mount else None


# --- the configuration files ------------------------------------------------

def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string of ASCII is a TOML basic string


# An example key of each section --score-master and --score-agent set.
OVERRIDE_EXAMPLES = {"master": "gang_slots=1", "agent": "pm_net_device=eth"}


def parse_overrides(items, section="master"):
    """["gang_slots=1", "preemption=freeze"] -> {"gang_slots": 1, "preemption": "freeze"}:
    the keys of scored.toml's [section] given with --score-SECTION."""
    out = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or not key.replace("_", "").isalnum():
            raise VclusterError(f"--score-{section} {item!r}: expected KEY=VALUE, e.g. "
                                f"{OVERRIDE_EXAMPLES[section]}", 2)
        raw = raw.strip()
        if raw in ("true", "false"):
            out[key] = raw == "true"
        else:
            try:
                out[key] = int(raw)
            except ValueError:
                out[key] = raw
    return out


def render_toml(header, sections):
    """A TOML file from {section: {key: value}}, with a comment header."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for section, keys in sections.items():
        lines += ["", f"[{section}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def master_url(layout):
    return f"http://{layout.networks[0].host_address}:{MASTER_PORT}"


def configs(layout, paths, cgroup_mount, overrides=None, agent_overrides=None):
    """{path: text} of every configuration file of cluster `layout`;
    `overrides` are [master] keys, `agent_overrides` [agent] keys (every
    agent's), that replace or add to the defaults."""
    head_addr = layout.networks[0].host_address
    url = master_url(layout)
    note = (f"Written by `vcluster` for the virtual cluster {layout.name}; rewritten by every\n"
            f"`vcluster up --with-score` and removed by `vcluster down`.  Reference:\n"
            f"docs/scored/admin.md (keys) and docs/admin/vcluster.md (this layout).")
    files = {}
    files[paths.master_config] = render_toml(
        f"scored master of cluster {layout.name}.\n{note}\n\n"
        "allow_root_jobs is true because the tests run as root; a real cluster keeps it false.\n"
        "The heartbeat is fast so that tests see a dead node within seconds.", {
            "master": {
                "listen": f"{head_addr}:{MASTER_PORT}",
                "metrics_listen": f"{head_addr}:{MASTER_METRICS_PORT}",
                "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                "heartbeat_timeout_ms": HEARTBEAT_TIMEOUT_MS,
                "allow_root_jobs": True,
                "state_dir": str(paths.master_state_dir),
                "nodes": [node.name for node in layout.nodes],
                **(overrides or {}),
            },
            "client": {"master": url},
            "munge": {"socket": str(paths.socket(HEAD))},
        })
    files[paths.client_config] = render_toml(
        f"scrun and scorectl on the host of cluster {layout.name}:\n"
        f"  export SCORE_CONFIG={paths.client_config}\n{note}", {
            "client": {"master": url},
            "munge": {"socket": str(paths.socket(HEAD))},
        })
    for node in layout.nodes:
        cgroup = cgroup_dir(layout.name, cgroup_mount)
        files[paths.agent_config(node.name)] = render_toml(
            f"scored agent of node {node.name} of cluster {layout.name}; scrun and scorectl\n"
            f"inside the node use it too (vcluster exec sets SCORE_CONFIG to it).\n{note}", {
                "agent": {
                    "master": url,
                    "node_name": node.name,
                    "metrics_listen": f"{node.nics[0].address}:{AGENT_METRICS_PORT}",
                    "cgroup_root": str(cgroup / node.name) if cgroup else "",
                    "state_dir": str(paths.agent_state_dir(node.name)),
                    **(agent_overrides or {}),
                },
                "client": {"master": url},
                "munge": {"socket": str(paths.socket(node.name))},
            })
    return files


def _write(path, text, mode=0o644):
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


# --- finding and stopping the daemons ---------------------------------------

def classify(argv, name):
    """(role, node) of a munged/scored command line of cluster `name`, else None.

    role: "munged", "agent", "master", "scored" or "apt-proxy"; node: "head" or "nI"."""
    if not argv:
        return None
    marker = f"{service_dir(name)}/"
    paths = [a[a.index(marker) + len(marker):] for a in argv if marker in a]
    if not paths:
        return None
    first = paths[0].split("/", 1)[0]
    node = first if naming.node_index(first) or first == HEAD else HEAD
    base = os.path.basename(argv[0])
    if base == "munged":
        return "munged", node
    if base == "apt-cacher-ng":   # the apt proxy of root-file-system nodes (aptproxy.py)
        return "apt-proxy", HEAD
    # scored itself, or an interpreter running a script named scored.
    for i, arg in enumerate(argv[:2]):
        if os.path.basename(arg) == "scored":
            following = argv[i + 1] if len(argv) > i + 1 else ""
            return (following if following in ("agent", "master") else "scored"), node
    return None


def find(name):
    """{pid: (role, node)} of the live munged and scored processes of `name`."""
    return procs.matching(lambda argv: classify(argv, name))


def clusters_with_leftovers():
    """Names of clusters that have a service directory or a cgroup."""
    names = set()
    if state.STATE_DIR.is_dir():
        names |= {p.name for p in state.STATE_DIR.iterdir()
                  if p.is_dir() and naming._NAME_RE.match(p.name)}
    mount = cgroup2_mount()
    if mount and os.path.isdir(mount):
        for entry in os.listdir(mount):
            if entry.startswith(CGROUP_PREFIX):
                names.add(entry[len(CGROUP_PREFIX):])
    return {n for n in names if naming._NAME_RE.match(n)}


def _terminate(name, pids, grace, kill_wait=3.0):
    """SIGTERM, up to `grace` s, then SIGKILL; only PIDs that are still ours."""
    return procs.terminate_pids(pids, lambda pid: classify(procs.argv(pid), name), grace,
                                kill_wait)


def stop(name, grace=DEFAULT_GRACE, roles=("agent", "master", "scored", "munged", "apt-proxy")):
    """Stop the daemons of `name` with the given roles: agents, then the
    master, then munged, then the apt proxy.  Returns the PIDs that survived
    SIGKILL."""
    survivors = []
    for group in (("agent",), ("master", "scored"), ("munged",), ("apt-proxy",)):
        group = [r for r in group if r in roles]
        if not group:
            continue
        pids = [pid for pid, (role, _) in find(name).items() if role in group]
        if pids:
            what = "/".join(group)
            log.step(f"stopping {len(pids)} {what} process(es) of cluster {name} "
                     f"(SIGTERM, then SIGKILL after {grace:g}s)")
            survivors += _terminate(name, pids, grace)
    return survivors


def remove_cgroups(name, wait=5.0):
    """Remove <cgroup2>/score-vcluster-NAME bottom-up, killing what is left in it."""
    root = cgroup_dir(name)
    if root is None or not root.is_dir():
        return
    failures = remove_cgroup_tree(root, wait)
    if failures:
        raise VclusterError("cannot remove cgroups: " + "; ".join(failures))


def remove_cgroup_tree(top, wait=5.0):
    """Remove the cgroup directory `top` (v1 or v2) and everything under it,
    bottom-up, killing what is still in each (bounded).  Returns what could
    not be removed, one "path: reason" each."""
    failures = []
    for dirpath, _, _ in os.walk(top, topdown=False):
        cg = Path(dirpath)
        if _cgroup_procs(cg):
            _kill_cgroup(cg)
            deadline = time.monotonic() + wait
            while _cgroup_procs(cg) and time.monotonic() < deadline:
                time.sleep(0.05)
        try:
            cg.rmdir()
        except FileNotFoundError:
            pass
        except OSError as e:
            failures.append(f"{cg}: {e.strerror}")
    return failures


def _cgroup_procs(cg):
    try:
        return [int(p) for p in (cg / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_cgroup(cg):
    """cgroup.kill (Linux 5.14+) kills the whole subtree at once; else by PID."""
    try:
        (cg / "cgroup.kill").write_text("1")
        return
    except OSError:
        pass
    for pid in _cgroup_procs(cg):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def teardown(name, grace=DEFAULT_GRACE, keep_dir=False):
    """Stop every daemon of `name`, remove its cgroups and (unless keep_dir)
    its service directory.  Raises if something could not be removed."""
    survivors = stop(name, grace)
    if survivors:
        log.warn("processes that ignored SIGKILL: " + ", ".join(map(str, survivors)))
    remove_cgroups(name)
    if not keep_dir and service_dir(name).exists():
        shutil.rmtree(service_dir(name), ignore_errors=True)


# --- starting ---------------------------------------------------------------

def find_bin(score_bin=None):
    """{program: path} of scored, scorectl and scrun."""
    if score_bin:
        where = Path(score_bin)
        if not (where / "scored").is_file():
            raise VclusterError(f"--score-bin {score_bin}: no scored in it")
    elif (DEFAULT_BIN / "scored").is_file():
        where = DEFAULT_BIN
    elif shutil.which("scored"):
        where = Path(shutil.which("scored")).parent
    else:
        raise VclusterError(f"scored not found in {DEFAULT_BIN} nor in PATH: build it with "
                            "'make' or name its directory with --score-bin DIR")
    progs = {p: where / p for p in ("scored", "scorectl", "scrun")}
    missing = [p for p in ("scored", "scorectl") if not os.access(progs[p], os.X_OK)]
    if missing:
        raise VclusterError(f"{where} lacks {', '.join(missing)} (or it is not executable)")
    return {p: str(path.resolve()) if path.exists() else str(path) for p, path in progs.items()}


def munged_tool():
    path = shutil.which("munged", path=os.environ.get("PATH", "") + ":" + ":".join(MUNGED_PATHS))
    if not path:
        raise VclusterError("missing 'munged' (Debian package munge); "
                            "install it with: apt-get install munge")
    return path


def _in_node(holder_pid, argv):
    """argv run inside the node of `holder_pid` (network, host name, mount)."""
    return [system.tool("nsenter"), f"--target={holder_pid}", "--net", "--uts", "--mount",
            "--"] + list(argv)


def _holder(current, layout, node, wait=5.0):
    """The node's holder PID.  A holder reports ready just before it execs into
    its tagged `sleep`, so right after `up` it may take a moment to verify."""
    pid = state.holder_pid(current, node.name)
    deadline = time.monotonic() + wait
    while not holder.verify(pid, layout.name, node.name, node.netns) \
            and procs.alive(pid or 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    if not holder.verify(pid, layout.name, node.name, node.netns):
        raise VclusterError(f"node {node.name} of cluster {layout.name} has no holder process; "
                            f"run 'vcluster down --name {layout.name}' and 'vcluster up' again")
    return pid


def _ensure_key(paths):
    if paths.key.exists():
        return
    fd = os.open(paths.key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(KEY_BYTES))
    os.chmod(paths.key, 0o400)


def _munged_argv(paths, node, origin):
    return [munged_tool(), f"--socket={paths.socket(node)}", f"--key-file={paths.key}",
            f"--pid-file={paths.munged_file(node, 'pid')}",
            f"--log-file={paths.munged_file(node, 'log')}",
            f"--seed-file={paths.munged_file(node, 'seed')}", f"--origin={origin}"]


def start_munge(current, layout, paths):
    """The key and one munged per node plus the head's; returns {node: pid}.

    munged forks into the background once its socket is ready, so each
    start is waited for; all start in parallel."""
    paths.dir.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.dir, 0o755)  # munged wants its socket's directories searchable by all
    _ensure_key(paths)
    jobs = [(HEAD, _munged_argv(paths, HEAD, layout.networks[0].host_address))]
    for node in layout.nodes:
        jobs.append((node.name, _in_node(_holder(current, layout, node),
                                         _munged_argv(paths, node.name, node.nics[0].address))))
    log.step(f"starting {len(jobs)} munged (one per node, one for the host) with the key {paths.key}")
    running = []
    for node, argv in jobs:
        d = paths.node_dir(node)
        d.mkdir(exist_ok=True)
        os.chmod(d, 0o755)
        for what in ("pid",):
            with contextlib.suppress(FileNotFoundError):
                paths.munged_file(node, what).unlink()
        err = tempfile.TemporaryFile()  # a pipe could be held open by the daemon
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                cwd="/", start_new_session=True)
        running.append((node, proc, err))
    pids, errors = {}, []
    deadline = time.monotonic() + MUNGED_TIMEOUT
    for node, proc, err in running:
        try:
            rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        err.seek(0)
        text = err.read().decode(errors="replace").strip()
        err.close()
        pid = _read_pid(paths.munged_file(node, "pid"))
        if rc != 0 or pid is None:
            why = f"did not start within {MUNGED_TIMEOUT:g}s" if rc is None else f"exited {rc}"
            errors.append(f"munged of {node} {why}: {text or 'no message'} "
                          f"(log: {paths.munged_file(node, 'log')})")
        else:
            pids[node] = pid
    if errors:
        raise VclusterError("; ".join(errors))
    return pids


def _read_pid(path):
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


_MOUNT_CGROUP2 = """set -e
p="$1"
if [ ! -d "$p" ]; then
  case "$p" in
    /sys/fs/cgroup/*) mountpoint -q /sys/fs/cgroup || mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup ;;
  esac
  mkdir -p "$p"
fi
mount -t cgroup2 cgroup2 "$p"
"""


def _node_has_cgroup2(holder_pid, mount):
    try:
        with open(f"/proc/{holder_pid}/mounts") as f:
            return any(line.split()[1:3] == [mount, "cgroup2"] for line in f if line.strip())
    except OSError:
        return False


def prepare_cgroups(current, layout):
    """<cgroup2>/score-vcluster-NAME/nI for every node, visible inside the
    nodes at the same path.  Returns the cgroup2 mount point, or None."""
    mount = cgroup2_mount()
    if mount is None:
        log.warn("no cgroup2 file system in /proc/mounts: the agents get no cgroup_root "
                 "(mount one, e.g. 'mount -t cgroup2 none /sys/fs/cgroup')")
        return None
    root = cgroup_dir(layout.name, mount)
    log.step(f"creating cgroups {root}/n1..n{len(layout.nodes)} and mounting cgroup2 in the nodes")
    root.mkdir(exist_ok=True)
    _delegate_controllers(root)
    for node in layout.nodes:
        (root / node.name).mkdir(exist_ok=True)
        _delegate_controllers(root / node.name)
        hpid = _holder(current, layout, node)
        if not _node_has_cgroup2(hpid, mount):
            proc = subprocess.run(_in_node(hpid, ["/bin/sh", "-c", _MOUNT_CGROUP2, "sh", mount]),
                                  capture_output=True, text=True, timeout=30)
            if proc.returncode != 0:
                raise VclusterError(f"cannot mount cgroup2 at {mount} in node {node.name}: "
                                    f"{proc.stderr.strip()}")
    return mount


def _delegate_controllers(cg):
    """Enable for the children of `cg` every controller it has (best effort)."""
    try:
        controllers = (cg / "cgroup.controllers").read_text().split()
    except OSError:
        return
    for c in controllers:
        with contextlib.suppress(OSError):
            (cg / "cgroup.subtree_control").write_text(f"+{c}")


def start_daemon(argv, logfile, what):
    with open(logfile, "a") as f:
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        f.write(f"=== {stamp} vcluster: starting {what}: {' '.join(argv)}\n")
        f.flush()
        # A session of its own, so that ^C at the terminal of `vcluster up` spares it.
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                cwd="/", start_new_session=True)


def start_scored(current, layout, paths, bins, ready_timeout=READY_TIMEOUT, overrides=None,
                 agent_overrides=None):
    """Write the configurations, start the master and the agents, wait until
    every node is up.  Returns {"master": pid, "agents": {node: pid}}."""
    mount = prepare_cgroups(current, layout)
    for path, text in configs(layout, paths, mount, overrides, agent_overrides).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, text)
    for node in layout.nodes:
        paths.agent_state_dir(node.name).mkdir(exist_ok=True)
    # Master and agents start afresh: no agent holds a job the master could
    # adopt, so a state saved by an earlier master would only be jobs to fail.
    shutil.rmtree(paths.master_state_dir, ignore_errors=True)
    paths.master_state_dir.mkdir(mode=0o700, parents=True)
    log.step(f"starting the scored master on {layout.networks[0].host_address}:{MASTER_PORT} "
             f"and {len(layout.nodes)} agent(s)")
    started = {HEAD: start_daemon([bins["scored"], "master", "--config", str(paths.master_config)],
                                   paths.scored_log(HEAD), "scored master")}
    for node in layout.nodes:
        argv = _in_node(_holder(current, layout, node),
                        [bins["scored"], "agent", "--config", str(paths.agent_config(node.name))])
        started[node.name] = start_daemon(argv, paths.scored_log(node.name),
                                           f"scored agent {node.name}")
    wait_ready(layout, paths, bins, started, ready_timeout)
    return {"master": started[HEAD].pid,
            "agents": {n: p.pid for n, p in started.items() if n != HEAD}}


def tail_of(path, lines=5):
    try:
        text = Path(path).read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def wait_for_daemons(started, probe, died, timeout, failed):
    """Poll probe() -> (ready, description of what is not) every 0.2 s
    until ready.  A daemon of `started` ({node: Popen}) that exits fails at
    once with the message died(node, status); when `timeout` s pass, the
    error is failed(last description)."""
    deadline = time.monotonic() + timeout
    while True:
        for node, proc in started.items():
            rc = proc.poll()
            if rc is not None:
                raise VclusterError(died(node, rc))
        ready, last = probe()
        if ready:
            return
        if time.monotonic() > deadline:
            raise VclusterError(failed(last))
        time.sleep(0.2)


def wait_ready(layout, paths, bins, started, timeout=READY_TIMEOUT):
    """Until `scorectl nodes --json` shows every node up (bounded)."""
    env = dict(os.environ, SCORE_CONFIG=str(paths.client_config))
    env.pop("SCORE_MASTER", None)  # scorectl would prefer it to the configuration
    want = {node.name for node in layout.nodes}

    def probe():
        try:
            proc = subprocess.run([bins["scorectl"], "nodes", "--json"], env=env,
                                  capture_output=True, text=True, timeout=10,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return False, "scorectl nodes --json did not answer within 10 s"
        if proc.returncode != 0:
            return False, (f"scorectl nodes --json exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-300:]}")
        return _nodes_up(proc.stdout, want)

    def died(node, rc):
        what = "master" if node == HEAD else f"agent of {node}"
        return (f"scored {what} exited with status {rc}; "
                f"{paths.scored_log(node)}: {tail_of(paths.scored_log(node))}")

    def failed(last):
        logs = ", ".join(str(paths.scored_log(n)) for n in started)
        return f"score did not come up within {timeout:g} s ({last}); see the logs: {logs}"
    wait_for_daemons(started, probe, died, timeout, failed)


def _nodes_up(text, want):
    """(all up?, description) from the output of `scorectl nodes --json`."""
    try:
        nodes = json.loads(text)
    except ValueError:
        return False, f"scorectl nodes --json printed no JSON: {text.strip()[:200]!r}"
    if isinstance(nodes, dict) and isinstance(nodes.get("nodes"), list):
        nodes = nodes["nodes"]
    if not isinstance(nodes, list):
        return False, "scorectl nodes --json printed no JSON array"
    states = {str(n.get("name")): str(n.get("state", "")).lower()
              for n in nodes if isinstance(n, dict)}
    missing = sorted(want - set(states))
    not_up = sorted(n for n in want & set(states) if states[n] != "up")
    if not missing and not not_up:
        return True, "all nodes up"
    parts = [f"{n} {states[n] or '?'}" for n in not_up] + [f"{n} unknown" for n in missing]
    return False, "nodes not up: " + ", ".join(parts)


# --- the state and the commands ---------------------------------------------

def _verify(pid, name, role, node):
    return bool(pid) and procs.alive(pid) and classify(procs.argv(pid), name) == (role, node)


def running(current):
    """(munge_ok, scored_ok, problems) for the services recorded in a state."""
    name = current["name"]
    svc = current.get("score") or {}
    problems = []
    munged = svc.get("munged") or {}
    for node, pid in munged.items():
        if not _verify(pid, name, "munged", node):
            problems.append(f"munged of {node}")
    munge_ok = bool(munged) and not problems
    scored = svc.get("scored")
    scored_ok = False
    if scored:
        bad = [] if _verify(scored.get("master"), name, "master", HEAD) else ["the master"]
        bad += [f"agent of {n}" for n, pid in scored.get("agents", {}).items()
                if not _verify(pid, name, "agent", n)]
        problems += bad
        scored_ok = not bad and munge_ok
    return munge_ok, scored_ok, problems


def up(name, with_scored, score_bin=None, ready_timeout=READY_TIMEOUT, overrides=None,
       agent_overrides=None):
    """Start MUNGE (and with_scored: scored) on cluster `name`, which must be
    up.  Idempotent.  Returns (changed, state)."""
    system.require_root()
    system.require_tools("nsenter")
    munged_tool()
    bins = find_bin(score_bin) if with_scored else None
    with state.lock():
        current = state.load(name)
        if current is None:
            raise VclusterError(f"cluster {name} is not up (start it with 'vcluster up --name {name}')")
        if current.get("rootfs"):
            raise VclusterError(f"cluster {name} has nodes with their own root file system: "
                                "install score and MUNGE there from their packages "
                                "(docs/admin/vcluster.md)")
        layout = state.layout(current)
        paths = Paths(name)
        munge_ok, scored_ok, problems = running(current)
        svc = current.get("score") or {}
        # Overrides stay with the cluster: a restart keeps them; new ones
        # need score-down first.
        stored = svc.get("scored") or {}
        given = {"master": overrides or {}, "agent": agent_overrides or {}}
        for section, keys in given.items():
            kept = stored.get(f"{section}_overrides") or {}
            if not keys:
                given[section] = kept
            elif scored_ok and keys != kept:
                raise VclusterError(f"scored already runs on cluster {name} with other "
                                    f"[{section}] settings; 'vcluster score-down --name {name}' "
                                    "first", 2)
        overrides, agent_overrides = given["master"], given["agent"]
        if munge_ok and (scored_ok or not with_scored):
            what = "score" if with_scored else "MUNGE"
            log.step(f"{what} is already running on cluster {name}; nothing to do")
            return False, current
        try:
            if not munge_ok:
                if problems:
                    log.step(f"restarting the services of cluster {name} ({', '.join(problems)} "
                             "not running)")
                teardown(name, keep_dir=True)
                svc = {"dir": str(paths.dir), "key": str(paths.key), "client_config": None,
                       "munged": start_munge(current, layout, paths), "scored": None}
            elif svc.get("scored"):
                log.step(f"restarting scored on cluster {name} ({', '.join(problems)} not running)")
                stop(name, roles=("agent", "master", "scored"))
                remove_cgroups(name)
            if with_scored:
                svc["scored"] = dict(start_scored(current, layout, paths, bins, ready_timeout,
                                                  overrides, agent_overrides),
                                     bin=str(Path(bins["scored"]).parent),
                                     url=master_url(layout), master_overrides=overrides,
                                     agent_overrides=agent_overrides)
                svc["client_config"] = str(paths.client_config)
        except BaseException as e:
            log.step(f"starting the services of cluster {name} failed ({e or type(e).__name__}); "
                     "stopping what was started (the logs stay in "
                     f"{paths.dir}; the network stays up)")
            with contextlib.suppress(VclusterError):
                teardown(name, keep_dir=True)
            current.pop("score", None)
            state.save(current)
            raise
        current["score"] = svc
        state.save(current)
        if with_scored:
            log.step(f"score is running on cluster {name}; for clients on the host: "
                     f"export SCORE_CONFIG={paths.client_config}")
        else:
            log.step(f"MUNGE is running on cluster {name}: socket {paths.socket(HEAD)} on the "
                     f"host, {paths.dir}/nI/munge.socket in node nI")
        return True, current


def down(name, grace=DEFAULT_GRACE):
    """Stop the services of cluster `name`, leaving its network up."""
    system.require_root()
    with state.lock():
        current = state.load(name)
        found = find(name)
        cg = cgroup_dir(name)
        if not found and not service_dir(name).exists() and not (cg and cg.exists()):
            log.step(f"no services of cluster {name} are running; nothing to do")
            if current and current.pop("score", None) is not None:
                state.save(current)
            return False
        teardown(name, grace)
        if current is not None:
            current.pop("score", None)
            state.save(current)
        log.step(f"the services of cluster {name} are stopped")
        return True


def environment(current, node=None):
    """{variable: value} a user needs for score on the cluster (or in `node`)."""
    paths = Paths(current["name"])
    env = {"VCLUSTER_NAME": current["name"]}
    svc = current.get("score") or {}
    if svc.get("munged"):
        env["MUNGE_SOCKET"] = str(paths.socket(node or HEAD))
    if svc.get("scored"):
        env["SCORE_CONFIG"] = str(paths.config_of(node or HEAD))
        env["SCORE_BIN"] = svc["scored"]["bin"]
    if current.get("slurm"):
        env["SLURM_CONF"] = current["slurm"]["conf"]
    return env


def exec_environment(current, node, environ):
    """The environment for a command run in `node`: SCORE_CONFIG names the
    node's configuration unless the caller chose one outside this cluster;
    SLURM_CONF the cluster's slurm.conf unless the caller chose one."""
    if current.get("slurm") and not environ.get("SLURM_CONF"):
        environ = dict(environ, SLURM_CONF=current["slurm"]["conf"])
    if not (current.get("score") or {}).get("scored"):
        return environ
    mine = str(service_dir(current["name"])) + "/"
    chosen = environ.get("SCORE_CONFIG")
    if chosen and not chosen.startswith(mine):
        return environ
    return dict(environ, SCORE_CONFIG=str(Paths(current["name"]).config_of(node)))
