#!/usr/bin/python3
"""Write the result tables of the benchmark reports from the suites' JSON.

    scripts/bench_report.py [--build BUILD] [--check] [--suite NAME ...]

scripts/bench (make bench) calls it after its suites, for the regions of the
suites that ran.  It reads BUILD/bench/<suite>.json and rewrites, in
docs/pm/bench.md, docs/pm/bench-udp.md, docs/scored/bench.md,
docs/mpi/bench.md, docs/admin/vcluster.md and docs/dsm/bench.md, every
region (of the suites named with --suite, or all) between

    <!-- bench:NAME begin -->   and   <!-- bench:NAME end -->

with what the renderer NAME below makes of its suite's JSON: the date, the
machine (CPUs, CPU model, memory, kernel), the source commit, the exact
command, every figure as its median with its spread (min-max over a few
rounds, p5-p95 from 20 samples up, scripts/bench_stats.py), the verdicts, and
the commands that produced the figures.  A region whose JSON is missing is
left as it is (and said so).  Nothing else in the documents is touched, and
no figure of the reports comes from anywhere else.

--check rewrites nothing and exits 1 when a document is not what the JSON
gives.
"""
import argparse
import json
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_dsm import target_key  # noqa: E402
from bench_stats import spread  # noqa: E402

DOCS = [ROOT / "docs" / "pm" / "bench.md", ROOT / "docs" / "pm" / "bench-udp.md",
        ROOT / "docs" / "scored" / "bench.md", ROOT / "docs" / "mpi" / "bench.md",
        ROOT / "docs" / "admin" / "vcluster.md", ROOT / "docs" / "dsm" / "bench.md"]


# ---------------------------------------------------------------- formatting

def num(v, digits=None):
    """A figure with about three significant digits, no exponent."""
    if v is None:
        return "-"
    if digits is not None:
        return f"{v:.{digits}f}"
    a = abs(v)
    if a >= 1000:
        return f"{v:.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 10:
        return f"{v:.2f}"
    return f"{v:.3f}"


def spread_cell(s, digits=None, scale=1.0):
    """median [lo–hi] of a bench_stats.spread()."""
    if not s or s.get("median") is None:
        return "-"
    med = num(s["median"] * scale, digits)
    if s["n"] == 1:
        return med
    return f"{med} [{num(s['lo'] * scale, digits)}–{num(s['hi'] * scale, digits)}]"


def spread_kind(s):
    if not s or not s.get("n"):
        return "no sample"
    if s["n"] == 1:
        return "one sample, no spread"
    return f"{s['kind'].replace('-', '–')} of {s['n']}"


def verdict_cell(v):
    if not v or not v.get("verdict"):
        return ""
    word = v["verdict"]
    if word in ("PASS", "MISS", "INCONCLUSIVE"):
        return f"**{word}**"
    return word


def target_text(op, bound):
    return f"{ {'<=': '≤', '>=': '≥'}.get(op, op)} {bound}"


def target_cell(v):
    """The target of a bench_stats.verdict() and the verdict, e.g. "≤ 1.2 **PASS**"."""
    return f"{target_text(v['op'], v['bound'])} {verdict_cell(v)}"


def size_label(n):
    for unit, shift in ((" MiB", 20), (" KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n} B"


def table(header, rows, align=None):
    align = align or ["---:"] * len(header)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def relative(word):
    root = str(ROOT) + "/"
    return word.replace(root, "")


def command_line(c):
    env = [f"{k}={shlex.quote(str(v))}" for k, v in sorted((c.get("env") or {}).items())]
    return " ".join(env + [shlex.quote(relative(w)) for w in c["argv"]])


# Temporary directories the suites make per command (NetPIPE's np.out).
TMPDIR = re.compile(r"/tmp/bench-[a-z]+-[A-Za-z0-9_]+")


def commands_block(doc, title="Commands"):
    """Every distinct command of the JSON's `commands`, in order."""
    seen, lines = set(), []
    for c in doc.get("commands", []):
        line = command_line(c)
        if c.get("cwd"):
            line = f"(cd {TMPDIR.sub('$(mktemp -d)', relative(c['cwd']))} && {line})"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return (f"<details><summary>{title}: the {len(lines)} distinct commands behind these "
            f"figures, from the JSON's <code>commands</code> (mpirun also with "
            f"<code>OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1</code>)"
            f"</summary>\n\n```sh\n"
            + "\n".join(lines) + "\n```\n\n</details>")


def bridge_netfilter_line(m):
    """Whether br_netfilter's hooks were in the way of the virtual cluster's
    frames (scripts/bench, bridge_netfilter()); None for a JSON without it."""
    if "bridge_netfilter" not in m:
        return None
    nf = m["bridge_netfilter"]
    host = ("br_netfilter not loaded" if nf is None else
            f"`net.bridge.bridge-nf-call-iptables={nf.get('iptables')}`")
    if m.get("vcluster_bridges") == "switch namespace":
        return ("- bridged frames: the virtual cluster's bridges are in a namespace of their "
                "own with br_netfilter's hooks off ([../admin/vcluster.md](../admin/vcluster.md), "
                f"\"The switch\"); the host's setting, not in their way: {host}")
    if nf is None:
        return "- bridged frames: br_netfilter not loaded (no netfilter between virtual-cluster nodes)"
    if nf.get("iptables"):
        return ("- bridged frames: `net.bridge.bridge-nf-call-iptables=1` on the host, whose "
                "namespace held the virtual cluster's bridges: every IPv4 frame between "
                "virtual-cluster nodes (PM's udp device, TCP) passed the host's netfilter hooks, "
                "as no real switch does; PM's eth frames (EtherType of their own) did not "
                "([../pm/bench.md](../pm/bench.md), \"The host's netfilter\")")
    return "- bridged frames: br_netfilter loaded but off for IPv4 (`net.bridge.bridge-nf-call-iptables=0`)"


def provenance(doc, path):
    """Who made these figures: file, command, dates, machine, source."""
    m = doc.get("machine", {})
    run = doc.get("run", {})
    cpu = m.get("cpu_model") or "unknown CPU"
    virt = ", virtualised" if m.get("virtualised") else ""
    mem = f", {m['mem_gib']} GiB" if m.get("mem_gib") else ""
    load = m.get("loadavg") or [None]
    modified = m.get("git_modified") or []
    src = f"commit `{m.get('git_commit') or '?'}`"
    if modified:
        src += f" with {len(modified)} file(s) modified in the working tree"
    rounds = run.get("rounds")
    lines = [
        f"*Generated by `scripts/bench_report.py` from `{path}`; do not edit by hand.*",
        "",
        f"- command: `{run.get('invocation') or 'scripts/bench'}`"
        + (f" ({rounds} round(s){', --quick' if run.get('quick') else ''}"
           f"{', nice ' + str(run['nice']) if run.get('nice') else ''})" if rounds else ""),
        f"- run: {run.get('started') or '?'} to {run.get('finished') or m.get('date') or '?'} "
        f"(UTC); load average {num(load[0], 2) if load[0] is not None else '?'} "
        "when the machine facts were taken",
        f"- machine: {m.get('nproc', '?')} CPUs ({cpu}{virt}){mem}, Linux "
        f"{m.get('kernel', '?')}, host `{m.get('hostname', '?')}`",
        f"- source: {src}",
    ]
    bridged = bridge_netfilter_line(m)
    if bridged:
        lines.append(bridged)
    pm = doc.get("pm") or {}
    if pm.get("config"):
        conf = pm["config"]
        lines.append(f"- PM {pm.get('version') or '?'} (`pminfo --json` on the host): "
                     + ", ".join(f"`{k}={conf[k]}`" for k in ("PM_SPIN_US", "PM_SHM_RING_KIB",
                                                             "PM_UDP_RING_KIB", "PM_UDP_WINDOW")
                                 if k in conf))
    if doc.get("failed"):
        lines.append("- **the suite failed part-way: the figures below are what it had "
                     "measured**")
    return "\n".join(lines)


# ---------------------------------------------------------------- pm-shm

def render_pm_shm(doc, path):
    comparison = doc.get("comparison") or {}
    judged = doc.get("judged")
    if not isinstance(comparison, dict) or judged not in comparison:
        return None   # a JSON of an older layout: leave the region alone
    rounds = len(doc.get("rounds", []))
    vader = doc.get("vader", {})
    first = doc["rounds"][0] if rounds else {}
    bind = (first.get(judged) or {}).get("bindings") or []
    variants = {v["key"]: v for v in doc.get("variants", [])}
    out = [provenance(doc, path), ""]
    out.append(table(["setting", "value"], [
        ["Open MPI / NetPIPE", f"`openmpi-bin {vader.get('openmpi')}`, "
                               f"`netpipe-openmpi {vader.get('netpipe')}`"],
        ["vader single copy", f"cma requested; Open MPI's default here: "
                              f"{vader.get('single_copy_default')}; CMA warnings: "
                              + ("yes, see the JSON" if any(
                                  r[k].get("cma_warnings") for r in doc["rounds"]
                                  for k in ("netpipe_pingpong", "netpipe_stream")) else "none")],
        ["placement", "; ".join(bind) if bind else doc.get("placement", "")],
        ["PM environment", ", ".join(f"`{k}={v}`" for k, v in doc.get("pm_env", {}).items())
         or "none set (PM's defaults)"],
        ["machine idle before / after", f"{num(doc.get('idle_before_pct'), 0)} % / "
                                        f"{num(doc.get('idle_after_pct'), 0)} %"],
        ["per round", f"pmbench's best of {doc.get('reps')} repetitions of about "
                      f"{doc.get('min_time_s')} s; NetPIPE's best of its trials"],
    ], ["---", "---"]))
    marks = {(t["what"], t["size"]): t for t in doc.get("targets", [])}

    def tgt(what, size):
        t = marks.get((what, size))
        return target_cell(t) if t else ""

    rows = []
    for r in comparison[judged]:
        rows.append([size_label(r["size"]), (r["path"] or "-") + (" +credit" if r.get(
            "rma_credit") else ""),
            spread_cell(r["pm_latency_us"]), spread_cell(r["vader_latency_us"]),
            spread_cell(r["latency_ratio"], 3), tgt("latency", r["size"]),
            spread_cell(r["pm_bandwidth_MBps"], 0), spread_cell(r["vader_bandwidth_MBps"], 0),
            spread_cell(r["bandwidth_ratio"], 3), tgt("bandwidth", r["size"])])
    kind = spread_kind(comparison[judged][0]["latency_ratio"])
    out += ["", f"**Judged: {variants.get(judged, {}).get('title', judged)}**, against vader. "
            f"Latency is one-way (round trip / 2) in µs, bandwidth the stream test in MB/s "
            f"(10^6 B/s); each cell is the median over the {rounds} round(s) with the "
            f"[{kind}] in brackets; a ratio is taken round by round (PM and vader of the same "
            "round). `+credit`: the stream waits for the receiver's credit per message. JSON: "
            f"`comparison.{judged}[]` (per size, with `per_round`), `targets[]`; the raw "
            f"records in `rounds[].{judged}.records` and `rounds[].netpipe_*.rows`.", ""]
    out.append(table(["size", "path", "PM µs", "vader µs", "PM/vader", "target",
                      "PM MB/s", "vader MB/s", "PM/vader", "target"], rows,
                     ["---:", "---", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---"]))
    out.append("")
    for t in doc.get("targets", []):
        why = f" ({t['why']})" if t.get("why") else ""
        out.append(f"- {t['what']} at {size_label(t['size'])}: PM/vader "
                   f"{target_text(t['op'], t['bound'])}; measured {spread_cell(t, 3)} "
                   f"({spread_kind(t)}) → {verdict_cell(t)}{why}")
    others = [k for k in comparison if k != judged]
    if others:
        out += ["", "Informational variants of the same rounds (PM's figure, and its ratio "
                "to vader of the same round; JSON: `comparison.<variant>[]`):", ""]
        header = ["size"]
        for k in others:
            header += [f"{k}: µs", "÷ vader", "MB/s", "÷ vader"]
        rows = []
        for i, r in enumerate(comparison[judged]):
            row = [size_label(r["size"])]
            for k in others:
                v = comparison[k][i]
                row += [spread_cell(v["pm_latency_us"]), spread_cell(v["latency_ratio"], 2),
                        spread_cell(v["pm_bandwidth_MBps"], 0),
                        spread_cell(v["bandwidth_ratio"], 2)]
            rows.append(row)
        out.append(table(header, rows))
        out.append("")
        out += [f"- `{k}`: {variants.get(k, {}).get('title', k)}" for k in others]
        if "pm_read" in comparison:
            out += ["", "Reading against copying (`--recv read` ÷ `--recv copy`, round by "
                    "round; below 1 reading is cheaper):", ""]
            rows = []
            for rd, cp in zip(comparison["pm_read"], comparison[judged]):
                lat = [a / b if a and b else None for a, b in
                       zip(rd["per_round"]["pm_latency_us"], cp["per_round"]["pm_latency_us"])]
                bw = [b / a if a and b else None for a, b in
                      zip(rd["per_round"]["pm_bandwidth_MBps"],
                          cp["per_round"]["pm_bandwidth_MBps"])]
                rows.append([size_label(rd["size"]), rd["path"],
                             spread_cell(spread(lat), 2), spread_cell(spread(bw), 2)])
            out.append(table(["size", "path", "latency read/copy", "time per byte read/copy "
                              "(stream)"], rows, ["---:", "---", "---:", "---:"]))
    out += ["", commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- pm-udp

def render_pm_udp(doc, path):
    if "measures" not in doc:
        return None
    n = len(doc.get("rounds", []))
    out = [provenance(doc, path), ""]
    kind = spread_kind(next(iter(doc["measures"].values())))
    out.append(f"Each figure is the median over {n} round(s) with the [{kind}] in brackets; "
               "pmbench's figure of a round is the median of its repetitions, sockperf's its "
               "average (and median) over the run, iperf3's the received rate. PM's "
               f"receiver copies every payload out (`--recv {doc.get('recv', 'none')}`). JSON: "
               "`measures.<key>` and `verdicts[]`, each with its `samples`; every round's "
               "raw records in `rounds[]`.")
    out.append("")
    rows = [[m["title"], spread_cell(m), ", ".join(num(x) for x in m["samples"])]
            for m in doc["measures"].values()]
    out.append(table(["measurement", "median [spread]", "per round"], rows,
                     ["---", "---:", "---"]))
    out.append("")
    rows = []
    for v in doc["verdicts"]:
        rows.append([v["what"], spread_cell(v, 3),
                     target_text(v["op"], v["bound"]) if v.get("op") else "report",
                     verdict_cell(v) if v.get("op") else "—"])
    out.append(table(["ratio (round by round)", "median [spread]", "target", "verdict"], rows,
                     ["---", "---:", "---", "---"]))
    out += ["", commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- launch

def render_launch(doc, path):
    results = doc.get("results") or []
    if not results or "samples_s" not in results[0]:
        return None
    out = [provenance(doc, path), ""]
    names = list(results[0]["samples_s"])
    titles = {"scrun": "scrun", "srun": "srun (Slurm)", "mpirun": "mpirun (nsenter rsh)",
              "mpirun-vc": "mpirun (vcluster rsh)"}
    kind = spread_kind(results[0]["scrun"])
    out.append(f"A job of `/bin/true` from the command to its exit, {doc['repetitions']} runs "
               f"of each launcher in turns after {doc['warmup']} warm-up runs each; median "
               f"[{kind}] in ms. The ratio is taken run by run (each scrun run against the "
               "mpirun run next to it). JSON: `results[]` (every run in `samples_s`).")
    out.append("")
    rows = []
    for r in results:
        row = [r["shape"]] + [spread_cell(r[n], 1, 1e3) for n in names]
        for key in ("ratio_srun", "ratio"):
            if key in r:
                row += [spread_cell(r[key], 3), target_cell(r[key])]
        if "ratio_vc" in r:
            row.append(spread_cell(r["ratio_vc"], 3))
        rows.append(row)
    header = ["shape"] + [titles.get(n, n) + " ms" for n in names]
    if "ratio_srun" in results[0]:
        header += ["scrun / srun", "target"]
    header += ["scrun / mpirun", "target"]
    if "ratio_vc" in results[0]:
        header.append("scrun / mpirun (vcluster rsh)")
    out.append(table(header, rows, ["---"] + ["---:"] * (len(header) - 1)))
    out.append("")
    if doc.get("warm_daemon_baseline"):
        out.append(f"Warm-daemon baseline: {doc['warm_daemon_baseline']}. mpirun is not like "
                   f"for like: {doc.get('warm_daemon_note')}.")
    else:
        out.append(f"Not like for like: {doc.get('warm_daemon_note')}. scrun's daemons are "
                   "up before the clock starts; mpirun's are started by every job.")
    out += ["", "<details><summary>The nsenter rsh agent mpirun used</summary>\n\n```sh\n"
            + doc.get("rsh_script", "").strip() + "\n```\n\n</details>", "",
            commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- gang

def _signed(cell):
    """+2.5 [-1.0–+4.0] for a percentage cell."""
    return re.sub(r"(?<![\d.])(\d)", r"+\1", cell).replace("+-", "-").replace("-+", "-")


def render_gang(doc, path):
    if "gang_vs_linux" not in doc or "speedup" not in next(iter(doc["gang_vs_linux"].values())):
        return None
    out = [provenance(doc, path), "", "JSON: `switch[]` for (a), `overhead[]` for (b), "
           "`gang_vs_linux.<device>` for (c), `preemption.<mode>.runs[]` for (d).", ""]
    out += ["**(a) switch time**: two pmcheck jobs on the same nodes, quantum 50 ms, network "
            "preemption; the master's own statistics (`scorectl matrix --json`) over all "
            "switches of the part.", ""]
    out.append(table(["nodes", "switches", "median", "p99", "median quiesce", "unanswered",
                      "of which silent PM contexts"],
                     [[s["nodes"], s["switches"], f"{num(s['median_ms'])} ms",
                       f"{num(s['p99_ms'])} ms", f"{num(s['quiesce_median_ms'])} ms",
                       s["unanswered"], s.get("silent", "-")] for s in doc["switch"]]))
    over = doc["overhead"]
    out += ["", f"**(b) overhead for a job alone**: one 4x1 pmcheck job "
            f"(`--count {doc.get('overhead_count', doc.get('count'))}`), "
            f"{doc.get('repetitions_overhead', doc.get('repetitions'))} runs per mode, the "
            "modes in turns; makespan median [spread] and the overhead of each run against "
            "the `off` run of the same turn.", ""]
    rows = []
    for o in over:
        row = [o["mode"], f"{spread_cell(o['makespan_s'])} s",
               ", ".join(str(x) for x in o.get("switches", []))]
        v = o.get("overhead_pct")
        if v:
            row += [f"{_signed(spread_cell(v, 1))} %", f"{target_text(v['op'], v['bound'])} % "
                                               f"{verdict_cell(v)}"]
        else:
            row += ["(reference)", ""]
        rows.append(row)
    out.append(table(["mode", "makespan", "switches per run", "overhead", "target"], rows,
                     ["---", "---:", "---:", "---:", "---"]))
    out += ["", "**(c) gang scheduling against Linux time sharing**: two ping-pong jobs "
            "(pmbench, 8 B, a fixed number of round trips) on the same nodes, PM's default "
            "spin on both sides; makespan from the first rank's start to the last rank's end "
            "(launchers' start-up excluded); speedup = Linux / gang, run by run.", ""]
    rows = []
    for device, g in doc["gang_vs_linux"].items():
        v = g["speedup"]
        rows.append([device, g["shape"], g.get("round_trips", "-"),
                     f"{spread_cell(g['gang_makespan_s'])} s",
                     f"{spread_cell(g['linux_makespan_s'])} s", spread_cell(v, 2),
                     target_cell(v),
                     f"{spread_cell(g.get('gang_launcher_makespan_s'))} s / "
                     f"{spread_cell(g.get('linux_launcher_makespan_s'))} s"])
    out.append(table(["device", "jobs", "round trips per job", "gang (scrun)",
                      "Linux (2 × mpirun)", "speedup", "target",
                      "informational: gang / Linux with the launchers' start-up"], rows,
                     ["---", "---", "---:", "---:", "---:", "---:", "---", "---:"]))
    p = doc["preemption"]
    out += ["", "**(d) network preemption against plain freezing**: two pmcheck jobs "
            f"(`--count {doc.get('preempt_count', doc.get('count'))}`) sharing 2 nodes, "
            "quantum 50 ms, the modes in turns; PM retransmissions over both jobs.",
            ""]
    rows = []
    for mode in ("network", "freeze"):
        runs = p[mode]["runs"]
        rows.append([mode, f"{spread_cell(p[mode]['makespan_s'])} s",
                     ", ".join(str(r["retransmits"]) for r in runs),
                     ", ".join(str(r.get("switches", "-")) for r in runs),
                     ", ".join(str(r.get("unanswered", "-")) for r in runs)])
    out.append(table(["preemption", "makespan", "retransmissions per run", "switches per run",
                      "unanswered per run"], rows, ["---", "---:", "---:", "---:", "---:"]))
    out += ["", commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- preempt-soak

def render_preempt_soak(doc, path):
    if "runs" not in doc:
        return None
    out = [provenance(doc, path), ""]
    jobs = ", ".join(f"{j['pattern']} ({j['count']})" for j in doc["jobs"])
    out.append(f"Three 2-rank pmcheck jobs ({jobs} messages per pair; sizes {doc['sizes']}) "
               f"on 2 nodes, quantum {doc['quantum_ms']} ms, started again until at least "
               f"{doc['min_switches']} switches per run; {doc['busy_loops']} busy loops on the "
               f"host during every run; {doc['runs_per_mode']} run(s) per mode, the modes in "
               "turns. JSON: `runs.<mode>[]` (every counter pmcheck printed, summed over the "
               "jobs of the run) and `summary.<mode>`.")
    out.append("")
    modes = list(doc["runs"])
    n = max(len(doc["runs"][m]) for m in modes)
    rows = []
    for i in range(n):
        row = [i + 1]
        for m in modes:
            r = doc["runs"][m][i] if i < len(doc["runs"][m]) else None
            if r and r.get("failed"):
                row += ["failed (see below)", "-", "-", "-"]
            else:
                row += ([r["retransmits"], r["switches"], r["unanswered"],
                         f"{num(r['seconds'])} s"] if r else ["-"] * 4)
        rows.append(row)
    header = ["run"]
    for m in modes:
        header += [f"{m}: retransmissions", "switches", "unanswered", "time"]
    out.append(table(header, rows))
    out.append("")
    for m in modes:
        s = doc["summary"][m]
        extra = [f"{k} {s[k]['total']}" for k in ("loses", "stops", "drops", "rto_polls",
                                                   "dups", "refused_resends") if k in s]
        if not s.get("retransmits"):
            out.append(f"- `{m}`: no run completed")
            continue
        failed = s.get("runs_failed", 0)
        out.append(f"- `{m}`: {s['retransmits']['total']} retransmissions in "
                   f"{s['switches']['total']} switches; runs with any: "
                   f"{s['runs_with_retransmits']} of {s.get('runs', len(doc['runs'][m]))}"
                   + (f" (and {failed} run(s) given up, see below)" if failed else "")
                   + "; per run "
                   f"{spread_cell(s['retransmits'], 0)} ({spread_kind(s['retransmits'])})"
                   + (f"; other PM counters, totals: {', '.join(extra)}" if extra else ""))
    incidents = doc.get("incidents") or []
    if incidents:
        out += ["", f"Failed attempts ({len(incidents)}), each followed by a restart of scored "
                "on that cluster and the run again (a run is given up after "
                f"{doc.get('retries', 2) + 1} failed attempts); the agents' thread states are "
                "in the JSON's `incidents`, scored's logs in `build/bench/preempt-soak-logs/`:",
                ""]
        out += [f"- `{i['mode']}` run {i['run']}, attempt {i['attempt']}: {i['error']}"
                + _agent_note(i.get("agents")) for i in incidents]
    out += ["", commands_block(doc)]
    return "\n".join(out)


def _agent_note(agents):
    """What the agents' processes were doing when the node was declared
    lost, from the incident's thread states."""
    if not agents:
        return ""
    procs = agents.get("agents", agents) if "agents" in agents else agents
    frozen, waiting = 0, []
    for pid, a in procs.items():
        threads = a.get("threads", [])
        if len(threads) == 1 and threads[0]["wchan"] == "get_signal":
            frozen += 1      # a forked agent that has not exec'd yet, frozen
            continue
        for t in threads:
            if t["wchan"] in ("__skb_wait_for_more_packets", "pipe_read", "do_wait"):
                node = a.get("cmdline", "").rsplit("/", 2)[-2] if "/" in a.get(
                    "cmdline", "") else "?"
                waiting.append(f"{node} agent thread {t['tid']} in `{t['wchan']}`")
    parts = []
    if frozen:
        parts.append(f"{frozen} child(ren) forked by an agent, not yet exec'd, frozen "
                     "(`get_signal`)")
    if waiting:
        parts.append("; ".join(waiting))
    return f" — {'; '.join(parts)}" if parts else ""


# ---------------------------------------------------------------- auth

def render_auth(doc, path):
    results = doc.get("results") or []
    if not results or "build" not in results[0]:
        return None
    out = [provenance(doc, path), ""]
    kind = spread_kind(results[0]["build"])
    out.append(f"`scrun -nodes={doc['nodes']}xP /bin/true` from the command to its exit, "
               f"{doc['repetitions']} runs of each in turns after {doc['warmup']} warm-up runs "
               "each, on two virtual clusters up side by side: one running this build (a "
               "credential on each call's first request, then the call key's MAC), one running "
               f"commit `{doc['baseline_commit'][:12]}` (the last that sealed every message "
               f"with a credential of its own); median [{kind}] in ms. Difference and ratio "
               "are taken run by run. JSON: `results[]` (every run in `samples_s`).")
    out.append("")
    rows = []
    for r in results:
        v = r["ratio"]
        rows.append([r["shape"], spread_cell(r["baseline"], 1, 1e3),
                     spread_cell(r["build"], 1, 1e3), spread_cell(r["difference_s"], 1, 1e3),
                     spread_cell(v, 3), target_cell(v)])
    out.append(table(["shape", "credential per message ms", "call key ms",
                      "call key - per message ms", "call key / per message", "target"], rows,
                     ["---", "---:", "---:", "---:", "---:", "---"]))
    out += ["", commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- restart

def render_restart(doc, path):
    runs = doc.get("runs") or []
    if "measures" not in doc or not runs:
        return None
    measures = doc["measures"]
    kind = spread_kind(next(iter(measures.values())))
    job = doc.get("job", {})
    out = [provenance(doc, path), ""]
    out.append(f"{doc['repetitions']} repetitions on a virtual cluster of {doc['nodes']} nodes "
               f"of its own, each a restart of the idle master, a restart of the master while "
               f"a {job.get('shape')} job runs and a restart of one agent (n1..n4 in turns), "
               "in turns. Every time runs from the new daemon's exec (`time.time()` just "
               "before its `Popen`) to the timestamp of a line of the master's log (the "
               "agent's own log for its first line); median "
               f"[{kind}] in ms. The agents retry a lost master after 50 ms, then twice as "
               f"late each time, up to `reconnect_ms` ({doc.get('reconnect_ms')} ms here); "
               "scrun retries every 250 ms. No target: figures only. JSON: "
               "`measures.<key>` (every repetition in `samples_s`), every restart in `runs[]`.")
    out.append("")
    rows = [[m["title"], spread_cell(m, 1, 1e3),
             ", ".join(num(x * 1e3, 1) for x in m["samples_s"] if x is not None), "—"]
            for m in measures.values()]
    out.append(table(["measurement", "median [spread] ms", "per repetition ms", "verdict"],
                     rows, ["---", "---:", "---", "---"]))
    out.append("")
    kills = spread([r[k]["kill_to_exec_s"] for r in runs for k in ("idle", "job")])
    ok = sum(1 for r in runs if r["job"].get("scrun_exit") == 0)
    out.append(f"- From the SIGKILL to the new master's exec (the old one dead): "
               f"{spread_cell(kills, 1, 1e3)} ms ({spread_kind(kills)} restarts).")
    out.append(f"- The job ({job.get('lines_per_rank')} counters per rank, one every "
               f"{job.get('gap_s')} s, the master killed once every rank had printed "
               f"`count {job.get('restart_after_line')}`) completed with scrun's exit status 0, "
               f"every line of every rank once and in order, in {ok} of {len(runs)} "
               "repetitions.")
    out += ["", commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- vcluster-rootfs

def render_vcluster_rootfs(doc, path):
    measures = doc.get("measures")
    if not measures:
        return None
    kind = spread_kind(measures.get("warm_up") or next(iter(measures.values())))
    out = [provenance(doc, path), ""]
    out.append(f"{doc['repetitions']} repetitions, each bringing a cluster of {doc['nodes']} "
               f"nodes up and down as each kind in turns (the cold kind in the first "
               f"{doc['cold_repetitions']} only: for it the node image is moved aside, so "
               "mmdebstrap builds it again, and put back afterwards). Wall time of the "
               f"`vcluster` command; median [{kind}] in s. The baseline is the same network "
               "with namespace-only nodes. No target: figures only. JSON: "
               "`measures.<kind>_<up|down>` (every repetition in `samples_s`).")
    out.append("")
    rows = [[m["title"], spread_cell(m, 2),
             ", ".join(num(x, 2) for x in m["samples_s"] if x is not None)]
            for m in measures.values()]
    out.append(table(["measurement", "median [spread] s", "per repetition s"], rows,
                     ["---", "---:", "---"]))
    out += ["", commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- latency breakdown

def render_latency_breakdown(doc, path):
    rounds = doc.get("rounds") or []
    if "summary" not in doc:
        return None
    out = [provenance(doc, path), ""]
    pm, udp = doc["summary"]["pm"], doc["summary"]["udp"]
    out.append(f"Microseconds per round trip and process (the phases of a side sum to its "
               f"round-trip time), median over {len(rounds)} round(s) with the "
               f"[{spread_kind(pm['rtt'])}] in brackets; perf samples of both processes of "
               "each side (`samples` in the JSON), `summary`, `rounds[].pm` and `rounds[].udp`.")
    out.append("")
    rows = [[phase if phase != "rtt" else "round trip", spread_cell(pm[phase]),
             spread_cell(udp[phase]), f"{pm[phase]['median'] - udp[phase]['median']:+.2f}"]
            for phase in (*doc["phases"], "rtt")]
    out.append(table(["phase", "PM (udp device)", "raw UDP (sockperf)", "PM − UDP"], rows,
                     ["---", "---:", "---:", "---:"]))
    out += ["", commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- mpi

def render_mpi(doc, path):
    results = doc.get("results")
    if not results or "targets" not in doc:
        return None
    rounds = doc.get("rounds", [])
    n = len(rounds)
    sizes = doc.get("bw_sizes", [])
    versions = doc.get("versions", {})
    cluster = doc.get("cluster", {})
    out = [provenance(doc, path), ""]
    cpus = []
    for key in ("pmbench_shm", "pmbench_udp", "pmbench_eth"):
        ids = next((r[key]["cpu_ids"] for r in rounds if (r.get(key) or {}).get("cpu_ids")),
                   None)
        if ids:
            cpus.append(f"{results[key]['title']} reported CPUs {ids[0]} and {ids[1]}")
    out.append(table(["setting", "value"], [
        ["Open MPI / NetPIPE / libfabric",
         ", ".join(f"`{p} {v}`" for p, v in versions.items() if v) or "?"],
        ["virtual cluster", f"`{cluster.get('name')}`, {cluster.get('nodes')} nodes, "
                            f"{cluster.get('nics')} NIC, subnet {cluster.get('subnet')} "
                            f"(net0 {cluster.get('net0', '?')}), {cluster.get('rate')} link, "
                            f"MTU {cluster.get('mtu')}; up once for the suite"],
        ["placement", doc.get("placement", "") + (f" ({'; '.join(cpus)})" if cpus else "")],
        ["per round", f"NetPIPE's best of its trials at each size (`-l S -u S -p 0`); "
                      f"pmbench's best of {doc.get('pm_reps')} repetitions of about "
                      f"{doc.get('pm_min_time_s')} s, receiver copying "
                      f"(`--recv {doc.get('recv')}`)"
                      + (f"; fi_pingpong's best of {doc.get('pm_reps')} runs of "
                         f"{doc.get('fi_pingpong_iters')} iterations"
                         if doc.get("fi_pingpong_iters") else "")],
        ["machine idle before / after", f"{num(doc.get('idle_before_pct'), 0)} % / "
                                        f"{num(doc.get('idle_after_pct'), 0)} %"],
    ] + ([["binaries measured", "; ".join(
        f"`{name}` {b['mtime']}, sha256 `{b['sha256'][:12]}`" if b else f"`{name}` missing"
        for name, b in doc["binaries"].items())
        + (f"; **changed during the run: {', '.join(doc['binaries_rebuilt'])}**"
           if doc.get("binaries_rebuilt") else "")]] if doc.get("binaries") else []),
        ["---", "---"]))
    kind = spread_kind(next((r["latency_us"] for r in results.values() if r["latency_us"]["n"]),
                            None))
    out += ["", f"Latency is one-way (round trip / 2) at {doc.get('lat_size')} B in µs, "
            "bandwidth the stream test in MB/s (10^6 B/s); each cell is the median over the "
            f"{n} round(s) with the [{kind}] in brackets. JSON: `results.<row>` (with "
            "`samples`), every round's raw figures in `rounds[].<row>`.", ""]
    def status(res):
        if not res["failed"]:
            return "ran"
        return (f"**failed** in {res['rounds_without_result']} of {n} round(s)"
                + ("" if res.get("required") else " (not fatal)") + ", see below")

    rows = []
    for key, res in results.items():
        if res["where"] not in ("node", "cluster"):
            continue
        where = "one node" if res["where"] == "node" else "2 nodes"
        rows.append([where, res["title"], f"`{key}`", spread_cell(res["latency_us"])]
                    + [spread_cell(res["bandwidth_MBps"][str(s)], 0) for s in sizes]
                    + [status(res)])
    out.append(table(["where", "row", "key", f"{doc.get('lat_size')} B latency µs"]
                     + [f"{size_label(s)} MB/s" for s in sizes] + ["status"], rows,
                     ["---", "---", "---", "---:"] + ["---:"] * len(sizes) + ["---"]))
    trunk = doc.get("trunk_cluster")
    if trunk:
        tsizes = doc.get("trunk_sizes", [])
        out += ["", f"**Two NICs of 1 Gbit/s.** Cluster `{trunk.get('name')}`, "
                f"{trunk.get('nodes')} nodes, {trunk.get('nics')} NICs each, subnet "
                f"{trunk.get('subnet')} (nets {', '.join(trunk.get('nets', []))}), every link "
                f"limited to {trunk.get('rate')} each way by `tc`, MTU {trunk.get('mtu')}, up "
                "for the whole suite. NetPIPE's stream from n1 to n2 (rank 0 on CPU 0, rank 1 "
                "on CPU 1), MB/s, median [spread] of the rounds. JSON: `results.<row>`.", ""]
        rows = [[res["title"], f"`{key}`"]
                + [spread_cell(res["bandwidth_MBps"][str(s)], 0) for s in tsizes] + [status(res)]
                for key, res in results.items() if res["where"] == "trunk"]
        out.append(table(["row", "key"] + [f"{size_label(s)} MB/s" for s in tsizes]
                         + ["status"], rows, ["---", "---"] + ["---:"] * len(tsizes) + ["---"]))
    hp = doc.get("hpcc")
    hkeys = [k for k, r in results.items() if r["where"] == "trunk4"]
    if hp and hkeys:
        out += ["", f"**HPC Challenge** (`hpcc`, Debian's package built with Open MPI) with its "
                f"example input (`{hp.get('input')}`: HPL N = 1000 on a 2 × 2 grid) on the "
                f"{hp.get('ranks')} nodes of `{trunk.get('name') if trunk else '?'}`, one rank "
                "each, not pinned: the 4 ranks share the machine's 2 CPUs, both rows alike "
                "(`mpi_yield_when_idle 1`, so that a waiting rank gives its CPU up). Each run "
                "must pass hpcc's own checks (`Success=1`, nothing FAILED). Figures from its "
                "summary (`hpccoutf.txt`), median [spread] of the rounds; the ratios, round by "
                "round, are in the informational table below. JSON: `results.<row>.hpcc`.", ""]
        rows = [[f"{m['title']} ({m['unit']}; {m['better']} is better)", f"`{m['key']}`"]
                + [spread_cell(results[k]["hpcc"][m["key"]], 4) for k in hkeys]
                for m in hp["metrics"]]
        rows.append(["status", ""] + [status(results[k]) for k in hkeys])
        out.append(table(["figure", "hpcc key"] + [results[k]["title"] for k in hkeys], rows,
                         ["---", "---"] + ["---:"] * len(hkeys)))
    out += ["", "Targets (issue 12, \"Performance\"), ratios taken round by round (the two rows "
            "of the same round); \"within 10 % or 0.3 µs\" is judged as MPI over pm's latency "
            "divided by native + max(10 % of native, 0.3 µs), at most 1. JSON: `targets[]`.", ""]
    rows = []
    for v in doc["targets"]:
        why = f" ({v['why']})" if v.get("why") else ""
        rows.append([v["what"], v["issue"], spread_cell(v, 3),
                     f"{target_text(v['op'], v['bound'])}",
                     f"{verdict_cell(v)}{why}"])
    out.append(table(["comparison", "target (issue)", "measured", "judged as", "verdict"], rows,
                     ["---", "---", "---:", "---", "---"]))
    if any(v["n"] for v in doc.get("info", [])):
        out += ["", "Informational, round by round (no target; JSON: `info[]`):", ""]
        out.append(table(["comparison", "median [spread]"],
                         [[v["what"], spread_cell(v, 3)] for v in doc["info"] if v["n"]],
                         ["---", "---:"]))
    failures = [(res["title"], res["error"]) for res in results.values() if res["failed"]]
    if failures:
        out += ["", "Rows that failed to run (the first error; a row that failed is not run "
                "again in later rounds):", ""]
        for title, error in failures:
            lines = [ln for ln in error.splitlines() if ln.strip()]
            out.append(f"- {title}: {relative(lines[0]) if lines else '?'}")
            if len(lines) > 1:
                out += ["", "  ```", *[f"  {relative(ln)}" for ln in lines[1:21]], "  ```"]
    out += ["", commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- slurm-gang

def render_slurm_gang(doc, path):
    rounds, summ = doc.get("rounds") or [], doc.get("summary")
    if not rounds or not summ:
        return None
    out = [provenance(doc, path), "",
           f"Two pmcheck jobs ({doc['count']:,} messages of {doc['sizes']} B per rank pair, one "
           f"rank per node) on the same {doc['nodes']} nodes, started at once; makespan from "
           f"the start of both launchers to the end of the last job, median "
           f"[{spread_kind(summ['scored_s'])}] in s. The ratio is taken round by round. JSON: "
           "`rounds[]`, `summary`.", ""]
    def ratio_cells(key):
        v = summ.get(key)
        if not v:
            return ["", ""]
        return [spread_cell(v, 3), target_cell(v)]
    rows = [["one job alone (scrun)", spread_cell(summ["alone_s"], 1), "", "", ""],
            ["scored, scrun (network preemption)", spread_cell(summ["scored_s"], 1),
             ", ".join(map(str, summ["scored_retransmits"])), *ratio_cells("ratio")],
            ["Slurm GANG (SUSPEND,GANG, 5 s slices)", spread_cell(summ["slurm_s"], 1),
             ", ".join(map(str, summ["slurm_retransmits"])), "", ""]]
    if "score_gang_alone_s" in summ:
        rows.append(["one job alone (`srun --score-gang`, just before the pair below)",
                     spread_cell(summ["score_gang_alone_s"], 1), "", "", ""])
    if "score_gang_s" in summ:
        rows.append(["scored, `srun --score-gang`", spread_cell(summ["score_gang_s"], 1),
                     ", ".join(map(str, summ["score_gang_retransmits"])),
                     *ratio_cells("score_gang_ratio")])
    out.append(table(["side", "makespan s", "PM retransmissions per round", "against Slurm GANG",
                      "target"], rows, ["---", "---:", "---:", "---:", "---"]))
    if "score_gang_vs_alone" in summ:
        v = summ["score_gang_vs_alone"]
        alone = ("one `srun --score-gang` job alone just before them"
                 if "score_gang_alone_s" in summ else "one job alone")
        out += ["", f"Two `srun --score-gang` jobs against {alone}, round by round: "
                f"{spread_cell(v, 3)} (target {target_text(v['op'], v['bound'])}: never the stall "
                f"of two plain sruns under Slurm's gang scheduling) {verdict_cell(v)}."]
    if "first_turn_ratio" in summ:
        v = summ["first_turn_ratio"]
        out += ["", f"From starting a job to its first turn, beside a long job that holds both "
                f"nodes, {len(doc['first_turn_s']['scrun'])} times each in turns, median "
                f"[{spread_kind(summ['first_turn_scrun_s'])}] in ms: scrun "
                f"{spread_cell(summ['first_turn_scrun_s'], 0, 1e3)}, `srun --score-gang` "
                f"{spread_cell(summ['first_turn_srun_s'], 0, 1e3)}; ratio, run by run, "
                f"{spread_cell(v, 3)} (target {target_text(v['op'], v['bound'])}) "
                f"{verdict_cell(v)}."]
    out += ["", f"0 retransmissions under scored in every round: "
            f"**{'PASS' if summ['zero_retransmits'] else 'MISS'}**.", "", commands_block(doc)]
    return "\n".join(out)


# ---------------------------------------------------------------- dsm

DSM_TEST_TITLES = {
    "write-remote": ("write fault + diff, page homed at the other rank", "page"),
    "write-home": ("write fault, page homed at the writer (no twin, no diff)", "page"),
    "read": ("reading pages in order: read faults with read-ahead (a sequential sweep)",
             "page"),
    "read-random": ("read fault: pages in a random order, each fetched from its home alone",
                    "page"),
    "lock": ("lock + unlock, managed by the other rank", "pair"),
    "lock-local": ("lock + unlock, managed by the rank itself", "pair"),
    "barrier": ("barrier", "barrier"),
    "barrier-peer": ("barrier of a few (`pmdsm_barrier_with`), here the two ranks", "barrier"),
    "first-touch": ("first touch of a first-touch page whose home the other rank decides: "
                    "a question and its answer, no fetch", "page"),
}
DSM_WHERE = {"node": "one node, PM's shm device",
             "cluster": "virtual-cluster nodes, PM's udp device, 1 Gbit/s, 1 rank each"}
DSM_FAULT_WHERE = {"node": "one node, PM's shm device, 2 ranks",
                   "cluster": "2 virtual-cluster nodes (n1, n2), PM's udp device, 1 Gbit/s, "
                              "1 rank each"}


def capitalised(text):
    return text[:1].upper() + text[1:]


# The DSM version's extra cluster rows (scripts/bench_dsm.py, DSM_EXTRA),
# in the report's order, each with what its label says after the chosen
# method: dsm-neighbours has the MPI version's synchronisation (jacobi_dsm
# --neighbours; mpi-barrier is the converse, jacobi_mpi --barrier),
# dsm-split the same in two halves, dsm-poll PMDSM_SERVICE_SCHED=poll.
DSM_EXTRA_ROWS = {
    "dsm-neighbours": "`--neighbours` (each rank meets its two neighbours after each sweep)",
    "dsm-split": "`--split` (the same meeting in two halves, the interior rows computed "
                 "between them)",
    "dsm-poll": "`PMDSM_SERVICE_SCHED=poll` (the service thread polls and yields instead "
                "of sleeping; its 1-rank time is its own)",
}


# The MPI version's extra cluster rows (scripts/bench_dsm.py), after "MPI".
MPI_ROWS = {
    "mpi-barrier": "MPI, `--barrier` (all ranks wait after each sweep)",
    "mpi-pm": "MPI over PM (`pml cm`, `mtl ofi`, provider `pm`, PM's udp device: the DSM's "
              "transport)",
}


def dsm_row_label(version, chosen):
    """The label of a DSM version's row: its method, or the chosen method
    and what the extra row adds to it."""
    if version in DSM_EXTRA_ROWS:
        return f"DSM, {chosen}, {DSM_EXTRA_ROWS[version]}"
    return f"DSM, {version[len('dsm-'):]}"


def dsm_over_mpi_pm_table(prog, marks, where, chosen):
    """The DSM versions against the MPI version over PM, where it ran: the
    same transport under both."""
    by_p = prog.get("dsm_over_mpi_pm")
    if not by_p:
        return []
    rows = []
    for p, by_method in by_p.items():
        for m, r in by_method.items():
            tgt = marks.get(target_key(where, prog["program"], m, p, "mpi-pm"))
            rows.append([dsm_row_label(f"dsm-{m}", chosen), p, spread_cell(r["efficiency_ratio"], 2),
                         target_cell(tgt) if tgt else "", spread_cell(r["time_ratio"], 2)])
    return ["", "The same DSM runs against the MPI version over PM (the row \"MPI over PM\" "
            "above), round by round. JSON: `dsm_over_mpi_pm`.", "",
            table(["version", "P ranks", "÷ MPI over PM's efficiency", "target",
                   "P ranks: time ÷ MPI over PM's"], rows,
                  ["---", "---:", "---:", "---", "---:"])]


def render_dsm(doc, path):
    fault, apps = doc.get("fault"), doc.get("apps")
    if not fault or "targets" not in doc:
        return None
    methods = doc.get("methods", ["segv", "uffd-async"])
    others = methods[1:]           # each compared with segv (segv ÷ method)
    fs = doc.get("fault_settings", {})
    cl = doc.get("cluster", {})
    out = [provenance(doc, path), ""]
    node_bind = (fault.get("node") or {}).get("bindings") or []
    settings = [
        ["CPUs", f"{doc.get('nproc')}: the applications run with 1 and 2 ranks on one node, "
                 "and with 1, 2 and 4 virtual-cluster nodes x 1 rank (4 ranks share the 2 CPUs, "
                 "two each, in both versions alike)"],
        ["placement, one node", doc["placement"]["node"]
         + (f" ({'; '.join(node_bind)})" if node_bind else "")],
        ["placement, virtual cluster", doc["placement"]["cluster"]],
        ["virtual cluster", f"`{cl.get('name')}`, {cl.get('nodes')} nodes, {cl.get('nics')} NIC, "
                            f"subnet {cl.get('subnet')} (net0 {cl.get('net0', '?')}), "
                            f"{cl.get('rate')} each way, MTU {cl.get('mtu')}; up once for the "
                            "suite" if not (fault.get("cluster") or {}).get("skipped")
                            else f"not run: {fault['cluster']['skipped']}"],
        ["pmdsm-bench", f"{fs.get('pages')} pages per batch, {fs.get('reps')} repetitions of "
                        f"about {fs.get('min_time_s')} s after a warm-up; a round's figure is "
                        "the median of its repetitions"],
        ["MPI", f"Open MPI `{(doc.get('versions') or {}).get('openmpi-bin')}`: ob1 + vader on "
                "one node, ob1 + tcp (net0) between the nodes"],
        ["PM / DSM environment", ", ".join(f"`{k}={v}`" for k, v in
                                          (doc.get("pm_env") or {}).items())
         or "none set (the defaults)"],
        ["machine idle before / after", f"{num(doc.get('idle_before_pct'), 0)} % / "
                                        f"{num(doc.get('idle_after_pct'), 0)} %"],
        ["CPU taken by other processes", (
            "per command on this host, median [min–max], % of the machine's CPU time (its "
            "busy time less this suite's processes'; not measured on the virtual cluster): "
            + "; ".join(f"{'fault path' if k.startswith('fault') else 'applications'} "
                        f"{spread_cell(v, 0)}"
                        for k, v in doc["others_cpu_by_part"].items() if v.get("n")))
         if doc.get("others_cpu_by_part") else "not measured"],
        ["suite's run time", f"{num(doc.get('seconds'), 0)} s"],
    ]
    if doc.get("binaries"):
        settings.append(["binaries measured", "; ".join(
            f"`{name}` {b['mtime']}, sha256 `{b['sha256'][:12]}`" if b else f"`{name}` missing"
            for name, b in doc["binaries"].items())
            + (f"; **changed during the run: {', '.join(doc['binaries_rebuilt'])}**"
               if doc.get("binaries_rebuilt") else "")])
    out.append(table(["setting", "value"], settings, ["---", "---"]))
    marks = {v["key"]: v for v in doc["targets"]}

    out += ["", "### Fault path (`pmdsm-bench`)", ""]
    for where, f in fault.items():
        if not f or f.get("skipped"):
            out += [f"**{capitalised(DSM_FAULT_WHERE[where])}**: not run "
                    f"({(f or {}).get('skipped', 'no data')}).", ""]
            continue
        n = len(f.get("rounds", []))
        kind = spread_kind(f["us"][methods[0]]["read"])
        out += [f"**{capitalised(DSM_FAULT_WHERE[where])}.** µs per operation, median over {n} round(s) with the "
                f"[{kind}] in brackets; the ratio is taken round by round (all the methods of the "
                f"same round). JSON: `fault.{where}.us`, `.segv_over`, "
                + ("`.read_random_over_pm_read`, " if "read_random_over_pm_read" in f else "")
                + "`.read_over_pm_read`, every run in `.rounds[]`.", ""]
        rows = []
        for test in DSM_FAULT_TESTS(f):
            title, op = DSM_TEST_TITLES.get(test, (test, "op"))
            v = marks.get(f"{where}_write") if test == "write-remote" else None
            rows.append([f"`{test}`: {title}", op]
                        + [spread_cell(f["us"][m][test]) for m in methods]
                        + [spread_cell(f["segv_over"][m][test], 2) for m in others]
                        + [target_cell(v) if v else ""])
        base = f["us"]["baseline"]["pm-read"]
        rows.append(["`pm-read`: PM's `pm_read` of 4 KiB alone (the read fault's baseline)",
                     "page", spread_cell(base), "(the same run for all)"]
                    + [""] * (len(methods) - 2 + len(others) + 1))
        out.append(table(["test", "per"] + [f"{m} µs" for m in methods]
                         + [f"segv ÷ {m}" for m in others]
                         + [f"target (segv ÷ {others[0]})"], rows,
                         ["---", "---"] + ["---:"] * (len(methods) + len(others)) + ["---"]))
        out.append("")
        out += dsm_read_table(f, methods, marks, where, base)
        work = f.get("work") or {}
        if work:
            out += ["", "What each method did per operation in the timed parts (the DSM's "
                    "counters of the first round; `fault.<where>.work`): every one did the same "
                    "protocol work, one diff per page written; the methods differ in how a "
                    "write is found and where the twin is made.", ""]
            rows = []
            for m in methods:
                for test in ("write-remote", "write-home", "read", "read-random"):
                    w = (work.get(m) or {}).get(test)
                    if not w:
                        continue
                    rows.append([m, f"`{test}`", num(w.get("write_faults"), 2),
                                 num(w.get("read_faults"), 2), num(w.get("twins"), 2),
                                 num(w.get("diffs_sent"), 2), num(w.get("diff_bytes"), 1),
                                 num(w.get("pages_fetched"), 2),
                                 num(w.get("read_ahead_pages"), 2)
                                 if "read_ahead_pages" in w else "-",
                                 num(w.get("wp_scans"), 3),
                                 num((w.get("fault_ns") or 0) / 1e3, 2),
                                 num((w.get("fetch_ns") or 0) / 1e3, 2),
                                 num((w.get("release_ns") or 0) / 1e3, 2),
                                 num(w.get("ctxsw"), 2)])
            out.append(table(["method", "test", "write faults", "read faults", "twins", "diffs",
                              "diff bytes", "pages fetched", "of them read ahead",
                              "PAGEMAP_SCANs", "in the fault handler µs", "of it fetching µs",
                              "in releases µs", "context switches"],
                             rows, ["---", "---"] + ["---:"] * 12))
        un = f.get("unpinned")
        if un:
            out += ["", f"Informational: the same runs with the ranks not pinned (the scheduler "
                    f"places each rank's application and service threads on either CPU; "
                    f"`fault.{where}.unpinned`), µs per operation:", ""]
            rows = [[f"`{t}`"] + [spread_cell(un["us"][m][t]) for m in methods]
                    + [spread_cell(un["segv_over"][m][t], 2) for m in others]
                    for t in DSM_FAULT_TESTS(un)]
            rows.append(["`pm-read`", spread_cell(un["us"]["baseline"]["pm-read"])]
                        + [""] * (len(methods) - 1 + len(others)))
            out.append(table(["test"] + [f"{m} µs" for m in methods]
                             + [f"segv ÷ {m}" for m in others], rows,
                             ["---"] + ["---:"] * (len(methods) + len(others))))
        out.append("")

    out += ["### Applications", ""]
    for where, part in (apps or {}).items():
        if not part or part.get("skipped"):
            out += [f"**{DSM_WHERE[where]}**: not run "
                    f"({(part or {}).get('skipped', 'no data')}).", ""]
            continue
        for prog in part["programs"]:
            summ = prog["summary"]
            n = len(prog["rounds"])
            kind = spread_kind(summ["mpi"]["seconds_1"])
            head = (f"**`{prog['program']} {' '.join(prog['args'])}`, "
                    f"{DSM_WHERE[where].replace(', 1 rank each', '')}** "
                    f"— the `seconds` of its result line (the compute phase), median over {n} "
                    f"round(s) with the [{kind}]; efficiency = T(1 rank) ÷ (P × T(P ranks)) "
                    f"of the same version and round; checksums of every run "
                    + ("agree" if prog["checksums_agree"] else "**differ**: "
                       + ", ".join(prog["checksums"]))
                    + f". JSON: `apps.{where}.programs[]`.")
            out += [head, ""]
            rows = []
            if "seq" in summ:
                rows.append(["sequential", "1", spread_cell(summ["seq"]["seconds_1"], 3), "",
                             "", "", "", "", ""])
            chosen = doc.get('chosen', 'uffd-async')
            for p, by_method in prog["dsm_over_mpi"].items():
                # Every method's DSM row, the extra rows where they ran
                # (DSM_EXTRA_ROWS), then MPI's.
                for v in ([f"dsm-{m}" for m in methods] + list(DSM_EXTRA_ROWS)
                          + ["mpi", "mpi-barrier", "mpi-pm"]):
                    if v not in summ:
                        continue
                    r = summ[v]
                    m = v[4:] if v.startswith("dsm-") else None
                    ratio = by_method.get(m) if m else None
                    tgt = marks.get(target_key(where, prog["program"], m, p)) if m else None
                    vs_seq = (r.get("efficiency_vs_seq") or {}).get(p)
                    label = dsm_row_label(v, chosen) if m else MPI_ROWS.get(v, "MPI")
                    rows.append([label, p,
                                 spread_cell(r["seconds_1"], 3), spread_cell(r[f"seconds_{p}"], 3),
                                 spread_cell(r["efficiency"][p], 2),
                                 spread_cell(ratio["efficiency_ratio"], 2) if ratio else "",
                                 target_cell(tgt) if tgt else "",
                                 spread_cell(ratio["time_ratio"], 2) if ratio else "",
                                 spread_cell(vs_seq, 2) if vs_seq else "-"])
            out.append(table(["version", "P ranks", "1 rank s", "P ranks s", "efficiency",
                              "÷ MPI's efficiency", "target", "P ranks: time ÷ MPI's",
                              "against the sequential program: T(seq) ÷ (P × T(P ranks))"],
                             rows, ["---", "---:", "---:", "---:", "---:", "---:", "---", "---:",
                                    "---:"]))
            out += dsm_over_mpi_pm_table(prog, marks, where, chosen)
            for m in others:
                out += ["", f"DSM segv ÷ {m}, time: " + ", ".join(
                    f"{k} rank(s) {spread_cell(v, 2)}"
                    for k, v in prog["segv_over"][m].items()) + "."]
            out.append("")

    out += ["### Targets", "", "Ratios taken round by round; PASS only when the whole spread "
            "is on the right side of the target (scripts/bench_stats.py). JSON: `targets[]`.",
            ""]
    rows = []
    for v in doc["targets"]:
        why = f" ({v['why']})" if v.get("why") else ""
        rows.append([v["what"], v["issue"], spread_cell(v, 3),
                     target_text(v["op"], v["bound"]), f"{verdict_cell(v)}{why}"])
    out.append(table(["comparison", "target (issue)", "measured", "judged as", "verdict"], rows,
                     ["---", "---", "---:", "---", "---"]))
    rec = doc.get("recommendation")
    if rec:
        wins = rec["wins"]
        out += ["", f"**Write detection favoured by these figures: `{rec['method']}`** "
                f"(rule: {rec['rule']}; JSON: `recommendation`).", ""]
        for m in methods:
            items = ", ".join(
                f"{w['what']} ("
                + ", ".join(f"{o} ÷ {m} {num(r, 2)}" for o, r in w["ratios"].items()) + ")"
                for w in wins[m])
            out.append(f"- `{m}` cheaper than every other in {len(wins[m])} (medians of the "
                       f"ratios in brackets): {items or 'none'}")
        und = rec.get("undecided") or []
        items = ", ".join(
            f"{w['what']} ("
            + ", ".join(f"segv ÷ {m} {num(w['over'][m]['segv'], 2)}" for m in others) + ")"
            for w in und)
        out.append(f"- undecided, no method cheaper than every other with the whole spread "
                   f"({len(und)}): {items or 'none'}")
    if doc.get("errors"):
        out += ["", "Errors (the first line of each; JSON: `errors`):", ""]
        out += [f"- {relative(e.splitlines()[0])}" for e in doc["errors"]]
    out += ["", commands_block(doc)]
    return "\n".join(out)


def dsm_read_table(f, methods, marks, where, base):
    """The read fault against pm_read, per method: `read-random` (one fault
    per page, judged), with `read` (a sequential sweep, read-ahead serving
    several pages per fault) beside it per page.  A summary from before
    read-random (no such test) has `read` alone as the read fault."""
    un = f.get("unpinned") or {}
    has_random = "read-random" in f["us"][methods[0]]
    rows = []
    for m in methods:
        v = marks.get(f"{where}_read_{m}")
        if has_random:
            fault, ratio = f["us"][m]["read-random"], f["read_random_over_pm_read"][m]
            un_ratio = (un.get("read_random_over_pm_read") or {}).get(m)
        else:
            fault, ratio = f["us"][m]["read"], f["read_over_pm_read"][m]
            un_ratio = (un.get("read_over_pm_read") or {}).get(m)
        row = [m, spread_cell(fault), spread_cell(base), spread_cell(ratio, 2),
               target_cell(v) if v else "", spread_cell(un_ratio, 2) if un_ratio else "-"]
        if has_random:
            row += [spread_cell(f["us"][m]["read"]), spread_cell(f["read_over_pm_read"][m], 2)]
        rows.append(row)
    head = ["read fault with", "read fault µs" + (" (`read-random`)" if has_random else ""),
            "pm_read 4 KiB µs", "read fault ÷ pm_read", "target",
            "the same, unpinned (informational)"]
    align = ["---", "---:", "---:", "---:", "---", "---:"]
    if has_random:
        head += ["sequential sweep (`read`), µs per page", "sweep per page ÷ pm_read"]
        align += ["---:", "---:"]
    return [table(head, rows, align)]


def DSM_FAULT_TESTS(f):
    """The fault-path tests a summary has, in the suite's order."""
    order = list(DSM_TEST_TITLES)
    have = list((f.get("us") or {}).get("segv", {}))
    return [t for t in order if t in have] + [t for t in have if t not in order]


RENDERERS = {
    "dsm": ("dsm", render_dsm),
    "mpi": ("mpi", render_mpi),
    "latency-breakdown": ("latency-breakdown", render_latency_breakdown),
    "pm-shm": ("pm-shm", render_pm_shm),
    "pm-udp": ("pm-udp", render_pm_udp),
    "launch": ("launch", render_launch),
    "auth": ("auth", render_auth),
    "gang": ("gang", render_gang),
    "slurm-gang": ("slurm-gang", render_slurm_gang),
    "preempt-soak": ("preempt-soak", render_preempt_soak),
    "restart": ("restart", render_restart),
    "vcluster-rootfs": ("vcluster-rootfs", render_vcluster_rootfs),
}


# ---------------------------------------------------------------- rewriting

MARKER = re.compile(r"^<!-- bench:([a-z0-9-]+) (begin|end) -->$", re.M)


def regions(text):
    """[(name, start of content, end of content)] of the marked regions: a
    marker is a line of its own (quoted in a sentence it is not one)."""
    found, open_ = [], None
    for m in MARKER.finditer(text):
        name, what = m.group(1), m.group(2)
        if what == "begin":
            if open_:
                raise ValueError(f"region {open_[0]} is not closed before {name} begins")
            open_ = (name, m.end())
        else:
            if not open_ or open_[0] != name:
                raise ValueError(f"an end marker for {name} outside its region")
            found.append((name, open_[1], m.start()))
            open_ = None
    if open_:
        raise ValueError(f"no end marker for region {open_[0]}")
    return found


def render(name, out_dir):
    if name not in RENDERERS:
        raise ValueError(f"unknown region {name!r} (known: {', '.join(RENDERERS)})")
    suite, fn = RENDERERS[name]
    path = out_dir / f"{suite}.json"
    if not path.exists():
        return None, f"{path} missing: run scripts/bench --suite {suite}"
    doc = json.loads(path.read_text())
    try:
        shown = path.relative_to(ROOT)
    except ValueError:
        shown = path
    text = fn(doc, shown)
    if text is None:
        return None, f"{path} is of an older layout: run scripts/bench --suite {suite}"
    return text, None


def update(out_dir, check=False, docs=DOCS, suites=None):
    """Rewrite the regions of `docs` from out_dir/*.json (only those of
    `suites` when given); the documents that changed (or, with check, that
    would)."""
    changed = []
    for doc_path in docs:
        text = doc_path.read_text()
        new, pos = [], 0
        for name, start, end in regions(text):
            if suites is not None and RENDERERS.get(name, (name,))[0] not in suites:
                continue
            body, why = render(name, Path(out_dir))
            new.append(text[pos:start])
            if body is None:
                print(f"bench_report: {doc_path.relative_to(ROOT)}: region {name} left as it "
                      f"is ({why})", file=sys.stderr)
                new.append(text[start:end])
            else:
                new.append("\n" + body.strip() + "\n")
            pos = end
        new.append(text[pos:])
        result = "".join(new)
        if result != text:
            changed.append(doc_path)
            if not check:
                doc_path.write_text(result)
                print(f"bench_report: rewrote {doc_path.relative_to(ROOT)}")
    return changed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=ROOT / "build",
                    help="build prefix whose bench/ holds the JSON (default: %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 when a document differs from the JSON")
    ap.add_argument("--suite", action="append", choices=sorted({s for s, _ in RENDERERS.values()}),
                    help="only the regions of this suite (repeatable; default: all)")
    args = ap.parse_args()
    changed = update(args.build.resolve() / "bench", check=args.check, suites=args.suite)
    if args.check and changed:
        print("bench_report: not up to date: "
              + ", ".join(str(p.relative_to(ROOT)) for p in changed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
