//! PMIx fences between the agents of a job: each node contributes its
//! ranks' data; when every node of the job has, every node receives all the
//! contributions concatenated in node order.  (A single-node job's fences
//! complete inside its agent and never come here.)

use score_proto::v1::{master_message, FenceComplete};
use std::collections::BTreeMap;

use super::State;

/// The contributions of the fences in progress, by job and fence sequence
/// number, then by the contributing node's index in the job's node list.
#[derive(Default)]
pub struct Fences {
    open: BTreeMap<u64, BTreeMap<u64, BTreeMap<usize, Vec<u8>>>>,
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
        Some(complete.into_values().flatten().collect())
    }

    /// The job ended or was forgotten: its open fences will never complete.
    pub fn forget(&mut self, job: u64) {
        self.open.remove(&job);
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
        let Some(data) = self
            .fences
            .contribute(id, seq, index, job.info.nodes.len(), data)
        else {
            return;
        };
        for name in &job.info.nodes {
            self.links.send(
                &self.nodes,
                name,
                id,
                master_message::Msg::Fence(FenceComplete {
                    seq,
                    data: data.clone(),
                    ok: true,
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;

    #[test]
    fn fences_complete_when_every_node_contributed_in_node_order() {
        let mut h = harness(2);
        let (id, _rx) = h.submit(spec(2, 1));
        h.launch_ok(id);
        h.agent_hears("n1");
        h.agent_hears("n2");
        h.agent_says(
            "n2",
            id,
            agent_message::Msg::Fence(FenceContribution {
                seq: 0,
                data: b"B".to_vec(),
            }),
        );
        assert!(h.agent_hears("n1").is_empty());
        h.agent_says(
            "n1",
            id,
            agent_message::Msg::Fence(FenceContribution {
                seq: 0,
                data: b"A".to_vec(),
            }),
        );
        for n in ["n1", "n2"] {
            let m = h.agent_hears(n);
            assert!(
                matches!(&m[..], [master_message::Msg::Fence(f)] if f.data == b"AB" && f.seq == 0 && f.ok)
            );
        }
    }
}
