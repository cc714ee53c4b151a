"""The launch benchmark suite: how long a whole parallel job of /bin/true
takes, from the command to its exit, with scrun against Slurm's srun and
Open MPI's mpirun on the same virtual cluster, in one run.

Called by scripts/bench (suite "launch").  The launchers start on the host
(the head node) and run their processes in the 4 nodes of one virtual
cluster brought up with --with-score --with-slurm:

  scrun        scrun -nodes=4xP /bin/true
               (scored's master and agents already run: warm daemons)
  srun         srun -N4 -n4P /bin/true, Slurm 22.05's slurmctld and slurmds
               already running (warm daemons, like for like with scrun;
               issue 13's target: scrun <= 0.3 x srun)
  mpirun       mpirun --host n1:P,...,n4:P -n 4P /bin/true, its rsh agent a
               small shell script that enters the node with nsenter (what
               `vcluster rsh` does, without Python's start-up): as warm as
               Open MPI 4.1 gets without a resource manager, since it starts
               an orted per node for every job (Debian's Open MPI 4.1 has no
               persistent DVM)
  mpirun-vc    the same through `vcluster rsh` (a Python program per node),
               informational: what an rsh that costs something adds

Shapes 4x1 and 4x2.  The launchers take turns, repetition by repetition, so
that all see the same machine; the first WARMUP runs of each are dropped
(they also warm the page cache for mpirun's plugins).  Targets: scrun no
slower than mpirun, and at most 0.3 x srun, each judged on the ratios of
each repetition (scripts/bench_stats.py: PASS only when its p5-p95 spread is at
most 1.0).  docs/scored/bench.md has the method; its tables are written by
scripts/bench_report.py from BUILD/bench/launch.json.
"""
import json
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from bench_stats import ratios, spread, verdict
from bench_udp import VCLUSTER, MPI_ENV, Cluster

NAME = "bl"
NODES = 4
SHAPES = (1, 2)
WARMUP = 3
TIMEOUT = 120
STATE_DIR = Path("/run/score/vcluster")      # vcluster's state files (read only)


def timed(argv, env):
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=TIMEOUT, check=False)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return dt


def fast_rsh(cl, directory):
    """A /bin/sh rsh agent for this cluster: NODE COMMAND... runs COMMAND in
    the node with nsenter, as `vcluster rsh` does (same namespaces: net, uts,
    mount), its holder PIDs looked up once now."""
    state = json.loads((STATE_DIR / f"{cl.name}.json").read_text())
    cases = []
    for node in state["nodes"]:
        names = [node["name"], f"{node['name']}.{cl.name}"] + [n["address"] for n in node["nics"]]
        cases.append(f"  {'|'.join(names)}) pid={int(node['holder_pid'])} ;;")
    script = "\n".join([
        "#!/bin/sh",
        f"# rsh agent for mpirun on vcluster {cl.name}, written by scripts/bench_launch.py",
        "while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done",
        'node=${1##*@}; shift',
        'case $node in',
        *cases,
        '  *) echo "rsh: unknown node $node" >&2; exit 255 ;;',
        'esac',
        'exec nsenter --target="$pid" --net --uts --mount -- /bin/sh -c "$*"',
        ""])
    path = Path(directory) / "rsh"
    path.write_text(script)
    path.chmod(0o755)
    return path, script


def run(ctx):
    reps = max(5, 10 * ctx.rounds) if not ctx.quick else 5
    doc = {"suite": "launch", "nodes": NODES, "repetitions": reps, "warmup": WARMUP,
           "baseline": "mpirun",
           "warm_daemon_baseline": ("Slurm 22.05's srun, slurmctld on the host and a slurmd "
                                    "per node already running, as scored's master and agents "
                                    "are (`vcluster up --with-slurm`)"),
           "warm_daemon_note": "Open MPI 4.1 starts an orted per node for every job",
           "results": []}
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp, \
            Cluster(NAME, NODES, 1, extra=["--with-score", "--with-slurm"]) as cl:
        rsh, script = fast_rsh(cl, tmp)
        doc["rsh_script"] = script
        score_env = dict(os.environ, SCORE_CONFIG=cl.client_config())
        slurm_env = dict(os.environ, SLURM_CONF=str(STATE_DIR / NAME / "slurm" / "slurm.conf"))
        mpi_env = dict(os.environ, **MPI_ENV)
        for ppn in SHAPES:
            hosts = ",".join(f"n{i}.{NAME}:{ppn}" for i in range(1, NODES + 1))
            scrun = [str(ctx.bin / "scrun"), f"-nodes={NODES}x{ppn}", "/bin/true"]

            def mpirun(agent):
                return ["mpirun", "--bind-to", "none", "--host", hosts, "-n", str(NODES * ppn),
                        "--mca", "plm_rsh_agent", agent,
                        "--mca", "oob_tcp_if_include", cl.subnet(0), "/bin/true"]
            srun = ["srun", "-N", str(NODES), "-n", str(NODES * ppn), "/bin/true"]
            launchers = [("scrun", scrun, score_env),
                         ("srun", srun, slurm_env),
                         ("mpirun", mpirun(str(rsh)), mpi_env),
                         ("mpirun-vc", mpirun(f"{VCLUSTER} rsh --name {NAME}"), mpi_env)]
            if ctx.quick:
                launchers = launchers[:3]
            for name, argv, _ in launchers:
                ctx.commands.append({"what": f"{name} {NODES}x{ppn}", "argv": argv, "cwd": None,
                                     "shell": " ".join(map(shlex.quote, argv))})
            samples = {name: [] for name, _, _ in launchers}
            for i in range(WARMUP + reps):
                order = launchers if i % 2 == 0 else launchers[::-1]
                for name, argv, env in order:
                    dt = timed(argv, env)
                    if i >= WARMUP:
                        samples[name].append(dt)
            row = {"shape": f"{NODES}x{ppn}", "samples_s": samples}
            for name in samples:
                row[name] = spread(samples[name])
            row["ratio"] = verdict(ratios(samples["scrun"], samples["mpirun"]), "<=", 1.0)
            row["ratio_srun"] = verdict(ratios(samples["scrun"], samples["srun"]), "<=", 0.3)
            if "mpirun-vc" in samples:
                row["ratio_vc"] = spread(ratios(samples["scrun"], samples["mpirun-vc"]))
            doc["results"].append(row)
    print_table(doc)
    return doc


def print_table(doc):
    print(f"\nlaunch: whole job of /bin/true, {doc['repetitions']} runs each "
          f"(median [p5-p95], ms); targets scrun/mpirun <= 1.0 and scrun/srun <= 0.3 over "
          f"the p5-p95 of the ratios")
    for r in doc["results"]:
        def cell(s):
            return f"{s['median'] * 1e3:7.1f} [{s['p5'] * 1e3:.1f}-{s['p95'] * 1e3:.1f}]"
        others = "  ".join(f"{name} {cell(r[name])}" for name in r["samples_s"])
        ratios_text = "  ".join(
            f"scrun/{base} {v['median']:.3f} [{v['lo']:.3f}-{v['hi']:.3f}] {v['verdict']}"
            for base, v in (("mpirun", r["ratio"]), ("srun", r.get("ratio_srun"))) if v)
        print(f"{r['shape']:>6}  {others}  {ratios_text}")
