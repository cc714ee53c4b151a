//! The queue and allocation: a submitted job is checked, queued, and placed
//! in the gang-scheduling matrix when the head of the queue finds room
//! (space sharing first: whole nodes, idle ones preferred), in strict
//! submission order; then it starts when its row is active.

use score_proto::v1::{job_event, JobSpec};
use tonic::Status;

use super::stats;
use super::{ClientTx, Requester, State};

impl State {
    /// A new job from scrun.  On success the job is queued (and maybe
    /// launched) and `client` receives its events.
    pub fn submit(
        &mut self,
        spec: JobSpec,
        who: Requester,
        user: String,
        client: ClientTx,
    ) -> Result<u64, Status> {
        self.validate(&spec, who)?;
        self.reserve_ids();
        let id = self.jobs.add(spec, who, user);
        self.links.follow(id, client);
        self.links.changed();
        if let Some(job) = self.jobs.get(id) {
            self.links
                .emit(id, job_event::Event::Accepted(job.info.clone()));
        }
        self.flow_submitted(id);
        self.metrics.jobs_submitted.inc();
        self.schedule();
        self.update_pending_reasons();
        Ok(id)
    }

    fn validate(&self, spec: &JobSpec, who: Requester) -> Result<(), Status> {
        if spec.argv.first().is_none_or(String::is_empty) {
            return Err(Status::invalid_argument("the job has no program to run"));
        }
        if spec.nodes == 0 || spec.ppn == 0 {
            return Err(Status::invalid_argument(format!(
                "the job asks for {}x{} processes: nodes and processes per node must be at least 1",
                spec.nodes, spec.ppn
            )));
        }
        if who.uid == 0 && !self.limits.allow_root_jobs {
            return Err(Status::permission_denied(
                "jobs of root are refused by this cluster (master.allow_root_jobs = false); submit as an ordinary user",
            ));
        }
        if spec.cwd.is_empty() || !spec.cwd.starts_with('/') {
            return Err(Status::invalid_argument(
                "the job's working directory must be an absolute path",
            ));
        }
        self.nodes.check_fits(spec)
    }

    /// Place queued jobs in the matrix, in order, while the head of the
    /// queue finds a place; start those whose turn it is.
    pub fn schedule(&mut self) {
        while let Some(id) = self.jobs.head() {
            let Some(spec) = self.jobs.get(id).and_then(|j| j.info.spec.clone()) else {
                // Not a job that can be placed (every submitted job has a
                // spec): it must not block the queue.
                self.jobs.dequeue(id);
                continue;
            };
            let mut usable = self.nodes.usable(spec.ppn);
            if !spec.hosts.is_empty() {
                // Exactly the named nodes, in their order, once all are usable.
                usable = if spec.hosts.iter().all(|h| usable.contains(h)) {
                    spec.hosts.clone()
                } else {
                    Vec::new()
                };
            }
            let Some((row, mut nodes)) = self.gang.matrix.place(id, spec.nodes as usize, &usable)
            else {
                break;
            };
            if !spec.hosts.is_empty() {
                // The matrix took every named node; the ranks follow the
                // order the job gave, not the matrix's preference.
                nodes = spec.hosts.clone();
            }
            self.jobs.dequeue(id);
            self.nodes.place(id, &nodes);
            if let Some(job) = self.jobs.get_mut(id) {
                job.place(row, nodes);
                stats::queued(&self.metrics, job.submitted);
            }
        }
        self.reconcile();
        self.refresh_gauges();
    }

    /// Tells each pending job's scrun why it waits, when that changed.
    pub(super) fn update_pending_reasons(&mut self) {
        for info in self.jobs.pending_reasons(self.nodes.free()) {
            self.links.emit(info.id, job_event::Event::State(info));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;

    #[test]
    fn disjoint_jobs_run_at_once_and_a_third_waits_in_order() {
        let mut h = harness(4);
        let (a, _ra) = h.submit(spec(2, 1));
        let (b, _rb) = h.submit(spec(2, 1));
        let (c, _rc) = h.submit(spec(1, 1));
        assert_eq!(h.state(a), JobState::Launching);
        assert_eq!(h.state(b), JobState::Launching);
        assert_eq!(h.state(c), JobState::Pending);
        let nodes_a = h.st.job_info(a).unwrap().nodes;
        let nodes_b = h.st.job_info(b).unwrap().nodes;
        assert!(nodes_a.iter().all(|n| !nodes_b.contains(n)));
        assert!(h
            .st
            .job_info(c)
            .unwrap()
            .reason
            .contains("waiting for 1 node(s)"));
        // a ends: c gets one of its nodes.
        h.launch_ok(a);
        h.exit(a, &nodes_a[0], 0, 0, 0);
        h.exit(a, &nodes_a[1], 1, 0, 0);
        h.clean_all(a);
        assert_eq!(h.state(c), JobState::Launching);
    }

    #[test]
    fn strict_order_keeps_a_small_job_behind_a_big_one() {
        let mut h = harness(2);
        let (_a, _ra) = h.submit(spec(1, 1));
        let (big, _rb) = h.submit(spec(2, 1));
        let (small, _rc) = h.submit(spec(1, 1));
        assert_eq!(h.state(big), JobState::Pending);
        assert_eq!(h.state(small), JobState::Pending, "no overtaking");
        assert!(h.st.job_info(small).unwrap().reason.contains("behind 1"));
    }

    #[test]
    fn impossible_jobs_are_refused_with_reasons() {
        let mut h = harness(2);
        let (tx, _r) = unbounded_channel();
        let e =
            h.st.submit(spec(3, 1), USER, "a".into(), tx.clone())
                .unwrap_err();
        assert_eq!(e.message(), "the job asks for 3 nodes; the cluster has 2");
        let e =
            h.st.submit(spec(1, 5), USER, "a".into(), tx.clone())
                .unwrap_err();
        assert!(
            e.message().contains("only 0 nodes have that many slots"),
            "{}",
            e.message()
        );
        let e = h.st.submit(spec(0, 1), USER, "a".into(), tx).unwrap_err();
        assert!(e.message().contains("at least 1"), "{}", e.message());
    }
}
