"""The vcluster-rootfs benchmark suite: how long `vcluster up --rootfs --nodes 4`
takes from a cold cache (no node image: mmdebstrap builds it first) and from
a warm one (the image is there), against the namespace-only `vcluster up
--nodes 4` (the baseline: the same network, no machines), and how long each
`vcluster down` takes.

Called by scripts/bench (suite "vcluster-rootfs").  Each repetition brings
the three kinds up and down in turns (the order rotates); the cold kind
runs in the first COLD_REPETITIONS repetitions only (a build takes about a
minute and downloads the image's packages).  For a cold start the image
directory is moved aside first and put back once the cluster is down (it
is the nodes' lower layer), so the image the machine had is kept; the apt proxy's cache is not touched (`up` fetches
nothing but one small index through it).  Times are the wall time of the
`vcluster` command (time.monotonic() around it).  No target: the issue asks
for the figures ("a warm start should take seconds, not minutes").
docs/admin/vcluster.md's table is written by scripts/bench_report.py from
BUILD/bench/vcluster-rootfs.json.
"""

import os
import shutil
import subprocess
import sys
import time

from bench_stats import spread
from bench_udp import ROOT, VCLUSTER

sys.path.insert(0, str(ROOT / "provisioning" / "vcluster"))
from vclusterlib import image  # noqa: E402  (vcluster's helpers)

NAME = "bvcr"
SUBNET = "10.246.0.0/16"      # outside vcluster's default range 10.250-10.255
NODES = 4
REPETITIONS = 5
QUICK_REPETITIONS = 2
COLD_REPETITIONS = 2
QUICK_COLD_REPETITIONS = 1
UP_TIMEOUT = 1800
DOWN_TIMEOUT = 180

KINDS = {
    "cold": ("vcluster up --rootfs, cold (the image built first)", ["--rootfs"]),
    "warm": ("vcluster up --rootfs, warm (the image there)", ["--rootfs"]),
    "netns": ("vcluster up (namespace-only nodes, baseline)", []),
}


def _vcluster(ctx, args, timeout):
    argv = [str(VCLUSTER), *args]
    ctx.commands.append({"what": f"vcluster {args[0]}", "argv": argv, "cwd": None, "env": {}})
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.strip()[-800:]}")
    return took


def _one(ctx, kind):
    """Bring the cluster up as `kind` and down again; returns the times."""
    aside = None
    if kind == "cold":
        path = image.path_of(image.recipe())
        if os.path.isdir(path):
            aside = f"{path}.bench-aside-{os.getpid()}"
            os.rename(path, aside)
    try:
        up = _vcluster(ctx, ["up", "--quiet", "--name", NAME, "--nodes", str(NODES),
                             "--subnet", SUBNET, *KINDS[kind][1]], UP_TIMEOUT)
        down = _vcluster(ctx, ["down", "--quiet", "--name", NAME], DOWN_TIMEOUT)
    finally:
        if aside:
            # Only once the nodes are gone (the image is their lower layer):
            # the image just built is the same recipe; keep the machine's own.
            subprocess.run([str(VCLUSTER), "down", "--quiet", "--name", NAME],
                           capture_output=True)
            path = image.path_of(image.recipe())
            shutil.rmtree(path, ignore_errors=True)
            os.rename(aside, path)
    return {"up_s": up, "down_s": down}


def run(ctx):
    reps = QUICK_REPETITIONS if ctx.quick else REPETITIONS
    cold_reps = QUICK_COLD_REPETITIONS if ctx.quick else COLD_REPETITIONS
    doc = {"suite": "vcluster-rootfs", "nodes": NODES, "repetitions": reps,
           "cold_repetitions": cold_reps, "image_packages": sorted(image.PACKAGES),
           "clock": "time.monotonic() around the vcluster command", "runs": []}
    subprocess.run([str(VCLUSTER), "down", "--quiet", "--name", NAME], capture_output=True)
    # A warm start needs the image: build it outside the measurements.
    image.ensure()
    kinds = list(KINDS)
    try:
        for i in range(reps):
            order = kinds[i % 3:] + kinds[:i % 3]
            run_ = {"repetition": i + 1, "order": order}
            for kind in order:
                if kind == "cold" and i >= cold_reps:
                    continue
                print(f"vcluster-rootfs: repetition {i + 1}/{reps}: {kind}", file=sys.stderr)
                run_[kind] = _one(ctx, kind)
            doc["runs"].append(run_)
    finally:
        subprocess.run([str(VCLUSTER), "down", "--quiet", "--name", NAME], capture_output=True)
    doc["measures"] = {}
    for kind, (title, _) in KINDS.items():
        for what in ("up_s", "down_s"):
            samples = [r[kind][what] for r in doc["runs"] if kind in r]
            doc["measures"][f"{kind}_{what[:-2]}"] = dict(
                spread(samples), samples_s=samples,
                title=f"{title}: {'up' if what == 'up_s' else 'down'}")
    return doc
