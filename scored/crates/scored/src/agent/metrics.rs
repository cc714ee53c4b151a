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

/// (counter index in the page, metric name without `_total`, help)
const PM_METRICS: [(usize, &str, &str); 19] = [
    (0, "score_pm_messages_sent", "PM messages sent"),
    (1, "score_pm_sent_bytes", "PM payload bytes sent"),
    (2, "score_pm_messages_received", "PM messages received"),
    (3, "score_pm_received_bytes", "PM payload bytes received"),
    (
        4,
        "score_pm_send_eagain",
        "PM send buffer requests refused for now (flow control, quiesce)",
    ),
    (5, "score_pm_rma_writes", "PM remote writes"),
    (6, "score_pm_rma_reads", "PM remote reads"),
    (
        7,
        "score_pm_rma_bytes",
        "PM bytes written and read remotely",
    ),
    (8, "score_pm_regcache_hits", "PM registration cache hits"),
    (
        9,
        "score_pm_regcache_misses",
        "PM registration cache misses",
    ),
    (
        10,
        "score_pm_regcache_evictions",
        "PM registrations evicted",
    ),
    (11, "score_pm_waits_blocked", "PM waits that went to sleep"),
    (12, "score_pm_retransmits", "PM packets sent again"),
    (
        13,
        "score_pm_drops",
        "PM packets dropped as malformed or foreign",
    ),
    (14, "score_pm_stops", "PM STOP flow-control signals"),
    (15, "score_pm_gos", "PM GO flow-control signals"),
    (16, "score_pm_loses", "PM LOSE negative acknowledgements"),
    (17, "score_pm_quiesces", "PM quiesces completed"),
    (
        18,
        "score_pm_quiesce_seconds",
        "Time PM contexts spent quiescing",
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

        for (index, name, help) in PM_METRICS {
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
                let raw = ctx.counters[index];
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
