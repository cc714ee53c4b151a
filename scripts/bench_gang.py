"""The gang benchmark suite: gang scheduling with network preemption on the
virtual cluster, in one run.  Called by scripts/bench (suite "gang").

  (a) switch time   two 4x1 (and 2x1) pmcheck jobs share every node with a
                    50 ms quantum; median and p99 switch time from the master
                    (scorectl matrix --json), for 2 and 4 nodes;
  (b) overhead      one pmcheck job alone, under gang scheduling (default
                    quantum, and 50 ms) against scheduling off (gang_slots=1);
                    target under 2 % (SCore-D reported under 4 %);
  (c) gang vs Linux two busy-polling ping-pong jobs (pmbench, 8 B, a fixed
                    number of round trips) on the same nodes, over shm (1x2)
                    and over udp (2x1): makespan under gang scheduling (scrun)
                    against both started at once with mpirun, sharing the
                    cores by plain Linux time sharing; target: gang at least
                    2x better;
  (d) preemption    two busy-polling pmcheck jobs on the same 2 nodes with a
                    50 ms quantum, network preemption against plain freezing:
                    PM retransmissions and makespan.

Every job is pmcheck (every message verified exactly once and in order); a
job that fails makes the suite fail.  The nodes of the virtual cluster share
this machine's cores, so each job has one process per node and (c) uses 2
nodes: 2 processes per job on 2 cores.  docs/scored/bench-gang.md has the
method and the figures.
"""
import json
import os
import statistics
import subprocess
import time

from bench_udp import VCLUSTER, MPI_ENV, Cluster

NAME = "bg"
COUNT = 60000            # messages per (sender, destination) of one pmcheck job
SIZES = "8-512"          # small: alone, a job does not retransmit here
BUSY = {"PM_SPIN_US": "100000000"}   # poll, never sleep: what gang scheduling is for
TIMEOUT = 600


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


def run_jobs(score, ctx, nodes, n_jobs, env=None, count=COUNT, argv=None, ppn=1):
    t0 = time.perf_counter()
    procs = [(score.scrun(nodes, argv or pmcheck_argv(ctx, count), env, ppn), time.perf_counter())
             for _ in range(n_jobs)]
    records, ends = finish(procs, checked=argv is None)
    return {"makespan_s": time.perf_counter() - t0, "job_s": ends,
            "retransmits": sum(r.get("retransmits", 0) for r in records),
            "messages": sum(r["received"] for r in records)}


def mpirun_jobs(ctx, cl, nodes, n_jobs, env, argv=None, ppn=1):
    hosts = ",".join(f"n{i}.{NAME}:{ppn}" for i in range(1, nodes + 1))
    cmd = ["mpirun", "--bind-to", "none", "--host", hosts, "-n", str(nodes * ppn),
            "--mca", "plm_rsh_agent", f"{VCLUSTER} rsh --name {NAME}",
            "--mca", "oob_tcp_if_include", cl.subnet(0),
            # Two mpiruns at once from one host: each must route to its own
            # daemons directly.
            "--mca", "routed", "direct"]
    for k in env:
        cmd += ["-x", k]
    program = argv
    argv = cmd + (program or pmcheck_argv(ctx))
    ctx.commands.append({"what": "mpirun (Linux time sharing)", "argv": argv, "cwd": None})
    penv = dict(os.environ, **MPI_ENV, **env)
    t0 = time.perf_counter()
    procs = [(subprocess.Popen(argv, env=penv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True), time.perf_counter()) for _ in range(n_jobs)]
    records, ends = finish(procs, checked=program is None)
    return {"makespan_s": time.perf_counter() - t0, "job_s": ends,
            "retransmits": sum(r.get("retransmits", 0) for r in records),
            "messages": sum(r["received"] for r in records)}


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
    for n in range(nodes + 1, 5):
        score.scorectl("resume", f"n{n}")
    return {"nodes": nodes, "switches": m["switches"] - before,
            "median_ms": m["switch_median_s"] * 1e3, "p99_ms": m["switch_p99_s"] * 1e3,
            "quiesce_median_ms": m["quiesce_median_s"] * 1e3, "unanswered": m["unanswered"]}


def run(ctx):
    reps = 3 if not ctx.quick else 1
    doc = {"suite": "gang", "count": COUNT, "sizes": SIZES, "repetitions": reps}
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
        for _ in range(reps):
            for label, settings in modes:
                score.configure(**settings)
                times[label].append(run_jobs(score, ctx, 4, 1)["makespan_s"])
        over = [{"mode": label, "median_s": statistics.median(times[label]),
                 "runs": times[label]} for label, _ in modes]
        base = over[0]["median_s"]
        for o in over:
            o["overhead_pct"] = (o["median_s"] / base - 1) * 100
        doc["overhead"] = over

        # (c) two busy-polling ping-pong jobs on the same nodes: gang
        # scheduling against Linux time sharing.  Over shm on one node (n1;
        # the others drained), and over udp between two (n1, n2).
        doc["gang_vs_linux"] = {}
        for device, shape in (("shm", (1, 2)), ("udp", (2, 1))):
            nodes, ppn = shape
            score.configure(preemption="network")
            for n in range(nodes + 1, 5):
                score.scorectl("drain", f"n{n}", "--reason", "bench: fewer nodes")
            argv = pingpong_argv(ctx, device)
            gang = [run_jobs(score, ctx, nodes, 2, BUSY, argv=argv, ppn=ppn) for _ in range(reps)]
            for n in range(nodes + 1, 5):
                score.scorectl("resume", f"n{n}")
            linux = [mpirun_jobs(ctx, cl, nodes, 2, BUSY, argv=argv, ppn=ppn) for _ in range(reps)]
            g = statistics.median(r["makespan_s"] for r in gang)
            li = statistics.median(r["makespan_s"] for r in linux)
            doc["gang_vs_linux"][device] = {"shape": f"{nodes}x{ppn}", "gang": gang,
                                            "linux": linux, "gang_makespan_s": g,
                                            "linux_makespan_s": li, "speedup": li / g}

        # (d) network preemption against plain freezing, 50 ms quantum,
        # two pmcheck jobs on n1 and n2.
        pre = {}
        for mode in ("network", "freeze"):
            score.configure(quantum_ms=50, preemption=mode)
            for n in (3, 4):
                score.scorectl("drain", f"n{n}", "--reason", "bench: two nodes")
            runs = [run_jobs(score, ctx, 2, 2, BUSY) for _ in range(reps)]
            pre[mode] = {"runs": runs,
                         "makespan_s": statistics.median(r["makespan_s"] for r in runs),
                         "retransmits": statistics.median(r["retransmits"] for r in runs),
                         "switches_unanswered": score.matrix()["unanswered"]}
        pre["slowdown_freeze_vs_network"] = pre["freeze"]["makespan_s"] / pre["network"]["makespan_s"]
        doc["preemption"] = pre
    print_tables(doc)
    return doc


def print_tables(doc):
    print("\n(a) switch time, two jobs on the same nodes, quantum 50 ms, network preemption")
    print(f"{'nodes':>5} {'switches':>9} {'median ms':>10} {'p99 ms':>8} {'quiesce ms':>11} {'unanswered':>10}")
    for s in doc["switch"]:
        print(f"{s['nodes']:>5} {s['switches']:>9} {s['median_ms']:>10.2f} {s['p99_ms']:>8.2f} "
              f"{s['quiesce_median_ms']:>11.2f} {s['unanswered']:>10}")
    print("\n(b) overhead: one 4x1 pmcheck job alone (median of runs); target < 2 %")
    for o in doc["overhead"]:
        verdict = "" if o["mode"] == "off" else ("PASS" if o["overhead_pct"] < 2 else "MISS")
        print(f"  gang {o['mode']:>8}: {o['median_s']:7.3f} s  {o['overhead_pct']:+6.2f} %  {verdict}")
    print("\n(c) two busy-polling ping-pong jobs (pmbench, 8 B) on the same nodes; "
          "target speedup >= 2")
    for device, g in doc["gang_vs_linux"].items():
        print(f"  {device} {g['shape']}: gang makespan {g['gang_makespan_s']:.3f} s, Linux time "
              f"sharing {g['linux_makespan_s']:.3f} s, speedup {g['speedup']:.2f}  "
              f"{'PASS' if g['speedup'] >= 2 else 'MISS'}")
    p = doc["preemption"]
    print("\n(d) two pmcheck jobs on 2 nodes, quantum 50 ms: network preemption against freezing")
    for mode in ("network", "freeze"):
        print(f"  {mode:>8}: makespan {p[mode]['makespan_s']:.3f} s, retransmits "
              f"{p[mode]['retransmits']}")
    print(f"  slowdown of freezing: {p['slowdown_freeze_vs_network']:.2f}x")
