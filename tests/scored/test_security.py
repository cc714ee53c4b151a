"""Security of scored on a virtual cluster (docs/scored/admin.md, "Security";
docs/scored/protocol.md): every message sealed with MUNGE both ways.  The
master refuses another cluster's key, an unsealed message, a forged or
replayed credential, and a request whose body a man in the middle swapped;
an agent refuses an impostor at the master's address (the cluster's key but
not the master's uid, another key, no credential) and a launch whose body a
man in the middle swapped: nothing runs, and every refusal is logged with
its reason and counted.  Also: no munged at all, malformed requests that must
not hurt the master, jobs running as the user who submitted them, who may
cancel and drain."""

import json
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

from .score import (REQUEST, SCORE_BIN, Score, grpc_call, grpc_frame, marker, metric_values,
                    munge_credential, pb_field, processes_with, seal_digest, sealed, wait_for)

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


def _sealed(score, method, body=b"", user=None, **kw):
    """`body` sealed as the first request of a `method` call, with the
    cluster's head munged (as `user`, or root); the gRPC frame of it."""
    envelope, _ = sealed(method, body, score.vc.munge_socket("head"), user=user, **kw)
    return grpc_frame(envelope)


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


def test_an_unsealed_request_is_unauthenticated(score):
    # A plain ListNodesRequest, as a client without score-auth would send it.
    fields, curl = _grpc_call(score, "ListNodes", grpc_frame(b""))
    assert fields.get("grpc-status") == "16", (fields, curl.stderr)
    assert "carries no MUNGE credential" in fields.get("grpc-message", ""), fields


def test_a_forged_credential_is_unauthenticated(score):
    body = _sealed(score, "ListNodes", credential="MUNGE:AwQFAAB" + "x" * 100 + ":")
    fields, curl = _grpc_call(score, "ListNodes", body)
    assert fields.get("grpc-status") == "16", (fields, curl.stderr)
    assert "MUNGE credential rejected" in fields.get("grpc-message", ""), fields


def test_a_sealed_request_is_good_once(score):
    body = _sealed(score, "ListNodes")
    fields, curl = _grpc_call(score, "ListNodes", body)
    assert fields.get("grpc-status") == "0", (fields, curl.stderr)
    fields, curl = _grpc_call(score, "ListNodes", body)
    assert fields.get("grpc-status") == "16", (fields, curl.stderr)
    assert "MUNGE credential rejected" in fields.get("grpc-message", ""), fields
    assert "replayed" in fields.get("grpc-message", "").lower(), fields


def test_a_call_key_in_clear_or_for_another_uid_is_refused(score):
    """Request 0 carries the call's key: the master refuses it unencrypted
    (munge --cipher none), and munged refuses the master a credential meant
    for another uid; neither reaches a handler."""
    socket = score.vc.munge_socket("head")
    call = os.urandom(16)
    payload = seal_digest(REQUEST, "ListNodes", call, 0, b"") + os.urandom(32)
    cases = {
        "not encrypted (munged's cipher is none), so its call key crossed the network in clear":
            munge_credential(socket, payload, reader=0, cipher="none"),
        "Unauthorized credential": munge_credential(socket, payload, reader=4242),
    }
    for reason, credential in cases.items():
        envelope, _ = sealed("ListNodes", b"", socket, call=call, credential=credential)
        fields, curl = _grpc_call(score, "ListNodes", grpc_frame(envelope))
        assert fields.get("grpc-status") == "16", (fields, curl.stderr)
        assert reason in fields.get("grpc-message", ""), fields
    _assert_master_serves(score)


def test_a_credential_binds_its_method_and_body(score):
    """A good credential over another body, or sealed for another method:
    what a man in the middle who swaps a body gets (see also the proxy
    tests below, with real clients)."""
    # Sealed for ListJobs, presented to ListNodes.
    fields, curl = _grpc_call(score, "ListNodes", _sealed(score, "ListJobs"))
    assert fields.get("grpc-status") == "16", (fields, curl.stderr)
    assert "altered in transit" in fields.get("grpc-message", ""), fields
    # The credential of Drain{n4} around Drain{n3}.
    socket = score.vc.munge_socket("head")
    good, call = sealed("Drain", pb_field(1, "n4"), socket)
    envelope, _ = sealed("Drain", pb_field(1, "n3"), socket, call=call,
                         credential=_credential_of(good))
    fields, curl = _grpc_call(score, "Drain", grpc_frame(envelope))
    assert fields.get("grpc-status") == "16", (fields, curl.stderr)
    assert "altered in transit" in fields.get("grpc-message", ""), fields
    assert {n: v["state"] for n, v in score.nodes().items()}["n3"] == "up"


def _credential_of(envelope):
    """The credential (field 3) of a Sealed envelope made by `sealed`."""
    i = 0
    while i < len(envelope):
        key = envelope[i]
        i += 1
        if key & 7 == 0:
            while envelope[i] & 0x80:
                i += 1
            i += 1
            continue
        n, shift = 0, 0
        while True:
            b = envelope[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if key >> 3 == 3:
            return envelope[i:i + n].decode()
        i += n
    raise AssertionError("no credential in the envelope")


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
        fields, curl = _grpc_call(score, "Attach",
                                  _sealed(score, "Attach", register, user="nobody"))
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
        # Garbage as it is, and garbage well sealed (the envelope opens, the
        # message inside does not decode).
        cases = dict(bodies, **{"sealed garbage": _sealed(score, method, garbage)})
        for what, body in cases.items():
            fields, curl = _grpc_call(score, method, body)
            status = fields.get("grpc-status")
            # Refused: a gRPC error status, or the stream reset by the
            # master (curl: "(92) Stream error in the HTTP/2 framing layer").
            assert status not in (None, "0") or (status is None and curl.returncode == 92), \
                f"{method} with {what}: {fields}, {curl.stderr}"
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


# --- an impostor at the master's address, a man in the middle -------------------------------
#
# These tests stop their cluster's master, so they run on a cluster of their
# own (`masterless`).  The impostor and the proxy are score-impostor
# (scored/crates/score-impostor, built by `make build`).

IMPOSTOR = SCORE_BIN / "score-impostor"


class _Daemon:
    """A process started for a test, output in a file, ended by its PID."""

    def __init__(self, argv, log, env=None):
        self.argv, self.log = argv, log
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f,
                                         stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def text(self):
        return self.log.read_text(errors="replace")

    def wait_listening(self):
        wait_for(lambda: "listening on" in self.text() or self.proc.poll() is not None, 10,
                 f"{self.argv[0]} to listen")
        assert self.proc.poll() is None, f"{self.argv} exited: {self.text()}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="module")
def masterless(own_cluster_factory):
    """A cluster of its own whose master is stopped: its agents keep trying
    to attach to the master's address every second.  Yields (cluster, the
    master's host and port)."""
    if not IMPOSTOR.is_file():
        pytest.fail(f"{IMPOSTOR} is not built (make build)")
    vc = own_cluster_factory()
    s = Score(vc)
    host, port = urllib.parse.urlsplit(s.master_url).netloc.rsplit(":", 1)
    pid = vc.services["scored"]["master"]
    # SIGKILL: a SIGTERMed master waits for its agents' streams to end.
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not _process_alive(pid), 20, "the master to stop")
    yield vc, host, int(port)


def _agent_log_at(vc):
    return {n: (vc.service_dir / n / "scored.log").stat().st_size for n in vc.nodes}


def _agent_logs_since(vc, at):
    return {n: (vc.service_dir / n / "scored.log").read_bytes()[at[n]:].decode(errors="replace")
            for n in vc.nodes}


def _agent_refused(vc, node, check):
    conf = tomllib.loads((vc.service_dir / node / "scored.toml").read_text())
    url = f"http://{conf['agent']['metrics_listen']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return metric_values(text, "score_agent_refused_messages_total").get(f'{{check="{check}"}}', 0)


def _impostor_refused(vc, host, port, workdir, munge_socket, user, expect, check, extra=()):
    """Run an impostor master at the master's address until every agent has
    attached to it, been sent a launch and refused it; returns its log."""
    m = marker()
    argv = [str(IMPOSTOR), "master", "--listen", f"{host}:{port}",
            "--munge-socket", str(munge_socket), *extra, "--", "sh", "-c", f"sleep 60; : {m}"]
    if user:
        argv = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"] + argv
    at = _agent_log_at(vc)
    before = {n: _agent_refused(vc, n, check) for n in vc.nodes}
    impostor = _Daemon(argv, workdir / f"impostor-{m}.log")
    try:
        impostor.wait_listening()

        def refused_everywhere():
            logs = _agent_logs_since(vc, at)
            return all(f"refused a message from the master: {expect}" in logs[n]
                       for n in vc.nodes)
        wait_for(refused_everywhere, 20, "every agent to refuse the impostor")
        wait_for(lambda: all(f"agent {n} hung up" in impostor.text() for n in vc.nodes), 10,
                 "every agent to hang up on the impostor")
    finally:
        impostor.stop()
    log = impostor.text()
    # The impostor did send its launch, to every agent ...
    for n in vc.nodes:
        assert f"agent {n} attached" in log and "sent Welcome and LaunchJob" in log, log
    # ... and nothing ran; every agent counted the refusal by its check.
    assert not processes_with(m), processes_with(m)
    for n in vc.nodes:
        assert _agent_refused(vc, n, check) > before[n], (n, check)
    return log


IMPOSTOR_REFUSED = ("reply 0 of /score.v1.Master/Attach does not match its MAC: it was altered "
                    "in transit, or sealed by someone who cannot read the call's key (only the "
                    "master's uid can, [master] uid): an impostor")


def test_an_impostor_with_the_cluster_key_but_not_the_masters_uid_launches_nothing(masterless):
    vc, host, port = masterless
    with tempfile.TemporaryDirectory(prefix="score-impostor-") as d:
        log = _impostor_refused(vc, host, port, Path(d), vc.munge_socket("head"), "nobody",
                                IMPOSTOR_REFUSED, "digest")
    # munged kept the call key from it: request 0 is for the master's uid alone.
    assert "cannot read the call key: MUNGE decode failed: Unauthorized credential" in log, log


def test_an_impostor_with_another_key_launches_nothing(masterless, foreign_munged):
    vc, host, port = masterless
    with tempfile.TemporaryDirectory(prefix="score-impostor-") as d:
        log = _impostor_refused(vc, host, port, Path(d), foreign_munged, None,
                                IMPOSTOR_REFUSED, "digest")
    assert "cannot read the call key: MUNGE decode failed: Invalid credential" in log, log


def test_an_impostor_without_credentials_launches_nothing(masterless):
    vc, host, port = masterless
    with tempfile.TemporaryDirectory(prefix="score-impostor-") as d:
        _impostor_refused(vc, host, port, Path(d), vc.munge_socket("head"), None,
                          "the reply carries no MAC", "unsealed",
                          extra=["--unsealed"])


@pytest.fixture(scope="module")
def behind_a_proxy(masterless):
    """The real master again, moved to port+10, and a man in the middle at
    the master's address that forwards the agents' calls to it and swaps
    the argument SWAP-<id> of any launch for another.  Yields (the moved
    master's URL, the master, the proxy, the swapped argument, the one
    swapped in)."""
    vc, host, port = masterless
    workdir = Path(tempfile.mkdtemp(prefix="score-mitm-", dir="/tmp"))
    conf = (vc.service_dir / "scored.toml").read_text()
    moved_conf = workdir / "scored.toml"
    conf = conf.replace(f'listen = "{host}:{port}"', f'listen = "{host}:{port + 10}"')
    conf = conf.replace(f':{port + 1}"', f':{port + 11}"')  # metrics_listen
    assert f"{host}:{port + 10}" in conf, conf
    moved_conf.write_text(conf)
    master = _Daemon([str(SCORE_BIN / "scored"), "master", "--config", str(moved_conf)],
                     workdir / "master.log")
    swapped, swapped_in = f"SWAP-{marker()}", f"PWNED-{marker()}"
    proxy = _Daemon([str(IMPOSTOR), "proxy", "--listen", f"{host}:{port}",
                     "--upstream", f"http://{host}:{port + 10}",
                     "--swap-argv", f"{swapped}={swapped_in}"], workdir / "proxy.log")
    try:
        proxy.wait_listening()
        s = _moved(vc, f"http://{host}:{port + 10}")
        try:
            wait_for(lambda: _all_up(s), 30, "the agents to attach through the proxy")
        finally:
            s.cleanup()
        yield f"http://{host}:{port + 10}", master, proxy, swapped, swapped_in
    finally:
        proxy.stop()
        master.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _moved(vc, url):
    """Clients of cluster `vc` talking to its master at `url`."""
    s = Score(vc)
    s.env = dict(s.env, SCORE_MASTER=url)
    return s


def _all_up(s):
    proc = s.scorectl("nodes", "--json")
    if proc.returncode != 0:
        return False
    nodes = json.loads(proc.stdout)
    return len(nodes) == len(s.vc.nodes) and all(n["state"] == "up" for n in nodes)


def test_a_man_in_the_middle_cannot_swap_a_launch(masterless, behind_a_proxy):
    vc = masterless[0]
    url, master, proxy, swapped, swapped_in = behind_a_proxy
    s = _moved(vc, url)
    try:
        # Through the proxy, a job whose launch it leaves alone runs.
        proc = s.scrun("-nodes=4x1", "true")
        assert proc.returncode == 0, proc.stderr
        # One whose launch it alters does not: the agent refuses the altered
        # launch, drops the connection (and with it the job), and reattaches.
        at = _agent_log_at(vc)
        before = sum(_agent_refused(vc, n, "digest") for n in vc.nodes)
        proc = s.scrun("-v", "-nodes=1", "sh", "-c", "sleep 60", swapped, timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert "lost" in proc.stderr, proc.stderr
        assert f"-> {swapped_in!r}".replace("'", '"') in proxy.text(), proxy.text()
        logs = _agent_logs_since(vc, at)
        refused = [n for n in vc.nodes if "refused a message from the master: reply" in logs[n]
                   and "of /score.v1.Master/Attach does not match its MAC: it was "
                   "altered in transit" in logs[n]]
        assert len(refused) == 1, logs
        assert sum(_agent_refused(vc, n, "digest") for n in vc.nodes) == before + 1
        # Neither the command sent nor the one swapped in ran (the proxy's
        # own command line names both).
        ran = {**processes_with(swapped), **processes_with(swapped_in)}
        assert set(ran) <= {proxy.proc.pid}, ran
        wait_for(lambda: _all_up(s), 30, "the agent to attach again")
        s.assert_job_gone(int(proc.stderr.split("scrun: job ", 1)[1].split()[0]))
    finally:
        s.cleanup()


def test_a_man_in_the_middle_cannot_swap_a_cancel(masterless, behind_a_proxy):
    """scorectl cancel A through a second proxy that makes it cancel B: the
    master refuses it, logs and counts why, and neither job is cancelled."""
    url, master, _, _, _ = behind_a_proxy
    s = _moved(masterless[0], url)
    host, port = urllib.parse.urlsplit(s.env["SCORE_MASTER"]).netloc.rsplit(":", 1)
    try:
        a, b = marker(), marker()
        run_a = s.start("-v", "-nodes=1", "sleep", a)
        run_b = s.start("-v", "-nodes=1", "sleep", b)
        job_a, job_b = run_a.job_id(), run_b.job_id()
        s.wait_job(job_a, "running")
        s.wait_job(job_b, "running")
        proxy = _Daemon([str(IMPOSTOR), "proxy", "--listen", f"{host}:{int(port) + 20}",
                         "--upstream", f"http://{host}:{port}",
                         "--swap-cancel", f"{job_a}={job_b}"], s.workdir / "cancel-proxy.log")
        try:
            proxy.wait_listening()
            at = len(master.text())
            env = dict(s.env, SCORE_MASTER=f"http://{host}:{int(port) + 20}")
            proc = s.scorectl("cancel", job_a, env=env)
        finally:
            proxy.stop()
        assert f"swapped Cancel of job {job_a} for job {job_b}" in proxy.text(), proxy.text()
        assert proc.returncode == 1, proc.stdout + proc.stderr
        reason = "request 0 of /score.v1.Master/Cancel does not match its credential: " \
                 "it was altered in transit"
        assert reason in proc.stderr, proc.stderr
        wait_for(lambda: f"refused: {reason}" in master.text()[at:], 10,
                 "the master to log the refusal")
        assert s.job(job_a)["state"] == "running" and s.job(job_b)["state"] == "running"
    finally:
        s.cleanup()
