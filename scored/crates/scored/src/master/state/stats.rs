//! Switch and launch statistics: the samples `scorectl matrix` summarizes
//! (kept here, plain data) and the Prometheus metrics, counted as things
//! happen and refreshed from the tables after each change.

use score_proto::v1::{Drained, JobState, NodeState, SwitchStats};
use std::collections::VecDeque;
use std::time::Instant;

use super::super::metrics::MasterMetrics;
use super::State;

/// Switch durations kept for scorectl's median and p99.
const SWITCH_SAMPLES: usize = 1000;

#[derive(Default)]
pub struct Stats {
    switches: u64,
    /// The last [`SWITCH_SAMPLES`] switch durations, in seconds.
    switch_times: VecDeque<f64>,
    /// The longest quiesce of each of the last switches that preempted a job.
    quiesce_times: VecDeque<f64>,
    unanswered: u64,
    silent: u64,
}

impl Stats {
    /// A node's answer to a preemption.
    pub fn drained(&mut self, metrics: &MasterMetrics, d: &Drained) {
        self.unanswered += u64::from(d.unanswered);
        self.silent += u64::from(d.silent);
        if d.unanswered > 0 {
            metrics.unanswered.inc_by(u64::from(d.unanswered));
        }
        if d.contexts > 0 {
            metrics.quiesce.observe(d.quiesce_ns as f64 / 1e9);
        }
    }

    /// A switch is over; `quiesce` is its longest quiesce if it preempted
    /// a job.
    pub fn switched(&mut self, metrics: &MasterMetrics, took: f64, quiesce: Option<f64>) {
        self.switches += 1;
        metrics.switches.inc();
        metrics.switch_time.observe(took);
        push_sample(&mut self.switch_times, took);
        if let Some(q) = quiesce {
            push_sample(&mut self.quiesce_times, q);
        }
    }

    pub fn summary(&self) -> SwitchStats {
        SwitchStats {
            switches: self.switches,
            last_s: self.switch_times.back().copied().unwrap_or(0.0),
            median_s: quantile(&self.switch_times, 0.5),
            p99_s: quantile(&self.switch_times, 0.99),
            quiesce_median_s: quantile(&self.quiesce_times, 0.5),
            unanswered: self.unanswered,
            silent: self.silent,
        }
    }
}

/// A job waited in the queue since `submitted`.
pub fn queued(metrics: &MasterMetrics, submitted: Instant) {
    metrics
        .queue_wait
        .observe(submitted.elapsed().as_secs_f64());
}

/// A job started on every node; its launch began at `started`.
pub fn launched(metrics: &MasterMetrics, started: Option<Instant>) {
    if let Some(t) = started {
        metrics.launch_time.observe(t.elapsed().as_secs_f64());
    }
}

fn push_sample(v: &mut VecDeque<f64>, x: f64) {
    if v.len() == SWITCH_SAMPLES {
        v.pop_front();
    }
    v.push_back(x);
}

fn quantile(v: &VecDeque<f64>, q: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().collect();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = (s.len().saturating_sub(1) as f64 * q).round() as usize;
    s.get(i).copied().unwrap_or(0.0)
}

impl State {
    /// The gauges: jobs and nodes by state, rows of the matrix.
    pub(super) fn refresh_gauges(&self) {
        for s in [
            JobState::Pending,
            JobState::Launching,
            JobState::Running,
            JobState::Completing,
        ] {
            self.metrics
                .jobs
                .get_or_create(&vec![("state".into(), s.label().into())])
                .set(self.jobs.count(s) as i64);
        }
        self.metrics.slots.set(self.gang.matrix.rows().len() as i64);
        for s in [NodeState::Up, NodeState::Down, NodeState::Drained] {
            self.metrics
                .nodes
                .get_or_create(&vec![("state".into(), s.label().into())])
                .set(self.nodes.count(s) as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_no_samples_are_zero_and_samples_are_bounded() {
        assert_eq!(quantile(&VecDeque::new(), 0.5), 0.0);
        let mut v = VecDeque::new();
        for x in 0..=SWITCH_SAMPLES {
            push_sample(&mut v, x as f64);
        }
        assert_eq!(v.len(), SWITCH_SAMPLES);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), SWITCH_SAMPLES as f64);
    }
}
