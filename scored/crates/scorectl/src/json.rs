//! The one place where the master's records become scorectl's JSON
//! (`--json`) and its state words.  The field names are a stable interface
//! (scripts wait for readiness with `scorectl nodes --json`); add fields,
//! never rename or remove them.  docs/scored/user.md lists them.

use score_proto::v1::{JobInfo, JobState, MatrixReply, NodeInfo, NodeState, RankExit};
use serde::Serialize;

/// A node's state as scorectl shows it: "up", "down", "drained".
pub fn node_state(state: i32) -> &'static str {
    NodeState::try_from(state).map_or("unknown", NodeState::label)
}

/// A job's state as scorectl shows it: "pending", "launching", "running",
/// "completing", "completed", "failed", "cancelled", "timeout".
pub fn job_state(state: i32) -> &'static str {
    JobState::try_from(state).map_or("unknown", JobState::label)
}

/// True once the job has ended (its state no longer changes).
pub fn job_finished(state: i32) -> bool {
    matches!(
        JobState::try_from(state),
        Ok(JobState::Completed | JobState::Failed | JobState::Cancelled | JobState::Timeout)
    )
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Node<'a> {
    pub name: &'a str,
    pub state: &'static str,
    pub reason: &'a str,
    pub slots: u32,
    pub jobs: &'a [u64],
    pub last_seen_ms: u64,
    pub address: &'a str,
    pub metrics_url: &'a str,
    pub boot_id: u64,
}

impl<'a> From<&'a NodeInfo> for Node<'a> {
    fn from(n: &'a NodeInfo) -> Self {
        Node {
            name: &n.name,
            state: node_state(n.state),
            reason: &n.reason,
            slots: n.slots,
            jobs: &n.jobs,
            last_seen_ms: n.last_seen_ms,
            address: &n.address,
            metrics_url: &n.metrics_url,
            boot_id: n.boot_id,
        }
    }
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Exit<'a> {
    pub rank: u32,
    pub node: &'a str,
    pub code: i32,
    pub signal: i32,
}

impl<'a> From<&'a RankExit> for Exit<'a> {
    fn from(e: &'a RankExit) -> Self {
        Exit {
            rank: e.rank,
            node: &e.node,
            code: e.code,
            signal: e.signal,
        }
    }
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Job<'a> {
    pub id: u64,
    pub name: &'a str,
    pub user: &'a str,
    pub uid: u32,
    pub gid: u32,
    pub state: &'static str,
    pub reason: &'a str,
    /// The allocation, in rank order (empty until the job is placed).
    pub nodes: &'a [String],
    /// The number of nodes asked for (spec.nodes).
    pub nodes_requested: u32,
    pub ppn: u32,
    pub argv: &'a [String],
    pub cwd: &'a str,
    pub time_limit_ms: u64,
    pub submit_time_ms: u64,
    pub start_time_ms: u64,
    pub end_time_ms: u64,
    pub exit_status: i32,
    pub exits: Vec<Exit<'a>>,
    /// Its row in the gang-scheduling matrix.
    pub slot: u32,
    /// Preempted: placed, but not its turn (time sharing).
    pub frozen: bool,
}

impl<'a> From<&'a JobInfo> for Job<'a> {
    fn from(j: &'a JobInfo) -> Self {
        let (nodes_requested, ppn, argv, cwd, time_limit_ms) = match &j.spec {
            Some(s) => (
                s.nodes,
                s.ppn,
                s.argv.as_slice(),
                s.cwd.as_str(),
                s.time_limit_ms,
            ),
            None => (0, 0, &[][..], "", 0),
        };
        Job {
            id: j.id,
            name: &j.name,
            user: &j.user,
            uid: j.uid,
            gid: j.gid,
            state: job_state(j.state),
            reason: &j.reason,
            nodes: &j.nodes,
            nodes_requested,
            ppn,
            argv,
            cwd,
            time_limit_ms,
            submit_time_ms: j.submit_time_ms,
            start_time_ms: j.start_time_ms,
            end_time_ms: j.end_time_ms,
            exit_status: j.exit_status,
            exits: j.exits.iter().map(Exit::from).collect(),
            slot: j.slot,
            frozen: j.frozen,
        }
    }
}

#[derive(Debug, Serialize, PartialEq)]
pub struct MatrixRow {
    pub slot: u32,
    /// The job in each node's cell, in the order of `nodes`; null: free.
    pub jobs: Vec<Option<u64>>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Matrix<'a> {
    pub nodes: &'a [String],
    pub rows: Vec<MatrixRow>,
    pub current: u32,
    pub running: &'a [u64],
    pub quantum_ms: u64,
    pub preemption: &'a str,
    pub switches: u64,
    pub switch_last_s: f64,
    pub switch_median_s: f64,
    pub switch_p99_s: f64,
    pub quiesce_median_s: f64,
    pub unanswered: u64,
    pub silent: u64,
}

impl<'a> From<&'a MatrixReply> for Matrix<'a> {
    fn from(m: &'a MatrixReply) -> Self {
        let st = m.stats.unwrap_or_default();
        Matrix {
            nodes: &m.nodes,
            rows: m
                .rows
                .iter()
                .map(|r| MatrixRow {
                    slot: r.slot,
                    jobs: r
                        .cells
                        .iter()
                        .map(|c| (c.job != 0).then_some(c.job))
                        .collect(),
                })
                .collect(),
            current: m.current,
            running: &m.running,
            quantum_ms: m.quantum_ms,
            preemption: &m.preemption,
            switches: st.switches,
            switch_last_s: st.last_s,
            switch_median_s: st.median_s,
            switch_p99_s: st.p99_s,
            quiesce_median_s: st.quiesce_median_s,
            unanswered: st.unanswered,
            silent: st.silent,
        }
    }
}

pub fn nodes(nodes: &[NodeInfo]) -> Vec<Node<'_>> {
    nodes.iter().map(Node::from).collect()
}

pub fn jobs(jobs: &[JobInfo]) -> Vec<Job<'_>> {
    jobs.iter().map(Job::from).collect()
}

/// Pretty-printed JSON and a newline; fields in the order of the structs.
pub fn to_string<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("plain data serializes");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use score_proto::v1::JobSpec;
    use serde_json::json;

    fn node(n: &NodeInfo) -> serde_json::Value {
        serde_json::to_value(Node::from(n)).unwrap()
    }
    fn job(j: &JobInfo) -> serde_json::Value {
        serde_json::from_str(&to_string(&Job::from(j))).unwrap()
    }
    fn nodes_value(n: &[NodeInfo]) -> serde_json::Value {
        serde_json::to_value(nodes(n)).unwrap()
    }

    #[test]
    fn node_fields_are_stable() {
        let n = NodeInfo {
            name: "n1".into(),
            state: NodeState::Drained as i32,
            reason: "disk".into(),
            slots: 8,
            jobs: vec![3, 4],
            last_seen_ms: 1700000000000,
            address: "10.0.0.1:41000".into(),
            metrics_url: "http://10.0.0.1:7102/metrics".into(),
            boot_id: 99,
        };
        assert_eq!(
            node(&n),
            json!({
                "name": "n1", "state": "drained", "reason": "disk", "slots": 8,
                "jobs": [3, 4], "last_seen_ms": 1700000000000u64,
                "address": "10.0.0.1:41000", "metrics_url": "http://10.0.0.1:7102/metrics",
                "boot_id": 99
            })
        );
        assert_eq!(
            nodes_value(&[n.clone(), n]).as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(nodes_value(&[]), json!([]));
    }

    #[test]
    fn job_fields_are_stable() {
        let j = JobInfo {
            id: 12,
            name: "prog".into(),
            uid: 1000,
            gid: 100,
            user: "alice".into(),
            spec: Some(JobSpec {
                nodes: 4,
                ppn: 2,
                argv: vec!["./prog".into(), "x".into()],
                cwd: "/home/alice".into(),
                time_limit_ms: 60000,
                ..Default::default()
            }),
            state: JobState::Failed as i32,
            reason: "rank 3 on n2 exited with status 7".into(),
            nodes: vec!["n1".into(), "n2".into(), "n3".into(), "n4".into()],
            submit_time_ms: 1,
            start_time_ms: 2,
            end_time_ms: 3,
            exit_status: 7,
            exits: vec![RankExit {
                rank: 3,
                node: "n2".into(),
                code: 7,
                signal: 0,
            }],
            ..Default::default()
        };
        assert_eq!(
            job(&j),
            json!({
                "id": 12, "name": "prog", "user": "alice", "uid": 1000, "gid": 100,
                "state": "failed", "reason": "rank 3 on n2 exited with status 7",
                "nodes": ["n1", "n2", "n3", "n4"], "nodes_requested": 4, "ppn": 2,
                "argv": ["./prog", "x"], "cwd": "/home/alice", "time_limit_ms": 60000,
                "submit_time_ms": 1, "start_time_ms": 2, "end_time_ms": 3, "exit_status": 7,
                "exits": [{"rank": 3, "node": "n2", "code": 7, "signal": 0}],
                "slot": 0, "frozen": false
            })
        );
        // A record without its spec still has every field.
        let bare = job(&JobInfo::default());
        assert_eq!(bare["state"], "unknown");
        assert_eq!(bare["nodes_requested"], 0);
        assert_eq!(bare["argv"], json!([]));
    }

    #[test]
    fn fields_keep_their_order() {
        let s = to_string(&Node::from(&NodeInfo::default()));
        let name = s.find("\"name\"").unwrap();
        let state = s.find("\"state\"").unwrap();
        let boot = s.find("\"boot_id\"").unwrap();
        assert!(name < state && state < boot, "{s}");
        assert!(s.ends_with("}\n"));
    }

    #[test]
    fn state_words() {
        let all: Vec<_> = (0..=9).map(job_state).collect();
        assert_eq!(
            all,
            [
                "unknown",
                "pending",
                "launching",
                "running",
                "completing",
                "completed",
                "failed",
                "cancelled",
                "timeout",
                "unknown"
            ]
        );
        assert_eq!(
            (0..=4).map(node_state).collect::<Vec<_>>(),
            ["unknown", "up", "down", "drained", "unknown"]
        );
        assert!(job_finished(JobState::Timeout as i32));
        assert!(!job_finished(JobState::Completing as i32));
    }
}
