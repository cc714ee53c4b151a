"""The preempt-soak suite: PM retransmissions of gang-scheduled jobs under CPU
load, network preemption against plain freezing.  Called by scripts/bench
(suite "preempt-soak"); a soak variant of the retransmission check of
tests/scored/test_gang.py, outside `make test`.

Two virtual clusters of 2 nodes run scored side by side, one with
`preemption = "network"` (the default), one with `preemption = "freeze"`,
both with a short quantum (QUANTUM_MS).  A run puts three 2-rank pmcheck jobs
(patterns all, pairs, ring; small messages, SIZES) on the two nodes of one
cluster at once and starts them again until the master has counted at least
MIN_SWITCHES switches during the run.  Meanwhile two busy loops (`sh -c
'while :; do :; done'` on the host, started by this script and killed by
their PIDs after the run) compete with everything for the machine's cores.
RUNS runs per mode, the modes taking turns run by run.

Per run it records what pmcheck prints for every rank (PM's counters:
retransmits, and the loses, stops, drops, dups, ... there are), summed over
the jobs, the master's switch statistics for the run (scorectl matrix
--json: switches, unanswered, silent), and the time taken.  It only
measures: no target, no verdict.  docs/scored/bench.md has the method; its
table is written by scripts/bench_report.py from
BUILD/bench/preempt-soak.json.
"""
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from bench_stats import spread
from bench_udp import VCLUSTER, Cluster

MODES = (("network", "psn"), ("freeze", "psf"))   # (preemption, cluster name)
QUANTUM_MS = 20
MIN_SWITCHES = 200
RUNS = 10
SIZES = "8-512"          # small: alone, a job does not retransmit (tests/scored/test_gang.py)
# (pattern, --count): a few seconds per scenario when the jobs share the nodes.
JOBS = (("all", 100000), ("pairs", 100000), ("ring", 100000))
BUSY_LOOPS = 2
PM_TIMEOUT = 300
RETRIES = 2              # a run whose node was lost is run again on a fresh scored
# The virtual cluster's heartbeat is tuned for tests that want a dead node
# seen within seconds; under the busy loops an agent can stay off the CPU
# that long.  A soak measures retransmissions, not failure detection.
HEARTBEAT = {"heartbeat_interval_ms": 1000, "heartbeat_timeout_ms": 30000}
# pmcheck's counters summed per run, when pmcheck prints them.
COUNTERS = ("retransmits", "loses", "stops", "gos", "drops", "rto_polls", "dups",
            "refused_resends", "send_eagain")


class Master:
    """scorectl and scrun against one cluster's scored."""

    def __init__(self, ctx, cl, settings):
        self.ctx, self.cl, self.settings = ctx, cl, settings
        self.env = dict(os.environ, SCORE_CONFIG=cl.client_config())

    def restart(self):
        """scored down and up again on the cluster, with the same settings."""
        vc = str(VCLUSTER)
        subprocess.run([vc, "score-down", "--name", self.cl.name], capture_output=True,
                       timeout=120)
        argv = [vc, "score-up", "--name", self.cl.name, "--score-bin", str(self.ctx.bin)]
        for k, v in self.settings.items():
            argv += ["--score-master", f"{k}={v}"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=180)
        if p.returncode != 0:
            raise RuntimeError(f"vcluster score-up {self.cl.name}: {p.stderr.strip()[-400:]}")
        self.env = dict(os.environ, SCORE_CONFIG=self.cl.client_config())

    def agent_threads(self):
        """What the agents' threads are doing (state and kernel wait
        channel), for the record when a node was lost."""
        out = {}
        p = subprocess.run(["pgrep", "-f", f"scored agent --config /run/score/vcluster/"
                                           f"{self.cl.name}/"], capture_output=True, text=True)
        for pid in p.stdout.split():
            threads = []
            for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
                try:
                    stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
                    threads.append({"tid": int(task.name), "comm": (task / "comm").read_text()
                                    .strip(), "state": stat[0],
                                    "wchan": (task / "wchan").read_text().strip()})
                except OSError:
                    continue
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            out[pid] = {"cmdline": cmd.strip(), "threads": threads}
        return {"agents": out, "job_cgroups": self.job_cgroups()}

    def job_cgroups(self):
        """The cluster's job cgroups: frozen or not, and their processes'
        states (the agents freeze and thaw them)."""
        out = {}
        for cg in Path("/sys/fs/cgroup").glob(f"**/score-vcluster-{self.cl.name}/*/job-*"):
            try:
                procs = []
                for pid in (cg / "cgroup.procs").read_text().split():
                    try:
                        stat = Path(f"/proc/{pid}/stat").read_text()
                        comm = stat[stat.index("(") + 1:stat.rindex(")")]
                        procs.append({"pid": int(pid), "comm": comm,
                                      "state": stat.rsplit(")", 1)[1].split()[0],
                                      "wchan": Path(f"/proc/{pid}/wchan").read_text().strip()})
                    except OSError:
                        continue
                out[str(cg)] = {"freeze": (cg / "cgroup.freeze").read_text().strip(),
                                "events": (cg / "cgroup.events").read_text().split("\n"),
                                "procs": procs}
            except OSError:
                continue
        return out

    def matrix(self):
        p = subprocess.run([str(self.ctx.bin / "scorectl"), "matrix", "--json"], env=self.env,
                           capture_output=True, text=True, check=True, timeout=60)
        return json.loads(p.stdout)

    def scrun(self, pattern, count):
        argv = [str(self.ctx.bin / "scrun"), "-nodes=2x1", "-J", f"soak-{pattern}",
                str(self.ctx.bin / "pmcheck"), "--quiet", "--pattern", pattern,
                "--count", str(count), "--sizes", SIZES, "--timeout", str(PM_TIMEOUT)]
        if not any(c["argv"] == argv for c in self.ctx.commands):
            self.ctx.commands.append({"what": f"scrun pmcheck {pattern}", "argv": argv,
                                      "cwd": None})
        return subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


def scenario(master):
    """The three jobs at once; their pmcheck records."""
    procs = [master.scrun(pattern, count) for pattern, count in JOBS]
    records = []
    for p in procs:
        out, err = p.communicate(timeout=PM_TIMEOUT + 60)
        if p.returncode != 0:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            raise RuntimeError(f"a pmcheck job failed (exit {p.returncode}): "
                               f"{err.strip()[-400:]}")
        recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if len(recs) != 2 or not all(r.get("ok") for r in recs):
            raise RuntimeError(f"pmcheck reported errors: {out[-400:]}")
        records.extend(recs)
    return records


def one_run(master, mode, index, incidents):
    """The run, again on a restarted scored if it fails on the way (each
    failure recorded in `incidents`, with what the agents' threads were
    doing); after RETRIES more failures, a run marked failed."""
    for attempt in range(RETRIES + 1):
        try:
            return attempt_run(master, mode)
        except (RuntimeError, subprocess.SubprocessError) as e:
            incidents.append({"mode": mode, "run": index + 1, "attempt": attempt + 1,
                              "error": str(e), "agents": master.agent_threads()})
            print(f"  run failed: {e}", flush=True)
            keep_logs(master.ctx, [master.cl], suffix=f"-{mode}{index + 1}.{attempt + 1}")
            master.restart()
    return {"mode": mode, "failed": True, "error": incidents[-1]["error"]}


def attempt_run(master, mode):
    """Scenarios until MIN_SWITCHES switches; the run's figures."""
    before = master.matrix()
    t0 = time.perf_counter()
    records, scenarios = [], 0
    while True:
        records += scenario(master)
        scenarios += 1
        now = master.matrix()
        if now["switches"] - before["switches"] >= MIN_SWITCHES:
            break
    run = {"mode": mode, "seconds": time.perf_counter() - t0, "scenarios": scenarios,
           "jobs": scenarios * len(JOBS),
           "switches": now["switches"] - before["switches"],
           "unanswered": now["unanswered"] - before["unanswered"],
           "silent": now.get("silent", 0) - before.get("silent", 0),
           "switch_median_ms": now["switch_median_s"] * 1e3,
           "messages": sum(r["received"] for r in records)}
    for c in COUNTERS:
        if any(c in r for r in records):
            run[c] = sum(r.get(c, 0) for r in records)
    return run


def start_busy_loops(ctx):
    argv = ["/bin/sh", "-c", "while :; do :; done"]
    ctx.commands.append({"what": f"{BUSY_LOOPS} busy loops on the host", "argv": argv,
                         "cwd": None})
    return [subprocess.Popen(argv, start_new_session=True) for _ in range(BUSY_LOOPS)]


def stop_busy_loops(loops):
    for p in loops:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()


def keep_logs(ctx, clusters, suffix=""):
    """scored's logs of the clusters, kept in BUILD/bench/preempt-soak-logs
    when a run fails (the clusters are taken down after)."""
    for cl in clusters:
        src = Path("/run/score/vcluster") / cl.name
        dst = ctx.out / "preempt-soak-logs" / (cl.name + suffix)
        shutil.rmtree(dst, ignore_errors=True)
        for log in src.glob("**/scored.log"):
            target = dst / log.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(log, target)
        print(f"preempt-soak: scored's logs of {cl.name} kept in {dst}", flush=True)


def run(ctx):
    runs = RUNS if not ctx.quick else 1
    doc = {"suite": "preempt-soak", "quantum_ms": QUANTUM_MS, "min_switches": MIN_SWITCHES,
           "runs_per_mode": runs, "sizes": SIZES, "busy_loops": BUSY_LOOPS,
           "master": dict(HEARTBEAT, quantum_ms=QUANTUM_MS),
           "jobs": [{"pattern": p, "count": c, "nodes": "2x1"} for p, c in JOBS],
           "retries": RETRIES, "runs": {mode: [] for mode, _ in MODES}, "incidents": []}
    clusters = []
    try:
        for mode, name in MODES:
            master = dict(HEARTBEAT, quantum_ms=QUANTUM_MS, preemption=mode)
            extra = ["--with-score", "--score-bin", str(ctx.bin)]
            for k, v in master.items():
                extra += ["--score-master", f"{k}={v}"]
            cl = Cluster(name, 2, 1, extra=extra)
            cl.__enter__()
            clusters.append((mode, cl))
        masters = {mode: Master(ctx, cl, dict(HEARTBEAT, quantum_ms=QUANTUM_MS,
                                              preemption=mode))
                   for mode, cl in clusters}
        for mode, m in masters.items():
            got = m.matrix()
            if got["preemption"] != mode or got["quantum_ms"] != QUANTUM_MS:
                raise RuntimeError(f"cluster for {mode}: the master runs with "
                                   f"{got['preemption']}, {got['quantum_ms']} ms")
        for i in range(runs):
            # The modes take turns; which goes first alternates.
            order = [mode for mode, _ in MODES]
            for mode in (order if i % 2 == 0 else order[::-1]):
                print(f"preempt-soak run {i + 1}/{runs}: {mode}", flush=True)
                loops = start_busy_loops(ctx)
                try:
                    run_ = one_run(masters[mode], mode, i, doc["incidents"])
                finally:
                    stop_busy_loops(loops)
                doc["runs"][mode].append(run_)
                if run_.get("failed"):
                    print(f"  run given up after {RETRIES + 1} attempts", flush=True)
                else:
                    print(f"  {run_['switches']} switches, {run_['retransmits']} "
                          f"retransmissions, {run_['unanswered']} unanswered, "
                          f"{run_['seconds']:.1f} s", flush=True)
    except BaseException:
        keep_logs(ctx, [cl for _, cl in clusters])
        raise
    finally:
        for _, cl in reversed(clusters):
            cl.__exit__(None, None, None)
    doc["summary"] = {}
    for mode, _ in MODES:
        rs = [r for r in doc["runs"][mode] if not r.get("failed")]
        doc["summary"][mode] = {k: dict(spread([r.get(k) for r in rs]),
                                        total=sum(r.get(k) or 0 for r in rs))
                                for k in ("retransmits", "switches", "unanswered", "silent",
                                          "seconds", *COUNTERS[1:]) if any(k in r for r in rs)}
        doc["summary"][mode]["runs_with_retransmits"] = sum(1 for r in rs if r["retransmits"])
        doc["summary"][mode]["runs"] = len(rs)
        doc["summary"][mode]["runs_failed"] = len(doc["runs"][mode]) - len(rs)
    print_table(doc)
    return doc


def print_table(doc):
    print(f"\npreempt-soak: 3 pmcheck jobs on 2 nodes, quantum {doc['quantum_ms']} ms, "
          f">= {doc['min_switches']} switches per run, {doc['busy_loops']} busy loops")
    for mode in doc["runs"]:
        rs = doc["runs"][mode]
        print(f"  {mode:>8}: retransmissions per run {[r.get('retransmits') for r in rs]}, "
              f"switches {[r.get('switches') for r in rs]}, unanswered "
              f"{[r.get('unanswered') for r in rs]}")
    if doc["incidents"]:
        print(f"  {len(doc['incidents'])} failed attempt(s), run again on a restarted scored: "
              "see the JSON's incidents and BUILD/bench/preempt-soak-logs/")
