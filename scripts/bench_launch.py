"""The launch benchmark suite: how long a whole parallel job of /bin/true
takes, from the command to its exit, with scrun against Open MPI's mpirun on
the same virtual cluster, in one run.

Called by scripts/bench (suite "launch").  Both launchers start on the host
(the head node) and run their processes in the 4 nodes of one virtual cluster
brought up with --with-score:

  scrun   scrun -nodes=4xP /bin/true        (scored master + agents already running)
  mpirun  mpirun --host n1:P,...,n4:P -n 4P /bin/true
                                            (orted started in each node by rsh)

Shapes 4x1 and 4x2.  The two launchers alternate, repetition by repetition, so
that both see the same machine; the first WARMUP runs of each are dropped.
Target (the issue's): scrun no slower than mpirun, median ratio <= 1.0.
docs/scored/bench.md has the method and the figures.
"""
import os
import statistics
import subprocess
import time

from bench_udp import VCLUSTER, MPI_ENV, Cluster

NAME = "bl"
NODES = 4
SHAPES = (1, 2)
WARMUP = 3
TIMEOUT = 120


def timed(argv, env):
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=TIMEOUT, check=False)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return dt


def summary(samples):
    s = sorted(samples)
    q = statistics.quantiles(s, n=20) if len(s) >= 2 else s * 19
    return {"median_s": statistics.median(s), "p5_s": q[0], "p95_s": q[-1],
            "min_s": s[0], "max_s": s[-1], "n": len(s)}


def run(ctx):
    reps = max(5, 10 * ctx.rounds) if not ctx.quick else 5
    doc = {"suite": "launch", "nodes": NODES, "repetitions": reps, "warmup": WARMUP,
           "results": []}
    with Cluster(NAME, NODES, 1, extra=["--with-score"]) as cl:
        score_env = dict(os.environ, SCORE_CONFIG=cl.client_config())
        mpi_env = dict(os.environ, **MPI_ENV)
        for ppn in SHAPES:
            hosts = ",".join(f"n{i}.{NAME}:{ppn}" for i in range(1, NODES + 1))
            scrun = [str(ctx.bin / "scrun"), f"-nodes={NODES}x{ppn}", "/bin/true"]
            mpirun = ["mpirun", "--bind-to", "none", "--host", hosts, "-n", str(NODES * ppn),
                      "--mca", "plm_rsh_agent", f"{VCLUSTER} rsh --name {NAME}",
                      "--mca", "oob_tcp_if_include", cl.subnet(0), "/bin/true"]
            ctx.commands.append({"what": f"scrun {NODES}x{ppn}", "argv": scrun, "cwd": None})
            ctx.commands.append({"what": f"mpirun {NODES}x{ppn}", "argv": mpirun, "cwd": None})
            samples = {"scrun": [], "mpirun": []}
            for i in range(WARMUP + reps):
                for name, argv, env in (("scrun", scrun, score_env), ("mpirun", mpirun, mpi_env)):
                    dt = timed(argv, env)
                    if i >= WARMUP:
                        samples[name].append(dt)
            row = {"shape": f"{NODES}x{ppn}",
                   "scrun": summary(samples["scrun"]), "mpirun": summary(samples["mpirun"])}
            row["ratio"] = row["scrun"]["median_s"] / row["mpirun"]["median_s"]
            row["verdict"] = "PASS" if row["ratio"] <= 1.0 else "MISS"
            doc["results"].append(row)
    print_table(doc)
    return doc


def print_table(doc):
    print(f"\nlaunch: whole job of /bin/true, {doc['repetitions']} runs each "
          f"(median, p5-p95, ms); target scrun/mpirun <= 1.0")
    print(f"{'shape':>6} {'scrun':>22} {'mpirun':>22} {'ratio':>6}  verdict")
    for r in doc["results"]:
        def cell(s):
            return (f"{s['median_s'] * 1e3:7.1f} ({s['p5_s'] * 1e3:.1f}-"
                    f"{s['p95_s'] * 1e3:.1f})")
        print(f"{r['shape']:>6} {cell(r['scrun']):>22} {cell(r['mpirun']):>22} "
              f"{r['ratio']:6.3f}  {r['verdict']}")
