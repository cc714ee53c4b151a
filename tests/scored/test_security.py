"""Security of the scored master on a virtual cluster: MUNGE authentication
of every request (another cluster's key, no credential, a forged or replayed
one, no munged at all), malformed requests that must not hurt the master,
jobs running as the user who submitted them, and the refusal of root's jobs
(docs/scored/admin.md, "Security")."""

import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import tomllib
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .score import (grpc_call, grpc_frame, marker, metric_values, processes_with,
                    wait_for)

MUNGED_PATHS = "/usr/sbin:/sbin:/usr/local/sbin:" + os.environ.get("PATH", "")


def _process_alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _write_client_config(path, master, munge_socket):
    path.write_text(f'[client]\nmaster = "{master}"\n\n[munge]\nsocket = "{munge_socket}"\n')
    os.chmod(path, 0o644)
    return path


@pytest.fixture
def foreign_munged():
    """A munged on the host with a key of its own (not the cluster's); its
    socket path.  Ended by its PID afterwards."""
    munged = shutil.which("munged", path=MUNGED_PATHS)
    d = Path(tempfile.mkdtemp(prefix="score-foreign-munge-", dir="/tmp"))
    os.chmod(d, 0o755)  # munged wants its socket directory searchable by all
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    pidfile = d / "munged.pid"
    proc = subprocess.run([munged, f"--socket={d / 'munge.socket'}", f"--key-file={key}",
                           f"--pid-file={pidfile}", f"--log-file={d / 'munged.log'}",
                           f"--seed-file={d / 'munged.seed'}"],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    pid = None
    try:
        assert proc.returncode == 0, f"munged with another key did not start: {proc.stderr}"
        pid = int(pidfile.read_text().split()[0])
        yield d / "munge.socket"
    finally:
        if pid and _process_alive(pid):
            os.kill(pid, signal.SIGTERM)
            try:
                wait_for(lambda: not _process_alive(pid), 10, "munged to stop")
            except AssertionError:
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(d, ignore_errors=True)


def _master_url(score):
    return score.master_url


def _master_hostport(score):
    return urllib.parse.urlsplit(_master_url(score)).netloc


def _grpc_call(score, method, body, headers=()):
    return grpc_call(_master_hostport(score), method, body, headers)


def _credential(score, user=None):
    """A fresh MUNGE credential from the cluster's head munged."""
    argv = ["munge", "-n", "-S", score.vc.munge_socket("head")]
    if user:
        argv = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"] + argv
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _master_pid(score):
    return score.vc.services["scored"]["master"]


def _assert_master_serves(score):
    assert _process_alive(_master_pid(score)), "the scored master died"
    nodes = score.nodes()
    assert {n: v["state"] for n, v in nodes.items()} == {n: "up" for n in score.vc.nodes}


# --- authentication ----------------------------------------------------------------------


def test_a_munged_with_another_key_is_refused(score, foreign_munged):
    """Credentials of another cluster's munged: the master's munged cannot
    decode them (MUNGE's "Invalid credential"), so the master refuses the
    request as unauthenticated, counts it, logs why, and starts nothing."""
    config = _write_client_config(score.workdir / "foreign.toml", _master_url(score),
                                  foreign_munged)
    env = dict(score.env, SCORE_CONFIG=str(config))
    refusal = "MUNGE credential rejected: MUNGE decode failed: Invalid credential (munge error 14)"
    log = score.vc.service_dir / "head" / "scored.log"
    log_at = log.stat().st_size
    refused_before = _rejected(score, "unauthenticated")

    proc = score.scorectl("nodes", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("scorectl: error: "), proc.stderr
    assert refusal in proc.stderr, proc.stderr
    assert proc.stdout == ""
    m = marker()
    proc = score.scrun("-nodes=1", "sleep", m, env=env)
    assert proc.returncode == 255, proc.stderr
    assert refusal in proc.stderr, proc.stderr
    assert not processes_with(m)
    assert not [j for j in score.jobs(all=True) if m in j["argv"]]

    # One refusal each for scorectl's and scrun's request, for that reason.
    assert _rejected(score, "unauthenticated") - refused_before == 2

    def logged():
        return log.read_bytes()[log_at:].decode(errors="replace").count(f"refused: {refusal}")
    wait_for(lambda: logged() == 2, 10, "the master to log both refusals")
    _assert_master_serves(score)


def test_no_munged_is_a_clear_local_error(score):
    config = _write_client_config(score.workdir / "nosocket.toml", _master_url(score),
                                  "/nonexistent/munge.socket")
    env = dict(score.env, SCORE_CONFIG=str(config))
    proc = score.scorectl("nodes", env=env)
    assert proc.returncode == 1
    assert "cannot reach munged at /nonexistent/munge.socket" in proc.stderr, proc.stderr
    proc = score.scrun("-nodes=1", "true", env=env)
    assert proc.returncode == 255
    assert "cannot reach munged at /nonexistent/munge.socket" in proc.stderr, proc.stderr


def test_a_request_without_credential_is_unauthenticated(score):
    fields, curl = _grpc_call(score, "ListNodes", grpc_frame(b""))
    assert fields.get("grpc-status") == "16", (fields, curl.stderr)
    assert "no MUNGE credential" in fields.get("grpc-message", ""), fields


def test_a_forged_credential_is_unauthenticated(score):
    fields, curl = _grpc_call(score, "ListNodes", grpc_frame(b""),
                              ["x-score-munge: MUNGE:AwQFAAB" + "x" * 100 + ":"])
    assert fields.get("grpc-status") == "16", (fields, curl.stderr)
    assert "MUNGE credential rejected" in fields.get("grpc-message", ""), fields


def test_a_credential_is_good_for_one_request_only(score):
    cred = _credential(score)
    fields, curl = _grpc_call(score, "ListNodes", grpc_frame(b""), [f"x-score-munge: {cred}"])
    assert fields.get("grpc-status") == "0", (fields, curl.stderr)
    fields, curl = _grpc_call(score, "ListNodes", grpc_frame(b""), [f"x-score-munge: {cred}"])
    assert fields.get("grpc-status") == "16", (fields, curl.stderr)
    assert "MUNGE credential rejected" in fields.get("grpc-message", ""), fields
    assert "replayed" in fields.get("grpc-message", "").lower(), fields


def _rejected(score, reason):
    conf = tomllib.loads((score.vc.service_dir / "scored.toml").read_text())
    url = f"http://{conf['master']['metrics_listen']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return metric_values(text, "score_requests_rejected_total").get(f'{{reason="{reason}"}}', 0)


def test_an_ordinary_user_cannot_attach_an_agent(score):
    # AgentMessage{register: Register{node: "n9"}}
    register = b"\x0a\x04\x0a\x02n9"
    refused_before = _rejected(score, "permission")
    for attempt in range(1, 31):
        fields, curl = _grpc_call(score, "Attach", grpc_frame(register),
                                  [f"x-score-munge: {_credential(score, user='nobody')}"])
        # The master answers at once, before the end of the request stream,
        # and then resets the stream (RST_STREAM NO_ERROR, as RFC 9113 8.1
        # allows); curl 7.88 then often drops the answer and exits 92.
        if "grpc-status" in fields or curl.returncode != 92:
            break
    assert fields.get("grpc-status") == "7", (fields, curl.stderr)
    assert "only root may attach an agent" in fields.get("grpc-message", ""), fields
    # Every attempt was refused as a permission problem, none registered a node.
    assert _rejected(score, "permission") - refused_before == attempt
    assert "n9" not in score.nodes()


# --- malformed requests -------------------------------------------------------------------


def test_malformed_requests_are_refused_and_the_master_keeps_running(score):
    rng = random.Random(20261121)
    garbage = bytes(rng.randrange(256) for _ in range(4096))
    bodies = {
        "unframed garbage": garbage,
        "garbage in a frame": grpc_frame(garbage),
        "a frame that claims 4 GiB": b"\x00\xff\xff\xff\xff" + garbage[:100],
        "a truncated frame header": b"\x00\x00",
        "a compressed frame without grpc-encoding": b"\x01" + struct.pack(">I", 10) + garbage[:10],
    }
    for method in ("ListNodes", "Cancel", "Run", "Attach"):
        for what, body in bodies.items():
            for cred in (None, _credential(score)):
                headers = [f"x-score-munge: {cred}"] if cred else []
                fields, curl = _grpc_call(score, method, body, headers)
                status = fields.get("grpc-status")
                # Refused: a gRPC error status, or the stream reset by the
                # master (curl: "(92) Stream error in the HTTP/2 framing layer").
                assert status not in (None, "0") or (status is None and curl.returncode == 92), \
                    f"{method} with {what} (credential: {bool(cred)}): {fields}, {curl.stderr}"
                assert _process_alive(_master_pid(score)), f"the master died of {method} {what}"
    # Not HTTP/2 at all, and a connection that stops half-way.
    host, port = _master_hostport(score).rsplit(":", 1)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    for data in (garbage, preface + garbage[:64], b"GET / HTTP/1.1\r\n"):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(data)
            s.settimeout(2)
            try:
                s.recv(4096)
            except (socket.timeout, ConnectionError):
                pass
    _assert_master_serves(score)
    proc = score.scrun("-nodes=4x1", "true")
    assert proc.returncode == 0, proc.stderr


# --- users --------------------------------------------------------------------------------


def test_a_job_runs_as_the_user_who_submitted_it(score):
    proc = score.scrun("-l", "-v", "-nodes=2x1", "sh", "-c", 'echo "$(id -u) $(id -g) $PWD"',
                       user="nobody", cwd="/tmp")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["0: 65534 65534 /tmp", "1: 65534 65534 /tmp"]
    job_id = int(proc.stderr.split("scrun: job ", 1)[1].split()[0])
    job = score.job(job_id)
    assert (job["user"], job["uid"], job["gid"]) == ("nobody", 65534, 65534), job


def test_root_jobs_run_as_root_where_allowed(score):
    proc = score.scrun("-nodes=2x1", "id", "-u")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "0"]


def test_only_the_owner_or_root_may_cancel_a_job(score):
    m = marker()
    run = score.start("-v", "-nodes=1", "sleep", m)
    job_id = run.job_id()
    score.wait_job(job_id, "running")
    proc = score.scorectl("cancel", job_id, user="nobody")
    assert proc.returncode == 1
    assert f"job {job_id} belongs to root (uid 0); only its owner or root may cancel it" \
        in proc.stderr, proc.stderr
    assert score.job(job_id)["state"] == "running"
    proc = score.scorectl("drain", "n4", user="nobody")
    assert proc.returncode == 1
    assert "only root may" in proc.stderr, proc.stderr
    assert score.nodes()["n4"]["state"] == "up"

    # nobody's own job: nobody may cancel it.
    m2 = marker()
    mine = score.start("-v", "-nodes=1", "sleep", m2, user="nobody")
    mine_id = mine.job_id()
    score.wait_job(mine_id, "running")
    proc = score.scorectl("cancel", mine_id, user="nobody")
    assert proc.returncode == 0, proc.stderr
    assert mine.wait(30) == 130, mine.stderr()
    score.assert_job_gone(mine_id, m2)
