"""Prometheus /metrics of the scored master and agents on a virtual cluster:
valid exposition (`promtool check metrics`), the job, node and launch
metrics of the master, the process counts of the agents, the PM counters
of a running job, and the counters a layer above PM publishes."""

import shutil
import signal
import subprocess
import tomllib
import urllib.parse

import pytest

from .score import (PMCHECK, agent_metrics_url, build_pm_program, grpc_call, grpc_frame, marker,
                    master_state_dir, metric_values, scrape, wait_for)

pytestmark = pytest.mark.skipif(not shutil.which("promtool"),
                                reason="promtool is not installed (prometheus)")


def promtool_check(text, what):
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, f"promtool check metrics of {what}: " \
                                 f"{proc.stdout}{proc.stderr}\n--- metrics:\n{text[:3000]}"


def master_metrics_url(score):
    conf = tomllib.loads((score.vc.service_dir / "scored.toml").read_text())
    return f"http://{conf['master']['metrics_listen']}/metrics"


def test_master_metrics(score):
    url = master_metrics_url(score)
    before = scrape(url)
    assert metric_values(before, "score_nodes") == {
        '{state="up"}': 4, '{state="down"}': 0, '{state="drained"}': 0}
    assert set(metric_values(before, "score_jobs")) >= {
        '{state="pending"}', '{state="running"}'}, before
    launches = sum(metric_values(before, "score_job_launch_seconds_count").values())

    # Runs until every node has reported its processes started (see
    # test_every_launched_job_is_counted for jobs that end at once).
    proc = score.scrun("-nodes=4x1", "sleep", "0.5")
    assert proc.returncode == 0, proc.stderr
    fields, _ = grpc_call(urllib.parse.urlsplit(score.master_url).netloc, "ListNodes",
                          grpc_frame(b""))
    assert fields.get("grpc-status") == "16", fields

    after = scrape(url)
    assert sum(metric_values(after, "score_job_launch_seconds_count").values()) == launches + 1
    assert "score_job_launch_seconds_bucket" in after
    assert sum(metric_values(after, "score_job_queue_wait_seconds_count").values()) >= 1
    finished = metric_values(after, "score_jobs_finished_total")
    assert finished.get('{state="completed"}', 0) >= 1, finished
    rejected = metric_values(after, "score_requests_rejected_total")
    assert rejected.get('{reason="unauthenticated"}', 0) > \
        metric_values(before, "score_requests_rejected_total").get(
            '{reason="unauthenticated"}', 0), rejected


def test_every_launched_job_is_counted_and_has_a_start_time(score):
    """A job whose ranks exit at once still went through its launch: the
    master counts it in score_job_launch_seconds and records when it
    started, whichever of the agent's reports (processes started, a rank
    exited) arrives first."""
    url = master_metrics_url(score)
    before = sum(metric_values(scrape(url), "score_job_launch_seconds_count").values())
    ids = []
    for _ in range(60):  # the race that loses the start is rare: give it chances
        proc = score.scrun("-v", "-nodes=1x2", "true")
        assert proc.returncode == 0, proc.stderr
        ids.append(int(proc.stderr.split("scrun: job ", 1)[1].split()[0]))
    jobs = {j["id"]: j for j in score.jobs(all=True)}
    never_started = [i for i in ids if jobs[i]["start_time_ms"] == 0]
    after = sum(metric_values(scrape(url), "score_job_launch_seconds_count").values())
    assert never_started == [] and after - before == len(ids), \
        f"jobs completed without a start time: {never_started}; " \
        f"score_job_launch_seconds_count grew by {after - before} for {len(ids)} jobs"


def test_a_master_that_cannot_save_its_state_says_so(score):
    """A save of the master's state that fails (here: a directory where its
    temporary file goes) is logged and counted, and
    score_master_state_save_failing is 1 until a save works again (the
    alert MasterStateNotSaved)."""
    url = master_metrics_url(score)
    log = score.vc.service_dir / "head" / "scored.log"

    def saves():
        text = scrape(url)
        return (metric_values(text, "score_master_state_save_failures_total").get("", 0),
                metric_values(text, "score_master_state_save_failing").get(""))

    failures, failing = saves()
    assert failing == 0, saves()
    logged = log.read_text(errors="replace").count("cannot save the state:")
    blocker = master_state_dir(score.vc) / "master.state.tmp"
    blocker.mkdir()
    try:
        # A job changes the state: the background saver tries to save it.
        assert score.scrun("-nodes=1x1", "true").returncode == 0
        wait_for(lambda: log.read_text(errors="replace").count("cannot save the state:") > logged,
                 10, "the background saver to fail")
        now = saves()
        assert now[0] > failures and now[1] == 1, (failures, now)
    finally:
        blocker.rmdir()
    assert score.scrun("-nodes=1x1", "true").returncode == 0
    wait_for(lambda: saves()[1] == 0, 10, "a save that works again")


def test_master_metrics_pass_promtool(score):
    proc = score.scrun("-nodes=4x1", "true")  # every histogram and counter has samples
    assert proc.returncode == 0, proc.stderr
    promtool_check(scrape(master_metrics_url(score)), "the master")


def test_agent_metrics_count_the_processes_of_a_job(score):
    for node in score.vc.nodes:
        url = agent_metrics_url(score, node)
        assert url == f"http://{score.vc.address(node)}:7102/metrics", url
        text = scrape(url)
        assert metric_values(text, "score_agent_processes") == {f'{{node="{node}"}}': 0}, text
        assert metric_values(text, "score_agent_job_cgroups") == {f'{{node="{node}"}}': 0}

    m = marker()
    run = score.start("-v", "-nodes=4x2", "sleep", m)
    job_id = run.job_id()
    score.wait_job(job_id, "running")
    for node in score.vc.nodes:
        text = scrape(agent_metrics_url(score, node))
        assert metric_values(text, "score_agent_processes") == {f'{{node="{node}"}}': 2}, text
        assert metric_values(text, "score_agent_job_cgroups") == {f'{{node="{node}"}}': 1}
    run.signal(signal.SIGINT)
    assert run.wait(30) == 130, run.stderr()
    score.assert_job_gone(job_id, m)
    text = scrape(agent_metrics_url(score, "n1"))
    assert metric_values(text, "score_agent_processes") == {'{node="n1"}': 0}, text


def start_pm_job(score):
    """A pmcheck job of 2x1 that runs far longer than the test waits (it is
    cancelled); returns (scrun, job id, node of rank 0, its agent's metrics
    URL, the first scrape with PM counters of the job, their labels, value)."""
    assert PMCHECK.exists(), f"{PMCHECK} is missing: make build"
    run = score.start("-v", "-nodes=2x1", PMCHECK, "--quiet", "--pattern", "pairs",
                      "--count", "100000000", "--timeout", "120")
    job_id = run.job_id()
    job = score.wait_job(job_id, "running")
    node = job["nodes"][0]
    url = agent_metrics_url(score, node)

    def sent():
        text = scrape(url)
        samples = {labels: v for labels, v in
                   metric_values(text, "score_pm_messages_sent_total").items()
                   if f'job="{job_id}"' in labels and v > 0}
        return (text, samples) if samples else None
    text, samples = wait_for(sent, 30, f"PM counters of job {job_id} on {node}", interval=0.3)
    assert len(samples) == 1, samples
    (labels, value), = samples.items()
    return run, job_id, node, url, text, labels, value


def test_pm_counters_of_a_running_job(score):
    run, job_id, node, url, text, labels, first = start_pm_job(score)
    assert f'node="{node}"' in labels and 'rank="0"' in labels and 'device="' in labels, labels
    assert metric_values(text, "score_pm_contexts") == {f'{{node="{node}"}}': 1}, text
    for name in ("score_pm_sent_bytes_total", "score_pm_messages_received_total",
                 "score_pm_retransmits_total", "score_pm_quiesce_seconds_total"):
        assert labels in metric_values(text, name), f"{name}{labels} missing"
    # The counters are live: they grow while the job runs.
    wait_for(lambda: metric_values(scrape(url), "score_pm_messages_sent_total").get(labels, 0)
             > first, 30, "the PM counter to grow")
    assert run.proc.poll() is None, f"pmcheck ended early: {run.stderr()}"
    run.signal(signal.SIGINT)
    assert run.wait(30) == 130, run.stderr()
    score.assert_job_gone(job_id)
    after = scrape(url)
    assert not [k for k in metric_values(after, "score_pm_messages_sent_total")
                if f'job="{job_id}"' in k]


def test_agent_metrics_pass_promtool(score):
    promtool_check(scrape(agent_metrics_url(score, "n4")), "an idle agent")
    run, job_id, node, url, text, labels, value = start_pm_job(score)
    promtool_check(text, f"the agent of {node} with the PM counters of job {job_id}")


def test_layer_counters_of_a_running_job(score):
    """A context that publishes the counters of a layer above PM
    (pm_stats_layer(), as libpmdsm does; tests/programs/pm_layer.c, layer
    "testlayer"): its agent exports them live, one family per counter named
    after the layer, with PM's labels and *_ns in seconds, and the
    exposition stays valid; they go with the job."""
    exe = build_pm_program(score.workdir, "pm_layer")
    run = score.start("-v", "-nodes=2x1", exe, "120")
    job_id = run.job_id()
    job = score.wait_job(job_id, "running")
    node = job["nodes"][0]
    url = agent_metrics_url(score, node)

    def ticking():
        text = scrape(url)
        samples = {labels: v for labels, v in
                   metric_values(text, "score_testlayer_ticks_total").items()
                   if f'job="{job_id}"' in labels and v > 0}
        return (text, samples) if samples else None
    text, samples = wait_for(ticking, 30, f"the layer counters of job {job_id} on {node}",
                             interval=0.3)
    assert len(samples) == 1, samples
    (labels, ticks), = samples.items()
    assert f'node="{node}"' in labels and 'rank="0"' in labels and 'device="' in labels, labels
    # PM's counters of the same context carry the same labels.
    assert labels in metric_values(text, "score_pm_messages_sent_total"), text
    # Each word is read whole but not with the others at one instant: the
    # later ones may be a tick behind or ahead.
    seconds = metric_values(text, "score_testlayer_tick_seconds_total")[labels]
    payload = metric_values(text, "score_testlayer_payload_bytes_total")[labels]
    assert abs(seconds / 0.01 - ticks) <= 2, (ticks, seconds)
    assert abs(payload / 4096 - ticks) <= 2, (ticks, payload)
    assert "score_testlayer_tick_ns" not in text
    assert "# TYPE score_testlayer_ticks_total counter" in text, text
    promtool_check(text, f"the agent of {node} with the layer counters of job {job_id}")

    wait_for(lambda: metric_values(scrape(url), "score_testlayer_ticks_total").get(labels, 0)
             > ticks, 30, "the layer counter to grow")
    assert run.proc.poll() is None, f"pm_layer ended early: {run.stderr()}"
    run.signal(signal.SIGINT)
    assert run.wait(30) == 130, run.stderr()
    score.assert_job_gone(job_id)
    assert not [k for k in metric_values(scrape(url), "score_testlayer_ticks_total")
                if f'job="{job_id}"' in k]
