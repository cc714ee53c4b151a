"""Running pmcheck under Open MPI's mpirun on a virtual cluster, and looking
at the nodes while it runs (interface counters, packet loss, PM's sockets).

pmcheck (pm/tools/pmcheck.c) verifies that every message arrives exactly
once, in order, with the right bytes, and prints one JSON line per rank with
PM's counters.  A Job is one mpirun in the background: it is started in its
own session and, whatever happens, ended by its PID (SIGTERM makes mpirun
take its daemons and ranks down; the process group is killed after that).
pmcheck's own --timeout bounds every rank as well.
"""

import json
import os
import random
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import REPO_ROOT, VCLUSTER
from .pmwire import DATA as WIRE_DATA, F_ACK, F_FIRST, F_LAST, HDR_BYTES, msg_header
from .pmwire import header as wire_header

BUILD = Path(os.environ.get("SCORE_BUILD", REPO_ROOT / "build"))
PMCHECK = BUILD / "bin" / "pmcheck"

# mpirun must outlive pmcheck's --timeout by this much before the test gives up:
# after its loop a rank quiesces, which waits up to 30 s for its last
# acknowledgements (udp), then closes.
MPIRUN_GRACE = 50


@dataclass
class App:
    """One application context of mpirun: `np` ranks of pmcheck with `args`
    and extra environment `env` (passed with -x)."""
    np: int
    args: list
    env: dict = field(default_factory=dict)


def hosts(vc, nodes, slots=1):
    """--host value: qualified names (n1.NAME) are unique however many clusters are up."""
    return ",".join(f"{n}.{vc.name}:{slots}" for n in nodes)


def mpirun_argv(vc, nodes, apps, slots=1):
    argv = ["mpirun", "--allow-run-as-root", "--quiet", "--oversubscribe", "--bind-to", "none",
            "--host", hosts(vc, nodes, slots),
            "--mca", "plm_rsh_agent", f"{VCLUSTER} rsh --name {vc.name}",
            "--mca", "oob_tcp_if_include", vc.state["networks"][0]["subnet"]]
    for i, app in enumerate(apps):
        if i:
            argv.append(":")
        argv += ["-n", str(app.np)]
        for k, v in app.env.items():
            argv += ["-x", f"{k}={v}"]
        argv += [str(PMCHECK), "--quiet", *map(str, app.args)]
    return argv


def timeout_of(args):
    """pmcheck's --timeout in args (its default is 300 s)."""
    args = list(map(str, args))
    for flag in ("--timeout", "-t"):
        if flag in args:
            return int(args[args.index(flag) + 1])
    return 300


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    wall: float                     # seconds, mpirun start to end
    nranks: int
    ranks: dict                     # rank -> pmcheck's JSON object

    def all_ok(self):
        return (self.returncode == 0 and len(self.ranks) == self.nranks
                and all(r["ok"] and r["errors"] == 0 for r in self.ranks.values()))

    def total(self, key):
        return sum(r[key] for r in self.ranks.values())

    def seconds(self):
        """pmcheck's own measure: the slowest rank."""
        return max((r["seconds"] for r in self.ranks.values()), default=0.0)

    def counters(self, *keys):
        keys = keys or ("retransmits", "loses", "stops", "gos", "drops")
        return {k: self.total(k) for k in keys}

    def describe(self):
        lines = [f"mpirun exited {self.returncode} after {self.wall:.1f} s; "
                 f"{len(self.ranks)}/{self.nranks} ranks reported"]
        lines += [json.dumps(self.ranks[r]) for r in sorted(self.ranks)]
        err = [l for l in self.stderr.splitlines() if l.strip() and not l.startswith("---")]
        lines += ["stderr:"] + err[-30:]
        return "\n".join(lines)

    def complaints(self):
        """pmcheck's error lines ("pmcheck[RANK]: ...")."""
        return [l for l in self.stderr.splitlines() if l.startswith("pmcheck[")]

    def stalled(self):
        """pmcheck gave up waiting and saw no wrong message: a stall, not corruption."""
        lines = self.complaints()
        return bool(lines) and all(" timed out " in l for l in lines)


def parse(stdout):
    ranks = {}
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            obj = json.loads(line)
            ranks[obj["rank"]] = obj
    return ranks


class Job:
    """pmcheck under mpirun, in the background."""

    def __init__(self, vc, nodes, apps, slots=1):
        self.argv = mpirun_argv(vc, nodes, apps, slots)
        self.nranks = sum(a.np for a in apps)
        self.limit = max(timeout_of(a.args) for a in apps) + MPIRUN_GRACE
        self.start = time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=vc.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)

    def running(self):
        return self.proc.poll() is None

    def elapsed(self):
        return time.monotonic() - self.start

    def wait(self):
        """Wait (bounded) and return the Result; a hung mpirun is ended and fails the test."""
        left = max(1.0, self.limit - self.elapsed())
        try:
            out, err = self.proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"mpirun still running after {self.limit} s, killed: "
                                 f"{' '.join(self.argv)}\n{out}\n{err[-3000:]}")
        return Result(self.proc.returncode, out, err, self.elapsed(), self.nranks, parse(out))

    def kill(self):
        """End mpirun by its PID (it takes its ranks down), then its process group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


# ---- looking at the nodes ----

def nic_counters(vc, node):
    """{ifname: {"tx": packets, "rx": packets, "up": bool}} of a node's interfaces."""
    proc = vc.exec(node, "ip", "-s", "-j", "link", "show", check=True, timeout=10)
    return {link["ifname"]: {"tx": link["stats64"]["tx"]["packets"],
                             "rx": link["stats64"]["rx"]["packets"],
                             "up": "UP" in link.get("flags", [])}
            for link in json.loads(proc.stdout)}


def grown(before, after, ifname, key="tx"):
    return after[ifname][key] - before[ifname][key]


LOSS_TABLE = "pmloss"


def add_udp_loss(vc, node, percent):
    """Drop `percent` % of the UDP packets `node` receives (nftables, inside the node)."""
    ruleset = (f"table inet {LOSS_TABLE} {{\n"
               f"  chain input {{\n"
               f"    type filter hook input priority 0; policy accept;\n"
               f"    meta l4proto udp numgen random mod 100 < {int(percent)} counter drop\n"
               f"  }}\n"
               f"}}\n")
    vc.exec(node, "nft", "-f", "-", input=ruleset, check=True, timeout=10)


def udp_loss_dropped(vc, node):
    """Packets the loss rule of `node` has dropped so far."""
    proc = vc.exec(node, "nft", "-j", "list", "table", "inet", LOSS_TABLE, check=True, timeout=10)
    for item in json.loads(proc.stdout)["nftables"]:
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                return expr["counter"]["packets"]
    raise AssertionError(f"no counter in table inet {LOSS_TABLE} of {node}: {proc.stdout}")


def pm_sockets(vc, node, program="pmcheck"):
    """{(address, port): kernel drops} of the UDP sockets `program` has open in
    `node` (ss -uanpm; the drops are datagrams the kernel discarded, e.g. for a
    full receive buffer, before the program could read them)."""
    proc = vc.exec(node, "ss", "-uanpmH", check=True, timeout=10)
    found, current = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith((" ", "\t")):       # skmem:(r0,rb...,d<drops>) of the line above
            m = re.search(r"\bd(\d+)\)", line)
            if current and m:
                found[current] = int(m.group(1))
            continue
        current = None
        if f'"{program}"' in line:
            addr, _, port = line.split()[3].rpartition(":")    # State Recv-Q Send-Q Local ...
            current = (addr, int(port))
            found[current] = 0
    return found


def wait_for(what, predicate, timeout, interval=0.1):
    """Poll predicate() (bounded in time) until it returns something true; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(interval)


# ---- foreign and malformed datagrams ----



def fnv1a64(text):
    """FNV-1a 64 of a string: how PM once derived a job's key from its
    name, which anybody can know (tests check it no longer works)."""
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def namespace_of(program):
    """PMIX_NAMESPACE of a running `program` (any of its processes)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv0 = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]
            if not argv0.endswith(program.encode()):
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"PMIX_NAMESPACE="):
                return kv.split(b"=", 1)[1].decode()
    return None


def garbage_datagrams(seed, count, dst_rank=0, src_rank=1, name_key=None):
    """`count` datagrams no PM receiver may accept: random bytes, truncated
    headers, well-formed DATA packets with a wrong job key, and (with
    `name_key`) well-formed ones with the key derived from the job's name
    (each kind in turn).  Deterministic for a seed."""
    rnd = random.Random(seed)
    out = []
    kinds = 4 if name_key is not None else 3
    for i in range(count):
        kind = i % kinds
        if kind == 0:
            out.append(rnd.randbytes(rnd.randrange(0, 1400)))
        elif kind == 1:
            hdr = wire_header(WIRE_DATA, F_FIRST | F_LAST | F_ACK, 64, rnd.getrandbits(64),
                              src_rank, dst_rank, rnd.getrandbits(32), 0)
            out.append(hdr[:rnd.randrange(0, HDR_BYTES)])
        else:
            body = msg_header(32, 0) + rnd.randbytes(32)
            key = name_key if kind == 3 else rnd.getrandbits(64) | 1
            hdr = wire_header(WIRE_DATA, F_FIRST | F_LAST | F_ACK, len(body),
                              key, src_rank, dst_rank, rnd.randrange(1, 1000), 0)
            out.append(hdr + body)
    return out


# Runs inside a node: read hex datagrams from stdin, send each to every
# target, print how many went out.
SENDER = r"""
import socket, sys
targets = [(a, int(p)) for a, p in (t.split(':') for t in sys.argv[1:])]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = 0
for line in sys.stdin:
    data = bytes.fromhex(line.strip())
    for t in targets:
        s.sendto(data, t)
        n += 1
print(n)
"""


def send_datagrams(vc, node, targets, datagrams):
    """Send every datagram to every (addr, port) from `node`; return how many were sent."""
    proc = vc.exec(node, "python3", "-c", SENDER, *(f"{a}:{p}" for a, p in targets),
                   input="".join(d.hex() + "\n" for d in datagrams), check=True, timeout=30)
    return int(proc.stdout.strip())
