"""The auth benchmark suite: what sealing every message with MUNGE costs a
launch.  scrun -nodes=4x2 /bin/true on a virtual cluster whose score seals
every message (this build) against the same on a cluster whose score does
not (the commit before sealing came in, built from git into
BUILD/bench/auth-base/), side by side in one run.

Called by scripts/bench (suite "auth").  Two virtual clusters of 4 nodes are
up at once, each with its own munged and scored; the two scrun take turns,
repetition by repetition, so that both see the same machine; the first
WARMUP runs of each are dropped.  Target (issue 10): sealed no more than
10 % slower than unsealed, judged on the ratio sealed/unsealed of each
repetition (scripts/bench_stats.py: PASS only when its p5-p95 spread is at
most 1.10).  docs/scored/bench.md has the method; its table is written by
scripts/bench_report.py from BUILD/bench/auth.json.

The baseline is built once per commit (a few minutes) with `git archive` of
BASE_COMMIT and `cargo build --release --locked`; later runs reuse it.
"""
import os
import shlex
import subprocess
import time
from pathlib import Path

from bench_stats import ratios, spread, verdict
from bench_udp import Cluster

ROOT = Path(__file__).resolve().parent.parent
# The last commit before every message was sealed (score-auth's envelope):
# its scored authenticates only each call's start, with an unbound credential.
BASE_COMMIT = "5e2a979d2569910bd940092dabac5ea6c2eb9cad"
NODES = 4
PPN = 2
WARMUP = 3
TIMEOUT = 120
BINS = ("scored", "scrun", "scorectl")


def baseline_bins(ctx):
    """BUILD/bench/auth-base/<commit>/bin with scored, scrun and scorectl
    of BASE_COMMIT, built unless they are there."""
    base = ctx.out / "auth-base"
    bin_dir = base / BASE_COMMIT[:12] / "bin"
    if all((bin_dir / b).is_file() for b in BINS):
        return bin_dir
    src = base / BASE_COMMIT[:12] / "src"
    subprocess.run(["rm", "-rf", str(src)], check=True)
    src.mkdir(parents=True)
    print(f"  building the unsealed baseline {BASE_COMMIT[:12]} in {src} (once)", flush=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BASE_COMMIT, "scored", "pm"],
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    argv = ["cargo", "build", "--quiet", "--release", "--locked",
            "--manifest-path", str(src / "scored" / "Cargo.toml")] + \
        [a for b in BINS for a in ("--bin", b)]
    env = dict(os.environ, CARGO_TARGET_DIR=str(base / "cargo"))
    ctx.commands.append({"what": "build the unsealed baseline", "argv": argv, "cwd": str(src),
                         "shell": f"CARGO_TARGET_DIR={base / 'cargo'} "
                                  + " ".join(map(shlex.quote, argv))})
    proc = subprocess.run(argv, env=env, cwd=src, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building the baseline failed: {proc.stderr.strip()[-800:]}")
    bin_dir.mkdir(parents=True, exist_ok=True)
    for b in BINS:
        subprocess.run(["install", "-m", "0755", str(base / "cargo" / "release" / b),
                        str(bin_dir / b)], check=True)
    return bin_dir


def timed(argv, env):
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=TIMEOUT, check=False)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return dt


def run(ctx):
    reps = max(20, 10 * ctx.rounds) if not ctx.quick else 5
    base_bin = baseline_bins(ctx)
    doc = {"suite": "auth", "nodes": NODES, "ppn": PPN, "repetitions": reps, "warmup": WARMUP,
           "baseline_commit": BASE_COMMIT, "baseline_bin": str(base_bin), "results": []}
    with Cluster("bau", NODES, 1, extra=["--with-score", "--score-bin", str(base_bin)]) as cu, \
            Cluster("bas", NODES, 1, extra=["--with-score", "--score-bin", str(ctx.bin)]) as cs:
        shape = f"-nodes={NODES}x{PPN}"
        runs = [("unsealed", [str(base_bin / "scrun"), shape, "/bin/true"],
                 dict(os.environ, SCORE_CONFIG=cu.client_config())),
                ("sealed", [str(ctx.bin / "scrun"), shape, "/bin/true"],
                 dict(os.environ, SCORE_CONFIG=cs.client_config()))]
        for name, argv, env in runs:
            ctx.commands.append({"what": f"scrun {NODES}x{PPN} ({name})", "argv": argv,
                                 "cwd": None, "env": {"SCORE_CONFIG": env["SCORE_CONFIG"]},
                                 "shell": f"SCORE_CONFIG={env['SCORE_CONFIG']} "
                                          + " ".join(map(shlex.quote, argv))})
        samples = {name: [] for name, _, _ in runs}
        for i in range(WARMUP + reps):
            for name, argv, env in (runs if i % 2 == 0 else runs[::-1]):
                dt = timed(argv, env)
                if i >= WARMUP:
                    samples[name].append(dt)
    row = {"shape": f"{NODES}x{PPN}", "samples_s": samples,
           "unsealed": spread(samples["unsealed"]), "sealed": spread(samples["sealed"]),
           "difference_s": spread([s - u for s, u in zip(samples["sealed"],
                                                         samples["unsealed"])]),
           "ratio": verdict(ratios(samples["sealed"], samples["unsealed"]), "<=", 1.10)}
    doc["results"].append(row)
    print_table(doc)
    return doc


def print_table(doc):
    print(f"\nauth: scrun -nodes={doc['nodes']}x{doc['ppn']} /bin/true, {doc['repetitions']} "
          f"runs each (median [p5-p95], ms); target sealed/unsealed <= 1.10")
    for r in doc["results"]:
        def cell(s):
            return f"{s['median'] * 1e3:7.1f} [{s['p5'] * 1e3:.1f}-{s['p95'] * 1e3:.1f}]"
        v = r["ratio"]
        print(f"{r['shape']:>6}  unsealed {cell(r['unsealed'])}  sealed {cell(r['sealed'])}  "
              f"difference {cell(r['difference_s'])}  sealed/unsealed {v['median']:.3f} "
              f"[{v['lo']:.3f}-{v['hi']:.3f}] {v['verdict']}")
