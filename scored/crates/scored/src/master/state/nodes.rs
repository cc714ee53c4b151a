//! The node registry: every node the master knows, whether it is up, down or
//! drained, its agent's connection, heartbeats and boot id, and the jobs
//! placed on it.
//!
//! Plain data: a node's connection is a number, the channel to its agent is
//! in [`super::Links`].

use score_proto::v1::{JobSpec, NodeInfo, NodeState, Register, SavedNode};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use tonic::Status;

use super::{now_ms, AgentTx, Requester, State};

pub struct Node {
    pub name: String,
    pub slots: u32,
    /// The id of the live agent connection; None while the node is down.
    pub conn: Option<u64>,
    pub drained: Option<String>,
    pub down_reason: String,
    /// The jobs placed on it that it has not cleaned yet.
    pub jobs: BTreeSet<u64>,
    pub last_seen: Instant,
    pub last_seen_ms: u64,
    pub address: String,
    pub metrics_url: String,
    pub boot_id: u64,
}

impl Node {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            slots: 0,
            conn: None,
            drained: None,
            down_reason: "never registered".into(),
            jobs: BTreeSet::new(),
            last_seen: Instant::now(),
            last_seen_ms: 0,
            address: String::new(),
            metrics_url: String::new(),
            boot_id: 0,
        }
    }

    pub fn state(&self) -> NodeState {
        match (&self.conn, &self.drained) {
            (None, _) => NodeState::Down,
            (Some(_), Some(_)) => NodeState::Drained,
            (Some(_), None) => NodeState::Up,
        }
    }

    fn is_usable(&self, ppn: u32) -> bool {
        self.state() == NodeState::Up && self.slots >= ppn
    }

    pub fn info(&self) -> NodeInfo {
        NodeInfo {
            name: self.name.clone(),
            state: self.state() as i32,
            reason: match self.state() {
                NodeState::Down => self.down_reason.clone(),
                NodeState::Drained => self.drained.clone().unwrap_or_default(),
                _ => String::new(),
            },
            slots: self.slots,
            jobs: self.jobs.iter().copied().collect(),
            last_seen_ms: self.last_seen_ms,
            address: self.address.clone(),
            metrics_url: self.metrics_url.clone(),
            boot_id: self.boot_id,
        }
    }
}

/// What an agent says about itself when it registers.
pub struct Registration {
    pub slots: u32,
    pub boot_id: u64,
    pub address: String,
    pub metrics_url: String,
}

/// The nodes by name.
pub struct Nodes {
    table: BTreeMap<String, Node>,
    next_conn: u64,
}

impl Nodes {
    /// The configured nodes, listed as down ("never registered") until their
    /// agents register.
    pub fn new(expected: &[String]) -> Self {
        Self {
            table: expected.iter().map(|n| (n.clone(), Node::new(n))).collect(),
            next_conn: 1,
        }
    }

    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.table.keys()
    }

    /// The live connection of `name`, if it is up.
    pub fn conn(&self, name: &str) -> Option<u64> {
        self.table.get(name).and_then(|n| n.conn)
    }

    pub fn is_up(&self, name: &str) -> bool {
        self.conn(name).is_some()
    }

    /// Whether `conn` is the live connection of `name` (not a stale stream
    /// of a replaced agent).
    pub fn is_current(&self, name: &str, conn: u64) -> bool {
        self.conn(name) == Some(conn)
    }

    /// The node is up with a new connection (added if it was not known);
    /// returns the connection's id.
    pub fn attach(&mut self, name: &str, reg: Registration) -> u64 {
        let conn = self.next_conn;
        self.next_conn += 1;
        let node = self
            .table
            .entry(name.to_string())
            .or_insert_with(|| Node::new(name));
        node.conn = Some(conn);
        node.slots = reg.slots;
        node.boot_id = reg.boot_id;
        node.address = reg.address;
        node.metrics_url = reg.metrics_url;
        node.last_seen = Instant::now();
        node.last_seen_ms = now_ms();
        node.down_reason.clear();
        conn
    }

    /// A message came from the node's agent.
    pub fn seen(&mut self, name: &str) {
        if let Some(node) = self.table.get_mut(name) {
            node.last_seen = Instant::now();
            node.last_seen_ms = now_ms();
        }
    }

    /// The node is down: returns its connection (now closed) and the jobs
    /// that were placed on it, or None for an unknown node.
    pub fn down(&mut self, name: &str, why: &str) -> Option<(Option<u64>, BTreeSet<u64>)> {
        let node = self.table.get_mut(name)?;
        node.down_reason = why.to_string();
        Some((node.conn.take(), std::mem::take(&mut node.jobs)))
    }

    /// Nodes that are up and whose agent has been silent longer than
    /// `timeout`.
    pub fn silent(&self, timeout: Duration) -> Vec<String> {
        self.table
            .values()
            .filter(|n| n.conn.is_some() && n.last_seen.elapsed() > timeout)
            .map(|n| n.name.clone())
            .collect()
    }

    /// Nodes a job of `ppn` processes per node may be placed on.
    pub fn usable(&self, ppn: u32) -> Vec<String> {
        self.table
            .values()
            .filter(|n| n.is_usable(ppn))
            .map(|n| n.name.clone())
            .collect()
    }

    /// Nodes that are up and hold no job.
    pub fn free(&self) -> usize {
        self.table
            .values()
            .filter(|n| n.is_usable(1) && n.jobs.is_empty())
            .count()
    }

    pub fn count(&self, state: NodeState) -> usize {
        self.table.values().filter(|n| n.state() == state).count()
    }

    /// `job` is placed on `nodes`.
    pub fn place(&mut self, job: u64, nodes: &[String]) {
        for name in nodes {
            if let Some(node) = self.table.get_mut(name) {
                node.jobs.insert(job);
            }
        }
    }

    /// `job` is gone from `node` (cleaned, or finished).
    pub fn release(&mut self, job: u64, node: &str) {
        if let Some(n) = self.table.get_mut(node) {
            n.jobs.remove(&job);
        }
    }

    /// Refuses a job the cluster could never run.  A node that is down
    /// counts as big enough: it may come back with any number of slots.
    pub fn check_fits(&self, spec: &JobSpec) -> Result<(), Status> {
        let known = self.table.len() as u32;
        if !spec.hosts.is_empty() {
            if spec.hosts.len() as u32 != spec.nodes {
                return Err(Status::invalid_argument(format!(
                    "the job names {} hosts but asks for {} nodes",
                    spec.hosts.len(),
                    spec.nodes
                )));
            }
            let mut seen = BTreeSet::new();
            for h in &spec.hosts {
                if !self.table.contains_key(h) {
                    return Err(Status::invalid_argument(format!(
                        "the job asks for node {h}, which is not in the cluster"
                    )));
                }
                if !seen.insert(h) {
                    return Err(Status::invalid_argument(format!(
                        "the job names node {h} twice"
                    )));
                }
            }
        }
        if spec.nodes > known {
            return Err(Status::invalid_argument(format!(
                "the job asks for {} nodes; the cluster has {known}",
                spec.nodes
            )));
        }
        let big_enough = self
            .table
            .values()
            .filter(|n| n.slots >= spec.ppn || n.conn.is_none())
            .count() as u32;
        if big_enough < spec.nodes {
            let max = self.table.values().map(|n| n.slots).max().unwrap_or(0);
            return Err(Status::invalid_argument(format!(
                "the job asks for {} processes per node on {} nodes; only {big_enough} nodes have that many slots (the largest has {max})",
                spec.ppn, spec.nodes
            )));
        }
        Ok(())
    }

    /// Drains the node (`Some(reason)`) or resumes it (`None`).
    pub fn set_drained(&mut self, name: &str, drained: Option<String>) -> Result<NodeInfo, Status> {
        let node = self.lookup_mut(name)?;
        node.drained = drained;
        Ok(node.info())
    }

    fn lookup_mut(&mut self, name: &str) -> Result<&mut Node, Status> {
        let known: Vec<String> = self.table.keys().cloned().collect();
        self.table.get_mut(name).ok_or_else(|| {
            Status::not_found(format!("no node {name:?} (known: {})", known.join(", ")))
        })
    }

    pub fn list(&self) -> Vec<NodeInfo> {
        self.table.values().map(Node::info).collect()
    }

    /// What a restarted master must know of the nodes: which are drained.
    pub fn save(&self) -> Vec<SavedNode> {
        self.table
            .values()
            .map(|n| SavedNode {
                name: n.name.clone(),
                drained: n.drained.is_some(),
                drain_reason: n.drained.clone().unwrap_or_default(),
            })
            .collect()
    }

    /// The saved nodes: down until their agents re-attach, drained as they
    /// were.  A node that is no longer configured is kept only while it
    /// matters: it carries an active job (`busy`: until that job is
    /// settled) or an administrator drained it.  An idle one is forgotten;
    /// its agent, if it still runs, registers it again.
    pub fn restore(&mut self, saved: &[SavedNode], busy: &BTreeSet<String>) {
        for s in saved {
            let known = self.table.contains_key(&s.name);
            if !known && !s.drained && !busy.contains(&s.name) {
                continue;
            }
            let node = self
                .table
                .entry(s.name.clone())
                .or_insert_with(|| Node::new(&s.name));
            node.down_reason =
                "waiting for its agent to re-attach after a restart of the master".into();
            node.drained = s.drained.then(|| s.drain_reason.clone());
        }
    }
}

impl State {
    /// An agent registered.  Returns the connection id its stream must
    /// present for later messages.
    pub fn agent_attached(&mut self, reg: Register, address: String, tx: AgentTx) -> u64 {
        let name = reg.node.as_str();
        let slots = reg.slots;
        // A node that re-registers while we still think it is up lost its
        // previous agent: fail what ran there first.
        if self.nodes.is_up(name) {
            self.node_lost(name, "its agent restarted");
        }
        let conn = self.nodes.attach(
            name,
            Registration {
                slots,
                boot_id: reg.boot_id,
                address,
                metrics_url: reg.metrics_url.clone(),
            },
        );
        self.links.attach(conn, tx);
        tracing::info!(node = name, slots, "node up");
        self.links.changed();
        self.adopt(name, reg.held);
        self.schedule();
        self.update_pending_reasons();
        conn
    }

    /// The agent's stream ended (or went silent): the node is lost.
    pub fn agent_detached(&mut self, name: &str, conn: u64, why: &str) {
        if self.nodes.is_current(name, conn) {
            self.node_lost(name, why);
        }
    }

    /// Nodes whose agent has been silent longer than the heartbeat timeout.
    pub fn check_heartbeats(&mut self) {
        let timeout = self.limits.heartbeat_timeout;
        for name in self.nodes.silent(timeout) {
            let why = format!("no heartbeat for {} ms", timeout.as_millis());
            self.node_lost(&name, &why);
        }
    }

    /// The node is down: its connection closes, the switch in progress
    /// stops waiting for it, and its jobs fail.
    fn node_lost(&mut self, name: &str, why: &str) {
        let Some((conn, jobs)) = self.nodes.down(name, why) else {
            return;
        };
        tracing::warn!(node = name, why, "node down");
        self.links.changed();
        if let Some(conn) = conn {
            self.links.detach(conn);
        }
        self.gang.node_lost(name);
        for id in jobs {
            self.lost(id, name, why);
        }
        self.advance_switch();
        self.schedule();
        self.update_pending_reasons();
    }

    pub fn list_nodes(&self) -> Vec<NodeInfo> {
        self.nodes.list()
    }

    pub fn drain(&mut self, name: &str, reason: &str, who: Requester) -> Result<NodeInfo, Status> {
        who.require_root("drain a node")?;
        let reason = if reason.is_empty() {
            "drained by administrator".into()
        } else {
            reason.to_string()
        };
        let info = self.nodes.set_drained(name, Some(reason))?;
        self.links.changed();
        self.refresh_gauges();
        Ok(info)
    }

    pub fn resume(&mut self, name: &str, who: Requester) -> Result<NodeInfo, Status> {
        who.require_root("resume a node")?;
        let info = self.nodes.set_drained(name, None)?;
        self.links.changed();
        self.schedule();
        self.update_pending_reasons();
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;

    #[test]
    fn a_lost_node_fails_its_jobs_and_only_those() {
        let mut h = harness(4);
        let (a, mut ra) = h.submit(spec(2, 1));
        let (b, _rb) = h.submit(spec(2, 1));
        h.launch_ok(a);
        h.launch_ok(b);
        let lost = h.st.job_info(a).unwrap().nodes[1].clone();
        let conn = h.agents[&lost].0;
        h.st.agent_detached(&lost, conn, "agent disconnected");
        assert_eq!(h.state(b), JobState::Running);
        let survivor = h.st.job_info(a).unwrap().nodes[0].clone();
        assert!(h
            .agent_hears(&survivor)
            .iter()
            .any(|m| matches!(m, master_message::Msg::Cleanup(_))));
        h.agent_says(&survivor, a, agent_message::Msg::Cleaned(Cleaned {}));
        let info = finished(&mut ra).unwrap();
        assert_eq!(JobState::try_from(info.state).unwrap(), JobState::Failed);
        assert_eq!(
            info.reason,
            format!("node {lost} lost (agent disconnected)")
        );
        let node =
            h.st.list_nodes()
                .into_iter()
                .find(|n| n.name == lost)
                .unwrap();
        assert_eq!(NodeState::try_from(node.state).unwrap(), NodeState::Down);
        assert_eq!(node.reason, "agent disconnected");
    }

    #[test]
    fn drained_nodes_take_no_new_jobs_until_resumed() {
        let mut h = harness(1);
        let root = Requester { uid: 0, gid: 0 };
        h.st.drain("n1", "maintenance", root).unwrap();
        let (id, _rx) = h.submit(spec(1, 1));
        assert_eq!(h.state(id), JobState::Pending);
        let e = h.st.drain("n1", "", USER).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        assert!(
            e.message().starts_with("only root may drain a node"),
            "{e:?}"
        );
        h.st.resume("n1", root).unwrap();
        assert_eq!(h.state(id), JobState::Launching);
    }
}
