#!/usr/bin/python3
"""Render the benchmarks' figures as PNG from the suites' JSON.

    scripts/bench_plots.py [--build BUILD] [--suite NAME ...]

scripts/bench (make bench) calls it after scripts/bench_report.py, for the
suites that ran.  Each figure is drawn from BUILD/bench/<suite>.json only,
with the run's date, machine and command in its caption, and written next
to the report that shows its table:

    pm-shm   docs/pm/figures/pm-shm.png       latency and bandwidth by
                                              message size, PM against vader,
                                              median with the min-max band
    gang     docs/scored/figures/gang-switch.png
                                              the master's histogram of gang
                                              switch times, per node count

A suite whose JSON is missing is left alone (and said so).
"""
import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")   # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Fixed metadata, so that the same JSON gives the same bytes.
PNG_METADATA = {"Software": None}


def caption(doc):
    m, run = doc.get("machine", {}), doc.get("run", {})
    modified = f" (+{len(m['git_modified'])} modified)" if m.get("git_modified") else ""
    return (f"{run.get('started', '?')}; {m.get('nproc', '?')} CPUs {m.get('cpu_model', '')}, "
            f"Linux {m.get('kernel', '?')}; commit {m.get('git_commit', '?')}{modified}; "
            f"{run.get('invocation', 'scripts/bench')}")


def size_label(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def band(ax, sizes, cells, label, style):
    """Median line with the min-max band of spread cells {median, lo, hi}."""
    pts = [(s, c) for s, c in zip(sizes, cells) if c and c.get("median") is not None]
    if not pts:
        return
    xs = [s for s, _ in pts]
    ax.plot(xs, [c["median"] for _, c in pts], style, label=label)
    ax.fill_between(xs, [c["lo"] for _, c in pts], [c["hi"] for _, c in pts], alpha=0.2)


def plot_pm_shm(doc, out):
    key = doc.get("judged") or "pm_copy"
    rows = doc["comparison"][key]
    sizes = [r["size"] for r in rows]
    fig, (lat, bw) = plt.subplots(1, 2, figsize=(11, 4.2))
    band(lat, sizes, [r["pm_latency_us"] for r in rows], "PM shm (receiver copies)", "o-")
    band(lat, sizes, [r["vader_latency_us"] for r in rows], "Open MPI vader (NetPIPE)", "s--")
    band(bw, sizes, [r["pm_bandwidth_MBps"] for r in rows], "PM shm (receiver copies)", "o-")
    band(bw, sizes, [r["vader_bandwidth_MBps"] for r in rows], "Open MPI vader (NetPIPE)", "s--")
    for ax, title, unit in ((lat, "one-way latency", "µs"), (bw, "stream bandwidth", "MB/s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [size_label(s) for s in sizes], rotation=45, fontsize=8)
        ax.set_xlabel("message size")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"PM's shm device against vader, within one node "
                 f"(median of {len(doc.get('rounds', []))} rounds, band: min-max)", fontsize=10)
    fig.text(0.01, 0.01, caption(doc), fontsize=7, alpha=0.7)
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    fig.savefig(out, dpi=110, metadata=PNG_METADATA)
    plt.close(fig)


def plot_gang(doc, out):
    runs = [s for s in doc.get("switch", []) if s.get("histogram_s")]
    if not runs:
        raise ValueError("no switch histogram in the JSON (switch[].histogram_s): an older run")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / len(runs)
    labels = None
    for i, s in enumerate(runs):
        buckets = s["histogram_s"]
        labels = [f"≤{b[0] * 1e3:g} ms" if b[0] is not None else "more" for b in buckets]
        xs = [k + i * width for k in range(len(buckets))]
        ax.bar(xs, [b[1] for b in buckets], width=width,
               label=f"{s['nodes']} nodes: {s['switches']} switches, median "
                     f"{s['median_ms']:.2f} ms, p99 {s['p99_ms']:.2f} ms")
    ax.set_xticks([k + width * (len(runs) - 1) / 2 for k in range(len(labels))], labels,
                  rotation=45, fontsize=8)
    ax.set_ylabel("switches")
    ax.set_xlabel("switch time (preempt request to every node frozen and thawed)")
    ax.set_title("Gang switch times, two jobs time-sharing, 50 ms quantum, network preemption",
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.text(0.01, 0.01, caption(doc), fontsize=7, alpha=0.7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out, dpi=110, metadata=PNG_METADATA)
    plt.close(fig)


PLOTS = {
    "pm-shm": [(plot_pm_shm, ROOT / "docs" / "pm" / "figures" / "pm-shm.png")],
    "gang": [(plot_gang, ROOT / "docs" / "scored" / "figures" / "gang-switch.png")],
}


def render(out_dir, suites=None):
    """Draw the figures of `suites` (default: all) from out_dir; the files
    written."""
    written = []
    for suite, figures in PLOTS.items():
        if suites is not None and suite not in suites:
            continue
        path = Path(out_dir) / f"{suite}.json"
        if not path.exists():
            print(f"bench_plots: no {path}: the figures of {suite} are left as they are",
                  file=sys.stderr)
            continue
        doc = json.loads(path.read_text())
        for draw, out in figures:
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                draw(doc, out)
            except (KeyError, ValueError) as e:
                print(f"bench_plots: {out.relative_to(ROOT)} left as it is: {e}", file=sys.stderr)
                continue
            written.append(out)
            print(f"bench_plots: wrote {out.relative_to(ROOT)}")
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--suite", action="append", choices=sorted(PLOTS))
    args = parser.parse_args()
    render(args.build / "bench", args.suite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
