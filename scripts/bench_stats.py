"""Spreads and verdicts shared by the benchmark suites (scripts/bench) and
the report generator (scripts/bench_report.py).

A verdict is PASS only when the whole spread of the measured value is on the
right side of the target, MISS when the whole spread is on the wrong side,
and INCONCLUSIVE when the spread straddles the target or there is a single
sample (no spread to judge).  The spread is p5-p95 from 20 samples up,
min-max below that (a handful of rounds has no meaningful 5th percentile).
"""
import statistics

PERCENTILE_FROM = 20     # samples needed before p5-p95 replaces min-max

OPS = {
    "<=": lambda v, b: v <= b,
    "<": lambda v, b: v < b,
    ">=": lambda v, b: v >= b,
    ">": lambda v, b: v > b,
}


def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def spread(values):
    """Summary of samples: n, median, min, max, p5, p95, and the interval a
    verdict uses (lo, hi, kind)."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None, "p5": None, "p95": None,
                "lo": None, "hi": None, "kind": None}
    s = {"n": len(vals), "median": statistics.median(vals), "min": vals[0], "max": vals[-1],
         "p5": percentile(vals, 0.05), "p95": percentile(vals, 0.95)}
    if len(vals) >= PERCENTILE_FROM:
        s.update(lo=s["p5"], hi=s["p95"], kind="p5-p95")
    else:
        s.update(lo=s["min"], hi=s["max"], kind="min-max")
    return s


def verdict(values, op, bound):
    """Judge samples of one quantity against `op bound` (e.g. "<=", 1.2)."""
    s = spread(values)
    out = dict(s, target=f"{op} {bound}", op=op, bound=bound)
    if s["n"] == 0:
        out["verdict"] = "n/a"
    elif s["n"] == 1:
        out["verdict"] = "INCONCLUSIVE"
        out["why"] = "one sample: no spread"
    else:
        ok_lo, ok_hi = OPS[op](s["lo"], bound), OPS[op](s["hi"], bound)
        if ok_lo and ok_hi:
            out["verdict"] = "PASS"
        elif not ok_lo and not ok_hi:
            out["verdict"] = "MISS"
        else:
            out["verdict"] = "INCONCLUSIVE"
            out["why"] = f"the {s['kind']} spread straddles the target"
    return out


def ratios(nums, dens):
    """Pairwise ratios of samples taken together (same round, same pair)."""
    return [n / d if n is not None and d else None for n, d in zip(nums, dens)]
