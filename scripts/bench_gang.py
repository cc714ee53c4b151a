"""The gang benchmark suite: gang scheduling with network preemption on the
virtual cluster, in one run.  Called by scripts/bench (suite "gang").

  (a) switch time   two 4x1 (and 2x1) pmcheck jobs share every node with a
                    50 ms quantum; median and p99 switch time from the master
                    (scorectl matrix --json), for 2 and 4 nodes;
  (b) overhead      one pmcheck job alone, under gang scheduling (default
                    quantum, and 50 ms) against scheduling off (gang_slots=1),
                    the modes taking turns run by run; target under 2 %
                    (SCore-D reported under 4 %), judged on the runs' spread;
  (c) gang vs Linux two ping-pong jobs (pmbench, 8 B, a fixed number of round
                    trips) on the same nodes, over shm (1x2) and over udp
                    (2x1): under gang scheduling (scrun) against both started
                    at once with mpirun, sharing the cores by plain Linux time
                    sharing.  Both sides run PM as it comes (its default
                    spin, then sleep); the makespan runs from the first rank's
                    start to the last rank's end (each rank's shell stamps
                    both), so the launchers' own start-up does not count;
                    target: gang at least 2x better;
  (d) preemption    two pmcheck jobs on the same 2 nodes with a 50 ms quantum,
                    network preemption against plain freezing, run by run in
                    turns: PM retransmissions and makespan.

Every job is pmcheck (every message verified exactly once and in order) or
pmbench; a job that fails makes the suite fail.  The nodes of the virtual
cluster share this machine's cores, so each job has one process per node and
(c) uses 2 nodes: 2 processes per job on 2 cores.  Verdicts come from
scripts/bench_stats.py (PASS only when the whole spread is on the right
side).  docs/scored/bench.md has the method; its tables are written by
scripts/bench_report.py from BUILD/bench/gang.json.
"""
import json
import os
import shutil
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path

from bench_stats import ratios, spread, verdict
from bench_udp import VCLUSTER, MPI_ENV, Cluster

NAME = "bg"
COUNT = 60000            # messages per (sender, destination) of one pmcheck job
SIZES = "8-512"          # small: alone, a job does not retransmit here
TIMEOUT = 600
# Each rank's shell writes "SECONDS start" and "SECONDS end" (bash's
# $EPOCHREALTIME, the host's clock: the nodes are namespaces of one machine)
# to PREFIX.RANK.PID; the makespan is the last end less the first start.
STAMP = ('echo "$EPOCHREALTIME start" >> "$0.${PMIX_RANK:-x}.$$"; "$@"; rc=$?; '
         'echo "$EPOCHREALTIME end" >> "$0.${PMIX_RANK:-x}.$$"; exit $rc')


def vc(*args):
    p = subprocess.run([str(VCLUSTER), *args], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"vcluster {' '.join(args)}: {p.stderr.strip()[-400:]}")
    return p.stdout


class Score:
    """scored on the cluster with one [master] configuration at a time."""

    def __init__(self, ctx, cl):
        self.ctx, self.cl = ctx, cl
        self.settings = None

    def configure(self, fresh=False, **master):
        """Restart scored with these [master] settings (and fresh switch
        statistics) unless it runs with them already."""
        if master == self.settings and not fresh:
            return
        vc("score-down", "--name", NAME)
        args = ["score-up", "--name", NAME, "--score-bin", str(self.ctx.bin)]
        for k, v in master.items():
            args += ["--score-master", f"{k}={v}"]
        vc(*args)
        self.settings = master
        self.env = dict(os.environ, SCORE_CONFIG=self.cl.client_config())

    def scrun(self, nodes, argv, env=None, ppn=1):
        cmd = [str(self.ctx.bin / "scrun"), f"-nodes={nodes}x{ppn}"]
        for k, v in (env or {}).items():
            cmd += ["--env", f"{k}={v}"]
        self.ctx.commands.append({"what": f"scrun {nodes}x{ppn}", "argv": cmd + argv,
                                  "cwd": None})
        return subprocess.Popen(cmd + argv, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def scorectl(self, *args):
        subprocess.run([str(self.ctx.bin / "scorectl"), *args], env=self.env,
                       capture_output=True, text=True, check=True)

    def matrix(self):
        p = subprocess.run([str(self.ctx.bin / "scorectl"), "matrix", "--json"], env=self.env,
                           capture_output=True, text=True, check=True)
        return json.loads(p.stdout)


PINGPONG_ITERS = {"shm": 100000, "udp": 20000}


def pingpong_argv(ctx, device):
    """A fixed amount of round trips: each needs both ranks running."""
    return [str(ctx.bin / "pmbench"), "--device", device, "--test", "pingpong", "--sizes", "8",
            "--iters", str(PINGPONG_ITERS[device]), "--reps", "3", "--warmup", "20"]


def pmcheck_argv(ctx, count=COUNT):
    return [str(ctx.bin / "pmcheck"), "--pattern", "all", "--count", str(count),
            "--sizes", SIZES, "--quiet", "--timeout", str(TIMEOUT)]


def finish(procs, checked=True):
    """Wait for every job; returns (pmcheck's JSON records, seconds per job).
    checked: the jobs are pmcheck, whose records must all say ok."""
    records, ends = [], []
    for p, t0 in procs:
        out, err = p.communicate(timeout=TIMEOUT)
        ends.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise RuntimeError(f"a job failed (exit {p.returncode}): {err.strip()[-400:]}")
        if not checked:
            continue
        recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if not recs or not all(r["ok"] for r in recs):
            raise RuntimeError(f"pmcheck reported errors: {out[-400:]}")
        records.extend(recs)
    return records, ends


class Stamps:
    """A directory for the ranks' start and end stamps of one run."""

    def __init__(self, ctx, label):
        self.dir = ctx.out / "gang-stamps" / label
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)

    def wrap(self, job, argv):
        return ["/bin/bash", "-c", STAMP, str(self.dir / f"job{job}"), *argv]

    def makespan(self, ranks):
        """Last end less first start over every rank of every job; checks
        that `ranks` ranks stamped both."""
        starts, ends = [], []
        for f in self.dir.iterdir():
            for line in f.read_text().split("\n"):
                if line.strip():
                    t, what = line.split()
                    (starts if what == "start" else ends).append(float(t.replace(",", ".")))
        if len(starts) != ranks or len(ends) != ranks:
            raise RuntimeError(f"{len(starts)} start and {len(ends)} end stamps in {self.dir}, "
                               f"expected {ranks} of each")
        shutil.rmtree(self.dir, ignore_errors=True)
        return max(ends) - min(starts)


def run_jobs(score, ctx, nodes, n_jobs, env=None, count=COUNT, argv=None, ppn=1, stamps=None):
    t0 = time.perf_counter()
    procs = []
    for j in range(n_jobs):
        program = argv or pmcheck_argv(ctx, count)
        if stamps:
            program = stamps.wrap(j, program)
        procs.append((score.scrun(nodes, program, env, ppn), time.perf_counter()))
    records, ends = finish(procs, checked=argv is None)
    out = {"launcher_makespan_s": time.perf_counter() - t0, "job_s": ends,
           "retransmits": sum(r.get("retransmits", 0) for r in records),
           "messages": sum(r["received"] for r in records)}
    out["makespan_s"] = (stamps.makespan(n_jobs * nodes * ppn) if stamps
                         else out["launcher_makespan_s"])
    return out


def mpirun_jobs(ctx, cl, nodes, n_jobs, env, argv=None, ppn=1, stamps=None):
    hosts = ",".join(f"n{i}.{NAME}:{ppn}" for i in range(1, nodes + 1))
    cmd = ["mpirun", "--bind-to", "none", "--host", hosts, "-n", str(nodes * ppn),
           "--mca", "plm_rsh_agent", f"{VCLUSTER} rsh --name {NAME}",
           "--mca", "oob_tcp_if_include", cl.subnet(0),
           # Two mpiruns at once from one host: each must route to its own
           # daemons directly.
           "--mca", "routed", "direct"]
    for k in env:
        cmd += ["-x", k]
    penv = dict(os.environ, **MPI_ENV, **env)
    t0 = time.perf_counter()
    procs = []
    for j in range(n_jobs):
        program = argv or pmcheck_argv(ctx)
        if stamps:
            program = stamps.wrap(j, program)
        ctx.commands.append({"what": "mpirun (Linux time sharing)", "argv": cmd + program,
                             "cwd": None})
        procs.append((subprocess.Popen(cmd + program, env=penv, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True), time.perf_counter()))
    records, ends = finish(procs, checked=argv is None)
    out = {"launcher_makespan_s": time.perf_counter() - t0, "job_s": ends,
           "retransmits": sum(r.get("retransmits", 0) for r in records),
           "messages": sum(r["received"] for r in records)}
    out["makespan_s"] = (stamps.makespan(n_jobs * nodes * ppn) if stamps
                         else out["launcher_makespan_s"])
    return out


def switch_histogram(metric="score_gang_switch_seconds"):
    """The master's histogram `metric` as [[upper bound in s, count]] (not
    cumulative; the last bound is +Inf as null), from its /metrics."""
    conf = tomllib.loads(Path(f"/run/score/vcluster/{NAME}/scored.toml").read_text())
    with urllib.request.urlopen(f"http://{conf['master']['metrics_listen']}/metrics",
                                timeout=10) as r:
        text = r.read().decode()
    cumulative = []
    for line in text.splitlines():
        if line.startswith(f'{metric}_bucket{{le="'):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            cumulative.append((None if le == "+Inf" else float(le), float(line.split()[-1])))
    out, below = [], 0.0
    for le, count in cumulative:
        out.append([le, int(count - below)])
        below = count
    return out


def switch_times(ctx, cl, score, nodes, seconds):
    """Two jobs on the same `nodes` nodes (the others drained), 50 ms
    quantum, for about `seconds`; statistics of a freshly started master."""
    score.configure(fresh=True, quantum_ms=50, preemption="network")
    for n in range(nodes + 1, 5):
        score.scorectl("drain", f"n{n}", "--reason", "bench: fewer nodes")
    before = score.matrix()["switches"]
    # Enough work for `seconds` of switching: jobs are restarted until then.
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        run_jobs(score, ctx, nodes, 2, count=COUNT // 2)
    m = score.matrix()
    # The master is fresh: its histogram holds this run's switches only.
    buckets = switch_histogram()
    for n in range(nodes + 1, 5):
        score.scorectl("resume", f"n{n}")
    return {"nodes": nodes, "switches": m["switches"] - before, "histogram_s": buckets,
            "median_ms": m["switch_median_s"] * 1e3, "p99_ms": m["switch_p99_s"] * 1e3,
            "quiesce_median_ms": m["quiesce_median_s"] * 1e3, "unanswered": m["unanswered"],
            "silent": m.get("silent")}


# Longer jobs for (b) and (d): run-to-run noise shrinks against a job's
# length, and (d) sees a few dozen switches per run.
OVERHEAD_COUNT = 2 * COUNT
PREEMPT_COUNT = 4 * COUNT
OVERHEAD_TARGET_PCT = 2.0
SPEEDUP_TARGET = 2.0


def run(ctx):
    reps = 3 if not ctx.quick else 1
    reps_overhead = 5 if not ctx.quick else 1
    doc = {"suite": "gang", "count": COUNT, "overhead_count": OVERHEAD_COUNT,
           "preempt_count": PREEMPT_COUNT, "sizes": SIZES, "repetitions": reps,
           "repetitions_overhead": reps_overhead, "pm_env": "PM defaults (PM_SPIN_US unset)"}
    with Cluster(NAME, 4, 1, extra=["--with-score", "--score-bin", str(ctx.bin)]) as cl:
        score = Score(ctx, cl)
        score.settings = {}
        score.env = dict(os.environ, SCORE_CONFIG=cl.client_config())

        # (a) switch time, 4 nodes then 2 nodes (the other two idle).
        doc["switch"] = [switch_times(ctx, cl, score, 4, 10 if not ctx.quick else 4),
                         switch_times(ctx, cl, score, 2, 10 if not ctx.quick else 4)]

        # (b) overhead of gang scheduling for a job alone; the modes take
        # turns, repetition by repetition, so that none runs on a quieter
        # machine than the others.
        modes = (("off", {"gang_slots": 1}), ("default", {}), ("50ms", {"quantum_ms": 50}))
        times = {label: [] for label, _ in modes}
        switches = {label: [] for label, _ in modes}
        for _ in range(reps_overhead):
            for label, settings in modes:
                score.configure(**settings)
                before = score.matrix()["switches"]
                times[label].append(run_jobs(score, ctx, 4, 1,
                                             count=OVERHEAD_COUNT)["makespan_s"])
                switches[label].append(score.matrix()["switches"] - before)
        over = []
        for label, _ in modes:
            o = {"mode": label, "runs": times[label], "switches": switches[label],
                 "makespan_s": spread(times[label])}
            if label != "off":
                pct = [(r - 1) * 100 for r in ratios(times[label], times["off"])]
                o["overhead_pct"] = verdict(pct, "<", OVERHEAD_TARGET_PCT)
                o["overhead_pct"]["samples"] = pct
            over.append(o)
        doc["overhead"] = over

        # (c) two ping-pong jobs on the same nodes: gang scheduling against
        # Linux time sharing, PM's default spin on both sides.  Over shm on
        # one node (n1; the others drained), and over udp between two (n1,
        # n2).  Gang and Linux take turns, run by run.
        doc["gang_vs_linux"] = {}
        for device, shape in (("shm", (1, 2)), ("udp", (2, 1))):
            nodes, ppn = shape
            score.configure(preemption="network")
            argv = pingpong_argv(ctx, device)
            gang, linux = [], []
            for i in range(reps):
                for n in range(nodes + 1, 5):
                    score.scorectl("drain", f"n{n}", "--reason", "bench: fewer nodes")
                gang.append(run_jobs(score, ctx, nodes, 2, {}, argv=argv, ppn=ppn,
                                     stamps=Stamps(ctx, f"gang-{device}")))
                for n in range(nodes + 1, 5):
                    score.scorectl("resume", f"n{n}")
                linux.append(mpirun_jobs(ctx, cl, nodes, 2, {}, argv=argv, ppn=ppn,
                                         stamps=Stamps(ctx, f"linux-{device}")))
            g = [r["makespan_s"] for r in gang]
            li = [r["makespan_s"] for r in linux]
            doc["gang_vs_linux"][device] = {
                "shape": f"{nodes}x{ppn}", "round_trips": PINGPONG_ITERS[device] * 3,
                "gang": gang, "linux": linux,
                "gang_makespan_s": spread(g), "linux_makespan_s": spread(li),
                "gang_launcher_makespan_s": spread([r["launcher_makespan_s"] for r in gang]),
                "linux_launcher_makespan_s": spread([r["launcher_makespan_s"] for r in linux]),
                "speedup": dict(verdict(ratios(li, g), ">=", SPEEDUP_TARGET),
                                samples=ratios(li, g))}

        # (d) network preemption against plain freezing, 50 ms quantum,
        # two pmcheck jobs on n1 and n2, the modes taking turns.
        pre = {mode: {"runs": []} for mode in ("network", "freeze")}
        for _ in range(reps):
            for mode in ("network", "freeze"):
                score.configure(quantum_ms=50, preemption=mode)
                for n in (3, 4):
                    score.scorectl("drain", f"n{n}", "--reason", "bench: two nodes")
                before = score.matrix()
                run = run_jobs(score, ctx, 2, 2, {}, count=PREEMPT_COUNT)
                after = score.matrix()
                run["switches"] = after["switches"] - before["switches"]
                run["unanswered"] = after["unanswered"] - before["unanswered"]
                pre[mode]["runs"].append(run)
                for n in (3, 4):
                    score.scorectl("resume", f"n{n}")
        for mode in ("network", "freeze"):
            runs = pre[mode]["runs"]
            pre[mode].update(makespan_s=spread([r["makespan_s"] for r in runs]),
                             retransmits=spread([r["retransmits"] for r in runs]),
                             switches=spread([r["switches"] for r in runs]))
        doc["preemption"] = pre
    print_tables(doc)
    return doc


def cell(s, spec, scale=1.0):
    if s.get("median") is None:
        return "-"
    if s["n"] == 1:
        return format(s["median"] * scale, spec)
    return (f"{format(s['median'] * scale, spec)} [{format(s['lo'] * scale, spec)}-"
            f"{format(s['hi'] * scale, spec)}]")


def print_tables(doc):
    print("\n(a) switch time, two jobs on the same nodes, quantum 50 ms, network preemption")
    print(f"{'nodes':>5} {'switches':>9} {'median ms':>10} {'p99 ms':>8} {'quiesce ms':>11} "
          f"{'unanswered':>10}")
    for s in doc["switch"]:
        print(f"{s['nodes']:>5} {s['switches']:>9} {s['median_ms']:>10.2f} {s['p99_ms']:>8.2f} "
              f"{s['quiesce_median_ms']:>11.2f} {s['unanswered']:>10}")
    print(f"\n(b) overhead: one 4x1 pmcheck job alone, {doc['repetitions_overhead']} runs per "
          f"mode in turns (median [min-max]); target < {OVERHEAD_TARGET_PCT} %")
    for o in doc["overhead"]:
        line = f"  gang {o['mode']:>8}: {cell(o['makespan_s'], '.3f')} s"
        if "overhead_pct" in o:
            line += f"  overhead {cell(o['overhead_pct'], '+.1f')} %  {o['overhead_pct']['verdict']}"
        print(line)
    print("\n(c) two ping-pong jobs (pmbench, 8 B) on the same nodes, PM's default spin; "
          "makespan from the first rank's start; target speedup >= 2")
    for device, g in doc["gang_vs_linux"].items():
        print(f"  {device} {g['shape']}: gang {cell(g['gang_makespan_s'], '.3f')} s, Linux "
              f"{cell(g['linux_makespan_s'], '.3f')} s, speedup {cell(g['speedup'], '.2f')}  "
              f"{g['speedup']['verdict']}")
    p = doc["preemption"]
    print("\n(d) two pmcheck jobs on 2 nodes, quantum 50 ms: network preemption against freezing")
    for mode in ("network", "freeze"):
        print(f"  {mode:>8}: makespan {cell(p[mode]['makespan_s'], '.3f')} s, retransmits "
              f"{[r['retransmits'] for r in p[mode]['runs']]}, switches "
              f"{[r['switches'] for r in p[mode]['runs']]}")
