//! The state a restarted master needs, as one message ([`SavedState`],
//! `scored/proto/state.proto`): the job table with the queue and history,
//! the drained nodes and the gang matrix.  What is not saved is rebuilt:
//! the agents report what their nodes run when they re-attach
//! ([`super::recovery`]), scruns what they have printed when they do.
//!
//! [`super::super::store`] writes it to the state directory.

use score_proto::v1::{MatrixCell, MatrixRow, SavedState};
use std::collections::BTreeMap;

use super::jobs::{Jobs, SavedJobs};
use super::{now_ms, State};

impl State {
    /// The state to save now.
    pub fn snapshot(&self) -> SavedState {
        let SavedJobs {
            jobs,
            queue,
            history,
            next_id,
        } = self.jobs.save();
        SavedState {
            next_job: next_id,
            next_switch: self.gang.next_switch(),
            saved_ms: now_ms(),
            jobs,
            queue,
            history,
            nodes: self.nodes.save(),
            matrix: self
                .gang
                .matrix
                .rows()
                .iter()
                .enumerate()
                .map(|(slot, cells)| MatrixRow {
                    slot: slot as u32,
                    cells: cells
                        .iter()
                        .map(|(node, &job)| MatrixCell {
                            node: node.clone(),
                            job,
                        })
                        .collect(),
                })
                .collect(),
            current_row: self.gang.matrix.current() as u32,
        }
    }

    /// Takes over a saved state, in a master that has just started (no
    /// agent attached, no scrun following): then waits for the agents and
    /// scruns of its active jobs ([`State::recover`]).
    pub fn restore(&mut self, saved: SavedState) {
        self.jobs = Jobs::restore(SavedJobs {
            jobs: saved.jobs,
            queue: saved.queue,
            history: saved.history,
            next_id: saved.next_job,
        });
        let busy = self
            .jobs
            .ids()
            .into_iter()
            .filter_map(|id| self.jobs.get(id))
            .filter(|j| j.is_active())
            .flat_map(|j| j.info.nodes.iter().cloned())
            .collect();
        self.nodes.restore(&saved.nodes, &busy);
        self.gang.restore_next_switch(saved.next_switch);
        // Cells of jobs the table no longer has are dropped.
        let rows: Vec<BTreeMap<String, u64>> = saved
            .matrix
            .into_iter()
            .map(|row| {
                row.cells
                    .into_iter()
                    .filter(|c| self.jobs.get(c.job).is_some_and(|j| j.is_active()))
                    .map(|c| (c.node, c.job))
                    .collect()
            })
            .collect();
        self.gang.matrix.restore(rows, saved.current_row as usize);
        self.recover();
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::Requester;

    #[test]
    fn a_snapshot_restores_the_same_jobs_queue_history_and_matrix() {
        let mut h = harness_with(2, 2);
        let (a, _ra) = h.submit(spec(2, 1));
        let (b, _rb) = h.submit(spec(2, 1));
        let (c, _rc) = h.submit(spec(1, 1));
        let (d, _rd) = h.submit(spec(1, 1));
        h.launch_ok(a);
        h.st.cancel(d, true, USER, "no longer wanted").unwrap();
        let saved = h.st.snapshot();

        let mut r = restarted(2, 2, saved.clone());
        assert_eq!(r.st.list_jobs(true), h.st.list_jobs(true));
        assert_eq!(r.st.snapshot().jobs, saved.jobs);
        assert_eq!(r.st.snapshot().queue, vec![c]);
        assert_eq!(r.st.snapshot().history, vec![d]);
        assert_eq!(r.st.snapshot().matrix, saved.matrix);
        assert_eq!(r.state(b), JobState::Pending);
        r.attach("n1", Vec::new());
        r.attach("n2", Vec::new());
        let (e, _re) = r.submit(spec(1, 1));
        assert!(e > d, "ids are never reused: {e} after {d}");
    }

    #[test]
    fn a_crash_that_loses_the_last_jobs_lends_their_ids_to_no_new_job() {
        let mut h = harness(2);
        let disk = h.durable();
        let (a, _ra) = h.submit(spec(1, 1));
        // The block of ids was on disk before a's id went out.
        assert_eq!(disk.saves(), 1);
        assert!(
            disk.last_next_job() > a,
            "{} after {a}",
            disk.last_next_job()
        );
        // The background saver's last snapshot; then b, which the crash
        // loses, while its ranks may run on and its scrun come back.
        let saved = h.st.snapshot();
        let (b, _rb) = h.submit(spec(1, 1));
        assert_eq!(disk.saves(), 1, "one synchronous save per block of ids");

        let mut r = restarted(2, 1, saved);
        let disk = r.durable();
        r.attach("n1", Vec::new());
        r.attach("n2", Vec::new());
        let (c, _rc) = r.submit(spec(1, 1));
        assert!(c > b, "the lost job's id {b} is not handed out again: {c}");
        // The restarted master reserved a block of its own first.
        assert_eq!(disk.saves(), 1);
        assert!(disk.last_next_job() > c);
    }

    #[test]
    fn a_restart_forgets_idle_nodes_that_are_no_longer_configured() {
        // Four nodes: a job on n3, n4 drained, n2 idle.
        let root = Requester { uid: 0, gid: 0 };
        let mut h = harness_with(4, 1);
        for n in ["n1", "n2", "n4"] {
            h.st.drain(n, "disk", root).unwrap();
        }
        let (a, _ra) = h.submit(spec(1, 1));
        h.launch_ok(a);
        assert_eq!(h.st.list_jobs(false)[0].nodes, vec!["n3".to_string()]);
        h.st.resume("n1", root).unwrap();
        h.st.resume("n2", root).unwrap();
        let saved = h.st.snapshot();

        // The restarted master is configured with n1 only.
        let r = restarted(1, 1, saved);
        let names: Vec<String> = r.st.list_nodes().into_iter().map(|n| n.name).collect();
        assert_eq!(
            names,
            ["n1", "n3", "n4"],
            "configured, drained and busy nodes stay; idle ones go"
        );
    }
}
