"""Flow control of a job's output and stdin (docs/scored/admin.md, "Output and
stdin flow control"): a scrun that stops reading holds up its job's ranks, not
the master's memory, and nothing is lost.

- 2 GiB of output (`seq`, so that order can be checked) to a scrun stopped
  with SIGSTOP for 12 s (four heartbeat timeouts of the virtual cluster's
  master): the master's resident memory (VmRSS, sampled through
  the whole job) stays under 64 MiB, the rank blocks in `write` (its written
  bytes stop growing), the node's heartbeats and other jobs go on, the master
  reports the job throttled; after SIGCONT every byte arrives, in order
  (checked by length and SHA-256 while streaming, nothing stored).
- 64 MiB of stdin to a rank 0 that does not read for a while: scrun sends
  only what the master grants, the master holds at most its budget, and
  rank 0 then reads every byte.
"""

import hashlib
import os
import random
import signal
import subprocess
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from .score import metric_values, processes_with, wait_for

MIB = 1 << 20
GIB = 1 << 30
RSS_LIMIT = 64 * MIB
# [master] stdio_buffer_kib's default: what the master may hold per job.
BUDGET = 4 * MIB
# Four times the virtual cluster's heartbeat timeout (3 s): long enough to
# show that the node's heartbeats go on while its job's output is held.
STOP_SECONDS = 12


def seq_length(n):
    """Bytes of `seq 1 n`'s output."""
    total, digits, low = 0, 1, 1
    while low <= n:
        high = min(n, 10 ** digits - 1)
        total += (high - low + 1) * (digits + 1)
        digits, low = digits + 1, 10 ** digits
    return total


def master_pid(score):
    pid = score.vc.services["scored"]["master"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"master" in argv, f"PID {pid} is not the scored master: {argv}"
    return pid


def vm_rss(pid):
    """Resident memory of `pid` in bytes, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for PID {pid}")


def written_bytes(pid):
    """What `pid` has written (wchar of /proc/PID/io)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError(f"no wchar for PID {pid}")


def master_metrics(score):
    conf = tomllib.loads((score.vc.service_dir / "scored.toml").read_text())
    url = f"http://{conf['master']['metrics_listen']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def stdio_metric(text, name, direction):
    return metric_values(text, name).get(f'{{direction="{direction}"}}')


def logs(score):
    """The end of scrun's and the daemons' logs, for a failure's message."""
    parts = []
    for name in ["scrun.err", *(f"{d}/scored.log" for d in ("head", *score.vc.nodes))]:
        path = (score.workdir if name == "scrun.err" else score.vc.service_dir) / name.lstrip("/")
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        parts.append(f"--- {name}:\n" + "\n".join(text.splitlines()[-15:]))
    return "\n".join(parts)


class RssSampler(threading.Thread):
    """Samples the master's VmRSS every 0.2 s until stopped; keeps the peak."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = vm_rss(pid)
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(0.2):
            self.peak = max(self.peak, vm_rss(self.pid))

    def stop(self):
        self.done.set()
        self.join()
        return self.peak


class Digest(threading.Thread):
    """Reads a pipe to its end: its length and SHA-256, nothing stored."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe = pipe
        self.length = 0
        self.sha = hashlib.sha256()

    def run(self):
        while chunk := self.pipe.read1(MIB):
            self.sha.update(chunk)
            self.length += len(chunk)


@pytest.mark.slow  # about 100 s: 2 GiB through MUNGE-sealed messages on 2 cores, and the stop
def test_a_stopped_scrun_holds_up_2_gib_of_output_not_the_masters_memory(score):
    master = master_pid(score)
    rss = RssSampler(master)
    rss.start()
    # The job's own `seq` is found by its last argument, unique to the test.
    n = 226_000_000 + random.randint(0, 999_999)
    length = seq_length(n)
    assert length >= 2 * GIB
    err = open(score.workdir / "scrun.err", "wb")
    scrun = subprocess.Popen([str(score.bin / "scrun"), "-v", "--no-stdin", "seq", "1", str(n)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                             env=score.env, cwd="/tmp", start_new_session=True)
    reader = Digest(scrun.stdout)
    expected = None
    try:
        reader.start()
        started = time.monotonic()
        wait_for(lambda: reader.length >= 256 * MIB, 120, "256 MiB of output", interval=0.2)
        rate = reader.length / (time.monotonic() - started)

        os.kill(scrun.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        pids = processes_with(str(n))
        assert len(pids) == 1, f"the job's seq 1 {n}: {pids}"
        [pid] = pids
        [job] = [j for j in score.jobs() if j["name"] == "seq"]
        node = job["nodes"][0]
        # The expected digest, computed while scrun stands still.
        expected = subprocess.Popen(f"seq 1 {n} | sha256sum", shell=True,
                                    stdout=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(3)
        metrics = master_metrics(score)
        assert stdio_metric(metrics, "score_stdio_throttled_jobs", "output") == 1, metrics
        held = stdio_metric(metrics, "score_stdio_buffered_bytes", "output")
        assert 0 < held <= BUDGET, metrics
        seen_before = score.nodes()[node]["last_seen_ms"]
        wrote = written_bytes(pid)
        # Other jobs and the nodes' heartbeats go on meanwhile.
        other = score.scrun("-nodes=2", "echo", "other job")
        assert other.returncode == 0, other.stderr
        assert other.stdout == "other job\n" * 2
        time.sleep(max(0.0, STOP_SECONDS - (time.monotonic() - stopped)))
        assert Path(f"/proc/{pid}").exists(), f"the job's seq ended: {pids} {logs(score)}"
        assert written_bytes(pid) == wrote, "the rank kept writing: its output was read"
        nodes = score.nodes()
        assert {name: v["state"] for name, v in nodes.items()} == \
            {name: "up" for name in score.vc.nodes}
        assert nodes[node]["last_seen_ms"] > seen_before
        assert score.job(job["id"])["state"] == "running"
        held_rss = vm_rss(master)

        os.kill(scrun.pid, signal.SIGCONT)
        status = scrun.wait(timeout=900)
        reader.join(60)
        digest = expected.communicate(timeout=300)[0].split()[0]
    finally:
        if scrun.poll() is None:
            os.kill(scrun.pid, signal.SIGCONT)
            scrun.kill()
        scrun.wait()
        if expected and expected.poll() is None:
            os.killpg(expected.pid, signal.SIGKILL)
            expected.wait()
        peak = rss.stop()
        err.close()
    stderr = (score.workdir / "scrun.err").read_text(errors="replace")
    print(f"\n2 GiB test: {length} bytes; {rate / MIB:.0f} MiB/s before the stop; master VmRSS "
          f"peak {peak / MIB:.1f} MiB, {held_rss / MIB:.1f} MiB after {STOP_SECONDS} s stopped; "
          f"{held} bytes held for scrun while stopped")
    assert status == 0, stderr
    assert reader.length == length, f"{reader.length} bytes of {length}"
    assert reader.sha.hexdigest() == digest, "the output differs from seq's"
    assert peak < RSS_LIMIT, f"the master's VmRSS reached {peak / MIB:.1f} MiB"
    metrics = master_metrics(score)
    assert stdio_metric(metrics, "score_stdio_throttled_jobs", "output") == 0
    assert stdio_metric(metrics, "score_stdio_buffered_bytes", "output") == 0
    assert stdio_metric(metrics, "score_stdio_throttles_total", "output") >= 1


def test_stdin_waits_for_a_rank_0_that_does_not_read(score):
    master = master_pid(score)
    rss = RssSampler(master)
    rss.start()
    data = random.randbytes(64 * MIB)
    gate = score.workdir / "read-now"
    # Rank 0 reads its stdin only once the test creates `gate`.
    script = f'while [ ! -e {gate} ]; do sleep 0.1; done; exec sha256sum'
    run = score.start("-nodes=1", "sh", "-c", script, stdin=subprocess.PIPE)
    fed = 0

    def feed():
        nonlocal fed
        try:
            for i in range(0, len(data), MIB):
                run.proc.stdin.write(data[i:i + MIB])
                fed = i + MIB
            run.proc.stdin.close()
        except BrokenPipeError:
            pass
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        # scrun takes what the master grants, then waits: its stdin pipe
        # fills and the feeder blocks.
        time.sleep(5)
        metrics = master_metrics(score)
        assert stdio_metric(metrics, "score_stdio_throttled_jobs", "stdin") == 1, metrics
        held = stdio_metric(metrics, "score_stdio_buffered_bytes", "stdin")
        assert 0 < held <= BUDGET, metrics
        assert fed <= 16 * MIB, f"scrun took {fed} bytes of stdin from its pipe"
        assert feeder.is_alive()
        gate.touch()
        assert run.wait(timeout=120) == 0, run.stderr()
        feeder.join(30)
    finally:
        peak = rss.stop()
    assert run.stdout().split()[0] == hashlib.sha256(data).hexdigest()
    assert peak < RSS_LIMIT, f"the master's VmRSS reached {peak / MIB:.1f} MiB"
    metrics = master_metrics(score)
    assert stdio_metric(metrics, "score_stdio_throttled_jobs", "stdin") == 0
