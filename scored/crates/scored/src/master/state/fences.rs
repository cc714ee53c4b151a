//! Fences between the agents of a job (PMIx fences, PMI-1 barriers): each
//! node contributes its ranks' data; when every node of the job has, every
//! node receives all the contributions concatenated in node order.  (A
//! single-node job's fences complete inside its agent and never come here.)

use score_proto::v1::{master_message, FenceComplete};
use std::collections::BTreeMap;

use super::State;

/// The contributions of the fences in progress, by job and fence sequence
/// number, then by the contributing node's index in the job's node list.
#[derive(Default)]
pub struct Fences {
    open: BTreeMap<u64, BTreeMap<u64, BTreeMap<usize, Vec<u8>>>>,
    /// The last fence completed of each job, (seq, data): a node can be at
    /// most one fence behind another, so a restarted master that hears of it
    /// from one node completes it for the nodes its predecessor's completion
    /// did not reach.
    done: BTreeMap<u64, (u64, Vec<u8>)>,
}

impl Fences {
    /// Records the contribution of node `index` of `nodes` to fence `seq` of
    /// `job`; once the last node has contributed, returns the fence's data.
    pub fn contribute(
        &mut self,
        job: u64,
        seq: u64,
        index: usize,
        nodes: usize,
        data: Vec<u8>,
    ) -> Option<Vec<u8>> {
        let fences = self.open.entry(job).or_default();
        let contributions = fences.entry(seq).or_default();
        contributions.insert(index, data);
        if contributions.len() < nodes {
            return None;
        }
        let complete = fences.remove(&seq)?;
        if fences.is_empty() {
            self.open.remove(&job);
        }
        let data: Vec<u8> = complete.into_values().flatten().collect();
        self.done.insert(job, (seq, data.clone()));
        Some(data)
    }

    /// The data of fence `seq` of `job` if it completed already.
    pub fn completed(&self, job: u64, seq: u64) -> Option<&[u8]> {
        match self.done.get(&job) {
            Some((s, data)) if *s == seq => Some(data),
            _ => None,
        }
    }

    /// A node reports fence `seq` of `job` completed with `data` (a restarted
    /// master): remembered, and the node indices that contributed to it here
    /// are returned, to be told.
    pub fn learn_completed(&mut self, job: u64, seq: u64, data: Vec<u8>) -> Vec<usize> {
        if self.done.get(&job).is_some_and(|(s, _)| *s >= seq) {
            return Vec::new();
        }
        self.done.insert(job, (seq, data));
        let Some(fences) = self.open.get_mut(&job) else {
            return Vec::new();
        };
        let waiting = fences
            .remove(&seq)
            .map(|c| c.into_keys().collect())
            .unwrap_or_default();
        if fences.is_empty() {
            self.open.remove(&job);
        }
        waiting
    }

    /// The job ended or was forgotten: its open fences will never complete.
    pub fn forget(&mut self, job: u64) {
        self.open.remove(&job);
        self.done.remove(&job);
    }
}

impl State {
    /// Node `node` contributes to fence `seq` of job `id`.
    pub(super) fn fence(&mut self, id: u64, node: &str, seq: u64, data: Vec<u8>) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        let Some(index) = job.info.nodes.iter().position(|n| n == node) else {
            return;
        };
        // Completed already (a restarted master heard so from another node):
        // this node missed the completion.
        if let Some(done) = self.fences.completed(id, seq) {
            let done = done.to_vec();
            self.fence_complete_to(id, node, seq, done);
            return;
        }
        let Some(data) = self
            .fences
            .contribute(id, seq, index, job.info.nodes.len(), data)
        else {
            return;
        };
        for name in job.info.nodes.clone() {
            self.fence_complete_to(id, &name, seq, data.clone());
        }
    }

    /// A restarted master hears from `node` that fence `seq` of job `id`
    /// completed there: the nodes still waiting for it get its data.
    pub(super) fn fence_completed_elsewhere(&mut self, id: u64, seq: u64, data: Vec<u8>) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        let nodes = job.info.nodes.clone();
        for index in self.fences.learn_completed(id, seq, data.clone()) {
            if let Some(name) = nodes.get(index) {
                self.fence_complete_to(id, name, seq, data.clone());
            }
        }
    }

    /// Tells `node` that fence `seq` of job `id` completed with `data`.  A
    /// completion too large for one message of the agent's stream (which
    /// it would break) fails the fence instead, for this job's ranks alone;
    /// every completion goes this way, a restarted master's too.
    fn fence_complete_to(&mut self, id: u64, node: &str, seq: u64, data: Vec<u8>) {
        let ok = data.len() <= score_proto::FENCE_MAX_BYTES;
        if !ok {
            tracing::warn!(
                job = id,
                node,
                seq,
                bytes = data.len(),
                limit = score_proto::FENCE_MAX_BYTES,
                "a fence's data is too large to send to the agent: the fence fails"
            );
        }
        let data = if ok { data } else { Vec::new() };
        self.links.send(
            &self.nodes,
            node,
            id,
            master_message::Msg::Fence(FenceComplete { seq, data, ok }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::Fences;

    #[test]
    fn a_fence_completed_before_a_restart_is_completed_for_the_nodes_it_missed() {
        let mut f = Fences::default();
        // The restarted master: node 1 still waits for fence 3 ...
        assert_eq!(f.contribute(7, 3, 1, 2, b"b".to_vec()), None);
        // ... node 0 says it completed, with its data: node 1 is told.
        assert_eq!(f.learn_completed(7, 3, b"ab".to_vec()), vec![1]);
        assert_eq!(f.completed(7, 3), Some(&b"ab"[..]));
        // Heard again, or of an older fence: nothing more to do.
        assert!(f.learn_completed(7, 3, b"ab".to_vec()).is_empty());
        assert!(f.learn_completed(7, 2, b"x".to_vec()).is_empty());
        // The next fence completes as usual, and is then the one remembered.
        assert_eq!(f.contribute(7, 4, 0, 2, b"c".to_vec()), None);
        assert_eq!(
            f.contribute(7, 4, 1, 2, b"d".to_vec()),
            Some(b"cd".to_vec())
        );
        assert_eq!(f.completed(7, 3), None);
        assert_eq!(f.completed(7, 4), Some(&b"cd"[..]));
        f.forget(7);
        assert_eq!(f.completed(7, 4), None);
    }

    /// Node `node`'s contribution to fence `seq` of job `id`.
    fn contribute(h: &mut Harness, node: &str, id: u64, seq: u64, data: Vec<u8>) {
        h.agent_says(
            node,
            id,
            agent_message::Msg::Fence(FenceContribution { seq, data }),
        );
    }

    #[test]
    fn fences_complete_when_every_node_contributed_in_node_order() {
        let mut h = harness(2);
        let (id, _rx) = h.submit(spec(2, 1));
        h.launch_ok(id);
        h.agent_hears("n1");
        h.agent_hears("n2");
        contribute(&mut h, "n2", id, 0, b"B".to_vec());
        assert!(h.agent_hears("n1").is_empty());
        contribute(&mut h, "n1", id, 0, b"A".to_vec());
        for n in ["n1", "n2"] {
            let m = h.agent_hears(n);
            assert!(
                matches!(&m[..], [master_message::Msg::Fence(f)] if f.data == b"AB" && f.seq == 0 && f.ok)
            );
        }
    }

    #[test]
    fn a_fence_too_large_for_one_message_fails_for_every_node() {
        let mut h = harness(2);
        let (id, _rx) = h.submit(spec(2, 1));
        h.launch_ok(id);
        h.agent_hears("n1");
        h.agent_hears("n2");
        // Each node's share fits; both together do not.
        let half = score_proto::FENCE_MAX_BYTES / 2 + 1;
        for n in ["n1", "n2"] {
            contribute(&mut h, n, id, 0, vec![7; half]);
        }
        let failed = |m: &[master_message::Msg]| matches!(m, [master_message::Msg::Fence(f)] if f.data.is_empty() && f.seq == 0 && !f.ok);
        for n in ["n1", "n2"] {
            let m = h.agent_hears(n);
            assert!(failed(&m), "{n}: {m:?}");
        }
        // A node that contributes again (it missed the completion, as after
        // a master restart) is told the same: the fence failed.
        contribute(&mut h, "n1", id, 0, vec![7; half]);
        let m = h.agent_hears("n1");
        assert!(failed(&m), "again: {m:?}");
    }
}
