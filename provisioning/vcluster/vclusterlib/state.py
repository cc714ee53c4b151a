"""State files: /run/score/vcluster/NAME.json, one per cluster that is up.

A state file records the layout of a cluster and the PIDs of its holder
processes; exec, rsh and status read it.  It lives under /run because a
cluster does not survive a reboot.  `down` never depends on it: it discovers
objects by name, so a missing or stale state file is harmless.

`lock()` serialises up and down (subnet choice, /etc/hosts edits) between
concurrent vcluster processes.
"""

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

from . import log
from .addressing import Layout
from .errors import VclusterError
from .shape import Shape

STATE_DIR = Path("/run/score/vcluster")
VERSION = 1


def path(name):
    return STATE_DIR / f"{name}.json"


def load(name):
    """The state dict of cluster `name`, or None if absent or unreadable."""
    try:
        with open(path(name)) as f:
            state = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warn(f"ignoring unreadable state file {path(name)}: {e}")
        return None
    if not isinstance(state, dict) or state.get("version") != VERSION or state.get("name") != name:
        log.warn(f"ignoring state file {path(name)} of an unknown format")
        return None
    return state


def save(state):
    """Write atomically so that readers never see half a file."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    target = path(state["name"])
    tmp = target.with_suffix(".json.tmp")
    with open(tmp, "w") as f:
        json.dump(state, f, indent=2)
        f.write("\n")
    os.replace(tmp, target)


def remove(name):
    with contextlib.suppress(FileNotFoundError):
        path(name).unlink()
    with contextlib.suppress(FileNotFoundError):
        path(name).with_suffix(".json.tmp").unlink()


def exists(name):
    return path(name).exists() or path(name).with_suffix(".json.tmp").exists()


def names():
    """Names of the clusters that have a state file."""
    if not STATE_DIR.is_dir():
        return []
    return sorted(p.stem for p in STATE_DIR.glob("*.json"))


def layout(state):
    return Layout(state["name"], Shape.from_dict(state["shape"]), state["subnet"])


def holder_pid(state, node):
    for entry in state["nodes"]:
        if entry["name"] == node:
            return entry.get("holder_pid")
    return None


@contextlib.contextmanager
def lock(timeout=120):
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as f:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise VclusterError(f"another vcluster up/down has held {STATE_DIR}/.lock "
                                        f"for more than {timeout}s") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
