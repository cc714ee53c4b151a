"""A command run in the background at the idle scheduling priority, for the
test runner's builds: it takes the CPU time the tests in the foreground
leave unused (most of the suite waits on daemons and timers).  Whoever
comes to need its result raises it to the normal priority and waits for it.

    job = IdleJob(["cargo", "test", "--no-run"], env=env)
    ...                       # the foreground work
    status, output, _ = job.result(timeout=1200)

The command runs in a session of its own, under SCHED_IDLE (inherited by
every process it starts), with its output collected meanwhile so that a
full pipe never stops it.

Idle is not free for every test: a task that sleeps for microseconds
between messages (MPI, PM, the DSM) finds its core's caches cold after the
build ran there, and runs up to twice as slow.  So the integration suite
runs the tests that do not wait on message latency first, and stops the
runner's idle jobs (SIGSTOP to their process groups, named in
SCORE_IDLE_JOBS) at the first test that does; result() continues them.

A job needed sooner than the others (the packages, which a test of the
first minutes waits for) is started `ahead`: SCHED_BATCH at nice 19
instead of SCHED_IDLE.  The scheduler then gives it five sixths of the
unused CPU that it shares with SCHED_IDLE jobs (weight 15 against 3), at
the cost of about 1.5 % of a core to a foreground task (weight 1024) that
wants the CPU too.
"""

import os
import signal
import subprocess
import threading
from pathlib import Path


def session_processes(sid):
    """The PIDs of the processes of session `sid` (from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # After "pid (comm) ": state ppid pgrp session ...; comm may hold spaces.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


def hurry_session(sid):
    """Session `sid` (an IdleJob's, possibly another process's) continued
    if it was stopped, and every process of it to the normal scheduling
    priority."""
    try:
        os.killpg(sid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # ended
    for pid in session_processes(sid):
        try:
            os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, pid, 0)
        except OSError:
            pass  # ended meanwhile


class IdleJob:
    """`argv` started now, at the idle priority (or ahead of the idle
    jobs, with `ahead`); its stdout and stderr are collected (together, or
    apart with separate_stderr)."""

    def __init__(self, argv, env=None, separate_stderr=False, ahead=False):
        policy = ["chrt", "--batch", "0", "nice", "-n", "19"] if ahead else ["chrt", "--idle", "0"]
        self._proc = subprocess.Popen(
            [*policy, *argv], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if separate_stderr else subprocess.STDOUT,
            text=True, start_new_session=True)
        self._output = (None, None)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        self._output = self._proc.communicate()

    @property
    def pgid(self):
        """Its process group (and session): what a test run stops with
        SIGSTOP while the tests want every cycle (tests/conftest.py)."""
        return self._proc.pid

    def hurry(self):
        """The job continued if it was stopped, and every process of it to
        the normal scheduling priority (one forked at this moment may stay
        idle: it then only runs later)."""
        hurry_session(self._proc.pid)

    def pause(self):
        """Stop the whole job (SIGSTOP to its process group) until resume()
        or hurry()."""
        self._signal(signal.SIGSTOP)

    def resume(self):
        """Continue a paused job, at its own priority still."""
        self._signal(signal.SIGCONT)

    def _signal(self, sig):
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass  # ended

    def result(self, timeout):
        """(exit status, stdout, stderr) once it has ended, raised to the
        normal priority first; stderr is None unless separate_stderr.
        Killed if it runs past `timeout` seconds from now (status -9)."""
        self.hurry()
        self._reader.join(timeout)
        if self._reader.is_alive():
            self.kill()
            self._reader.join()
        return (self._proc.returncode, *self._output)

    def running(self):
        return self._proc.poll() is None

    def kill(self):
        """End the whole job now (its session's process group)."""
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc.wait()
