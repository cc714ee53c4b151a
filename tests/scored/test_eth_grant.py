"""A user's job over PM's eth device: with `agent.pm_net_device = "eth"` the
agent opens each rank's raw Ethernet sockets (packet sockets take
CAP_NET_RAW, which the ranks of `nobody` lack) with a locked filter that
shows the rank only its own PM frames (pm.h, pm_eth_grant;
docs/scored/admin.md).  Two nodes with two NICs, real scored and munged.

Checked: a job of nobody runs PM and Open MPI over eth on both NICs; the
sockets it inherits refuse to drop or replace their filter, and bound to
every EtherType they show the rank none of the node's other traffic; a job
that chooses udp gets no sockets; a NIC that does not exist fails the
launch with a message that names the setting; an agent without
CAP_NET_RAW refuses to start."""

import json
import os
import shutil
import socket
import subprocess

import pytest

from pm import pmjob

from .score import SCORE_BIN, Score

pytestmark = pytest.mark.skipif(shutil.which("NPopenmpi") is None,
                                reason="NetPIPE is not installed (netpipe-openmpi)")

NICS = "eth0,eth1"

# (ping's status, frames) of a packet socket s while the node pings its
# neighbour 10 times: what s queued, read for half a second after.
FRAMES_SEEN = r"""
import ctypes, errno, json, os, socket, subprocess, sys, time

def frames_seen(s, neighbour):
    s.settimeout(0.1)
    ping = subprocess.run(["ping", "-c", "10", "-i", "0.05", "-W", "1", neighbour],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen, end = 0, time.monotonic() + 0.5
    while time.monotonic() < end:
        try:
            s.recv(4096)
            seen += 1
        except socket.timeout:
            pass
    return ping.returncode, seen
"""

# As the rank (nobody): what its granted packet socket on the first NIC
# lets it do.  Prints one JSON object.
PROBE = FRAMES_SEEN + r"""

class Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Insn))]

SO_ATTACH_FILTER, SO_DETACH_FILTER, ETH_P_ALL = 26, 27, 0x0003
grant = os.environ.get("PM_ETH_GRANT", "")
out = {"grant": grant, "device": os.environ.get("PM_NET_DEVICE"), "uid": os.getuid()}
nic, fds = grant.split(",")[0].split("=")
s = socket.socket(fileno=int(fds.split("/")[0]))

def attempt(what, *args):
    try:
        s.setsockopt(*args)
        out[what] = "allowed"
    except OSError as e:
        out[what] = errno.errorcode[e.errno]

attempt("detach", socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
accept_all = (Insn * 1)(Insn(0x06, 0, 0, 0xFFFFFFFF))
attempt("attach", socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(Prog(1, accept_all)))
# Every EtherType on the NIC, while the node pings its neighbour there.
s.bind((nic, ETH_P_ALL))
ping, seen = frames_seen(s, sys.argv[1])
out.update(ping=ping, frames_seen=seen)
print(json.dumps(out))
"""

# The same 0.5 s, as root on a packet socket of its own: the ping's frames
# are there to be seen (the control for frames_seen above).
CONTROL = FRAMES_SEEN + r"""
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0003))
s.bind((sys.argv[2], 0x0003))
print(frames_seen(s, sys.argv[1])[1])
"""


# The job's PM_ETH_GRANT and the address family of each socket it holds.
FAMILIES = r"""
import json, os, socket
families = []
for fd in map(int, os.listdir("/proc/self/fd")):
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        continue
    families.append(s.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN))
    s.close()
print(json.dumps({"grant": os.environ.get("PM_ETH_GRANT"), "families": families}))
"""


@pytest.fixture(scope="module")
def eth_score(vcluster_module):
    vc = vcluster_module(nodes=2, nics=2, with_score=True, score_bin=SCORE_BIN,
                         score_agent={"pm_net_device": "eth"})
    s = Score(vc)
    try:
        yield s
    finally:
        s.cleanup()


def user_env(score, **extra):
    return dict(score.env, PM_UDP_NICS=NICS, **extra)


def pmcheck_devices(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = pmjob.parse(proc.stdout)
    assert len(ranks) == 2 and all(r["ok"] for r in ranks.values()), proc.stdout
    return {rank: r["device"] for rank, r in ranks.items()}


def test_a_users_job_runs_over_eth_with_sockets_the_agent_opened(eth_score):
    pmcheck = SCORE_BIN / "pmcheck"
    run = eth_score.scrun("-nodes=2x1", pmcheck, "--pattern", "all", "--count", "5000",
                          env=user_env(eth_score), user="nobody", timeout=120)
    assert pmcheck_devices(run) == {0: "eth", 1: "eth"}

    # Open MPI over the provider pm, over eth, as nobody (scrun's default
    # --mpi pm): NetPIPE's ping-pong completes and the provider says which
    # device reaches the other rank.
    run = eth_score.scrun("-nodes=2x1", "NPopenmpi", "-l", "8", "-u", "4096", "-p", "0",
                          "-o", "/dev/null",
                          env=user_env(eth_score, FI_LOG_LEVEL="info"), user="nobody",
                          timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stderr.count("through PM's eth device") == 2, run.stderr[-3000:]


def test_the_granted_socket_shows_the_rank_only_its_own_frames(eth_score):
    probe = os.path.join(eth_score.workdir, "probe.py")
    with open(probe, "w") as f:
        f.write(PROBE)
    os.chmod(probe, 0o644)
    neighbour = eth_score.vc.address("n2", 0)
    run = eth_score.scrun("-nodes=1x1", "python3", probe, neighbour,
                          env=user_env(eth_score), user="nobody", timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["uid"] != 0 and got["device"] == "eth", got
    assert [n.split("=")[0] for n in got["grant"].split(",")] == NICS.split(","), got
    assert got["detach"] == "EPERM" and got["attach"] == "EPERM", got
    assert got["ping"] == 0 and got["frames_seen"] == 0, got

    control = eth_score.vc.exec("n1", "python3", "-c", CONTROL, neighbour, "eth0",
                                check=True, timeout=60)
    assert int(control.stdout.strip()) > 0, "the ping's frames were not there to be seen"


def test_a_job_that_chooses_udp_gets_no_raw_sockets(eth_score):
    pmcheck = SCORE_BIN / "pmcheck"
    run = eth_score.scrun("-nodes=2x1", pmcheck, "--pattern", "all", "--count", "2000",
                          env=user_env(eth_score, PM_NET_DEVICE="udp"), user="nobody",
                          timeout=120)
    assert pmcheck_devices(run) == {0: "udp", 1: "udp"}
    run = eth_score.scrun("-nodes=1x1", "python3", "-c", FAMILIES,
                          env=user_env(eth_score, PM_NET_DEVICE="udp"), user="nobody",
                          timeout=60)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["grant"] is None and socket.AF_PACKET not in got["families"], got
    # The probe would see them: a job on eth inherits two packet sockets.
    run = eth_score.scrun("-nodes=1x1", "python3", "-c", FAMILIES,
                          env=user_env(eth_score), user="nobody", timeout=60)
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["grant"] and got["families"].count(socket.AF_PACKET) == 2, got


def test_a_nic_that_does_not_exist_fails_the_launch_and_says_why(eth_score):
    run = eth_score.scrun("-nodes=1x1", "true", env=user_env(eth_score) | {"PM_UDP_NICS": "eth7"},
                          user="nobody", timeout=60)
    assert run.returncode != 0
    assert 'pm_net_device = "eth"' in run.stderr and "eth7" in run.stderr, run.stderr


def test_an_agent_that_may_not_open_packet_sockets_refuses_to_start(tmp_path):
    """Without CAP_NET_RAW (a container, a unit that drops it) an agent
    configured for eth would fail every launch: it says so at start and
    exits instead."""
    config = tmp_path / "scored.toml"
    config.write_text('[agent]\npm_net_device = "eth"\nmetrics_listen = ""\n'
                      f'state_dir = "{tmp_path / "state"}"\n')
    run = subprocess.run(["setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw",
                          str(SCORE_BIN / "scored"), "agent", "--config", str(config)],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert "cannot open packet sockets" in run.stderr and "CAP_NET_RAW" in run.stderr, run.stderr
