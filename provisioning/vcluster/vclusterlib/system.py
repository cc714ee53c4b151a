"""Running the system tools vcluster is built on (ip, tc, nsenter, unshare).

Tools are looked up in PATH and then in the sbin directories, because root's
PATH is not always complete (cron, some sudo and Ansible setups) and ip/tc live
in /usr/sbin on Debian.  Failures become VclusterError with the tool's own
message so the user sees the real cause.
"""

import json
import os
import re
import shutil
import subprocess

from .errors import VclusterError

_EXTRA_PATH = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"
_PACKAGE = {"ip": "iproute2", "tc": "iproute2", "nsenter": "util-linux",
            "unshare": "util-linux", "bash": "bash", "sleep": "coreutils",
            "slurmctld": "slurmctld", "slurmd": "slurmd", "sinfo": "slurm-client",
            "mmdebstrap": "mmdebstrap"}
# Commands of one batch are cheap; a stuck tool is not, so everything is bounded.
TIMEOUT = 60


def require_root():
    if os.geteuid() != 0:
        raise VclusterError("must be run as root: network namespaces, bridges and "
                            "tc need CAP_NET_ADMIN and CAP_SYS_ADMIN (try sudo)")


def tool(name):
    """Absolute path of a required tool, or a clear error naming its package."""
    path = shutil.which(name, path=os.environ.get("PATH", "") + ":" + _EXTRA_PATH)
    if not path:
        pkg = _PACKAGE.get(name, name)
        raise VclusterError(f"missing '{name}' (Debian package {pkg}); "
                            f"install it with: apt-get install {pkg}")
    return path


def require_tools(*names):
    for name in names:
        tool(name)


def run(argv, input=None, check=True):
    """Run a tool to completion; return its CompletedProcess (text, captured)."""
    argv = [tool(argv[0])] + list(argv[1:])
    try:
        proc = subprocess.run(argv, input=input, capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise VclusterError(f"'{' '.join(argv)}' did not finish within {TIMEOUT}s") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise VclusterError(f"'{' '.join(argv[:4])} ...' failed: {detail}")
    return proc


def batch(tool_name, lines, netns=None, force=False):
    """Feed many ip/tc commands to one process (`ip -batch -`).

    One process for hundreds of commands is what makes `up` fast.  Without
    `force` the batch stops at the first error, which is then raised; with it
    every line is tried and errors are returned (used by teardown, where some
    objects may already be gone)."""
    if not lines:
        return ""
    argv = [tool_name]
    if netns:
        argv += ["-n", netns]
    if force:
        argv.append("-force")
    argv += ["-batch", "-"]
    proc = run(argv, input="\n".join(lines) + "\n", check=False)
    if proc.returncode != 0 and not force:
        raise VclusterError(_batch_error(tool_name, netns, lines, proc.stderr))
    return proc.stderr


def _batch_error(tool_name, netns, lines, stderr):
    """'ip: link add ... failed: RTNETLINK answers: File exists' from batch output.

    ip and tc report the failing line as 'Command failed -:N'; quoting the line
    itself tells the user which object was in the way."""
    where = f" -n {netns}" if netns else ""
    match = re.search(r"Command failed -:(\d+)", stderr)
    detail = re.sub(r"\s*Command failed -:\d+\s*", " ", stderr).strip()
    if match and 0 < int(match.group(1)) <= len(lines):
        return f"'{tool_name}{where} {lines[int(match.group(1)) - 1]}' failed: {detail}"
    return f"'{tool_name}{where} -batch' failed: {detail}"


def ip_json(*args, netns=None):
    """Parsed output of `ip -j ARGS` (an empty list when ip prints nothing)."""
    argv = ["ip", "-j"] + (["-n", netns] if netns else []) + list(args)
    out = run(argv).stdout.strip()
    return json.loads(out) if out else []


def list_netns():
    return [entry["name"] for entry in ip_json("netns", "list")]


def list_links():
    """Root-namespace links with name, kind and alias."""
    links = []
    for link in ip_json("-d", "link", "show"):
        kind = (link.get("linkinfo") or {}).get("info_kind", "")
        links.append({"ifname": link["ifname"], "kind": kind,
                      "alias": link.get("ifalias", "")})
    return links


def ipv4_routes():
    """Every IPv4 route of every routing table: dicts with dst, dev, table, type."""
    return ip_json("-4", "route", "show", "table", "all")


def batches(tool_name, jobs):
    """Run several batches concurrently, one per network namespace.

    jobs: [(netns, lines)].  Every node needs its own `ip -n NETNS -batch`;
    running them side by side keeps `up` of a large cluster quick."""
    running, lines_of = [], {}
    for netns, lines in jobs:
        lines_of[netns] = lines
        if not lines:
            continue
        argv = [tool(tool_name), "-n", netns, "-batch", "-"]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        running.append((netns, proc, "\n".join(lines) + "\n"))
    errors = []
    for netns, proc, text in running:
        try:
            _, err = proc.communicate(text, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            err, proc.returncode = f"no answer within {TIMEOUT}s", 1
        if proc.returncode != 0:
            errors.append(_batch_error(tool_name, netns, lines_of[netns], err))
    if errors:
        raise VclusterError("; ".join(errors))
