//! The agent's Prometheus metrics.  Everything is read at scrape time from
//! the kernel (job cgroups) and from the PM statistics pages of the jobs'
//! processes, so the numbers are never stale and the agent keeps no copies.

use super::cgroup::CgroupRoot;
use super::pmstats::{self, PmContext};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

#[derive(Debug)]
pub struct AgentCollector {
    pub cgroups: CgroupRoot,
    pub stats_dir: PathBuf,
    pub node: String,
}

/// (PM counter in `struct pm_stats`, metric name without `_total`, help);
/// a test checks that every counter of the generated page layout has one.
const PM_METRICS: [(&str, &str, &str); pmstats::NCOUNTERS] = [
    ("msgs_sent", "score_pm_messages_sent", "PM messages sent"),
    ("bytes_sent", "score_pm_sent_bytes", "PM payload bytes sent"),
    (
        "msgs_recv",
        "score_pm_messages_received",
        "PM messages received",
    ),
    (
        "bytes_recv",
        "score_pm_received_bytes",
        "PM payload bytes received",
    ),
    (
        "send_eagain",
        "score_pm_send_eagain",
        "PM send buffer requests refused for now (flow control, quiesce)",
    ),
    ("rma_writes", "score_pm_rma_writes", "PM remote writes"),
    ("rma_reads", "score_pm_rma_reads", "PM remote reads"),
    (
        "rma_bytes",
        "score_pm_rma_bytes",
        "PM bytes written and read remotely",
    ),
    (
        "regcache_hits",
        "score_pm_regcache_hits",
        "PM registration cache hits",
    ),
    (
        "regcache_misses",
        "score_pm_regcache_misses",
        "PM registration cache misses",
    ),
    (
        "regcache_evictions",
        "score_pm_regcache_evictions",
        "PM registrations evicted",
    ),
    (
        "waits_blocked",
        "score_pm_waits_blocked",
        "PM waits that went to sleep",
    ),
    (
        "retransmits",
        "score_pm_retransmits",
        "PM packets sent again because they were lost",
    ),
    (
        "drops",
        "score_pm_drops",
        "PM packets dropped as malformed or foreign",
    ),
    ("stops", "score_pm_stops", "PM STOP flow-control signals"),
    ("gos", "score_pm_gos", "PM GO flow-control signals"),
    (
        "loses",
        "score_pm_loses",
        "PM LOSE negative acknowledgements",
    ),
    ("quiesces", "score_pm_quiesces", "PM quiesces completed"),
    (
        "quiesce_ns",
        "score_pm_quiesce_seconds",
        "Time PM contexts spent quiescing",
    ),
    (
        "rto_polls",
        "score_pm_rto_polls",
        "PM retransmission timeouts that asked the peer instead of resending",
    ),
    (
        "dups",
        "score_pm_duplicates",
        "PM data packets received twice (spurious retransmissions)",
    ),
    (
        "refused_resends",
        "score_pm_refused_resends",
        "PM packets sent again after the receiver refused them (STOP)",
    ),
];

impl AgentCollector {
    /// pid -> job of every process in our job cgroups.
    fn job_pids(&self) -> HashMap<i32, u64> {
        let mut m = HashMap::new();
        for job in self.cgroups.leftover_jobs() {
            for pid in self.cgroups.job(job).pids() {
                m.insert(pid, job);
            }
        }
        m
    }
}

type Labels = Vec<(&'static str, String)>;

impl Collector for AgentCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let pids = self.job_pids();
        let jobs: HashSet<u64> = pids.values().copied().collect();
        let node: Labels = vec![("node", self.node.clone())];

        let g = ConstGauge::new(pids.len() as i64);
        let mut m = encoder.encode_descriptor(
            "score_agent_processes",
            "Processes in the job cgroups of this node",
            None,
            g.metric_type(),
        )?;
        g.encode(m.encode_family(&node)?)?;

        let g = ConstGauge::new(jobs.len() as i64);
        let mut m = encoder.encode_descriptor(
            "score_agent_job_cgroups",
            "Job cgroups on this node",
            None,
            g.metric_type(),
        )?;
        g.encode(m.encode_family(&node)?)?;

        let wanted: HashSet<i32> = pids.keys().copied().collect();
        let contexts: Vec<PmContext> = pmstats::scan(&self.stats_dir, &wanted);
        let g = ConstGauge::new(contexts.len() as i64);
        let mut m = encoder.encode_descriptor(
            "score_pm_contexts",
            "Open PM contexts of this node's jobs",
            None,
            g.metric_type(),
        )?;
        g.encode(m.encode_family(&node)?)?;

        for (counter, name, help) in PM_METRICS {
            let mut m = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for ctx in &contexts {
                let labels: Labels = vec![
                    ("node", self.node.clone()),
                    ("job", pids.get(&ctx.pid).copied().unwrap_or(0).to_string()),
                    ("rank", ctx.rank.to_string()),
                    ("device", ctx.device.clone()),
                ];
                let raw = ctx.counter(counter).unwrap_or(0);
                if name.ends_with("_seconds") {
                    ConstCounter::new(raw as f64 / 1e9).encode(m.encode_family(&labels)?)?;
                } else {
                    ConstCounter::new(raw).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pm_counter_has_one_metric() {
        let layout: Vec<&str> = pmstats::layout::COUNTERS.iter().map(|(n, _)| *n).collect();
        let ours: Vec<&str> = PM_METRICS.iter().map(|(c, _, _)| *c).collect();
        assert_eq!(ours, layout, "PM_METRICS follows pm/src/stats.h");
        let mut names: Vec<&str> = PM_METRICS.iter().map(|(_, n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PM_METRICS.len(), "metric names are unique");
    }
}
