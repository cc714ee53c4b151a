"""Independent checks of what exists of a virtual cluster.

These look at the system directly (ip, /proc, /etc) rather than asking
vcluster, so a test of `down` does not trust the code it tests.
"""

import json
import os
import re
import subprocess
from pathlib import Path


def _ip_json(*args):
    out = subprocess.run(["ip", "-j", *args], capture_output=True, text=True,
                         timeout=10, check=True).stdout.strip()
    return json.loads(out) if out else []


def netns_of(name):
    return [e["name"] for e in _ip_json("netns", "list")
            if e["name"].startswith(f"vcluster-{name}-")]


def links_of(name):
    return [link["ifname"] for link in _ip_json("link", "show")
            if link.get("ifalias") == f"vcluster:{name}" or link["ifname"].startswith(f"{name}-")]


def holders_of(name):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if argv0.startswith(f"vcluster-holder {name} ".encode()):
            found.append(int(pid))
    return found


def process_gone(pid):
    """True if the process no longer exists or is a zombie waiting for its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def leftovers(name):
    """Descriptions of everything of cluster `name` that still exists."""
    found = []
    found += [f"netns {ns}" for ns in netns_of(name)]
    found += [f"link {link}" for link in links_of(name)]
    found += [f"holder pid {pid}" for pid in holders_of(name)]
    netns_dir = Path("/etc/netns")
    if netns_dir.is_dir():
        found += [f"/etc/netns/{d.name}" for d in netns_dir.iterdir()
                  if d.name.startswith(f"vcluster-{name}-")]
    hosts = Path("/etc/hosts").read_text()
    if re.search(rf"^# (BEGIN|END) vcluster {name}$", hosts, re.M):
        found.append("/etc/hosts block")
    if Path(f"/run/score/vcluster/{name}.json").exists():
        found.append("state file")
    return found
