"""Running scrun and scorectl against a virtual cluster with real scored.

`Score` wraps one cluster that runs score (`vcluster up --with-score`): it
runs scrun and scorectl on the host with the cluster's client configuration,
starts scrun in the background (`Scrun`, output into files, its own session,
ended by its PID), and looks at what a job leaves behind: its cgroups under
the agents' cgroup_root and its processes (found by a unique marker in their
command lines — the nodes share the host's PID space).

`Score.cleanup()` runs after every test: it ends every scrun the test
started, kills every job that is still active and waits (bounded) until the
master has none, so that the next test finds the cluster idle.
"""

import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import tomllib
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

from conftest import REPO_ROOT, kill_by_pid
from vclusterlib import procs
from vclusterlib import score as vscore

BUILD = Path(os.environ.get("SCORE_BUILD", REPO_ROOT / "build"))
BUILD_BIN = BUILD / "bin"
# scored, scrun, scorectl; SCORE_TEST_BIN points the tests at another build
# (the same variable as tests/vcluster's).
SCORE_BIN = Path(os.environ.get("SCORE_TEST_BIN") or BUILD_BIN)
PMCHECK = BUILD_BIN / "pmcheck"
PM_RING_PASS = BUILD_BIN / "pm-ring-pass"
PROGRAMS = REPO_ROOT / "tests" / "programs"

COMMAND_TIMEOUT = 60
# How long a job may take to disappear after it ended (agents kill the job
# cgroup, report, remove it).
CLEANUP_TIMEOUT = 20

ACTIVE = {"pending", "launching", "running", "completing"}


def wait_for(predicate, timeout, what, interval=0.1):
    """predicate()'s first truthy value, polling for at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def marker():
    """A unique `sleep` duration (e.g. 371.402915): a job that sleeps it is
    found by its command line, and nothing else on the machine has it."""
    return f"{random.randint(300, 899)}.{random.randint(100000, 999999)}"


def processes_with(text):
    """{pid: argv} of live processes (not scrun itself, not zombies) whose
    command line contains `text`."""
    found = {}
    for pid in procs.pids():
        argv = procs.argv(pid)
        if not argv or not any(text in a for a in argv):
            continue
        if os.path.basename(argv[0]) == "scrun" or not procs.alive(pid):
            continue
        found[pid] = argv
    return found


def scored_pid(vc, role, node="head"):
    """The PID of the live scored `role` ("master", "agent") of `node` of
    cluster `vc`, found by its command line (vcluster's own way), else None."""
    return next((pid for pid, found in vscore.find(vc.name).items() if found == (role, node)),
                None)


def master_state_dir(vc):
    """The master's state directory in a virtual cluster (vcluster's
    scored.toml: master.state_dir), where it saves master.state."""
    return vc.service_dir / "head" / "state"


def metric_values(text, name):
    """{labels-string: value} of the samples of metric `name` in a
    Prometheus text exposition."""
    values = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m and m.group(1) == name:
            values[m.group(2) or ""] = float(m.group(3))
    return values


class Scrun:
    """scrun in the background, in its own session; stdout and stderr go to
    files (so a talkative job never blocks on a full pipe)."""

    def __init__(self, argv, env, cwd, workdir, stdin=None):
        n = len(list(workdir.glob("scrun*.out")))
        self.argv = argv
        self.out_path = workdir / f"scrun{n}.out"
        self.err_path = workdir / f"scrun{n}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                argv, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True)
        self.pid = self.proc.pid

    def stdout(self):
        return self.out_path.read_text(errors="replace")

    def stderr(self):
        return self.err_path.read_text(errors="replace")

    def signal(self, sig):
        os.kill(self.pid, sig)

    def wait(self, timeout=COMMAND_TIMEOUT):
        """scrun's exit status; fails the test if it does not end in time."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{' '.join(map(str, self.argv))} did not end within "
                                 f"{timeout} s; stderr: {self.stderr()[-2000:]}") from None

    def job_id(self, timeout=30):
        """The job's id from `scrun -v`'s 'job N submitted'."""
        def find():
            m = re.search(r"scrun: job (\d+) submitted", self.stderr())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise AssertionError(f"scrun exited {self.proc.returncode} before its job was "
                                     f"accepted: {self.stderr()}")
            return None
        return wait_for(find, timeout, "scrun -v to report its job id")

    def kill(self):
        """End it by its PID, then whatever is left of the session it leads
        (the other commands of a pipeline)."""
        kill_by_pid(self.proc)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Score:
    """scrun and scorectl against cluster `vc`; see the module's docstring."""

    def __init__(self, vc, bin_dir=SCORE_BIN):
        self.vc = vc
        self.bin = Path(bin_dir)
        self.env = vc.score_env()
        self.config = self.env["SCORE_CONFIG"]
        self.master_url = tomllib.loads(Path(self.config).read_text())["client"]["master"]
        # Each agent's cgroup_root, from its configuration.
        self.cgroup_roots = {}
        for node in vc.nodes:
            conf = tomllib.loads((vc.service_dir / node / "scored.toml").read_text())
            root = conf.get("agent", {}).get("cgroup_root")
            if root:
                self.cgroup_roots[node] = Path(root)
        # Readable by every user: jobs of `nobody` write and read here too.
        self.workdir = Path(tempfile.mkdtemp(prefix="score-test-", dir="/tmp"))
        os.chmod(self.workdir, 0o755)
        self._scruns = []

    # --- running the clients ------------------------------------------------

    def scrun_argv(self, args, user=None):
        argv = [str(self.bin / "scrun"), *map(str, args)]
        if user:
            argv = ["setpriv", f"--reuid={user}", "--regid=nogroup" if user == "nobody"
                    else f"--regid={user}", "--clear-groups"] + argv
        return argv

    def scrun(self, *args, input=None, timeout=COMMAND_TIMEOUT, env=None, cwd="/tmp", user=None):
        """Run scrun to its end; the CompletedProcess (text)."""
        return subprocess.run(self.scrun_argv(args, user), input=input,
                              stdin=None if input is not None else subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace", timeout=timeout,
                              env=env or self.env, cwd=cwd)

    def start(self, *args, env=None, cwd="/tmp", user=None, stdin=None):
        """Start scrun in the background; it is ended by its PID after the test."""
        run = Scrun(self.scrun_argv(args, user), env or self.env, cwd, self.workdir, stdin)
        self._scruns.append(run)
        return run

    def start_shell(self, script, env=None, cwd="/tmp"):
        """Start `sh -c script` in the background (a pipeline around scrun);
        its process group is ended after the test."""
        run = Scrun(["sh", "-c", script], env or self.env, cwd, self.workdir)
        self._scruns.append(run)
        return run

    def scorectl(self, *args, env=None, user=None, timeout=30):
        argv = [str(self.bin / "scorectl"), *map(str, args)]
        if user:
            argv = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"] + argv
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=env or self.env, stdin=subprocess.DEVNULL, cwd="/tmp")

    def scorectl_json(self, *args):
        proc = self.scorectl(*args, "--json")
        assert proc.returncode == 0, f"scorectl {' '.join(map(str, args))} --json exited " \
                                     f"{proc.returncode}: {proc.stderr}"
        return json.loads(proc.stdout)

    # --- what the master knows ---------------------------------------------

    def nodes(self):
        return {n["name"]: n for n in self.scorectl_json("nodes")}

    def jobs(self, all=False):
        return self.scorectl_json("jobs", "--all") if all else self.scorectl_json("jobs")

    def job(self, job_id):
        return self.scorectl_json("show", job_id)

    def wait_job(self, job_id, states, timeout=30):
        """The job object once its state is one of `states`."""
        states = {states} if isinstance(states, str) else set(states)
        return wait_for(lambda: (lambda j: j if j["state"] in states else None)(self.job(job_id)),
                        timeout, f"job {job_id} to be {'/'.join(sorted(states))}", interval=0.2)

    # --- what a job leaves behind ----------------------------------------------

    def job_cgroups(self, job_id):
        """The job's cgroups that still exist, on any node."""
        return sorted(p for root in self.cgroup_roots.values()
                      for p in [root / f"job-{job_id}"] if p.exists())

    def assert_job_gone(self, job_id, mark=None, timeout=CLEANUP_TIMEOUT):
        """Every cgroup of the job is removed and, with `mark`, no process
        whose command line contains it is left anywhere."""
        def gone():
            return not self.job_cgroups(job_id) and not (mark and processes_with(mark))
        try:
            wait_for(gone, timeout, f"the processes and cgroups of job {job_id} to go")
        except AssertionError:
            raise AssertionError(
                f"job {job_id} left behind: cgroups {self.job_cgroups(job_id)}, "
                f"processes {processes_with(mark) if mark else '-'}") from None

    # --- teardown ----------------------------------------------------------------

    def cleanup(self):
        """End every scrun of the test and every job still active; wait until
        the master has none (bounded)."""
        for run in self._scruns:
            run.kill()
        self._scruns.clear()
        try:
            active = [j["id"] for j in self.jobs() if j["state"] in ACTIVE]
            for job_id in active:
                self.scorectl("cancel", "--kill", job_id)
            if active:
                wait_for(lambda: not [j for j in self.jobs() if j["state"] in ACTIVE],
                         CLEANUP_TIMEOUT, f"jobs {active} to end after the test")
        finally:
            remove_tree(self.workdir)


def remove_tree(path, tries=10):
    """rmtree, again while the directory is still there (bounded): a job's
    process that is ending may create a file in it while the first pass
    runs, and then the last rmdir fails (one empty score-test-* directory
    was left per CI run)."""
    for _ in range(tries):
        shutil.rmtree(path, ignore_errors=True)
        if not Path(path).exists():
            return
        time.sleep(0.2)


def build_program(dest_dir, name, cc=("cc",), flags=()):
    """Compile tests/programs/NAME.c with `cc` (and `flags` after the
    source) into dest_dir."""
    exe = Path(dest_dir) / name
    proc = subprocess.run([*cc, "-O1", "-o", str(exe), str(PROGRAMS / f"{name}.c"), *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{cc[0]} failed: {proc.stderr}"
    os.chmod(exe, 0o755)
    return exe


def build_mpi_program(dest_dir, name="mpi_ring"):
    """Compile tests/programs/NAME.c with Debian's mpicc into dest_dir."""
    return build_program(dest_dir, name, cc=("mpicc",))


def build_pmix_program(dest_dir, name):
    """Compile tests/programs/NAME.c against libpmix (pkg-config pmix)."""
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "pmix"], capture_output=True,
                           text=True, timeout=30, check=True).stdout.split()
    return build_program(dest_dir, name, flags=flags)


def build_pm_program(dest_dir, name):
    """Compile tests/programs/NAME.c against the libpm of the build
    (BUILD/include, BUILD/lib, which `make` installs)."""
    lib = BUILD / "lib"
    assert (lib / "libpm.so").exists(), f"{lib}/libpm.so is missing: make build"
    return build_program(dest_dir, name, flags=(f"-I{BUILD / 'include'}", f"-L{lib}", "-lpm",
                                                f"-Wl,-rpath,{lib}"))


def scrape(url):
    """The text of a Prometheus /metrics page."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers.get_content_type() in ("text/plain",
                                                   "application/openmetrics-text"), resp.headers
        return resp.read().decode()


def agent_metrics_url(score, node):
    return score.nodes()[node]["metrics_url"]


def job_metrics(score, job_id, metrics, nodes=None):
    """{metric: {labels: value}} of one job's samples of `metrics` on the
    agents of `nodes` (default: every node), each agent scraped once."""
    out = {m: {} for m in metrics}
    for node in nodes if nodes is not None else score.nodes():
        text = scrape(agent_metrics_url(score, node))
        for m in metrics:
            out[m].update({k: v for k, v in metric_values(text, m).items()
                           if f'job="{job_id}"' in k})
    return out


def grpc_frame(message):
    """A gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + struct.pack(">I", len(message)) + message


# --- sealed messages (docs/scored/protocol.md) -----------------------------------------

SEAL_TAG = b"score.v1.sealed\0"
REQUEST, REPLY = 1, 2


def pb_varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_field(number, value):
    """One protobuf field: an int as a varint, bytes/str length-delimited."""
    if isinstance(value, int):
        return pb_varint(number << 3) + pb_varint(value)
    if isinstance(value, str):
        value = value.encode()
    return pb_varint(number << 3 | 2) + pb_varint(len(value)) + value


def seal_digest(direction, method, call, seq, body):
    """SHA-256 of the digest input: tag, direction, method path, call, seq, body."""
    path = f"/score.v1.Master/{method}".encode()
    return hashlib.sha256(SEAL_TAG + bytes([direction]) + struct.pack(">H", len(path)) + path
                          + call + struct.pack(">Q", seq) + struct.pack(">I", len(body))
                          + body).digest()


def munge_credential(socket, payload=b"", user=None, reader=None, cipher=None):
    """A credential from the munged at `socket` carrying `payload`, made as
    `user` (setpriv) or as root, that only uid `reader` may decode (or any),
    with munge's `cipher` (or munged's default)."""
    argv = ["munge", "-S", str(socket)]
    if cipher:
        argv += ["--cipher", cipher]
    if reader is not None:
        argv += ["--restrict-uid", str(reader)]
    if user:
        argv = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"] + argv
    proc = subprocess.run(argv, input=payload, capture_output=True, timeout=10)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout.decode().strip()


def sealed(method, body, socket, user=None, call=None, seq=0, direction=REQUEST,
           credential=None):
    """The envelope (a score.v1.Sealed) of `body` as message `seq` of a call
    of `method`, sealed as request 0 is (docs/scored/protocol.md): a
    credential made by the munged at `socket` (or the one given) carrying the
    digest and a fresh call key, for the master's uid (0) alone; returns
    (envelope bytes, call nonce)."""
    call = call or os.urandom(16)
    if credential is None:
        credential = munge_credential(
            socket, seal_digest(direction, method, call, seq, body) + os.urandom(32), user,
            reader=0)
    envelope = (pb_field(1, call) + (pb_field(2, seq) if seq else b"")
                + pb_field(3, credential) + (pb_field(4, body) if body else b""))
    return envelope, call


def grpc_call(hostport, method, body, headers=()):
    """POST one raw gRPC request to the master's `method` with curl (HTTP/2
    without TLS); returns (its headers and trailers as {lowercase name:
    value}, curl's CompletedProcess)."""
    argv = ["curl", "-sS", "--http2-prior-knowledge", "--max-time", "10", "-D", "-",
            "-o", "/dev/null", "-X", "POST",
            "-H", "content-type: application/grpc", "-H", "te: trailers"]
    for h in headers:
        argv += ["-H", h]
    argv += ["--data-binary", "@-", f"http://{hostport}/score.v1.Master/{method}"]
    proc = subprocess.run(argv, input=body, capture_output=True, timeout=30)
    fields = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        name, sep, value = line.partition(":")
        if sep and not name.startswith("HTTP/"):
            fields[name.strip().lower()] = urllib.parse.unquote(value.strip())
    return fields, proc


# --- the agents of a cluster ----------------------------------------------------------


def agent_pid(vc, node):
    """The PID of node's agent, as vcluster recorded it (checked against
    its command line, so that nothing else is signalled by mistake)."""
    pid = vc.services["scored"]["agents"][node]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"agent" in argv and str(vc.service_dir / node / "scored.toml").encode() in argv, \
        f"PID {pid} is not the agent of {node}: {argv}"
    return pid


def start_agent(vc, node):
    """Start node's agent again, as vcluster does (in the node, its config);
    the process is ended by its PID when the module's cluster goes down."""
    log = open(vc.service_dir / node / "scored.log", "ab")
    try:
        return vc.popen(node, str(SCORE_BIN / "scored"), "agent", "--config",
                        str(vc.service_dir / node / "scored.toml"),
                        stdout=log, stderr=log)
    finally:
        log.close()


class Watch:
    """Polls `scorectl matrix --json` and `scorectl jobs --json` while jobs
    run: the largest matrix, the first and last switch statistics, and
    whether each running job was seen frozen and not frozen (the gang
    tests of tests/scored and tests/dsm)."""

    def __init__(self, score):
        self.score = score
        self.first = self.last = score.scorectl_json("matrix")
        self.max_rows = len(self.first["rows"])
        self.frozen = defaultdict(set)

    def poll(self):
        m = self.score.scorectl_json("matrix")
        self.last = m
        self.max_rows = max(self.max_rows, len(m["rows"]))
        for j in self.score.jobs():
            if j["state"] == "running":
                self.frozen[j["id"]].add(j["frozen"])
        return m

    def until(self, done, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if done():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            # Often enough to catch a job in a frozen quantum (100 ms here).
            time.sleep(0.05)

    def until_ended(self, runs, timeout):
        self.until(lambda: all(r.proc.poll() is not None for r in runs), timeout,
                   "the jobs to end")

    @property
    def switches(self):
        return self.last["switches"] - self.first["switches"]

    @property
    def unanswered(self):
        return self.last["unanswered"] - self.first["unanswered"]

    @property
    def silent(self):
        """Of the unanswered: processes whose PM contexts did not quiesce
        (the others had no PM context: not PM programs, or not yet)."""
        return self.last["silent"] - self.first["silent"]
