//! The master's state: the composition of its parts, and the operations that
//! cross them.
//!
//! Like slurmctld, which splits node, job and step management, the state is
//! split by concern, each part plain data with its own operations:
//!
//! | part | module | what |
//! |---|---|---|
//! | [`Nodes`] | [`nodes`] | the node registry: up, down, drained; heartbeats, boot ids |
//! | [`Jobs`] | [`jobs`], [`queue`] | the job table, the queue and allocation, each job's life, the history |
//! | [`Fences`] | [`fences`] | PMIx fences between the agents of a job |
//! | [`Gang`] | [`gang`] | the switch protocol over the matrix ([`matrix`]) |
//! | [`Stats`] | [`stats`] | switch and launch statistics |
//! | [`Flows`] | [`flow`] | flow control of each job's output and stdin |
//!
//! What is not state lives beside them: the channels to the agents, to the
//! scruns following their jobs and to the timer task ([`Links`]), and the
//! Prometheus metrics.  None of it would survive a restart of the master.
//!
//! Everything here is synchronous: messages leave through unbounded channels
//! and timers through `Links`, so the logic is testable without a network.
//! The jobs' stdio on those channels is bounded all the same: senders send
//! only within the credit [`flow`] grants them.
//!
//! # One lock, which cannot be poisoned
//!
//! The gRPC handlers, the agents' and scruns' stream tasks and the timer,
//! heartbeat and quantum tasks share the state behind one
//! `parking_lot::Mutex` ([`super::service`], [`super::run`]).  Each
//! operation is a method that runs to its end under the lock and never
//! waits for I/O, so the lock is held for microseconds.
//!
//! One lock rather than one per part: nearly every event crosses the parts
//! (a lost node fails its jobs, empties their cells in the matrix and stops
//! being awaited by the switch in progress), so per-part locks would be
//! taken together, in a fixed order, almost every time.  A lock rather than
//! a task owning the state: such a task would serialize the operations just
//! as the lock does, but add a channel hop and a reply channel to every
//! request (PMIx fences, on every job's launch path, included), and
//! `Drop` code such as the service's client guard could not wait for a
//! reply.
//!
//! parking_lot's lock, unlike std's, is not poisoned by a panic: with std's,
//! one panic under the lock made every later call panic, and the master was
//! dead while it still ran.  The state code is written not to panic in the
//! first place: a lookup that can miss returns early, before changing
//! anything, and there is no `unwrap`, `expect`, `panic!` or indexing that
//! can fail (the clippy lints below enforce it, in every part).
//! Were a panic to come from elsewhere (a dependency), the one operation
//! would stop where it was and its task end: a request fails, or an agent's
//! stream is no longer read and the node is lost at the heartbeat timeout,
//! failing its jobs as any lost node does.  Every other job, node and
//! client carries on.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

use score_proto::v1::{
    agent_message, job_event, master_message, AgentMessage, JobEvent, JobInfo, MasterMessage,
    SavedState,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;
use tonic::Status;

use super::metrics::MasterMetrics;
use fences::Fences;
use flow::Flows;
use gang::Gang;
use jobs::Jobs;
use nodes::Nodes;
use stats::Stats;

mod fences;
mod flow;
mod gang;
mod jobs;
mod matrix;
mod nodes;
mod queue;
mod recovery;
mod saved;
mod stats;
#[cfg(test)]
mod testkit;

pub type ClientTx = UnboundedSender<Result<JobEvent, Status>>;
pub type AgentTx = UnboundedSender<MasterMessage>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKind {
    /// The job's time limit ran out.
    TimeLimit,
    /// The grace time after SIGTERM is over: kill what is left.
    KillGrace,
    /// The job's stdio in this direction may have been throttled for a
    /// while: log it if it still is.
    Throttled(flow::Direction),
    /// After a restart of the master: the agents not back by now have lost
    /// their jobs (job 0: every job).
    AgentsBack,
    /// After a restart of the master: the job is cancelled if its scrun is
    /// not back by now.
    ClientBack,
}

#[derive(Debug)]
pub struct Timer {
    pub after: Duration,
    pub job: u64,
    pub kind: TimerKind,
}

pub struct Limits {
    pub allow_root_jobs: bool,
    pub kill_grace: Duration,
    pub heartbeat_timeout: Duration,
    pub history: usize,
    /// Rows of the gang-scheduling matrix; 1: space sharing only.
    pub gang_slots: usize,
    pub quantum: Duration,
    /// Network preemption (quiesce PM before freezing) or plain freezing.
    pub network_preemption: bool,
    pub quiesce_timeout: Duration,
    /// Bytes of each job's output, and of its stdin, the master holds at
    /// most (`stdio_buffer_kib`).
    pub stdio_buffer: u64,
    /// After a restart: how long the master waits for agents and scruns.
    pub reattach_timeout: Duration,
}

/// Who asks: the authenticated MUNGE identity of a request.
#[derive(Debug, Clone, Copy)]
pub struct Requester {
    pub uid: u32,
    pub gid: u32,
}

impl Requester {
    /// The job's owner and root may manage (cancel) a job.
    pub fn may_manage(&self, job: &JobInfo) -> bool {
        self.uid == 0 || self.uid == job.uid
    }

    /// Only root may `what` (drain a node, ...).
    pub fn require_root(&self, what: &str) -> Result<(), Status> {
        if self.uid != 0 {
            return Err(Status::permission_denied(format!(
                "only root may {what} (you are uid {})",
                self.uid
            )));
        }
        Ok(())
    }
}

/// The master's links to the outside: the channel to each agent by
/// connection id, to each following scrun by job, to the timer task and to
/// the task that saves the state.  Closing a channel (dropping its sender)
/// ends the other side's stream.
pub struct Links {
    agents: HashMap<u64, AgentTx>,
    /// Per job: the following scrun's call (a number, so that a call that
    /// ends after another scrun re-attached cannot cancel the job) and
    /// its channel.
    clients: HashMap<u64, (u64, ClientTx)>,
    next_call: u64,
    timers: UnboundedSender<Timer>,
    saver: Option<Arc<Notify>>,
    /// Writes the state before the master goes on ([`State::reserve_ids`]).
    durable: Option<Arc<dyn SaveNow>>,
}

impl Links {
    fn new(timers: UnboundedSender<Timer>) -> Self {
        Self {
            agents: HashMap::new(),
            clients: HashMap::new(),
            next_call: 1,
            timers,
            saver: None,
            durable: None,
        }
    }

    /// Sends `msg` about `job` (0: none) to the agent of `node`, if it is up.
    pub fn send(&self, nodes: &Nodes, node: &str, job: u64, msg: master_message::Msg) {
        let Some(tx) = nodes.conn(node).and_then(|c| self.agents.get(&c)) else {
            return;
        };
        // A closed channel means the agent is going away; its loss is
        // handled when its stream ends.
        let _ = tx.send(MasterMessage {
            msg: Some(msg),
            job,
        });
    }

    pub fn attach(&mut self, conn: u64, tx: AgentTx) {
        self.agents.insert(conn, tx);
    }

    /// Closes the channel to an agent.
    pub fn detach(&mut self, conn: u64) {
        self.agents.remove(&conn);
    }

    /// `client` follows job `id` (instead of any scrun that did); returns
    /// the number of its call.
    pub fn follow(&mut self, id: u64, client: ClientTx) -> u64 {
        let call = self.next_call;
        self.next_call += 1;
        if let Some((_, old)) = self.clients.insert(id, (call, client)) {
            let _ = old.send(Err(Status::aborted(
                "another scrun re-attached to this job",
            )));
        }
        call
    }

    /// The call of the scrun following job `id`.
    pub fn follower(&self, id: u64) -> Option<u64> {
        self.clients.get(&id).map(|(call, _)| *call)
    }

    /// Closes the channel to the scrun following job `id`, if any.
    pub fn unfollow(&mut self, id: u64) {
        self.clients.remove(&id);
    }

    /// Whether a scrun follows job `id`.
    pub fn follows(&self, id: u64) -> bool {
        self.clients.contains_key(&id)
    }

    /// Ends the call of the scrun following job `id` with `status`.
    pub fn end_follow(&mut self, id: u64, status: Status) {
        if let Some((_, c)) = self.clients.remove(&id) {
            let _ = c.send(Err(status));
        }
    }

    /// Tells the scrun following job `id` (if any).
    pub fn emit(&self, id: u64, event: job_event::Event) {
        if let Some((_, c)) = self.clients.get(&id) {
            let _ = c.send(Ok(JobEvent { event: Some(event) }));
        }
    }

    pub fn timer(&self, after: Duration, job: u64, kind: TimerKind) {
        let _ = self.timers.send(Timer { after, job, kind });
    }

    /// The state changed in a way a restarted master must know: save it
    /// (soon, in the background: [`super::store`]).
    pub fn changed(&self) {
        if let Some(saver) = &self.saver {
            saver.notify_one();
        }
    }
}

/// Writes a snapshot of the state at once and durably
/// ([`super::store::Store`]; a recorder in unit tests).
pub trait SaveNow: Send + Sync {
    fn save_now(&self, state: SavedState) -> anyhow::Result<()>;
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub struct State {
    pub(super) limits: Limits,
    pub(super) nodes: Nodes,
    pub(super) jobs: Jobs,
    pub(super) fences: Fences,
    pub(super) gang: Gang,
    pub(super) stats: Stats,
    pub(super) flows: Flows,
    pub(super) links: Links,
    pub metrics: MasterMetrics,
}

impl State {
    /// Every change worth saving notifies `saver`, which saves it soon, in
    /// the background; what must be on disk before the master goes on is
    /// written by `durable` at once ([`super::store`]).
    pub fn save_with(&mut self, saver: Arc<Notify>, durable: Arc<dyn SaveNow>) {
        self.links.saver = Some(saver);
        self.links.durable = Some(durable);
    }

    /// A crashed master's last jobs may be unsaved while an agent still
    /// runs their ranks and their scruns come back for them: their ids must
    /// never name another job.  So the saved state promises a block of ids
    /// ahead of those handed out (`next_job` is the block's end), written
    /// before the first of them goes out, and a restarted master starts
    /// after it: one synchronous save (an fsync, under the state's lock)
    /// per [`jobs::ID_BLOCK`] jobs, and at most that many ids skipped by a
    /// restart.
    fn reserve_ids(&mut self) {
        let Some(end) = self.jobs.reservation_needed() else {
            return;
        };
        self.jobs.reserve(end);
        if let Some(durable) = &self.links.durable {
            let saved = durable.save_now(self.snapshot());
            self.metrics.state_saved(saved.is_ok());
            if let Err(e) = saved {
                tracing::error!(
                    "cannot save the reservation of job ids up to {end}: {e:#} \
                     (after a crash of the master, ids may name another job)"
                );
            }
        }
    }

    pub fn new(
        limits: Limits,
        expected_nodes: &[String],
        timers: UnboundedSender<Timer>,
        metrics: MasterMetrics,
    ) -> Self {
        let s = Self {
            nodes: Nodes::new(expected_nodes),
            jobs: Jobs::new(),
            fences: Fences::default(),
            gang: Gang::new(limits.gang_slots),
            stats: Stats::default(),
            flows: Flows::new(limits.stdio_buffer),
            links: Links::new(timers),
            limits,
            metrics,
        };
        s.refresh_gauges();
        s
    }

    /// A message from the agent of `name` over connection `conn`, handed to
    /// the part it concerns.
    pub fn agent_message(&mut self, name: &str, conn: u64, msg: AgentMessage) {
        if !self.nodes.is_current(name, conn) {
            return; // a stale stream of a replaced agent
        }
        self.nodes.seen(name);
        let id = msg.job;
        let Some(m) = msg.msg else { return };
        if !matches!(
            m,
            agent_message::Msg::Heartbeat(_)
                | agent_message::Msg::Output(_)
                | agent_message::Msg::StdinWritten(_)
                | agent_message::Msg::Fence(_)
        ) {
            self.links.changed();
        }
        match m {
            agent_message::Msg::Heartbeat(_) | agent_message::Msg::Register(_) => {}
            agent_message::Msg::Launched(l) => self.launched(id, name, l.ok, &l.error),
            agent_message::Msg::Output(o) => self.output(id, name, o),
            agent_message::Msg::StdinWritten(c) => self.stdin_written(id, name, c.bytes),
            agent_message::Msg::Exited(e) => {
                if let Some(exit) = e.exit {
                    self.rank_exited(id, exit);
                }
            }
            agent_message::Msg::Aborted(a) => {
                let reason = if a.message.is_empty() {
                    format!("rank {} on {name} aborted with status {}", a.rank, a.status)
                } else {
                    format!(
                        "rank {} on {name} aborted with status {}: {}",
                        a.rank, a.status, a.message
                    )
                };
                let status = if a.status == 0 { 1 } else { a.status };
                self.fail(id, reason, status);
            }
            agent_message::Msg::Fence(f) => self.fence(id, name, f.seq, f.data),
            agent_message::Msg::Cleaned(_) => self.cleaned(id, name),
            agent_message::Msg::Drained(d) => {
                self.stats.drained(&self.metrics, &d);
                self.switch_answer(name, d.switch_id, true, d.quiesce_ns);
            }
            agent_message::Msg::Switched(sw) => self.switch_answer(name, sw.switch_id, false, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::*;

    #[test]
    fn others_may_not_cancel_and_root_jobs_are_refused() {
        let mut h = harness(1);
        let (id, _rx) = h.submit(spec(1, 1));
        let mallory = Requester {
            uid: 1001,
            gid: 1001,
        };
        let e = h.st.cancel(id, false, mallory, "x").unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        let (tx, _r) = unbounded_channel();
        let e =
            h.st.submit(spec(1, 1), Requester { uid: 0, gid: 0 }, "root".into(), tx)
                .unwrap_err();
        assert!(e.message().contains("allow_root_jobs"), "{}", e.message());
    }
}
