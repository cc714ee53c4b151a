"""The restart benchmark suite: how long a restart of the scored master
takes, on a virtual cluster of 4 nodes of its own, and, as the like-for-like
baseline, how long a restart of one agent takes on the same cluster.

Called by scripts/bench (suite "restart").  Each repetition does three
restarts, in turns (the order rotates from one repetition to the next):

  idle     the master is killed with SIGKILL (as a crash would) and started
           again with the same command line; measured: from the new master's
           exec to every node up again (the agents reconnect on their own:
           50 ms after they lose the master, then twice as late each time,
           up to [agent] reconnect_ms).
  job      the same while a 4x2 job runs (each rank prints a counter every
           JOB_GAP s, JOB_LINES times); measured: from the exec to every
           agent re-attached (its node up), to every saved job settled
           (scheduling resumes) and to the job's scrun re-attached.  The
           job must then complete, its scrun exit 0 and every line of every
           rank arrive once, in order.
  agent    baseline: the agent of one node (n1..n4 in turns) is killed with
           SIGKILL and started again as vcluster starts it (nsenter into the
           node, the same command line); measured: from its exec to its node
           up.  Both are "a daemon comes back and the cluster sees it".

Every time is taken from the master's own log: time.time() just before the
new daemon's Popen, and the RFC 3339 timestamps of the master's log lines
("node up", "every saved job is settled", "scrun re-attached") written after
it.  Polling scorectl would only add its own start-up and period.  After
each restart `scorectl nodes --json` must show every node up before the next
one.  No target: the suite reports figures.  docs/scored/bench.md has the
method; its table is written by scripts/bench_report.py from
BUILD/bench/restart.json.

Processes: the suite kills the master and agents it finds by their command
lines (the cluster's own, started by vcluster or by the suite), starts the
new ones itself and, at the end, stops those by PID before `vcluster down`.
"""
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from bench_stats import spread
from bench_udp import ROOT, Cluster

sys.path.insert(0, str(ROOT / "provisioning" / "vcluster"))
from vclusterlib import procs, score as vscore  # noqa: E402  (vcluster's helpers)

NAME = "brst"
SUBNET = "10.247.0.0/16"      # outside vcluster's default range 10.250-10.255
NODES = 4
PPN = 2
REPETITIONS = 10
QUICK_REPETITIONS = 3
JOB_LINES = 40                # the job: JOB_LINES counters per rank ...
JOB_GAP = 0.1                 # ... one every JOB_GAP s (about 4 s)
RESTART_AFTER_LINE = 5        # restart once every rank has printed this one
LOG_TIMEOUT = 20              # bound on waiting for a line of the master's log
DEATH_TIMEOUT = 10            # bound on waiting for a killed daemon to die
SETTLE_TIMEOUT = 20           # bound on waiting for every node up (scorectl)
JOB_TIMEOUT = 60              # bound on the job's scrun
POLL = 0.005
SERVICE_DIR = Path("/run/score/vcluster")
DEFAULT_RECONNECT_MS = 1000   # [agent] reconnect_ms's default (docs/scored/admin.md)

LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\S+Z)\s+(\w+)\s+(\S+): (.*)$")
FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')

# (key, title) of every measurement, in the order of the table.
MEASURES = [
    ("idle_listening", "idle: exec → master listening"),
    ("idle_first_up", "idle: exec → first node up"),
    ("idle_all_up", "idle: exec → every node up"),
    ("job_all_up", "4x2 job running: exec → every agent re-attached (node up)"),
    ("job_settled", "4x2 job running: exec → every saved job settled"),
    ("job_scrun", "4x2 job running: exec → scrun re-attached"),
    ("agent_started", "baseline, agent restart: exec → agent's first log line"),
    ("agent_up", "baseline, agent restart: exec → its node up"),
]


# ---------------------------------------------------------------- processes

def scored_pid(cluster, role, node="head"):
    """PID of the live scored `role` ("master", "agent") of `node` of
    `cluster`, found by its command line (vcluster's own way)."""
    return next((pid for pid, found in vscore.find(cluster).items() if found == (role, node)),
                None)


def wait_until(predicate, timeout, what, interval=POLL):
    """predicate()'s first truthy value, polling for at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout} s")
        time.sleep(interval)


# ---------------------------------------------------------------- the master's log

def log_stamp(text):
    return datetime.datetime.fromisoformat(text).timestamp()


def log_events(path, offset):
    """[(unix time, message, {field: value})] of the log lines after byte
    `offset` (complete lines only)."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    events = []
    for raw in data.decode(errors="replace").splitlines(keepends=True):
        if not raw.endswith("\n"):
            break
        m = LOG_LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        rest = m.group(4)
        # "node up node="n3" slots=2": the message, then its fields.
        first = FIELD.search(rest)
        message = rest[:first.start()].strip() if first else rest.strip()
        fields = {k: v.strip('"') for k, v in FIELD.findall(rest[len(message):])}
        events.append((log_stamp(m.group(1)), message, fields))
    return events


def first_event(events, message, **fields):
    """Time of the first event whose message starts with `message` and has
    `fields`, or None."""
    for t, msg, f in events:
        if msg.startswith(message) and all(f.get(k) == v for k, v in fields.items()):
            return t
    return None


def wait_log(path, offset, ready, what):
    """The events of the log after `offset` once ready(events) is true."""
    def check():
        events = log_events(path, offset)
        return events if ready(events) else None
    try:
        return wait_until(check, LOG_TIMEOUT, what, interval=0.01)
    except RuntimeError as e:
        tail = path.read_text(errors="replace")[-1500:]
        raise RuntimeError(f"{e}; {path} ends with:\n{tail}") from None


def nodes_up(events):
    """{node: first "node up" time} in events."""
    up = {}
    for t, msg, f in events:
        if msg == "node up" and f.get("node") not in up:
            up[f.get("node")] = t
    return up


# ---------------------------------------------------------------- the suite

class Restarts:
    """The cluster's daemons, killed and started again; every process the
    suite starts is kept to be stopped by PID at the end."""

    def __init__(self, ctx, cl, workdir):
        self.ctx = ctx
        self.cl = cl
        self.workdir = Path(workdir)      # the job's output
        self.dir = SERVICE_DIR / cl.name
        self.master_config = self.dir / "scored.toml"
        self.master_log = self.dir / "head" / "scored.log"
        self.env = dict(os.environ, SCORE_CONFIG=cl.client_config())
        self.env.pop("SCORE_MASTER", None)
        state = json.loads((SERVICE_DIR / f"{cl.name}.json").read_text())
        self.holder = {n["name"]: int(n["holder_pid"]) for n in state["nodes"]}
        self.nodes = sorted(self.holder)
        self.started = {}     # pid: Popen of every daemon the suite started
        self.scruns = []

    def agent_config(self, node):
        return self.dir / node / "scored.toml"

    def master_argv(self):
        return [str(self.ctx.bin / "scored"), "master", "--config", str(self.master_config)]

    def agent_argv(self, node):
        return ["nsenter", f"--target={self.holder[node]}", "--net", "--uts", "--mount", "--",
                str(self.ctx.bin / "scored"), "agent", "--config", str(self.agent_config(node))]

    def record_commands(self):
        c = self.ctx.commands
        c.append({"what": "start the master again (after SIGKILL)", "argv": self.master_argv(),
                  "cwd": None})
        for node in self.nodes:
            c.append({"what": f"start the agent of {node} again (after SIGKILL)",
                      "argv": self.agent_argv(node), "cwd": None})
        c.append({"what": f"the job running during a restart ({NODES}x{PPN})",
                  "argv": self.job_argv(), "cwd": None,
                  "env": {"SCORE_CONFIG": self.env["SCORE_CONFIG"]}})
        c.append({"what": "every node up?", "argv": [str(self.ctx.bin / "scorectl"), "nodes",
                                                     "--json"], "cwd": None,
                  "env": {"SCORE_CONFIG": self.env["SCORE_CONFIG"]}})

    def kill(self, pid):
        """SIGKILL `pid` and wait until every thread of it is gone (reaped if ours)."""
        t = time.time()
        os.kill(pid, signal.SIGKILL)
        proc = self.started.get(pid)
        if proc is not None:
            proc.wait(timeout=DEATH_TIMEOUT)
            del self.started[pid]
        else:
            wait_until(lambda: procs.exited(pid), DEATH_TIMEOUT, f"death of PID {pid}")
        return t

    def start(self, argv, log):
        """Start a daemon, its output appended to `log`, cwd /, a session of
        its own; (time just before the Popen, the log's size before)."""
        with open(log, "ab") as f:
            offset = f.seek(0, os.SEEK_END)
            t = time.time()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                    cwd="/", start_new_session=True)
        self.started[proc.pid] = proc
        return t, offset

    def restart_master(self):
        pid = scored_pid(self.cl.name, "master")
        if pid is None:
            raise RuntimeError(f"no master of {self.cl.name} runs")
        killed = self.kill(pid)
        t0, offset = self.start(self.master_argv(), self.master_log)
        return killed, t0, offset

    def settled(self):
        """Until `scorectl nodes --json` shows every node up (bounded)."""
        argv = [str(self.ctx.bin / "scorectl"), "nodes", "--json"]

        def all_up():
            p = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=10,
                               stdin=subprocess.DEVNULL)
            if p.returncode != 0:
                return False
            nodes = json.loads(p.stdout)
            if isinstance(nodes, dict):
                nodes = nodes.get("nodes", [])
            states = {n.get("name"): str(n.get("state", "")).lower() for n in nodes}
            return all(states.get(n) == "up" for n in self.nodes)
        wait_until(all_up, SETTLE_TIMEOUT, "every node up in scorectl nodes --json",
                   interval=0.1)

    # -- the three measurements

    def idle(self):
        killed, t0, offset = self.restart_master()
        events = wait_log(self.master_log, offset,
                          lambda ev: len(nodes_up(ev)) == NODES, "every node up after the restart")
        up = nodes_up(events)
        self.settled()
        listening = first_event(events, "master listening")
        return {"kill_to_exec_s": t0 - killed,
                "listening": listening - t0 if listening else None,
                "nodes_up": {n: up[n] - t0 for n in sorted(up)},
                "first_up": min(up.values()) - t0, "all_up": max(up.values()) - t0}

    def job_argv(self):
        script = (f"i=1; while [ $i -le {JOB_LINES} ]; do echo count $i; sleep {JOB_GAP}; "
                  "i=$((i+1)); done")
        return [str(self.ctx.bin / "scrun"), "-v", "-l", f"-nodes={NODES}x{PPN}",
                "sh", "-c", script]

    def job(self, index):
        out_path = self.workdir / f"job{index}.out"
        err_path = self.workdir / f"job{index}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            scrun = subprocess.Popen(self.job_argv(), stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=err, env=self.env, start_new_session=True)
        self.scruns.append(scrun)
        ranks = NODES * PPN
        mark = f"count {RESTART_AFTER_LINE}"

        def running():
            text = out_path.read_text(errors="replace")
            return all(f"{r}: {mark}\n" in text for r in range(ranks))
        wait_until(running, 30, f"every rank of the job to print {mark}", interval=0.01)
        job_id = int(re.search(r"scrun: job (\d+)", err_path.read_text()).group(1))

        killed, t0, offset = self.restart_master()
        job = str(job_id)

        def ready(ev):
            return (len(nodes_up(ev)) == NODES
                    and first_event(ev, "every saved job is settled: scheduling resumes")
                    and first_event(ev, "scrun re-attached", job=job))
        events = wait_log(self.master_log, offset, ready,
                          f"every agent, the saved jobs and the scrun of job {job_id} back")
        try:
            status = scrun.wait(timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the job's scrun did not end within {JOB_TIMEOUT} s") from None
        stderr = err_path.read_text(errors="replace")
        if status != 0:
            raise RuntimeError(f"the job's scrun exited {status} (repetition {index + 1}): "
                               f"{stderr.strip()[-600:]}")
        if f"re-attached to job {job_id}" not in stderr:
            raise RuntimeError(f"the job's scrun did not say it re-attached: {stderr[-600:]}")
        lines = out_path.read_text(errors="replace").splitlines()
        for r in range(ranks):
            got = [x.split(": ", 1)[1] for x in lines if x.startswith(f"{r}: ")]
            if got != [f"count {i}" for i in range(1, JOB_LINES + 1)]:
                raise RuntimeError(f"rank {r} of job {job_id}: {len(got)} lines, not "
                                   f"count 1..{JOB_LINES} once each in order")
        self.scruns.remove(scrun)
        self.settled()
        up = nodes_up(events)
        listening = first_event(events, "master listening")
        settled = first_event(events, "every saved job is settled: scheduling resumes")
        reattached = first_event(events, "scrun re-attached", job=job)
        return {"job": job_id, "kill_to_exec_s": t0 - killed,
                "listening": listening - t0 if listening else None,
                "nodes_up": {n: up[n] - t0 for n in sorted(up)},
                "all_up": max(up.values()) - t0, "settled": settled - t0,
                "scrun": reattached - t0, "scrun_exit": status,
                "lines_per_rank": JOB_LINES}

    def agent(self, node):
        pid = scored_pid(self.cl.name, "agent", node)
        if pid is None:
            raise RuntimeError(f"no agent of {node} runs")
        killed = self.kill(pid)
        agent_log = self.dir / node / "scored.log"
        with open(agent_log, "rb") as f:
            agent_offset = f.seek(0, os.SEEK_END)
        with open(self.master_log, "rb") as f:
            offset = f.seek(0, os.SEEK_END)
        t0, _ = self.start(self.agent_argv(node), agent_log)
        events = wait_log(self.master_log, offset, lambda ev: node in nodes_up(ev),
                          f"{node} up after its agent's restart")
        agent_events = wait_log(agent_log, agent_offset,
                                lambda ev: first_event(ev, "agent starting"),
                                f"the agent of {node} to start")
        self.settled()
        return {"node": node, "kill_to_exec_s": t0 - killed,
                "started": first_event(agent_events, "agent starting") - t0,
                "up": nodes_up(events)[node] - t0}

    def stop_all(self):
        """Stop by PID what the suite started: scruns, agents, then masters."""
        def order(item):
            argv = item[1].args
            return 0 if "agent" in argv else 1
        for p in self.scruns:
            Cluster.stop(p)
        for _, p in sorted(self.started.items(), key=order):
            Cluster.stop(p)
        self.started.clear()


def reconnect_ms(config):
    try:
        agent = tomllib.loads(Path(config).read_text()).get("agent", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return agent.get("reconnect_ms", DEFAULT_RECONNECT_MS)


def run(ctx):
    reps = QUICK_REPETITIONS if ctx.quick else REPETITIONS
    doc = {"suite": "restart", "cluster": NAME, "subnet": SUBNET, "nodes": NODES,
           "repetitions": reps,
           "job": {"shape": f"{NODES}x{PPN}", "lines_per_rank": JOB_LINES, "gap_s": JOB_GAP,
                   "restart_after_line": RESTART_AFTER_LINE},
           "clock": ("time.time() just before the Popen of the new daemon, to the RFC 3339 "
                     "timestamps of the master's log lines (the agent's own log for its "
                     "first line)"),
           "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp, \
            Cluster(NAME, NODES, 1, extra=["--subnet", SUBNET, "--with-score",
                                           "--score-bin", str(ctx.bin)]) as cl:
        r = Restarts(ctx, cl, tmp)
        try:
            r.record_commands()
            doc["reconnect_ms"] = reconnect_ms(r.agent_config("n1"))
            doc["master_config"] = r.master_config.read_text()
            r.settled()
            kinds = ["idle", "job", "agent"]
            for i in range(reps):
                order = kinds[i % 3:] + kinds[:i % 3]
                node = r.nodes[i % len(r.nodes)]
                run_ = {"repetition": i + 1, "order": order}
                for kind in order:
                    if kind == "idle":
                        run_["idle"] = r.idle()
                    elif kind == "job":
                        run_["job"] = r.job(i)
                    else:
                        run_["agent"] = r.agent(node)
                doc["runs"].append(run_)
                print(f"  repetition {i + 1}/{reps}: idle {run_['idle']['all_up'] * 1e3:.0f} ms, "
                      f"job {run_['job']['all_up'] * 1e3:.0f}/{run_['job']['settled'] * 1e3:.0f}/"
                      f"{run_['job']['scrun'] * 1e3:.0f} ms, agent {node} "
                      f"{run_['agent']['up'] * 1e3:.0f} ms", flush=True)
        finally:
            r.stop_all()
    doc["measures"] = summary(doc["runs"])
    print_table(doc)
    return doc


def summary(runs):
    pick = {
        "idle_listening": lambda r: r["idle"]["listening"],
        "idle_first_up": lambda r: r["idle"]["first_up"],
        "idle_all_up": lambda r: r["idle"]["all_up"],
        "job_all_up": lambda r: r["job"]["all_up"],
        "job_settled": lambda r: r["job"]["settled"],
        "job_scrun": lambda r: r["job"]["scrun"],
        "agent_started": lambda r: r["agent"]["started"],
        "agent_up": lambda r: r["agent"]["up"],
    }
    out = {}
    for key, title in MEASURES:
        samples = [pick[key](r) for r in runs]
        out[key] = dict(spread(samples), title=title, samples_s=samples)
    return out


def print_table(doc):
    print(f"\nrestart: {doc['repetitions']} repetitions on {doc['nodes']} nodes, in ms from the "
          "new daemon's exec (median [min-max]); no target")
    for key, _ in MEASURES:
        m = doc["measures"][key]
        if m["median"] is None:
            continue
        print(f"  {m['title']:60} {m['median'] * 1e3:7.1f} "
              f"[{m['lo'] * 1e3:.1f}-{m['hi'] * 1e3:.1f}]")
