//! The agent's Prometheus metrics.  Everything is read at scrape time from
//! the kernel (job cgroups) and from the PM statistics pages of the jobs'
//! processes, so the numbers are never stale and the agent keeps no copies.

use super::cgroup::CgroupRoot;
use super::pmstats::{self, PmContext};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::{BTreeMap, HashMap, HashSet};
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

/// A layer whose families could be the agent's own (`score_pm_*`,
/// `score_agent_*`): `pm`, `agent`, or a name that begins with `pm_` or
/// `agent_`.  pm_stats_layer() refuses them, so only a forged page has one;
/// a family twice would spoil the whole scrape.
fn reserved_layer(layer: &str) -> bool {
    ["pm", "agent"].iter().any(|r| {
        layer
            .strip_prefix(r)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
    })
}

/// The metric family (without `_total`) of counter `counter` of layer
/// `layer` (pm_stats_layer, docs/pm/stats.md): `score_<layer>_<counter>`,
/// a counter of nanoseconds (`*_ns`) as `score_<layer>_<...>_seconds` in
/// seconds, as PM's `quiesce_ns`.  Returns (family, in seconds).
fn layer_family(layer: &str, counter: &str) -> (String, bool) {
    match counter.strip_suffix("_ns") {
        Some(base) if !base.is_empty() => (format!("score_{layer}_{base}_seconds"), true),
        _ => (format!("score_{layer}_{counter}"), false),
    }
}

/// One family of layer counters: its help, its unit and its samples.
struct LayerFamily {
    help: String,
    seconds: bool,
    samples: Vec<(Labels, u64)>,
}

/// The families of the layer counters of `contexts`, by name: a family per
/// (layer, counter) that some context publishes.  Two names that make one
/// family (`a_ns` and `a_seconds`, or layers `a_b` and `a` with counters
/// `c` and `b_c`) give it the samples of the first only, per context.
fn layer_families(contexts: &[(Labels, &PmContext)]) -> BTreeMap<String, LayerFamily> {
    let mut families: BTreeMap<String, LayerFamily> = BTreeMap::new();
    for (labels, ctx) in contexts {
        let Some(layer) = &ctx.layer else { continue };
        if reserved_layer(&layer.name) {
            continue;
        }
        let mut mine: HashSet<String> = HashSet::new();
        for (counter, value) in &layer.counters {
            let (family, seconds) = layer_family(&layer.name, counter);
            let f = families
                .entry(family.clone())
                .or_insert_with(|| LayerFamily {
                    help: format!(
                        "Counter {counter} of the layer {} over PM (pm_stats_layer){}",
                        layer.name,
                        if seconds { ", in seconds" } else { "" }
                    ),
                    seconds,
                    samples: Vec::new(),
                });
            if f.seconds == seconds && mine.insert(family) {
                f.samples.push((labels.clone(), *value));
            }
        }
    }
    families
}

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

        let labelled: Vec<(Labels, &PmContext)> = contexts
            .iter()
            .map(|ctx| {
                let labels: Labels = vec![
                    ("node", self.node.clone()),
                    ("job", pids.get(&ctx.pid).copied().unwrap_or(0).to_string()),
                    ("rank", ctx.rank.to_string()),
                    ("device", ctx.device.clone()),
                ];
                (labels, ctx)
            })
            .collect();
        for (counter, name, help) in PM_METRICS {
            let mut m = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (labels, ctx) in &labelled {
                let raw = ctx.counter(counter).unwrap_or(0);
                encode_counter(&mut m, labels, raw, name.ends_with("_seconds"))?;
            }
        }
        // The counters of the layers above PM (libpmdsm, ...): a family per
        // counter of the layers the contexts publish, none without them.
        for (name, family) in layer_families(&labelled) {
            let mut m = encoder.encode_descriptor(
                &name,
                &family.help,
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (labels, raw) in &family.samples {
                encode_counter(&mut m, labels, *raw, family.seconds)?;
            }
        }
        Ok(())
    }
}

/// One sample of a counter family: `raw`, or `raw` nanoseconds in seconds.
fn encode_counter(
    m: &mut prometheus_client::encoding::MetricEncoder,
    labels: &Labels,
    raw: u64,
    seconds: bool,
) -> Result<(), std::fmt::Error> {
    if seconds {
        ConstCounter::new(raw as f64 / 1e9).encode(m.encode_family(labels)?)
    } else {
        ConstCounter::new(raw).encode(m.encode_family(labels)?)
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

    #[test]
    fn layers_that_could_take_the_agents_names_are_left_out() {
        for r in ["pm", "agent", "pm_rma", "agent_", "pm_"] {
            assert!(reserved_layer(r), "{r}");
        }
        for ok in ["dsm", "pmdsm", "fi", "agents", "p", "a"] {
            assert!(!reserved_layer(ok), "{ok}");
        }
    }

    #[test]
    fn layer_counters_are_named_after_their_layer() {
        assert_eq!(
            layer_family("dsm", "read_faults"),
            ("score_dsm_read_faults".into(), false)
        );
        assert_eq!(
            layer_family("dsm", "fetch_bytes"),
            ("score_dsm_fetch_bytes".into(), false)
        );
        assert_eq!(
            layer_family("dsm", "fault_ns"),
            ("score_dsm_fault_seconds".into(), true)
        );
        assert_eq!(layer_family("fi", "_ns"), ("score_fi__ns".into(), false));
        assert_eq!(layer_family("fi", "ns"), ("score_fi_ns".into(), false));
    }

    /// The whole exposition of an agent whose job has one process whose
    /// context publishes a layer, read from its page as at a scrape.
    #[test]
    fn layer_counters_are_exported() {
        use pmstats::tests::page_of_layer;
        let dir = std::env::temp_dir().join(format!("score-metrics-layer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let me = std::process::id() as i32;
        let cgroups = CgroupRoot::open(dir.join("cg").to_str().unwrap()).unwrap();
        std::fs::create_dir_all(dir.join("cg/job-7")).unwrap();
        std::fs::write(dir.join("cg/job-7/cgroup.procs"), format!("{me}\n")).unwrap();
        let stats_dir = dir.join("shm");
        std::fs::create_dir_all(&stats_dir).unwrap();
        let mut page = page_of_layer(me, b"dsm", &[b"read_faults", b"fault_ns", b"Bad"]);
        let at = pmstats::layout::LAYER_VALUES_AT + 8;
        page[at..at + 8].copy_from_slice(&1_500_000_000u64.to_le_bytes());
        std::fs::write(stats_dir.join(format!("pm-stats.{me}.0")), page).unwrap();

        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(AgentCollector {
            cgroups,
            stats_dir,
            node: "n1".into(),
        }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();

        let labels = r#"{node="n1",job="7",rank="3",device="udp"}"#;
        for line in [
            "# TYPE score_dsm_read_faults counter".to_string(),
            format!("score_dsm_read_faults_total{labels} 100"),
            "# TYPE score_dsm_fault_seconds counter".to_string(),
            format!("score_dsm_fault_seconds_total{labels} 1.5"),
            format!("score_pm_messages_sent_total{labels} 77"),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line} in\n{text}");
        }
        assert!(
            !text.contains("Bad") && !text.contains("score_dsm_fault_ns"),
            "{text}"
        );
    }

    fn context(rank: i32, layer: Option<(&str, &[(&str, u64)])>) -> PmContext {
        PmContext {
            pid: 1,
            rank,
            job_name: String::new(),
            device: "shm".into(),
            counters: [0; pmstats::NCOUNTERS],
            layer: layer.map(|(name, counters)| pmstats::Layer {
                name: name.into(),
                counters: counters.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            }),
        }
    }

    /// Families of every layer the contexts publish, one sample per
    /// context; no family twice, no sample twice, nothing under the agent's
    /// own names.
    #[test]
    fn layer_families_of_several_contexts() {
        let a = context(0, Some(("dsm", &[("read_faults", 1), ("lock_ns", 2)])));
        let b = context(1, Some(("dsm", &[("read_faults", 3)])));
        let c = context(2, Some(("fi", &[("x_ns", 4), ("x_seconds", 5)])));
        let d = context(3, Some(("pm", &[("drops", 6)])));
        let e = context(4, None);
        let g = context(5, Some(("pm_rma", &[("bytes", 7)])));
        let h = context(6, Some(("agent_x", &[("y", 8)])));
        let labelled: Vec<(Labels, &PmContext)> = [&a, &b, &c, &d, &e, &g, &h]
            .into_iter()
            .map(|ctx| (vec![("rank", ctx.rank.to_string())], ctx))
            .collect();
        let f = layer_families(&labelled);
        let names: Vec<&str> = f.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "score_dsm_lock_seconds",
                "score_dsm_read_faults",
                "score_fi_x_seconds"
            ]
        );
        let samples = |name: &str| -> Vec<(String, u64)> {
            f[name]
                .samples
                .iter()
                .map(|(l, v)| (l[0].1.clone(), *v))
                .collect()
        };
        assert_eq!(
            samples("score_dsm_read_faults"),
            [("0".to_string(), 1), ("1".to_string(), 3)]
        );
        assert!(f["score_dsm_lock_seconds"].seconds);
        // x_ns (in seconds) came first: x_seconds, which would be a count
        // of seconds in the same family, is left out.
        assert_eq!(samples("score_fi_x_seconds"), [("2".to_string(), 4)]);
        assert!(f["score_dsm_read_faults"]
            .help
            .contains("read_faults of the layer dsm"));
    }
}
