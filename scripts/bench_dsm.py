"""The dsm benchmark suite: libpmdsm's fault path against PM's remote read,
its two write-detection methods against each other, and the DSM versions of
the example programs against their MPI versions.

Called by scripts/bench (suite "dsm").  In one run, ctx.rounds times, the
sides of every comparison taking turns (the order reversed every other round
so that a drift of the machine does not always favour the same side):

  fault path (pmdsm-bench, docs/dsm/bench.md), 2 ranks:
    on this host, PM's shm device: mpirun -n 2 --bind-to core --map-by core
      pmdsm-bench --write-detect segv, the same with uffd-async and uffd-wp, and
      pmdsm-bench --pm-read-baseline (PM's pm_read of 4 KiB alone, the same
      pages, the same device);
    between n1 and n2 of a virtual cluster (bdsm, 10.244.0.0/16, one NIC,
      1 Gbit/s each way, MTU 1500), PM's udp device: the same three, rank 0
      on CPU 0 in n1, rank 1 on CPU 1 in n2 (root only; up once, always
      taken down).
  applications (build/bin/{jacobi,sor,matmul,histogram}_{seq,dsm,mpi}, the
  same arguments, so the same result: the checksums are compared):
    on this host: the sequential program, the DSM version with segv and with
      uffd-async and with uffd-wp, the MPI version (Open MPI's ob1 + vader), each with 1 and
      with 2 ranks (the machine has 2 cores);
    on the virtual cluster (4 nodes): jacobi, DSM (PM's udp device) and MPI
      (ob1 + tcp on net0; and over PM: pml cm, mtl ofi, the provider pm on
      PM's udp device, the DSM's transport), 1 rank on n1, 1 rank on each of
      n1 and n2, and 1 rank on each of n1..n4 (the issue's shape: on 2 CPUs,
      two ranks share each CPU, in both versions alike).

Every figure of a round is one run's: pmdsm-bench's median of its
repetitions, an application's "seconds" (its compute phase).  Ratios and
efficiencies are taken round by round (T(1 rank) / (P x T(P ranks)) of the
same round) and judged with scripts/bench_stats.py: PASS only when the whole
spread is on the right side of the target.

Targets (the DSM issue): write fault + diff per page of the better method at
least 3 x cheaper than segv's; a read fault at most 1.5 x PM's remote read of
4 KiB alone (the issue's measure: over udp at 1 Gbit/s), judged on
pmdsm-bench's read-random (one fault per page, read-ahead never starts); its
read, a sequential sweep that read-ahead serves several pages per fault, is
reported beside it per page; Jacobi 2048^2,
efficiency of the DSM version at least 0.9 x the MPI version's, judged on
4 nodes x 1 rank (the issue's shape) and on 2 nodes x 1 rank (one rank per
CPU) and 2 ranks on one node.
"""
import json
import os
import re
import subprocess
import time

from bench_mpi import (PM_MCA, BoundedCluster, Failed, file_records, idle_probe,
                       package_version, run_cmd)
from bench_stats import ratios, spread, verdict
from bench_udp import VCLUSTER, cell, pin

NAME = "bdsm"                  # no other suite or test uses it
SUBNET = "10.244.0.0/16"       # outside vcluster's default 10.250-10.255 and the other suites'
RATE = "1gbit"
# The write detections, segv first: the others are compared with it (segv
# ÷ method), and the issue's "chosen method" is uffd-async, the default.
METHODS = ["segv", "uffd-async", "uffd-wp"]
CHOSEN = "uffd-async"
FAULT_TESTS = ["write-remote", "write-home", "read", "read-random", "lock", "lock-local",
               "barrier", "barrier-peer", "first-touch"]
# The read fault judged against pm_read: pages in a random order, one fault
# each; "read" (in order, read-ahead) is the sweep, reported beside it.
READ_FAULT_TEST = "read-random"
BASELINE_TEST = "pm-read"
FAULT_PAGES = 256
FAULT_REPS = 5
FAULT_MIN_TIME = 0.05
QUICK_FAULT_REPS = 3
RUN_TIMEOUT = 180              # s for one mpirun

# (program, arguments).  Sizes keep the suite near 4 minutes on 2 cores;
# jacobi is the issue's 2048^2, 200 sweeps (some 0.5 s a run: with 40, a
# run was as short as the scheduler's and the host's noise, and the 1-rank
# times that every efficiency divides swung by a third).
PROGRAMS = [
    ("jacobi", ["-n", "2048", "-i", "200"]),
    ("sor", ["-n", "2048", "-i", "10"]),
    ("matmul", ["-n", "768"]),
    ("histogram", ["-m", "16000000"]),
]
QUICK_PROGRAMS = ["jacobi"]
CLUSTER_PROGRAMS = ["jacobi"]
# Ranks of the application runs: on one node one per CPU at most; on the
# virtual cluster one per node, 4 nodes being the issue's Jacobi shape.
RANKS = {"node": [1, 2], "cluster": [1, 2, 4]}
CLUSTER_NODES = 4
VERSIONS = ["seq"] + [f"dsm-{m}" for m in METHODS] + ["mpi"]
# On the virtual cluster, the MPI version also as the DSM version
# synchronises: every rank waiting for all after each sweep (jacobi_mpi
# --barrier).  A row to read beside the others, not a baseline of a target.
MPI_BARRIER = "mpi-barrier"
# And the DSM version meeting only its neighbours after each sweep
# (jacobi_dsm --neighbours, the chosen method): its edge rows pushed.
DSM_NEIGHBOURS = "dsm-neighbours"
# And meeting them in two halves, the interior rows computed between the
# two (jacobi_dsm --split: pmdsm_barrier_with_notify, _wait).
DSM_SPLIT = "dsm-split"
# And with a service thread that polls instead of sleeping while the
# application computes (PMDSM_SERVICE_SCHED=poll, the chosen method).
DSM_POLL = "dsm-poll"
# And the MPI version over PM (libpm-fi, PM's udp device on net0): the DSM's
# transport under both versions.  The issue's "MPI version" is "over PM once
# the MPI issue lands, Open MPI's own transports before that": the DSM is
# judged against both.
MPI_PM = "mpi-pm"
CLUSTER_EXTRA = {"jacobi": [MPI_BARRIER, MPI_PM, DSM_NEIGHBOURS, DSM_SPLIT, DSM_POLL]}
# The MPI versions a DSM version is compared with, each under its key of
# the summary (dsm_over_mpi: ob1 + tcp, or vader on one node).
MPI_BASELINES = {"mpi": "dsm_over_mpi", MPI_PM: "dsm_over_mpi_pm"}
# What each of those DSM rows adds to the chosen method's run: arguments
# of the program, environment of the ranks.
DSM_EXTRA = {DSM_NEIGHBOURS: (["--neighbours"], {}), DSM_SPLIT: (["--split"], {}),
             DSM_POLL: ([], {"PMDSM_SERVICE_SCHED": "poll"})}
TARGET_PROGRAM = "jacobi"
VADER = ["--mca", "pml", "ob1", "--mca", "btl", "self,vader"]
MPIRUN_NODE = ["mpirun", "--bind-to", "core", "--map-by", "core", "--report-bindings"]


class DsmCluster(BoundedCluster):
    """bench_mpi's bounded, recorded virtual cluster, said to be this suite's."""

    def __exit__(self, *exc):
        for p in self.procs:
            self.stop(p)
        try:
            proc = self._vcluster("vcluster down", ["down", "--name", self.name], 60)
            if proc.returncode != 0:
                print(f"dsm: vcluster down --name {self.name}: {proc.stderr.strip()}",
                      flush=True)
        except subprocess.TimeoutExpired:
            print(f"dsm: vcluster down --name {self.name} did not finish in 60 s", flush=True)


def cluster_mpirun(ctx, cl, ranks, mca, env, program, pinned=True):
    """mpirun of `ranks` ranks in the cluster, rank i in node n(i+1) on CPU
    i % 2 (n1 and n2 as bench_udp.pin() places them; unless not pinned:
    then the scheduler places them); the environment forwarded with -x in
    each app context."""
    argv = ["mpirun", "--bind-to", "none",
            "--mca", "plm_rsh_agent", f"{VCLUSTER} rsh --name {cl.name}",
            "--mca", "oob_tcp_if_include", cl.subnet(0), *mca]
    forward = [a for k in sorted(env) for a in ("-x", f"{k}={env[k]}")]
    for i in range(ranks):
        argv += ([":"] if i else []) + ["--host", f"n{i + 1}", "-n", "1", *forward,
                                        *(rank_pin(i) if pinned else []), *ctx.wrap, *program]
    return argv


def rank_pin(i):
    """Rank i's CPU on the virtual cluster: i % 2 (n1 and n2 as
    bench_udp.pin() places them, n3 and n4 beside them)."""
    return pin("n1" if i % 2 == 0 else "n2")


def node_mpirun(ctx, ranks, mca, env, program, pinned=True):
    """mpirun of `ranks` ranks on this host, each bound to its own core (the
    same prefix for the DSM and MPI), or not bound at all."""
    forward = [a for k in sorted(env) for a in ("-x", f"{k}={env[k]}")]
    extra = [] if len(os.sched_getaffinity(0)) >= ranks else ["--oversubscribe"]
    prefix = MPIRUN_NODE if pinned else ["mpirun", "--bind-to", "none", "--report-bindings"]
    return [*prefix, *extra, "-n", str(ranks), *mca, *forward, *ctx.wrap, *program]


class CpuWatch:
    """How much CPU other processes took while a command of this suite ran:
    the machine's busy time (/proc/stat) less this process's and its waited
    children's (os.times()), as a percentage of all CPUs over the interval.
    On this host the benchmarks' ranks are mpirun's children, so what is
    left is someone else's.  On the virtual cluster they are not (mpirun
    starts them through vcluster rsh and Open MPI's daemon, whose CPU time
    never reaches this process): not measured there."""

    HZ = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
        t = os.times()
        return (sum(fields) - fields[3] - fields[4], sum(fields),
                t.user + t.system + t.children_user + t.children_system)

    @classmethod
    def others_pct(cls, a, b):
        busy = (b[0] - a[0]) / cls.HZ
        total = (b[1] - a[1]) / cls.HZ
        if total <= 0:
            return None
        return round(max(0.0, busy - (b[2] - a[2])) / total * 100, 1)


def timed_cmd(ctx, what, argv, watch):
    """run_cmd, and (when watch) the CPU others took meanwhile."""
    a = CpuWatch.sample()
    out, err = run_cmd(ctx, what, argv, timeout=RUN_TIMEOUT)
    return out, err, CpuWatch.others_pct(a, CpuWatch.sample()) if watch else None


def json_lines(out, what):
    recs = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                recs.append(json.loads(line))
            except ValueError as e:
                raise Failed(f"{what}: bad JSON: {line[:120]}") from e
    return recs


def bindings(err):
    found = {}
    for m in re.finditer(r"MCW rank (\d+) (bound to .*|is not bound.*)", err or ""):
        found[int(m.group(1))] = m.group(2).strip()
    return [found[r] for r in sorted(found)]


# ---------------------------------------------------------------- fault path

def fault_run(ctx, where, cl, side, reps, pinned=True):
    """One pmdsm-bench run: side is a write-detection method or "baseline";
    {test: record}."""
    program = [str(ctx.bin / "pmdsm-bench"), "--device", "shm" if where == "node" else "udp",
               "--pages", str(FAULT_PAGES), "--reps", str(reps),
               "--min-time", str(FAULT_MIN_TIME), "--json"]
    program += ["--pm-read-baseline"] if side == "baseline" else ["--write-detect", side]
    if where == "node":
        argv = node_mpirun(ctx, 2, [], {}, program, pinned)
    else:
        argv = cluster_mpirun(ctx, cl, 2, [], {"PM_DEVICE": "udp", "PM_UDP_NICS": "eth0"},
                              program, pinned)
    what = f"fault path, {where}{'' if pinned else ', unpinned'}: pmdsm-bench " + (
        "--pm-read-baseline" if side == "baseline" else f"--write-detect {side}")
    out, err, others = timed_cmd(ctx, what, argv, where == "node")
    recs = {r["test"]: r for r in json_lines(out, what)}
    want = [BASELINE_TEST] if side == "baseline" else FAULT_TESTS
    missing = [t for t in want if t not in recs]
    if missing:
        raise Failed(f"{what}: no record for {', '.join(missing)}")
    if side != "baseline":
        found = {r.get("write_detect") for r in recs.values()}
        if found != {side}:
            raise Failed(f"{what}: the DSM used write detection {sorted(found)}, not {side}")
    return {"records": recs, "bindings": bindings(err), "others_cpu_pct": others}


def fault_part(ctx, where, cl, rounds, reps, doc):
    """The judged placement (pinned) and, informational, the same runs
    unpinned (keys "unpinned:<side>" in the rounds, part["unpinned"])."""
    part = {"where": where, "rounds": [], "errors": []}
    sides = [(side, True) for side in METHODS + ["baseline"]]
    if not ctx.quick:
        sides += [(side, False) for side in METHODS + ["baseline"]]
    for i in range(rounds):
        print(f"dsm: fault path ({where}) round {i + 1}/{rounds}", flush=True)
        rnd = {}
        for side, pinned in (sides if i % 2 == 0 else list(reversed(sides))):
            key = side if pinned else f"unpinned:{side}"
            try:
                rnd[key] = fault_run(ctx, where, cl, side, reps, pinned)
            except Failed as e:
                print(f"dsm: FAILED: {e}", flush=True)
                rnd[key] = {"failed": True, "error": str(e)}
                part["errors"].append(str(e))
        part["rounds"].append(rnd)
    part.update(summarise_fault(part["rounds"], ""))
    if not ctx.quick:
        part["unpinned"] = summarise_fault(part["rounds"], "unpinned:")
    return part


def fault_value(rnd, side, test):
    run = rnd.get(side) or {}
    rec = (run.get("records") or {}).get(test)
    return rec["us_per_op"]["median"] if rec else None


def summarise_fault(all_rounds, prefix):
    """Figures of the runs whose keys start with prefix."""
    rounds = [{k[len(prefix):]: v for k, v in r.items() if k.startswith(prefix)}
              for r in all_rounds]
    part = {}
    us = {}
    for side in METHODS:
        us[side] = {}
        for test in FAULT_TESTS:
            samples = [fault_value(r, side, test) for r in rounds]
            us[side][test] = dict(spread(samples), samples=samples)
    samples = [fault_value(r, "baseline", BASELINE_TEST) for r in rounds]
    us["baseline"] = {BASELINE_TEST: dict(spread(samples), samples=samples)}
    part["us"] = us
    # segv ÷ each other method per test, round by round: above 1, the other
    # is cheaper.
    part["segv_over"] = {}
    for m in METHODS[1:]:
        part["segv_over"][m] = {}
        for test in FAULT_TESTS:
            s = ratios([fault_value(r, "segv", test) for r in rounds],
                       [fault_value(r, m, test) for r in rounds])
            part["segv_over"][m][test] = dict(spread(s), samples=s)
    # A read fault (read-random, judged) and a sequential sweep per page
    # (read, with read-ahead) against pm_read of 4 KiB alone, per method.
    base = [fault_value(r, "baseline", BASELINE_TEST) for r in rounds]
    for key, test in (("read_random_over_pm_read", READ_FAULT_TEST),
                      ("read_over_pm_read", "read")):
        part[key] = {}
        for side in METHODS:
            s = ratios([fault_value(r, side, test) for r in rounds], base)
            part[key][side] = dict(spread(s), samples=s)
    # What each method did per operation (the DSM's counters, first round
    # that has them): both sides must do the same work.
    part["work"] = {}
    for side in METHODS:
        rec = next((r[side]["records"] for r in rounds if (r.get(side) or {}).get("records")),
                   None)
        if rec:
            part["work"][side] = {t: {k: rec[t]["per_op"].get(k) for k in
                                      ("read_faults", "write_faults", "twins", "diffs_sent",
                                       "diff_bytes", "pages_fetched", "read_ahead_pages",
                                       "wp_scans",
                                       "fault_ns", "fetch_ns", "release_ns")}
                                  | {"ctxsw": rec[t].get("ctxsw_per_op"),
                                     "iterations": rec[t].get("iterations")}
                                  for t in FAULT_TESTS if t in rec}
    first = next((r for r in rounds if (r.get("segv") or {}).get("bindings")), None)
    part["bindings"] = first["segv"]["bindings"] if first else []
    return part


# ---------------------------------------------------------------- applications

def app_argv(ctx, where, cl, program, args, version, ranks):
    binary = [str(ctx.bin / f"{program}_{'seq' if version == 'seq' else version.split('-')[0]}"),
              *args]
    if version == "seq":
        return [*pin("n1"), *ctx.wrap, *binary]
    if version == MPI_BARRIER:
        binary.append("--barrier")
    if version in ("mpi", MPI_BARRIER, MPI_PM):
        if where == "node":
            return node_mpirun(ctx, ranks, VADER, {}, binary)
        env = {}
        if version == MPI_PM:
            mca = list(PM_MCA)
            env = {"FI_PROVIDER_PATH": str(ctx.build / "lib" / "libfabric"),
                   "PM_DEVICE": "udp", "PM_UDP_NICS": "eth0"}
        else:
            mca = ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp",
                   "--mca", "btl_tcp_if_include", cl.subnet(0)]
        if ranks > len(os.sched_getaffinity(0)):
            # Two ranks a CPU: each node looks to Open MPI like a machine
            # of its own with one rank, so it does not know to yield while
            # it polls (as it does when it sees more ranks than slots), and
            # a rank waiting in MPI_Sendrecv would take half the CPU from
            # the one computing beside it.  The DSM's waits yield too.
            mca += ["--mca", "mpi_yield_when_idle", "1"]
        return cluster_mpirun(ctx, cl, ranks, mca, env, binary)
    method = version.split("-", 1)[1]
    env = {}
    if version in DSM_EXTRA:
        extra_args, env = DSM_EXTRA[version]
        binary += extra_args
        method = CHOSEN
    if where == "node":
        return node_mpirun(ctx, ranks, [], {"PM_DEVICE": "shm", "PMDSM_WRITE_DETECT": method,
                                             **env}, binary)
    return cluster_mpirun(ctx, cl, ranks, [], {"PM_DEVICE": "udp", "PM_UDP_NICS": "eth0",
                                               "PMDSM_WRITE_DETECT": method, **env}, binary)


def app_run(ctx, where, cl, program, args, version, ranks):
    argv = app_argv(ctx, where, cl, program, args, version, ranks)
    what = f"{program} {version} x{ranks} ({where})"
    out, _, others = timed_cmd(ctx, what, argv, where == "node")
    recs = [r for r in json_lines(out, what) if "seconds" in r]
    if not recs:
        raise Failed(f"{what}: no result line")
    r = recs[-1]
    if r.get("ranks") != ranks:
        raise Failed(f"{what}: ran with {r.get('ranks')} rank(s)")
    return {"seconds": r["seconds"], "checksum": r.get("checksum"), "ranks": r["ranks"],
            "others_cpu_pct": others}


def app_versions(where, program):
    """The versions run of program, without the sequential one."""
    extra = CLUSTER_EXTRA.get(program, []) if where == "cluster" else []
    return [v for v in VERSIONS if v != "seq"] + extra


def configs(where, program):
    out = [("seq", 1)] if where == "node" else []
    for ranks in RANKS[where]:
        out += [(v, ranks) for v in app_versions(where, program)]
    return out


def app_part(ctx, where, cl, programs, rounds):
    part = {"where": where, "programs": [], "errors": []}
    for name, args in PROGRAMS:
        if name not in programs:
            continue
        prog = {"program": name, "args": args, "rounds": []}
        cfgs = configs(where, name)
        for i in range(rounds):
            print(f"dsm: {name} ({where}) round {i + 1}/{rounds}", flush=True)
            rnd = {}
            for version, ranks in (cfgs if i % 2 == 0 else list(reversed(cfgs))):
                key = f"{version}/{ranks}"
                try:
                    rnd[key] = app_run(ctx, where, cl, name, args, version, ranks)
                except Failed as e:
                    print(f"dsm: FAILED: {e}", flush=True)
                    rnd[key] = {"failed": True, "error": str(e)}
                    part["errors"].append(str(e))
            prog["rounds"].append(rnd)
        summarise_app(prog, where)
        part["programs"].append(prog)
    return part


def t(rnd, version, ranks):
    run = rnd.get(f"{version}/{ranks}") or {}
    return run.get("seconds")


def summarise_app(prog, where):
    """Per version: the seconds at every rank count, and per rank count P
    above 1 the efficiency T(1) / (P x T(P)) round by round (and, on one
    node, against the sequential program); per method and P, the DSM's
    efficiency and time over MPI's.  Keyed by P as a string (JSON)."""
    rounds = prog["rounds"]
    versions = app_versions(where, prog["program"])
    counts = RANKS[where]
    sums = {}
    for version in versions:
        row = {"efficiency": {}}
        for ranks in counts:
            s = [t(r, version, ranks) for r in rounds]
            row[f"seconds_{ranks}"] = dict(spread(s), samples=s)
        for p in counts[1:]:
            eff = [t1 / (p * tp) if t1 and tp else None
                   for t1, tp in ((t(r, version, 1), t(r, version, p)) for r in rounds)]
            row["efficiency"][str(p)] = dict(spread(eff), samples=eff)
            if where == "node":
                seq = [t(r, "seq", 1) for r in rounds]
                e = [ts / (p * tp) if ts and tp else None
                     for ts, tp in zip(seq, [t(r, version, p) for r in rounds])]
                row.setdefault("efficiency_vs_seq", {})[str(p)] = dict(spread(e), samples=e)
        sums[version] = row
    if where == "node":
        s = [t(r, "seq", 1) for r in rounds]
        sums["seq"] = {"seconds_1": dict(spread(s), samples=s)}
    prog["summary"] = sums
    for mpi, key in MPI_BASELINES.items():
        if mpi not in sums:
            continue
        prog[key] = {}
        for p in counts[1:]:
            by_method = prog[key][str(p)] = {}
            for v in (v for v in versions if v.startswith("dsm-")):
                method = v[len("dsm-"):]
                eff_ratio = ratios(sums[v]["efficiency"][str(p)]["samples"],
                                   sums[mpi]["efficiency"][str(p)]["samples"])
                time_ratio = ratios([t(r, v, p) for r in rounds],
                                    [t(r, mpi, p) for r in rounds])
                by_method[method] = {
                    "efficiency_ratio": dict(spread(eff_ratio), samples=eff_ratio),
                    "time_ratio": dict(spread(time_ratio), samples=time_ratio)}
    prog["segv_over"] = {}
    for m in METHODS[1:]:
        prog["segv_over"][m] = {}
        for ranks in counts:
            s = ratios([t(r, "dsm-segv", ranks) for r in rounds],
                       [t(r, f"dsm-{m}", ranks) for r in rounds])
            prog["segv_over"][m][str(ranks)] = dict(spread(s), samples=s)
    # Every version, every rank count: the same result.
    sums_seen = {}
    for r in rounds:
        for key, run in r.items():
            if run.get("checksum"):
                sums_seen.setdefault(run["checksum"], []).append(key)
    prog["checksums"] = sorted(sums_seen)
    prog["checksums_agree"] = len(sums_seen) == 1


# ---------------------------------------------------------------- targets

def judge(doc):
    out = []
    for where in ("node", "cluster"):
        f = doc["fault"].get(where)
        if not f or f.get("skipped"):
            continue
        label = "one node, shm" if where == "node" else "2 nodes, udp, 1 Gbit/s"
        s = f["segv_over"][CHOSEN]["write-remote"]["samples"]
        v = verdict(s, ">=", 3.0)
        v.update(key=f"{where}_write", where=where, samples=s,
                 what=f"write fault + diff per page, segv ÷ {CHOSEN} ({label})",
                 issue="the chosen method ≥ 3 × cheaper than segv")
        out.append(v)
        for method in METHODS:
            s = f["read_random_over_pm_read"][method]["samples"]
            v = verdict(s, "<=", 1.5)
            v.update(key=f"{where}_read_{method}", where=where, samples=s,
                     what=f"read fault ({method}; `{READ_FAULT_TEST}`, one fault per page) ÷ "
                          f"pm_read of 4 KiB alone ({label})",
                     issue="≤ 1.5 × PM's remote read of 4 KiB" +
                           (" (the issue's measure: udp, 1 Gbit/s)" if where == "cluster" else ""))
            out.append(v)
    for where, part in doc["apps"].items():
        if not part or part.get("skipped"):
            continue
        for prog in part["programs"]:
            if prog["program"] != TARGET_PROGRAM:
                continue
            for mpi, key in MPI_BASELINES.items():
                for p, by_method in prog.get(key, {}).items():
                    for method in METHODS:
                        s = by_method[method]["efficiency_ratio"]["samples"]
                        v = verdict(s, ">=", 0.9)
                        v.update(key=target_key(where, prog["program"], method, p, mpi),
                                 where=where, samples=s,
                                 what=f"{prog['program']} {' '.join(prog['args'])}, DSM "
                                      f"({method}) efficiency ÷ {MPI_WORDS[where][mpi]} "
                                      f"efficiency, {app_shape(where, int(p))}",
                                 issue="Jacobi 2048², DSM efficiency ≥ 0.9 × MPI's")
                        out.append(v)
    return out


# What a report calls each MPI version a DSM version is compared with.
MPI_WORDS = {"node": {"mpi": "MPI (ob1 + vader)"},
             "cluster": {"mpi": "MPI (ob1 + tcp)", MPI_PM: "MPI over PM (udp)"}}


def target_key(where, program, method, ranks, mpi="mpi"):
    """The key of a target of the DSM's efficiency against an MPI version's
    (bench_report marks the table's rows with it)."""
    return f"{where}_{program}_{method}_{ranks}" + ("" if mpi == "mpi" else f"_{mpi}")


def app_shape(where, ranks):
    """The words for a shape of the application runs."""
    if where == "node":
        return f"{ranks} ranks on one node (shm)"
    return (f"{ranks} nodes × 1 rank (udp, 1 Gbit/s)"
            + (", the issue's shape (2 ranks a CPU)" if ranks == 4 else ""))


def recommend(doc):
    """Which write detection the figures favour.  A comparison (a fault-path
    test, an application run) counts for a method when it is cheaper than
    every other round by round with the whole spread of each ratio (other ÷
    it) above 1, as a verdict would; otherwise it is undecided.  The method
    cheaper in more application runs is favoured, then the one cheaper in
    more fault-path tests."""
    wins = {m: [] for m in METHODS}
    undecided = []

    def count(what, by_method):
        """by_method: {method: [a figure per round]}, lower is cheaper."""
        if any(not any(v is not None for v in vals) for vals in by_method.values()):
            return
        versus = {m: {o: spread(ratios(by_method[o], by_method[m]))
                      for o in METHODS if o != m} for m in METHODS}
        item = {"what": what, "over": {m: {o: r["median"] for o, r in versus[m].items()}
                                       for m in METHODS}}
        best = [m for m in METHODS
                if all(r["median"] is not None and r["lo"] > 1 for r in versus[m].values())]
        if best:
            item["ratios"] = {o: r["median"] for o, r in versus[best[0]].items()}
            wins[best[0]].append(item)
        else:
            undecided.append(item)

    for where, f in doc["fault"].items():
        if not f or f.get("skipped"):
            continue
        for test in FAULT_TESTS:
            count(f"{test} ({where})",
                  {m: [fault_value(r, m, test) for r in f["rounds"]] for m in METHODS})
    for where, part in doc["apps"].items():
        if not part or part.get("skipped"):
            continue
        for prog in part["programs"]:
            for ranks in RANKS[where]:
                count(f"{prog['program']} x{ranks} ({where})",
                      {m: [t(r, f"dsm-{m}", ranks) for r in prog["rounds"]]
                       for m in METHODS})
    apps = {m: [w for w in wins[m] if " x" in w["what"]] for m in METHODS}
    best = max(METHODS, key=lambda m: (len(apps[m]), len(wins[m])))
    return {"method": best, "wins": wins, "undecided": undecided,
            "rule": "a comparison (the methods' figures of each round) counts for the "
                    "method cheaper than every other, each ratio's whole spread above 1; "
                    "the method cheaper in more application runs is favoured, then the one "
                    "cheaper in more fault-path tests"}


# ---------------------------------------------------------------- the suite

def contention(doc):
    """The CPU other processes took during each part's commands on this host
    (percent of the machine, per command): median, min, max."""
    out = {}
    for kind in ("fault", "apps"):
        for where, part in doc[kind].items():
            vals = []
            for rnd in part.get("rounds", []):
                vals += [run.get("others_cpu_pct") for run in rnd.values()]
            for prog in part.get("programs", []):
                for rnd in prog["rounds"]:
                    vals += [run.get("others_cpu_pct") for run in rnd.values()]
            if where == "node":
                out[f"{kind}.{where}"] = spread(vals)
    return out


def binaries(ctx):
    """What was measured: size, modification time and SHA-256 of the DSM,
    PM and the benchmark (the tree is shared: they may be rebuilt while the
    suite runs)."""
    return file_records((ctx.build / "lib" / "libpmdsm.so", ctx.build / "lib" / "libpm.so",
                         ctx.bin / "pmdsm-bench", ctx.bin / "jacobi_dsm"))


def run_suite(ctx):
    quick = ctx.quick
    rounds = ctx.rounds
    reps = QUICK_FAULT_REPS if quick else FAULT_REPS
    programs = QUICK_PROGRAMS if quick else [p for p, _ in PROGRAMS]
    need = [ctx.bin / "pmdsm-bench"] + [ctx.bin / f"{p}_{v}" for p in programs
                                         for v in ("seq", "dsm", "mpi")]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: run make")
    cpus = len(os.sched_getaffinity(0))
    doc = {"suite": "dsm", "rounds_asked": rounds, "quick": quick,
           "fault_settings": {"pages": FAULT_PAGES, "reps": reps, "min_time_s": FAULT_MIN_TIME,
                              "tests": FAULT_TESTS, "baseline": BASELINE_TEST},
           "programs": [{"program": p, "args": a} for p, a in PROGRAMS if p in programs],
           "methods": METHODS, "chosen": CHOSEN, "ranks": RANKS,
           "placement": {
               "node": ("mpirun --bind-to core --map-by core: each rank on its own core (its "
                        "service thread with it); the sequential program on CPU 0 (taskset)"
                        if cpus >= 2 else "one CPU: the ranks share it"),
               "cluster": "rank i in node n(i+1) on CPU i % 2 (taskset -c, mpirun "
                          "--bind-to none): 1 and 2 ranks one per CPU, 4 ranks two per CPU; "
                          "the fault path in n1 and n2"},
           "cluster": {"name": NAME, "subnet": SUBNET, "nodes": CLUSTER_NODES, "nics": 1,
                       "rate": RATE,
                       "mtu": 1500},
           "nproc": cpus,
           "versions": {p: package_version(p) for p in ("openmpi-bin", "libpmix2")},
           "pm_env": {k: v for k, v in os.environ.items()
                      if k.startswith(("PM_", "PMDSM_"))},
           "fault": {}, "apps": {}, "failed": False, "errors": []}
    print(f"dsm: {cpus} CPUs, {rounds} round(s)", flush=True)
    doc["binaries"] = binaries(ctx)
    doc["idle_before_pct"] = idle_probe()
    started = time.monotonic()

    try:
        doc["fault"]["node"] = fault_part(ctx, "node", None, rounds, reps, doc)
        doc["apps"]["node"] = app_part(ctx, "node", None, programs, rounds)
        if os.geteuid() != 0:
            why = "needs root (it brings up a virtual cluster)"
            doc["fault"]["cluster"] = {"skipped": why}
            doc["apps"]["cluster"] = {"skipped": why}
        else:
            try:
                with DsmCluster(ctx, NAME, nodes=CLUSTER_NODES, nics=1, rate=RATE,
                                extra=["--subnet", SUBNET]) as cl:
                    doc["cluster"]["net0"] = cl.subnet(0)
                    doc["fault"]["cluster"] = fault_part(ctx, "cluster", cl, rounds, reps, doc)
                    doc["apps"]["cluster"] = app_part(
                        ctx, "cluster", cl, [p for p in CLUSTER_PROGRAMS if p in programs],
                        rounds)
            except (RuntimeError, subprocess.SubprocessError) as e:
                # The node's figures stand; the cluster's are missing, and said so.
                why = f"the virtual cluster failed: {e}"
                print(f"dsm: FAILED: {why}", flush=True)
                doc["fault"].setdefault("cluster", {"skipped": why, "errors": [why]})
                doc["apps"].setdefault("cluster", {"skipped": why, "errors": [why]})
    finally:
        doc["idle_after_pct"] = idle_probe()
        doc["seconds"] = round(time.monotonic() - started, 1)
        doc["others_cpu_by_part"] = contention(doc)
        after = binaries(ctx)
        doc["binaries_rebuilt"] = sorted(k for k in after if after[k] != doc["binaries"].get(k))
    doc["targets"] = judge(doc)
    doc["recommendation"] = recommend(doc)
    for part in list(doc["fault"].values()) + list(doc["apps"].values()):
        doc["errors"] += part.get("errors", [])
    for part in doc["apps"].values():
        for prog in part.get("programs", []):
            if not prog["checksums_agree"]:
                doc["errors"].append(f"{prog['program']} ({part['where']}): the versions' "
                                     f"checksums differ: {', '.join(prog['checksums'])}")
    doc["failed"] = bool(doc["errors"])
    print_tables(doc)
    return doc


def run(ctx):
    """scripts/bench's entry point."""
    return run_suite(ctx)


# ---------------------------------------------------------------- printing

def print_tables(doc):
    for where, f in doc["fault"].items():
        if f.get("skipped"):
            print(f"\n  fault path ({where}): skipped, {f['skipped']}")
            continue
        print(f"\n  fault path ({where}), us per operation, median [min-max] of "
              f"{len(f['rounds'])} round(s)")
        print(f"  {'test':14}" + "".join(f" {m:>24}" for m in METHODS)
              + "".join(f" {'segv/' + m:>22}" for m in METHODS[1:]))
        for test in FAULT_TESTS:
            print(f"  {test:14}" + "".join(f" {cell(f['us'][m][test]):>24}" for m in METHODS)
                  + "".join(f" {cell(f['segv_over'][m][test]):>22}" for m in METHODS[1:]))
        print(f"  {'pm-read':14} {cell(f['us']['baseline'][BASELINE_TEST]):>24}  (PM alone)")
        for m in METHODS:
            print(f"  read fault ({m}, {READ_FAULT_TEST}) / pm-read: "
                  f"{cell(f['read_random_over_pm_read'][m])}"
                  + (f"; unpinned {cell(f['unpinned']['read_random_over_pm_read'][m])}"
                     if f.get("unpinned") else "")
                  + f"; sequential sweep (read) per page / pm-read: "
                    f"{cell(f['read_over_pm_read'][m])}")
    for where, part in doc["apps"].items():
        if part.get("skipped"):
            print(f"\n  applications ({where}): skipped, {part['skipped']}")
            continue
        print(f"\n  applications ({where}), seconds, median [min-max]")
        for prog in part["programs"]:
            print(f"  {prog['program']} {' '.join(prog['args'])}  (checksums "
                  f"{'agree' if prog['checksums_agree'] else 'DIFFER'})")
            for v, row in prog["summary"].items():
                line = f"    {v:16}"
                for ranks in RANKS[where]:
                    if f"seconds_{ranks}" in row:
                        line += f" x{ranks} {cell(row[f'seconds_{ranks}'], '.3f'):>26}"
                for p, eff in row.get("efficiency", {}).items():
                    line += f"  efficiency x{p} {cell(eff)}"
                print(line)
            for mpi, key in MPI_BASELINES.items():
                for p, by_method in prog.get(key, {}).items():
                    for m in METHODS:
                        r = by_method[m]
                        print(f"    DSM ({m}) / {mpi} x{p}: efficiency "
                              f"{cell(r['efficiency_ratio'])}, time {cell(r['time_ratio'])}")
    print()
    for v in doc["targets"]:
        why = f" ({v['why']})" if v.get("why") else ""
        print(f"  {v['what']}: {cell(v, '.3f')} (target {v['target']}) {v['verdict']}{why}")
    rec = doc["recommendation"]
    print(f"\n  write detection favoured by the figures: {rec['method']} ("
          + ", ".join(f"{len(rec['wins'][m])} comparisons for {m}" for m in METHODS)
          + f", {len(rec['undecided'])} undecided)")
    for when in ("before", "after"):
        idle = doc.get(f"idle_{when}_pct")
        if idle is not None and idle < 90:
            print(f"  WARNING: the machine was only {idle:.0f}% idle {when} the runs: other "
                  "processes competed for the CPUs and the numbers are noisy.")
    for part, sp in (doc.get("others_cpu_by_part") or {}).items():
        if sp.get("n"):
            print(f"  other processes took {cell(sp, '.0f')}% of the machine's CPU time during "
                  f"the commands of {part}"
                  + (" (WARNING: the numbers are noisy)" if sp["median"] > 10 else ""))
    if doc.get("binaries_rebuilt"):
        print(f"  WARNING: {', '.join(doc['binaries_rebuilt'])} changed while the suite ran "
              "(rebuilt by someone else): the rounds may have measured different builds.")
    for e in doc["errors"]:
        print(f"  ERROR: {e.splitlines()[0]}")
