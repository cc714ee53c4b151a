//! After a restart of the master: adopting the jobs the agents kept running,
//! and the scruns that follow them again.
//!
//! A restarted master reads its saved state ([`super::saved`]).  Each job
//! that was launched waits for the agents of its nodes ([`Job::awaiting`]):
//! an agent that lost its master keeps its jobs for `[agent] master_wait_ms`
//! and, when it registers again, reports each one (`HeldJob`: started or
//! not, frozen or not, the exits and fences it has seen).  The master
//! adopts what it knows and tells the agent to clean what it does not.  A
//! node whose agent is not back within `[master] reattach_timeout_ms` has
//! lost its jobs, as a node that dies does.  Until every saved job is
//! settled, nothing new starts and the matrix does not switch.
//!
//! Each scrun re-attaches with the last chunk of output it printed per
//! rank and stream; the agents resend every later chunk they kept, and
//! scrun prints each once.  A job whose scrun is not back within the same
//! timeout is cancelled, as when its scrun goes away.
//!
//! [`Job::awaiting`]: super::jobs::Job::awaiting

use score_proto::v1::{
    job_event, master_message, CleanupJob, HeldJob, JobState, OutputAck, OutputMark,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tonic::Status;

use super::jobs::{Outcome, Stop, EXIT_CANCELLED};
use super::{now_ms, ClientTx, Requester, State, TimerKind};

impl State {
    /// The saved jobs wait for their agents and scruns; timers bound the
    /// wait.
    pub(super) fn recover(&mut self) {
        let wait = self.limits.reattach_timeout;
        let (mut active, mut awaited) = (0, 0);
        for id in self.jobs.ids() {
            let kill_grace = self.limits.kill_grace;
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            if !job.is_active() {
                continue;
            }
            active += 1;
            let nodes = job.info.nodes.clone();
            self.nodes.place(id, &nodes);
            if matches!(
                job.state(),
                JobState::Launching | JobState::Running | JobState::Completing
            ) {
                job.awaiting = nodes
                    .iter()
                    .zip(&job.cleaned)
                    .filter(|(_, &c)| !c)
                    .map(|(n, _)| n.clone())
                    .collect();
                awaited += usize::from(job.recovering());
                // The time limit counts from the start, not from now.
                let limit = job.info.spec.as_ref().map_or(0, |s| s.time_limit_ms);
                if limit > 0 && job.outcome.is_none() {
                    let started = if job.info.start_time_ms > 0 {
                        job.info.start_time_ms
                    } else {
                        now_ms()
                    };
                    let left = (started + limit).saturating_sub(now_ms());
                    self.links
                        .timer(Duration::from_millis(left), id, TimerKind::TimeLimit);
                }
                // A termination under way when the master died still ends
                // in a kill.
                if job.outcome.is_some() && !job.cleanup_sent {
                    self.links.timer(kill_grace, id, TimerKind::KillGrace);
                }
            }
            self.links.timer(wait, id, TimerKind::ClientBack);
        }
        if awaited > 0 {
            self.links.timer(wait, 0, TimerKind::AgentsBack);
        }
        tracing::info!(
            jobs = active,
            awaiting_agents = awaited,
            "restored the saved state; waiting up to {} s for agents and scruns",
            wait.as_secs_f64()
        );
        self.refresh_gauges();
    }

    /// The agent of `node` registered, reporting the jobs it `held`.
    pub(super) fn adopt(&mut self, node: &str, held: Vec<HeldJob>) {
        let held_ids: BTreeSet<u64> = held.iter().map(|h| h.job).collect();
        for h in held {
            let id = h.job;
            let Some(job) = self.jobs.get_mut(id).filter(|j| j.awaiting.contains(node)) else {
                // Ended while its node was away (or never known): the
                // agent must kill what is left of it.
                tracing::warn!(
                    node,
                    job = id,
                    "the agent still runs a job the master has ended: cleaning it"
                );
                self.links.send(
                    &self.nodes,
                    node,
                    id,
                    master_message::Msg::Cleanup(CleanupJob {}),
                );
                continue;
            };
            job.awaiting.remove(node);
            if h.launched {
                job.mark(node, false);
            }
            if h.frozen {
                job.frozen_on.insert(node.to_string());
            }
            let resend_cleanup = job.cleanup_sent;
            tracing::info!(
                node,
                job = id,
                exits = h.exits.len(),
                "adopted the job from its agent"
            );
            for exit in h.exits {
                self.rank_exited(id, exit);
            }
            if let Some(done) = h.last_fence {
                self.fence_completed_elsewhere(id, done.seq, done.data);
            }
            for f in h.fences {
                self.fence(id, node, f.seq, f.data);
            }
            if resend_cleanup && !h.cleaning {
                self.links.send(
                    &self.nodes,
                    node,
                    id,
                    master_message::Msg::Cleanup(CleanupJob {}),
                );
            }
            if self.links.follows(id) {
                self.resume_output(id, node);
            }
            self.recovered(id);
        }
        // Jobs saved on this node that its agent no longer has.
        for id in self.jobs.ids() {
            if held_ids.contains(&id) {
                continue;
            }
            let Some(job) = self.jobs.get_mut(id).filter(|j| j.awaiting.contains(node)) else {
                continue;
            };
            job.awaiting.remove(node);
            if job.cleanup_sent {
                // It cleaned the job while the master was away.
                self.cleaned(id, node);
            } else {
                self.lost(
                    id,
                    node,
                    "its agent no longer had the job when it re-attached to the restarted master",
                );
            }
            self.recovered(id);
        }
    }

    /// When every node of a saved job is back (or given up): the job takes
    /// up its life where the saved state left it.
    fn recovered(&mut self, id: u64) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        if job.recovering() {
            return;
        }
        let frozen_on = std::mem::take(&mut job.frozen_on);
        let everywhere = job
            .info
            .nodes
            .iter()
            .zip(&job.cleaned)
            .filter(|(_, &c)| !c)
            .all(|(n, _)| frozen_on.contains(n));
        if job.is_active() && job.outcome.is_none() {
            if job.state() == JobState::Launching && job.launched.iter().all(|&l| l) {
                job.info.state = JobState::Running as i32;
                if job.info.start_time_ms == 0 {
                    job.info.start_time_ms = now_ms();
                }
                self.links
                    .emit(id, job_event::Event::State(job.info.clone()));
            }
            if frozen_on.is_empty() {
                self.set_frozen(id, false);
            } else if !everywhere {
                // Caught in the middle of a switch: it runs on every node
                // again; the next quantum freezes it cleanly if it must.
                self.thaw_now(id);
            } else {
                self.set_frozen(id, true);
            }
        }
        self.maybe_finish(id);
        if !self.jobs.recovering() {
            tracing::info!("every saved job is settled: scheduling resumes");
            self.schedule();
            self.update_pending_reasons();
        }
        self.links.changed();
    }

    /// The wait for the agents is over: the nodes not back have lost their
    /// jobs.
    pub(super) fn agents_back_timeout(&mut self) {
        let why = format!(
            "its agent did not re-attach within {} s of the master's restart",
            self.limits.reattach_timeout.as_secs_f64()
        );
        for id in self.jobs.ids() {
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            // Only the jobs still waiting: one settled already has its
            // frozen state from the gang scheduler now, not from its agents.
            if !job.recovering() {
                continue;
            }
            for node in std::mem::take(&mut job.awaiting) {
                self.lost(id, &node, &why);
            }
            self.recovered(id);
        }
    }

    /// The wait for the job's scrun is over.
    pub(super) fn client_back_timeout(&mut self, id: u64) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        if self.links.follows(id) || !job.is_active() || job.outcome.is_some() {
            return;
        }
        let stop = if job.info.frozen {
            Stop::Kill
        } else {
            Stop::Terminate
        };
        let reason = format!(
            "cancelled: its scrun did not re-attach within {} s of the master's restart",
            self.limits.reattach_timeout.as_secs_f64()
        );
        self.decide(
            id,
            Outcome {
                state: JobState::Cancelled,
                reason,
                exit_status: EXIT_CANCELLED,
            },
            stop,
        );
    }

    /// scrun follows job `id` again (it lost the master, or its
    /// connection), after the chunks `delivered`.  Returns the number of
    /// its call.
    pub fn reattach(
        &mut self,
        id: u64,
        who: Requester,
        delivered: Vec<OutputMark>,
        client: ClientTx,
    ) -> Result<u64, Status> {
        let job = self.jobs.get_mut(id).ok_or_else(|| {
            Status::not_found(format!(
                "no job {id} to re-attach to (finished jobs are kept for a while, then forgotten)"
            ))
        })?;
        if !who.may_manage(&job.info) {
            return Err(Status::permission_denied(format!(
                "job {id} belongs to {} (uid {}); only its owner or root may follow it",
                job.info.user, job.info.uid
            )));
        }
        for m in delivered {
            let seq = job.delivered.entry((m.rank, m.stream)).or_default();
            *seq = (*seq).max(m.seq);
        }
        let info = job.info.clone();
        let active = job.is_active();
        let launched = matches!(
            job.state(),
            JobState::Launching | JobState::Running | JobState::Completing
        );
        let call = self.links.follow(id, client);
        tracing::info!(job = id, uid = who.uid, "scrun re-attached");
        self.links
            .emit(id, job_event::Event::Accepted(info.clone()));
        if !active {
            self.links.emit(id, job_event::Event::Finished(info));
            self.links.unfollow(id);
            return Ok(call);
        }
        self.flows.forget(id);
        self.flow_submitted(id);
        if launched {
            // Each agent drops its credit and resends; then the fresh
            // window of each is granted.
            for node in &info.nodes {
                self.send_resume(id, node);
            }
            self.flow_launched(id);
        }
        Ok(call)
    }

    /// Tells the agent of `node` to resend the job's output that its scrun
    /// lacks, then grants it a fresh window.
    fn resume_output(&mut self, id: u64, node: &str) {
        if self.send_resume(id, node) {
            self.flow_sender_reset(id, node);
        }
    }

    /// Tells the agent of `node` to drop the output credit it holds and
    /// resend the job's output that its scrun lacks; false if the node is
    /// not (yet) there.
    fn send_resume(&self, id: u64, node: &str) -> bool {
        let Some(job) = self.jobs.get(id) else {
            return false;
        };
        if job.awaiting.contains(node) || !self.nodes.is_up(node) {
            return false; // done when it re-attaches
        }
        let marks = marks_of_node(job, node);
        self.links.send(
            &self.nodes,
            node,
            id,
            master_message::Msg::OutputResume(OutputAck { delivered: marks }),
        );
        true
    }

    /// scrun printed the chunks `delivered`: their agents forget them.
    pub fn output_acked(&mut self, id: u64, delivered: Vec<OutputMark>) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        let ppn = job.info.spec.as_ref().map_or(1, |s| s.ppn.max(1));
        let mut per_node: BTreeMap<String, Vec<OutputMark>> = BTreeMap::new();
        for m in delivered {
            let seq = job.delivered.entry((m.rank, m.stream)).or_default();
            *seq = (*seq).max(m.seq);
            if let Some(node) = job.info.nodes.get((m.rank / ppn) as usize) {
                per_node.entry(node.clone()).or_default().push(m);
            }
        }
        for (node, marks) in per_node {
            self.links.send(
                &self.nodes,
                &node,
                id,
                master_message::Msg::OutputAck(OutputAck { delivered: marks }),
            );
        }
    }
}

/// What the job's scrun printed of the ranks of `node`.
fn marks_of_node(job: &super::jobs::Job, node: &str) -> Vec<OutputMark> {
    let ppn = job.info.spec.as_ref().map_or(1, |s| s.ppn.max(1));
    let Some(index) = job.info.nodes.iter().position(|n| n == node) else {
        return Vec::new();
    };
    let ranks = (index as u32 * ppn)..((index as u32 + 1) * ppn);
    job.delivered
        .iter()
        .filter(|((rank, _), _)| ranks.contains(rank))
        .map(|(&(rank, stream), &seq)| OutputMark { rank, stream, seq })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;

    /// A 4x2 job running on n1..n4, then the master restarted from its
    /// saved state, no agent back yet.
    fn running_then_restarted() -> (Harness, u64) {
        let mut h = harness(4);
        let (id, _rx) = h.submit(spec(4, 2));
        h.launch_ok(id);
        h.exit(id, "n1", 0, 0, 0);
        assert_eq!(h.state(id), JobState::Running);
        (restarted(4, 1, h.st.snapshot()), id)
    }

    fn held(id: u64, exits: Vec<RankExit>) -> Vec<HeldJob> {
        vec![HeldJob {
            job: id,
            launched: true,
            exits,
            ..Default::default()
        }]
    }

    fn exit(rank: u32, node: &str) -> RankExit {
        RankExit {
            rank,
            node: node.into(),
            code: 0,
            signal: 0,
        }
    }

    #[test]
    fn the_agents_that_come_back_give_the_job_back_and_it_runs_to_its_end() {
        let (mut h, id) = running_then_restarted();
        assert_eq!(h.state(id), JobState::Running);
        // Nothing new starts before the saved job is settled.
        h.attach("n1", held(id, vec![exit(0, "n1"), exit(1, "n1")]));
        let (other, _ro) = h.submit(spec(1, 1));
        assert_eq!(h.state(other), JobState::Pending);
        for n in ["n2", "n3", "n4"] {
            h.attach(n, held(id, Vec::new()));
        }
        assert_eq!(h.state(id), JobState::Running);
        let info = h.st.job_info(id).unwrap();
        assert_eq!(
            info.exits.len(),
            2,
            "the exit saved and the one reported since, once each"
        );
        for (i, n) in ["n2", "n3", "n4"].iter().enumerate() {
            h.exit(id, n, 2 * i as u32 + 2, 0, 0);
            h.exit(id, n, 2 * i as u32 + 3, 0, 0);
        }
        assert_eq!(h.state(id), JobState::Completing);
        h.clean_all(id);
        assert_eq!(h.state(id), JobState::Completed);
        assert_eq!(
            h.state(other),
            JobState::Launching,
            "then scheduling resumes"
        );
    }

    #[test]
    fn a_node_not_back_in_time_fails_its_job_and_a_node_without_the_job_loses_it() {
        let (mut h, id) = running_then_restarted();
        h.attach("n1", held(id, Vec::new()));
        h.attach("n2", Vec::new());
        h.attach("n3", held(id, Vec::new()));
        let info = h.st.job_info(id).unwrap();
        assert!(
            info.reason
                .contains("node n2 lost (its agent no longer had the job"),
            "{}",
            info.reason
        );
        assert!(drain(&mut h.timers)
            .iter()
            .any(|t| t.kind == TimerKind::AgentsBack && t.after == Duration::from_secs(30)));
        h.st.timer_fired(0, TimerKind::AgentsBack);
        for n in ["n1", "n3"] {
            assert!(h
                .agent_hears(n)
                .iter()
                .any(|m| matches!(m, master_message::Msg::Cleanup(_))));
            h.agent_says(n, id, agent_message::Msg::Cleaned(Cleaned {}));
        }
        assert_eq!(h.state(id), JobState::Failed);
    }

    #[test]
    fn an_agent_holding_a_job_the_master_ended_is_told_to_clean_it() {
        let (mut h, id) = running_then_restarted();
        h.attach("n1", held(id + 100, Vec::new()));
        let heard = h.agent_hears("n1");
        assert!(
            heard
                .iter()
                .any(|m| matches!(m, master_message::Msg::Cleanup(_))),
            "{heard:?}"
        );
    }

    #[test]
    fn a_reattached_scrun_gets_what_it_lacks_and_one_that_never_comes_back_cancels_the_job() {
        let (mut h, id) = running_then_restarted();
        for n in ["n1", "n2", "n3", "n4"] {
            h.attach(n, held(id, Vec::new()));
            h.agent_hears(n);
        }
        let (tx, mut rx) = unbounded_channel();
        let mark = OutputMark {
            rank: 3,
            stream: 1,
            seq: 5,
        };
        h.st.reattach(id, USER, vec![mark], tx).unwrap();
        assert!(matches!(
            rx.try_recv(),
            Ok(Ok(JobEvent {
                event: Some(job_event::Event::Accepted(_))
            }))
        ));
        let heard = h.agent_hears("n2");
        assert!(
            matches!(&heard[..], [master_message::Msg::OutputResume(r), master_message::Msg::OutputCredit(_)]
                if r.delivered == vec![mark]),
            "resend after rank 3's chunk 5, then a fresh credit: {heard:?}"
        );
        let heard = h.agent_hears("n1");
        assert!(
            matches!(&heard[..], [master_message::Msg::OutputResume(r), master_message::Msg::OutputCredit(_)]
                if r.delivered.is_empty()),
            "{heard:?}"
        );
        let mallory = Requester {
            uid: 1001,
            gid: 1001,
        };
        let (tx, _rx2) = unbounded_channel();
        let e = h.st.reattach(id, mallory, Vec::new(), tx).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);

        // Another job whose scrun never comes back.
        let (mut h, id) = running_then_restarted();
        h.st.timer_fired(id, TimerKind::ClientBack);
        let info = h.st.job_info(id).unwrap();
        assert_eq!(
            JobState::try_from(info.state).unwrap(),
            JobState::Completing
        );
        assert!(info.reason.contains("did not re-attach"), "{}", info.reason);
    }

    #[test]
    fn the_end_of_the_wait_for_agents_leaves_a_settled_job_as_the_gang_scheduler_has_it() {
        let mut h = harness_with(2, 2);
        let (a, _ra) = h.submit(spec(2, 1));
        h.launch_ok(a);
        let mut h = restarted_quantum(2, 2, Duration::ZERO, h.st.snapshot());
        for n in ["n1", "n2"] {
            h.attach(n, held(a, Vec::new()));
        }
        // Settled; then a second job takes turns with it, and it is frozen.
        let (b, _rb) = h.submit(spec(2, 1));
        h.st.quantum_tick();
        let id = preempt_of(&h.agent_hears("n1")).expect("preempt").switch_id;
        h.agent_hears("n2");
        for n in ["n1", "n2"] {
            h.drained(n, id);
        }
        for n in ["n1", "n2"] {
            h.switched(n, id);
        }
        h.launch_ok(b);
        assert!(h.st.job_info(a).unwrap().frozen);

        // The wait for the agents ends (its timer was set at the restart).
        h.st.timer_fired(0, TimerKind::AgentsBack);
        assert!(
            h.st.job_info(a).unwrap().frozen,
            "a settled job is not recovered again"
        );
        // So, when b ends, a is thawed rather than left frozen for good.
        for n in ["n1", "n2"] {
            h.agent_hears(n);
        }
        h.exit(b, "n1", 0, 0, 0);
        h.exit(b, "n2", 1, 0, 0);
        h.clean_all(b);
        let sw = switch_of(&h.agent_hears("n1")).expect("a thaw");
        assert_eq!(sw.thaw, vec![a]);
        assert!(!h.st.job_info(a).unwrap().frozen);
    }

    #[test]
    fn a_job_frozen_on_some_or_all_of_its_nodes_runs_again_when_its_row_is_active() {
        for frozen_nodes in [vec!["n1", "n2", "n3", "n4"], vec!["n2"]] {
            let (mut h, id) = running_then_restarted();
            for n in ["n1", "n2", "n3", "n4"] {
                let mut j = held(id, Vec::new());
                j[0].frozen = frozen_nodes.contains(&n);
                h.attach(n, j);
            }
            assert!(!h.st.job_info(id).unwrap().frozen);
            for n in ["n1", "n3"] {
                let thawed = h
                    .agent_hears(n)
                    .iter()
                    .any(|m| matches!(m, master_message::Msg::Switch(s) if s.thaw == vec![id]));
                assert!(thawed, "{frozen_nodes:?}: {n} thaws it");
            }
        }
    }
}
