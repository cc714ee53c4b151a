"""Jobs under scrun on a virtual cluster of 4 nodes with real munged and
scored: launching PM and Open MPI programs, output, stdin, exit statuses,
signals, time limits and space sharing (docs/scored/user.md)."""

import json
import re
import shlex
import shutil
import signal
import time

import pytest

from .score import (PM_RING_PASS, PMCHECK, build_mpi_program, build_pmix_program, marker, processes_with,
                    wait_for)

# --- launching programs ------------------------------------------------------


def test_ranks_are_placed_in_node_order(score):
    proc = score.scrun("-l", "-nodes=4x2", "sh", "-c",
                       'echo "$(hostname) $SCORE_RANK $SCORE_SIZE $SCORE_LOCAL_RANK"')
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert lines == [f"{r}: n{r // 2 + 1} {r} 8 {r % 2}" for r in range(8)], proc.stdout


def test_pmcheck_all_to_all_on_4x2(score):
    assert PMCHECK.exists(), f"{PMCHECK} is missing: make build"
    proc = score.scrun("-l", "-nodes=4x2", PMCHECK, "--quiet", "--pattern", "all",
                       "--count", "300", "--timeout", "60", timeout=90)
    assert proc.returncode == 0, proc.stderr
    results = {}
    for line in proc.stdout.splitlines():
        label, _, text = line.partition(": ")
        result = json.loads(text)
        assert int(label) == result["rank"], line
        results[result["rank"]] = result
    assert sorted(results) == list(range(8)), proc.stdout
    for rank, r in results.items():
        assert r["ok"] is True and r["errors"] == 0, r
        assert r["size"] == 8, r
        # all-to-all: every rank sends --count messages to each of the 7 others
        assert r["sent"] == r["received"] == 7 * 300, r


def test_pm_ring_pass_on_4x2(score):
    assert PM_RING_PASS.exists(), f"{PM_RING_PASS} is missing: make build"
    proc = score.scrun("-nodes=4x2", PM_RING_PASS, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ring_pass: 8 ranks, token 8000 after 1000 rounds, " \
                                  "table complete", proc.stdout


needs_mpicc = pytest.mark.skipif(not shutil.which("mpicc"),
                                 reason="mpicc is not installed (libopenmpi-dev)")


def open_mpi_env(score):
    """Open MPI launched directly under scored's PMIx server: TCP between
    nodes on network 0, shared memory within a node."""
    subnet = score.vc.state["networks"][0]["subnet"]
    return dict(score.env, OMPI_MCA_pml="ob1", OMPI_MCA_btl="self,vader,tcp",
                OMPI_MCA_btl_tcp_if_include=subnet, OMPI_MCA_oob_tcp_if_include=subnet,
                OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


@needs_mpicc
def test_open_mpi_program_on_4x2(score):
    exe = build_mpi_program(score.workdir)
    proc = score.scrun("-nodes=4x2", exe, env=open_mpi_env(score), timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\n" \
                                 f"stderr: {proc.stderr}"
    ranks = {}
    for line in proc.stdout.splitlines():
        m = re.fullmatch(r"mpi_ring rank=(\d+) size=(\d+) sum=(\d+) left=(\d+) host=(\S+) ok=(\d)",
                         line)
        assert m, f"unexpected line {line!r} in {proc.stdout}"
        rank, size, total, left, host, ok = m.groups()
        ranks[int(rank)] = (int(size), int(total), int(left), host, ok)
    assert sorted(ranks) == list(range(8)), proc.stdout
    for rank, (size, total, left, host, ok) in ranks.items():
        assert (size, total, left, ok) == (8, 36, (rank - 1) % 8, "1"), ranks[rank]
        assert host == f"n{rank // 2 + 1}", ranks[rank]


@needs_mpicc
def test_mpi_abort_ends_the_job_with_its_status(score):
    exe = build_mpi_program(score.workdir)
    m = marker()
    proc = score.scrun("-v", "-J", f"abort-{m}", "-nodes=4x2", exe, "--abort", "5", "9",
                       env=open_mpi_env(score), timeout=120)
    assert proc.returncode == 9, proc.stderr
    job_id = int(re.search(r"scrun: job (\d+) submitted", proc.stderr).group(1))
    assert f"scrun: job {job_id} failed: rank 5 on n3 aborted with status 9" in proc.stderr
    score.assert_job_gone(job_id, str(exe))
    assert score.job(job_id)["exit_status"] == 9


def test_the_master_gives_each_job_a_secret_pm_key(score):
    """The master draws PM's key (64 random bits) per job and every rank
    gets it through PMIx as "pm.jobkey" (docs/pm/wire.md); scorectl never
    shows it."""
    exe = build_pmix_program(score.workdir, "pmix_jobkey")
    keys = []
    for _ in range(2):
        proc = score.scrun("-v", "-nodes=4x2", exe)
        assert proc.returncode == 0, proc.stderr
        got = dict(re.fullmatch(r"pm\.jobkey rank=(\d+) key=(\S+)", line).groups()
                   for line in proc.stdout.splitlines())
        assert sorted(map(int, got)) == list(range(8)), proc.stdout
        assert len(set(got.values())) == 1, f"the ranks disagree: {got}"
        key = got["0"]
        assert re.fullmatch(r"[0-9a-f]{16}", key) and int(key, 16) != 0, key
        keys.append(key)
        job_id = re.search(r"scrun: job (\d+) submitted", proc.stderr).group(1)
        shown = score.scorectl("show", job_id, "--json")
        assert shown.returncode == 0 and key not in shown.stdout, shown.stdout
    assert keys[0] != keys[1], "two jobs got the same key"


def test_environment_working_directory_and_name(score):
    env = dict(score.env, SCORE_TEST_FROM_SCRUN="inherited", SCORE_TEST_COPIED="copied")
    proc = score.scrun("-v", "-J", "env-check", "--env", "SCORE_TEST_SET=a=b c",
                       "--env", "SCORE_TEST_COPIED", "-nodes=2x1", "sh", "-c",
                       'echo "$SCORE_TEST_FROM_SCRUN|$SCORE_TEST_SET|$SCORE_TEST_COPIED|$PWD"',
                       env=env, cwd=str(score.workdir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"inherited|a=b c|copied|{score.workdir}"] * 2
    job_id = int(re.search(r"scrun: job (\d+) submitted", proc.stderr).group(1))
    job = score.job(job_id)
    assert (job["name"], job["cwd"], job["nodes_requested"], job["ppn"]) == \
        ("env-check", str(score.workdir), 2, 1), job


# --- output and input ----------------------------------------------------------


def test_stdout_and_stderr_of_every_rank_arrive(score):
    proc = score.scrun("-nodes=4x2", "sh", "-c",
                       'echo "out $SCORE_RANK"; echo "err $SCORE_RANK" >&2')
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"out {r}" for r in range(8)]
    assert sorted(line for line in proc.stderr.splitlines() if not line.startswith("scrun:")) \
        == [f"err {r}" for r in range(8)]


def test_label_prefixes_every_line_with_its_rank(score):
    proc = score.scrun("--label", "-nodes=2x2", "sh", "-c",
                       'echo "a $SCORE_RANK"; echo "e $SCORE_RANK" >&2; printf "b $SCORE_RANK"')
    assert proc.returncode == 0, proc.stderr
    # The last line has no newline: it is written with one at the end.
    assert sorted(proc.stdout.splitlines()) == sorted(
        [f"{r}: a {r}" for r in range(4)] + [f"{r}: b {r}" for r in range(4)]), proc.stdout
    assert proc.stdout.endswith("\n")
    assert sorted(proc.stderr.splitlines()) == [f"{r}: e {r}" for r in range(4)]


def test_labelled_lines_of_different_ranks_never_mix(score):
    proc = score.scrun("-l", "-nodes=4x2", "sh", "-c",
                       'seq -f "rank $SCORE_RANK line %g of a line long enough to be cut '
                       'somewhere if lines were not kept whole" 1 5000', timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = {r: 0 for r in range(8)}
    for line in proc.stdout.splitlines():
        m = re.fullmatch(r"(\d): rank (\d) line (\d+) of a line long enough to be cut "
                         r"somewhere if lines were not kept whole", line)
        assert m and m.group(1) == m.group(2), f"mixed line: {line!r}"
        rank = int(m.group(1))
        assert int(m.group(3)) == seen[rank] + 1, f"rank {rank}: {line!r} after {seen[rank]}"
        seen[rank] += 1
    assert seen == {r: 5000 for r in range(8)}


def test_large_output_arrives_whole(score):
    expected = "".join(f"{i}\n" for i in range(1, 750001))  # 5.1 MB
    assert len(expected) > 5_000_000
    proc = score.scrun("-nodes=2x1", "sh", "-c",
                       '[ "$SCORE_RANK" = 0 ] && seq 1 750000; echo "done $SCORE_RANK" >&2',
                       timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) == len(expected)
    assert proc.stdout == expected
    assert sorted(proc.stderr.splitlines()) == ["done 0", "done 1"]


def test_stdin_goes_to_rank_0_only_once(score):
    proc = score.scrun("-l", "-nodes=2x1", "cat", input="data\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "0: data\n"
    # Unlabelled, as in the issue: `echo data | scrun -nodes=2x1 cat`.
    proc = score.scrun("-nodes=2x1", "cat", input="data\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "data\n"


def test_large_stdin_arrives_whole_at_rank_0(score):
    data = "".join(f"line {i}\n" for i in range(200000))  # 2.3 MB: many 64 KiB chunks
    proc = score.scrun("-l", "-nodes=2x1", "sh", "-c", 'echo "$(wc -c)"', input=data,
                       timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"0: {len(data)}", "1: 0"]


def test_no_stdin_gives_rank_0_end_of_file(score):
    proc = score.scrun("--no-stdin", "-nodes=1", "sh", "-c", 'echo "[$(cat)]"', input="data\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[]\n"


# --- exit statuses ---------------------------------------------------------------


def test_a_failing_rank_gives_its_status_and_the_others_are_killed(score):
    m = marker()
    proc = score.scrun("-v", "-nodes=4x1", "sh", "-c",
                       f'if [ "$SCORE_NODE" = n2 ]; then exit 7; fi; exec sleep {m}')
    assert proc.returncode == 7, proc.stderr
    job_id = int(re.search(r"scrun: job (\d+) submitted", proc.stderr).group(1))
    assert f"scrun: job {job_id} failed: rank 1 on n2 exited with status 7" in proc.stderr
    score.assert_job_gone(job_id, m)
    job = score.job(job_id)
    assert job["state"] == "failed" and job["exit_status"] == 7, job
    assert {"rank": 1, "node": "n2", "code": 7, "signal": 0} in job["exits"], job
    shown = score.scorectl("show", job_id)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^exit:\s+rank 1 on n2: exit 7$", shown.stdout, re.M), shown.stdout


def test_a_rank_killed_by_sigsegv_gives_139(score):
    m = marker()
    proc = score.scrun("-v", "-nodes=4x1", "sh", "-c",
                       f'if [ "$SCORE_RANK" = 2 ]; then kill -SEGV $$; fi; exec sleep {m}')
    assert proc.returncode == 139, proc.stderr
    job_id = int(re.search(r"scrun: job (\d+) submitted", proc.stderr).group(1))
    assert "rank 2 on n3 was killed by SIGSEGV" in proc.stderr, proc.stderr
    score.assert_job_gone(job_id, m)
    job = score.job(job_id)
    assert job["state"] == "failed" and job["exit_status"] == 139, job
    assert {"rank": 2, "node": "n3", "code": 0, "signal": 11} in job["exits"], job


def test_a_program_that_does_not_exist_fails_the_launch(score):
    proc = score.scrun("-nodes=2x1", "/nonexistent/program")
    assert proc.returncode == 1, proc.stderr
    assert "launch failed on n" in proc.stderr and "/nonexistent/program" in proc.stderr, \
        proc.stderr


def test_every_rank_exiting_0_gives_0(score):
    proc = score.scrun("-v", "-nodes=4x2", "true")
    assert proc.returncode == 0, proc.stderr
    job_id = int(re.search(r"scrun: job (\d+) submitted", proc.stderr).group(1))
    assert f"scrun: job {job_id} completed" in proc.stderr
    job = score.job(job_id)
    assert job["state"] == "completed" and job["exit_status"] == 0
    assert sorted(e["rank"] for e in job["exits"]) == list(range(8))
    assert score.job_cgroups(job_id) == []


# --- signals and time limits ----------------------------------------------------------


def _start_sleeping_job(score, script, nodes="2x1"):
    m = marker()
    run = score.start("-v", f"-nodes={nodes}", "sh", "-c", script.format(m=m))
    job_id = run.job_id()
    score.wait_job(job_id, "running")
    wait_for(lambda: len(processes_with(m)) >= int(nodes.split("x")[0]), 10,
             "the job's processes to start")
    return run, job_id, m


def test_sigint_cancels_the_job_everywhere(score):
    run, job_id, m = _start_sleeping_job(score, "exec sleep {m}")
    run.signal(signal.SIGINT)
    assert run.wait(30) == 130, run.stderr()
    err = run.stderr()
    assert f"scrun: cancelling job {job_id} (press Ctrl-C again to kill it)" in err
    assert f"scrun: job {job_id} cancelled" in err, err
    score.assert_job_gone(job_id, m)
    assert score.job(job_id)["state"] == "cancelled"


def test_second_sigint_kills_a_job_that_ignores_sigterm(score):
    run, job_id, m = _start_sleeping_job(score, "trap '' TERM; exec sleep {m}")
    first = time.monotonic()
    run.signal(signal.SIGINT)
    score.wait_job(job_id, "completing")
    time.sleep(1)
    # SIGTERM reached the ranks and was ignored: they still run.
    assert len(processes_with(m)) == 2, "the ranks did not ignore SIGTERM"
    assert run.proc.poll() is None
    run.signal(signal.SIGINT)
    # Killed now, not after the master's grace time (kill_grace_ms, 5 s by default).
    wait_for(lambda: not processes_with(m), 30, "the ranks to be killed")
    gone = time.monotonic() - first
    assert run.wait(30) == 130, run.stderr()
    assert gone < 5, f"the ranks went {gone:.1f} s after the first SIGINT: killed by the " \
                     "grace timer, not by the second SIGINT"
    assert f"scrun: killing job {job_id}" in run.stderr()
    score.assert_job_gone(job_id, m)


def test_third_sigint_makes_scrun_stop_waiting(score):
    run, job_id, m = _start_sleeping_job(score, "trap '' TERM; exec sleep {m}")
    run.signal(signal.SIGINT)
    wait_for(lambda: "cancelling job" in run.stderr(), 10, "scrun to cancel")
    run.signal(signal.SIGINT)
    wait_for(lambda: "killing job" in run.stderr(), 10, "scrun to kill")
    if run.proc.poll() is None:
        run.signal(signal.SIGINT)
    rc = run.wait(30)
    # 255 if the third SIGINT found scrun still waiting; 130 if the job had
    # already ended (the kill of the second one was that quick).
    assert rc in (255, 130), run.stderr()
    if rc == 255:
        assert f"scrun: error: not waiting for job {job_id} to end" in run.stderr()
    # The master cleans up either way.
    assert score.wait_job(job_id, "cancelled")["exit_status"] == 130
    score.assert_job_gone(job_id, m)


def test_sigterm_to_scrun_cancels_the_job(score):
    run, job_id, m = _start_sleeping_job(score, "exec sleep {m}")
    run.signal(signal.SIGTERM)
    assert run.wait(30) == 130, run.stderr()
    assert f"scrun: job {job_id} cancelled" in run.stderr()
    score.assert_job_gone(job_id, m)


def test_scorectl_cancel_ends_the_job(score):
    run, job_id, m = _start_sleeping_job(score, "exec sleep {m}")
    proc = score.scorectl("cancel", job_id)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"job {job_id}: cancelling"), proc.stdout
    assert run.wait(30) == 130, run.stderr()
    score.assert_job_gone(job_id, m)


def test_time_limit_ends_the_job_with_124(score):
    m = marker()
    start = time.monotonic()
    proc = score.scrun("-v", "--time", "2s", "-nodes=2x1", "sleep", m)
    elapsed = time.monotonic() - start
    assert proc.returncode == 124, proc.stderr
    job_id = int(re.search(r"scrun: job (\d+) submitted", proc.stderr).group(1))
    assert f"scrun: job {job_id} timeout: time limit of 2 s exceeded" in proc.stderr
    assert elapsed >= 2, "the job ended before its time limit"
    score.assert_job_gone(job_id, m)
    job = score.job(job_id)
    assert job["state"] == "timeout" and job["time_limit_ms"] == 2000, job


# --- space sharing ------------------------------------------------------------------


def test_two_jobs_run_at_once_on_disjoint_nodes(score):
    """Space sharing first: jobs that fit side by side get disjoint nodes and
    run at the same time (the one that does not fit is tested on a cluster
    without time sharing, test_strict_cluster.py)."""
    ma, mb = marker(), marker()
    a = score.start("-v", "-J", "share-a", "-nodes=2x1", "sleep", ma)
    b = score.start("-v", "-J", "share-b", "-nodes=2x1", "sleep", mb)
    ja, jb = a.job_id(), b.job_id()
    job_a = score.wait_job(ja, "running")
    job_b = score.wait_job(jb, "running")
    assert len(job_a["nodes"]) == len(job_b["nodes"]) == 2
    assert not set(job_a["nodes"]) & set(job_b["nodes"]), (job_a["nodes"], job_b["nodes"])
    wait_for(lambda: len(processes_with(ma)) == 2 and len(processes_with(mb)) == 2, 10,
             "both jobs' processes")
    for run in (a, b):
        run.signal(signal.SIGINT)
        assert run.wait(30) == 130, run.stderr()
    score.assert_job_gone(ja, ma)
    score.assert_job_gone(jb, mb)


def test_a_job_larger_than_the_cluster_is_refused(score):
    proc = score.scrun("-nodes=5x1", "true")
    assert proc.returncode == 255
    assert "the job asks for 5 nodes; the cluster has 4" in proc.stderr, proc.stderr


def test_a_drained_node_takes_no_new_jobs(score):
    proc = score.scorectl("drain", "n1", "--reason", "bad DIMM")
    try:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "node n1: drained (bad DIMM)", proc.stdout
        node = score.nodes()["n1"]
        assert (node["state"], node["reason"]) == ("drained", "bad DIMM"), node
        proc = score.scrun("-nodes=3x1", "hostname")
        assert proc.returncode == 0, proc.stderr
        assert sorted(proc.stdout.split()) == ["n2", "n3", "n4"]
    finally:
        resumed = score.scorectl("resume", "n1")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "node n1: up", resumed.stdout
    proc = score.scrun("-nodes=4x1", "hostname")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["n1", "n2", "n3", "n4"]


# --- scrun going away ------------------------------------------------------------------


def test_the_job_of_a_killed_scrun_is_cancelled(score):
    run, job_id, m = _start_sleeping_job(score, "exec sleep {m}")
    run.signal(signal.SIGKILL)
    run.wait(10)
    job = score.wait_job(job_id, "cancelled", timeout=30)
    assert job["exit_status"] == 130, job
    score.assert_job_gone(job_id, m)


def test_closing_scrun_stdout_cancels_the_job(score):
    m = marker()
    scrun = shlex.join(score.scrun_argv(["-v", "-nodes=2x1", "sh", "-c", f"exec yes {m}"]))
    run = score.start_shell(f"{scrun} | head -n 1")
    assert run.wait(60) == 0, run.stderr()
    assert run.stdout() == f"{m}\n"
    job = next(j for j in score.jobs(all=True) if j["argv"] == ["sh", "-c", f"exec yes {m}"])
    job = score.wait_job(job["id"], "cancelled", timeout=30)
    score.assert_job_gone(job["id"], m)
