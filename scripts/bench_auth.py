"""The auth benchmark suite: what authenticating the control messages costs
a launch.  scrun /bin/true on a virtual cluster running this build (a MUNGE
credential on each call's first request, carrying a call key; HMAC-SHA256
under that key on every other message) against the same on a cluster
running the last commit that sealed every message with a credential of its
own (built from git into BUILD/bench/auth-base/), side by side in one run.

Called by scripts/bench (suite "auth").  Two virtual clusters of 4 nodes are
up at once, each with its own munged and scored; the two scrun take turns,
repetition by repetition, so that both see the same machine; the first
WARMUP runs of each are dropped.  Target: the call key no slower than a
credential per message, judged on the ratio of each repetition
(scripts/bench_stats.py: PASS only when its p5-p95 spread is at most 1.0).
docs/scored/bench.md has the method; its table is written by
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
# The last commit whose score-auth sealed every message with a MUNGE
# credential of its own (one munged round trip on each side per message).
BASE_COMMIT = "8c59a41754107709a064181b4bc37c0e0670036a"
NODES = 4
SHAPES = (1, 2)  # processes per node
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
    print(f"  building the baseline {BASE_COMMIT[:12]} in {src} (once)", flush=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BASE_COMMIT, "scored", "pm"],
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    argv = ["cargo", "build", "--quiet", "--release", "--locked",
            "--manifest-path", str(src / "scored" / "Cargo.toml")] + \
        [a for b in BINS for a in ("--bin", b)]
    # A target directory per commit: a shared one kept another commit's
    # generated protobuf code.
    target = base / BASE_COMMIT[:12] / "cargo"
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    ctx.commands.append({"what": "build the baseline (a credential per message)", "argv": argv,
                         "cwd": str(src),
                         "shell": f"CARGO_TARGET_DIR={target} "
                                  + " ".join(map(shlex.quote, argv))})
    proc = subprocess.run(argv, env=env, cwd=src, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building the baseline failed: {proc.stderr.strip()[-800:]}")
    bin_dir.mkdir(parents=True, exist_ok=True)
    for b in BINS:
        subprocess.run(["install", "-m", "0755", str(target / "release" / b),
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
    doc = {"suite": "auth", "nodes": NODES, "repetitions": reps, "warmup": WARMUP,
           "baseline_commit": BASE_COMMIT, "baseline_bin": str(base_bin), "results": []}
    with Cluster("bau", NODES, 1, extra=["--with-score", "--score-bin", str(base_bin)]) as cb, \
            Cluster("bas", NODES, 1, extra=["--with-score", "--score-bin", str(ctx.bin)]) as cn:
        for ppn in SHAPES:
            shape = f"-nodes={NODES}x{ppn}"
            runs = [("baseline", [str(base_bin / "scrun"), shape, "/bin/true"],
                     dict(os.environ, SCORE_CONFIG=cb.client_config())),
                    ("build", [str(ctx.bin / "scrun"), shape, "/bin/true"],
                     dict(os.environ, SCORE_CONFIG=cn.client_config()))]
            for name, argv, env in runs:
                ctx.commands.append({"what": f"scrun {NODES}x{ppn} ({name})", "argv": argv,
                                     "cwd": None, "env": {"SCORE_CONFIG": env["SCORE_CONFIG"]},
                                     "shell": f"SCORE_CONFIG={env['SCORE_CONFIG']} "
                                              + " ".join(map(shlex.quote, argv))})
            samples = {name: [] for name, _, _ in runs}
            for i in range(WARMUP + reps):
                for name, argv, env in (runs if i % 2 == 0 else runs[::-1]):
                    dt = timed(argv, env)
                    if i >= WARMUP:
                        samples[name].append(dt)
            doc["results"].append({
                "shape": f"{NODES}x{ppn}", "samples_s": samples,
                "baseline": spread(samples["baseline"]), "build": spread(samples["build"]),
                "difference_s": spread([n - b for n, b in zip(samples["build"],
                                                              samples["baseline"])]),
                "ratio": verdict(ratios(samples["build"], samples["baseline"]), "<=", 1.0)})
    print_table(doc)
    return doc


def print_table(doc):
    print(f"\nauth: scrun -nodes={doc['nodes']}xP /bin/true, {doc['repetitions']} runs each "
          "(median [p5-p95], ms); target call key / credential per message <= 1.0")
    for r in doc["results"]:
        def cell(s):
            return f"{s['median'] * 1e3:7.1f} [{s['p5'] * 1e3:.1f}-{s['p95'] * 1e3:.1f}]"
        v = r["ratio"]
        print(f"{r['shape']:>6}  per message {cell(r['baseline'])}  call key {cell(r['build'])}  "
              f"difference {cell(r['difference_s'])}  ratio {v['median']:.3f} "
              f"[{v['lo']:.3f}-{v['hi']:.3f}] {v['verdict']}")
