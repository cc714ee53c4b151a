//! The master's Prometheus metrics (names follow the Prometheus conventions:
//! `score_` prefix, base units, `_total` for counters).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub type Labels = Vec<(String, String)>;

#[derive(Clone)]
pub struct MasterMetrics {
    pub jobs: Family<Labels, Gauge>,
    pub nodes: Family<Labels, Gauge>,
    pub jobs_submitted: Counter,
    pub jobs_finished: Family<Labels, Counter>,
    pub requests_rejected: Family<Labels, Counter>,
    pub queue_wait: Histogram,
    pub launch_time: Histogram,
    pub switches: Counter,
    pub switch_time: Histogram,
    pub quiesce: Histogram,
    pub unanswered: Counter,
    pub slots: Gauge,
    pub stdio_buffered: Family<Labels, Gauge>,
    pub stdio_throttled_jobs: Family<Labels, Gauge>,
    pub stdio_throttles: Family<Labels, Counter>,
    pub state_save_failures: Counter,
    pub state_save_failing: Gauge,
}

impl MasterMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            jobs: Family::default(),
            nodes: Family::default(),
            jobs_submitted: Counter::default(),
            jobs_finished: Family::default(),
            requests_rejected: Family::default(),
            // 1 ms .. ~9 h
            queue_wait: Histogram::new(exponential_buckets(0.001, 4.0, 13)),
            // 1 ms .. ~65 s
            launch_time: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            switches: Counter::default(),
            // 100 us .. ~3 s
            switch_time: Histogram::new(exponential_buckets(0.0001, 2.0, 15)),
            quiesce: Histogram::new(exponential_buckets(0.0001, 2.0, 15)),
            unanswered: Counter::default(),
            slots: Gauge::default(),
            stdio_buffered: Family::default(),
            stdio_throttled_jobs: Family::default(),
            stdio_throttles: Family::default(),
            state_save_failures: Counter::default(),
            state_save_failing: Gauge::default(),
        };
        registry.register(
            "score_jobs",
            "Jobs known to the master that have not finished, by state",
            m.jobs.clone(),
        );
        registry.register("score_nodes", "Nodes by state", m.nodes.clone());
        registry.register(
            "score_jobs_submitted",
            "Jobs accepted into the queue",
            m.jobs_submitted.clone(),
        );
        registry.register(
            "score_jobs_finished",
            "Jobs finished, by final state",
            m.jobs_finished.clone(),
        );
        registry.register(
            "score_requests_rejected",
            "Requests refused, by reason (unauthenticated, permission, invalid)",
            m.requests_rejected.clone(),
        );
        registry.register(
            "score_job_queue_wait_seconds",
            "Time from submission to launch",
            m.queue_wait.clone(),
        );
        registry.register(
            "score_job_launch_seconds",
            "Time from launch to every node reporting its processes started",
            m.launch_time.clone(),
        );
        registry.register(
            "score_gang_switches",
            "Switches of the gang-scheduling matrix from one time slot to the next",
            m.switches.clone(),
        );
        registry.register(
            "score_gang_switch_seconds",
            "Duration of a switch, from the preempt request to every node frozen and thawed",
            m.switch_time.clone(),
        );
        registry.register(
            "score_gang_quiesce_seconds",
            "Longest time a node's PM contexts took to quiesce, per node and switch",
            m.quiesce.clone(),
        );
        registry.register(
            "score_gang_unanswered_processes",
            "Processes frozen without answering the quiesce request in time",
            m.unanswered.clone(),
        );
        registry.register(
            "score_gang_slots",
            "Rows (time slots) of the gang-scheduling matrix in use",
            m.slots.clone(),
        );
        registry.register(
            "score_stdio_buffered_bytes",
            "Bytes of the jobs' output (for scrun) and stdin (for rank 0) the master holds, \
             by direction",
            m.stdio_buffered.clone(),
        );
        registry.register(
            "score_stdio_throttled_jobs",
            "Jobs whose output (or stdin) waits because the other end takes it slower than \
             it comes, by direction",
            m.stdio_throttled_jobs.clone(),
        );
        registry.register(
            "score_stdio_throttles",
            "Times a job's output (or stdin) started to wait for the other end, by direction",
            m.stdio_throttles.clone(),
        );
        registry.register(
            "score_master_state_save_failures",
            "Saves of the master's state to master.state_dir that failed",
            m.state_save_failures.clone(),
        );
        registry.register(
            "score_master_state_save_failing",
            "1 while the master's last save of its state failed: a restart of the master \
             now loses what changed since the last save",
            m.state_save_failing.clone(),
        );
        m
    }

    /// The outcome of a save of the state ([`super::store`]).
    pub fn state_saved(&self, ok: bool) {
        if !ok {
            self.state_save_failures.inc();
        }
        self.state_save_failing.set(i64::from(!ok));
    }
}
