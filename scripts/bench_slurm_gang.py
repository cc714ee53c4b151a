"""The slurm-gang benchmark suite: two PM jobs sharing the same 2 nodes,
gang-scheduled by scored (network preemption) against Slurm's own gang
scheduling, in one run.  Called by scripts/bench (suite "slurm-gang").

One virtual cluster of 2 nodes runs both scored and Slurm
(`vcluster up --with-score --with-slurm --slurm-gang`: PreemptMode=
SUSPEND,GANG, SchedulerTimeSlice=5, Slurm's smallest, OverSubscribe=FORCE:2).
Each job is pmcheck over PM's udp device, one rank per node, every message
verified, sized to run about JOB_SECONDS alone.  The sides take turns,
round by round:

  alone   one job under scrun, nothing else (how long a job takes);
  scored  two such jobs started at once with scrun -nodes=2x1: scored's
          matrix switches them every quantum (its default), quiescing PM
          before each freeze;
  slurm   two such jobs submitted at once with sbatch (each `srun
          --mpi=pmix` inside): Slurm runs one, suspends the other, and
          swaps them every 5 s with SIGTSTP/SIGSTOP and its cgroup freezer;
  srun --score-gang
          one such job alone with `srun -p score --score-gang --mpi=pmix`,
          then two started at once the same way: Slurm starts the tasks
          (the partition lets the jobs share the nodes), scored's matrix
          time-shares them as it does scrun's jobs
          (slurm/spank/spank_score.c).  The pair is judged against the job
          alone measured just before it, with the same launcher and Slurm's
          same configuration, so that both see the same machine (a job
          alone under scrun at the start of the round is minutes away).

Then, once per suite run: the time from starting a job to its first turn.
A long pmcheck job holds both nodes (started with scrun); a short one is
started beside it, with scrun or with `srun -p score --score-gang`, in
turns, FIRST_TURN_REPS times each; the time runs from starting the launcher
to the first `scorectl matrix --json` (polled every 20 ms) that shows the
new job running.  Target (issue 13): srun --score-gang within 20 % of scrun.

Slurm's configuration differs between the slurm side (its own gang
scheduling) and the srun --score-gang side (none; nodes shared), so Slurm
is restarted between them (`vcluster slurm-up [--gang]`, a few seconds,
outside every measurement).

Makespan: from the moment the two jobs are started (both launchers at
once) to the end of the last, measured by this script the same way for both
sides (the launchers' start-up, tens of milliseconds, is in both).  PM's
retransmissions are the sum of pmcheck's `retransmits` over every rank.
Targets (issue 13): scored's makespan at most 0.9 x Slurm's, round by
round, and 0 retransmissions under scored; two `srun --score-gang` jobs
never stall the way two plain `srun`s do under Slurm's gang scheduling
(Slurm suspends the second at once and its srun retries step creation only
after 120-130 s): their makespan at most 2.2 x one job alone.
"""
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench_stats import ratios, spread, verdict
from bench_udp import VCLUSTER, Cluster

NAME = "bsg"
NODES = 2
JOB_SECONDS = 30
# pmcheck --pattern all between 2 ranks over udp: about 72,000 messages a
# second per rank pair on this machine (600,000 took 8.3 s alone), so a job
# runs about JOB_SECONDS alone; --quick jobs are shorter.
COUNT = {False: 2_200_000, True: 600_000}
SIZES = "8-512"
TIMEOUT = 900
STATE_DIR = Path("/run/score/vcluster")


def pmcheck_argv(ctx, count):
    return [str(ctx.bin / "pmcheck"), "--pattern", "all", "--count", str(count),
            "--sizes", SIZES, "--quiet", "--timeout", str(TIMEOUT)]


def records_of(text):
    recs = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    if len(recs) != NODES or not all(r["ok"] and r["errors"] == 0 for r in recs):
        raise RuntimeError(f"pmcheck did not report {NODES} good ranks: {text[-400:]}")
    return recs


def at_once(ctx, what, argv, env, n_jobs, output, cwd=None):
    """n_jobs copies of argv started at once; (seconds until the last ended,
    pmcheck's records of every job).  output(stdout) is a job's pmcheck
    output (its stdout, or the file it names)."""
    ctx.commands.append({"what": f"{what} (x{n_jobs} at once)", "argv": argv, "cwd": None})
    t0 = time.perf_counter()
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=cwd) for _ in range(n_jobs)]
    recs = []
    for p in procs:
        out, err = p.communicate(timeout=TIMEOUT)
        if p.returncode != 0:
            raise RuntimeError(f"{what} exited {p.returncode}: {err.strip()[-400:]}")
        recs += records_of(output(out))
    return time.perf_counter() - t0, recs


def scored_jobs(ctx, env, n_jobs, count):
    argv = [str(ctx.bin / "scrun"), f"-nodes={NODES}x1", *pmcheck_argv(ctx, count)]
    return at_once(ctx, f"scrun {NODES}x1 pmcheck", argv, env, n_jobs, lambda out: out)


def slurm_jobs(ctx, env, n_jobs, count, tmp):
    script = Path(tmp) / "job.sh"
    script.write_text("#!/bin/sh\nexec srun --mpi=pmix " + " ".join(pmcheck_argv(ctx, count)) + "\n")
    script.chmod(0o755)
    argv = ["sbatch", "--wait", "--parsable", "-N", str(NODES), "-n", str(NODES),
            "-o", f"{tmp}/slurm-%j.out", str(script)]

    def output(out):
        return (Path(tmp) / f"slurm-{out.strip().split(';')[0]}.out").read_text()
    return at_once(ctx, f"sbatch -N{NODES} of: {script.read_text().splitlines()[1]}", argv, env,
                   n_jobs, output, cwd=tmp)


def srun_score_gang_jobs(ctx, env, n_jobs, count):
    argv = ["srun", "-p", "score", "--score-gang", "--mpi=pmix", "-N", str(NODES),
            "-n", str(NODES), *pmcheck_argv(ctx, count)]
    return at_once(ctx, "srun --score-gang", argv, env, n_jobs, lambda out: out, cwd="/tmp")


class SlurmMode:
    """Restarts Slurm when a side needs the other configuration."""

    def __init__(self):
        self.gang = True        # the cluster comes up with --slurm-gang

    def ensure(self, gang):
        if gang == self.gang:
            return
        for args in (["slurm-down", "--name", NAME],
                     ["slurm-up", "--name", NAME] + (["--gang"] if gang else [])):
            p = subprocess.run([str(VCLUSTER), *args],
                               capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                raise RuntimeError(f"vcluster {' '.join(args)}: {p.stderr.strip()[-400:]}")
        self.gang = gang


FIRST_TURN_REPS = 20
POLL_S = 0.02


def first_turn(ctx, score_env, slurm_env, count):
    """{"scrun": [s...], "srun_score_gang": [s...]}: launch to first turn."""
    scorectl = [str(ctx.bin / "scorectl")]

    def running():
        p = subprocess.run(scorectl + ["matrix", "--json"], env=score_env,
                           capture_output=True, text=True, timeout=30)
        return set(json.loads(p.stdout)["running"]) if p.returncode == 0 else set()

    holder = subprocess.Popen([str(ctx.bin / "scrun"), f"-nodes={NODES}x1", "--no-stdin",
                               *pmcheck_argv(ctx, 100 * count)], env=score_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    short = pmcheck_argv(ctx, 20000)
    launchers = {
        "scrun": ([str(ctx.bin / "scrun"), f"-nodes={NODES}x1", "--no-stdin", *short],
                  score_env),
        "srun_score_gang": (["srun", "-p", "score", "--score-gang", "--mpi=pmix",
                             "-N", str(NODES), "-n", str(NODES), *short], slurm_env),
    }
    for name, (argv, _) in launchers.items():
        ctx.commands.append({"what": f"first turn: {name} beside a long scrun job",
                             "argv": argv, "cwd": None})
    times = {name: [] for name in launchers}
    try:
        deadline = time.monotonic() + 60
        while not running() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        before = running()
        if len(before) != 1:
            raise RuntimeError(f"the long job is not running alone: {before}")
        for i in range(FIRST_TURN_REPS):
            order = list(launchers.items())
            for name, (argv, env) in (order if i % 2 == 0 else order[::-1]):
                t0 = time.perf_counter()
                p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, cwd="/tmp")
                seen = None
                while seen is None and time.perf_counter() - t0 < 60:
                    if running() - before:
                        seen = time.perf_counter() - t0
                    else:
                        time.sleep(POLL_S)
                _, err = p.communicate(timeout=TIMEOUT)
                if p.returncode != 0 or seen is None:
                    raise RuntimeError(f"first turn, {name}: exit {p.returncode}, "
                                       f"seen {seen}: {err.strip()[-300:]}")
                times[name].append(seen)
    finally:
        holder.terminate()
        holder.wait(timeout=60)
    return times


def run(ctx):
    rounds = max(1, ctx.rounds)
    count = COUNT[bool(ctx.quick)]
    doc = {"suite": "slurm-gang", "nodes": NODES, "count": count, "sizes": SIZES,
           "rounds": [], "method": __doc__.split("\n\n")[1]}
    with tempfile.TemporaryDirectory(prefix="bench-slurm-gang-") as tmp, \
            Cluster(NAME, NODES, 1, extra=["--with-score", "--with-slurm", "--slurm-gang"]) as cl:
        os.chmod(tmp, 0o755)
        score_env = dict(os.environ, SCORE_CONFIG=cl.client_config())
        slurm_env = dict(os.environ, SLURM_CONF=str(STATE_DIR / NAME / "slurm" / "slurm.conf"))
        mode = SlurmMode()
        for r in range(rounds):
            row = {}
            alone, recs = scored_jobs(ctx, score_env, 1, count)
            row["alone_s"] = alone
            # Alternate which side goes first, so that neither always runs
            # on a machine the other has just warmed.
            sides = [("scored", None, lambda: scored_jobs(ctx, score_env, 2, count)),
                     ("slurm", True, lambda: slurm_jobs(ctx, slurm_env, 2, count, tmp)),
                     ("score_gang", False,
                      lambda: srun_score_gang_jobs(ctx, slurm_env, 2, count))]
            for side, gang, fn in (sides if r % 2 == 0 else sides[::-1]):
                if gang is not None:
                    mode.ensure(gang)
                if side == "score_gang":
                    row["score_gang_alone_s"], _ = srun_score_gang_jobs(ctx, slurm_env, 1,
                                                                        count)
                makespan, recs = fn()
                row[side] = {"makespan_s": makespan,
                             "retransmits": sum(x.get("retransmits", 0) for x in recs),
                             "rto_polls": sum(x.get("rto_polls", 0) for x in recs)}
            print(f"  round {r + 1}: alone {alone:.1f} s (srun --score-gang "
                  f"{row['score_gang_alone_s']:.1f} s), scored {row['scored']['makespan_s']:.1f}"
                  f" s ({row['scored']['retransmits']} retransmissions), Slurm "
                  f"{row['slurm']['makespan_s']:.1f} s ({row['slurm']['retransmits']}), "
                  f"srun --score-gang {row['score_gang']['makespan_s']:.1f} s "
                  f"({row['score_gang']['retransmits']})", flush=True)
            doc["rounds"].append(row)
        mode.ensure(False)
        doc["first_turn_s"] = first_turn(ctx, score_env, slurm_env, count)
    rs = doc["rounds"]
    doc["summary"] = {
        "alone_s": spread(r["alone_s"] for r in rs),
        "scored_s": spread(r["scored"]["makespan_s"] for r in rs),
        "slurm_s": spread(r["slurm"]["makespan_s"] for r in rs),
        "score_gang_s": spread(r["score_gang"]["makespan_s"] for r in rs),
        "scored_retransmits": [r["scored"]["retransmits"] for r in rs],
        "slurm_retransmits": [r["slurm"]["retransmits"] for r in rs],
        "score_gang_retransmits": [r["score_gang"]["retransmits"] for r in rs],
        "score_gang_ratio": verdict(ratios([r["score_gang"]["makespan_s"] for r in rs],
                                           [r["slurm"]["makespan_s"] for r in rs]), "<=", 0.9),
        "score_gang_alone_s": spread(r["score_gang_alone_s"] for r in rs),
        "score_gang_vs_alone": verdict(ratios([r["score_gang"]["makespan_s"] for r in rs],
                                              [r["score_gang_alone_s"] for r in rs]),
                                       "<=", 2.2),
        "ratio": verdict(ratios([r["scored"]["makespan_s"] for r in rs],
                                [r["slurm"]["makespan_s"] for r in rs]), "<=", 0.9),
        "zero_retransmits": all(r[side]["retransmits"] == 0 for r in rs
                                for side in ("scored", "score_gang")),
        "first_turn_scrun_s": spread(doc["first_turn_s"]["scrun"]),
        "first_turn_srun_s": spread(doc["first_turn_s"]["srun_score_gang"]),
        "first_turn_ratio": verdict(ratios(doc["first_turn_s"]["srun_score_gang"],
                                           doc["first_turn_s"]["scrun"]), "<=", 1.2),
    }
    print_table(doc)
    return doc


def print_table(doc):
    s = doc["summary"]

    def cell(x):
        return f"{x['median']:.1f} [{x['lo']:.1f}-{x['hi']:.1f}]"
    print(f"\nslurm-gang: two pmcheck jobs on the same {doc['nodes']} nodes, makespan s "
          f"(median [min-max] of {len(doc['rounds'])})")
    print(f"  one job alone {cell(s['alone_s'])}  scored {cell(s['scored_s'])}  "
          f"Slurm GANG {cell(s['slurm_s'])}  srun --score-gang {cell(s['score_gang_s'])} "
          f"(alone {cell(s['score_gang_alone_s'])})")
    for what, key, bound in (("scored / Slurm", "ratio", 0.9),
                             ("srun --score-gang / Slurm", "score_gang_ratio", 0.9),
                             ("srun --score-gang / one alone", "score_gang_vs_alone", 2.2)):
        v = s[key]
        print(f"  {what} {v['median']:.3f} [{v['lo']:.3f}-{v['hi']:.3f}] target <= {bound} "
              f"{v['verdict']}")
    v = s["first_turn_ratio"]
    def ms(x):
        return f"{x['median'] * 1e3:.0f} [{x['lo'] * 1e3:.0f}-{x['hi'] * 1e3:.0f}]"
    print(f"  first turn beside a running job: scrun {ms(s['first_turn_scrun_s'])} ms, "
          f"srun --score-gang {ms(s['first_turn_srun_s'])} ms, ratio {v['median']:.3f} "
          f"[{v['lo']:.3f}-{v['hi']:.3f}] target <= 1.2 {v['verdict']}")
    print(f"  retransmissions: scored {s['scored_retransmits']}, Slurm {s['slurm_retransmits']}, "
          f"srun --score-gang {s['score_gang_retransmits']}")
