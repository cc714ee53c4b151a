//! The job table and each job's life: launch, the nodes' reports, the
//! outcome (decided once: the first failure wins), stopping it on every node
//! and finishing it when every node has cleaned up; then the history that
//! `scorectl jobs --all` and `scorectl show` read.  The queue and placement
//! are in [`super::queue`].
//!
//! [`Jobs`] and [`Job`] are plain data; each scrun following a job is a
//! channel in [`super::Links`].

use score_proto::v1::{
    job_event, master_message, CleanupJob, JobInfo, JobSpec, JobState, LaunchJob, RankExit,
    SavedJob, SavedOutcome, SignalJob, StdinChunk,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};
use tonic::Status;

use super::stats;
use super::{now_ms, Requester, State, TimerKind};

/// Exit statuses scrun returns for outcomes that are not a rank's own status.
pub const EXIT_CANCELLED: i32 = 130;
pub const EXIT_TIMEOUT: i32 = 124;
pub const EXIT_SYSTEM_FAILURE: i32 = 1;

/// How a job ends, decided once: the first failure wins.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub state: JobState,
    pub reason: String,
    pub exit_status: i32,
}

/// How to stop a job's processes once its outcome is decided.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// SIGTERM now, SIGKILL (cleanup) after the grace time.
    Terminate,
    /// Cleanup now: the agents kill the job's cgroups.
    Kill,
}

pub struct Job {
    pub info: JobInfo,
    pub outcome: Option<Outcome>,
    /// Per allocated node (same order as info.nodes): launched, cleaned.
    pub launched: Vec<bool>,
    pub cleaned: Vec<bool>,
    pub ranks_exited: usize,
    /// stdin that arrived before the job was launched.
    pub pending_stdin: Vec<StdinChunk>,
    pub submitted: Instant,
    pub launch_started: Option<Instant>,
    pub cleanup_sent: bool,
    /// Since when it runs without interruption (launch or last thaw): a
    /// job is not preempted before it had a whole quantum.
    pub running_since: Instant,
    /// After a restart of the master: the nodes whose agents have not yet
    /// re-attached and reported the job ([`super::recovery`]).
    pub awaiting: BTreeSet<String>,
    /// After a restart of the master: the nodes that reported the job's
    /// cgroup frozen.
    pub frozen_on: BTreeSet<String>,
    /// What its scrun has printed: the last chunk per (rank, stream), as
    /// scrun acknowledged it.
    pub delivered: BTreeMap<(u32, i32), u64>,
    /// The secret that tags its PM packets, drawn here so that no rank and
    /// nothing public derives it; saved for a restart of the master.
    pub pm_jobkey: u64,
}

impl Job {
    /// A job as submitted: pending, placed nowhere.
    pub fn new(info: JobInfo) -> Self {
        Self {
            info,
            outcome: None,
            launched: Vec::new(),
            cleaned: Vec::new(),
            ranks_exited: 0,
            pending_stdin: Vec::new(),
            submitted: Instant::now(),
            launch_started: None,
            cleanup_sent: false,
            running_since: Instant::now(),
            awaiting: BTreeSet::new(),
            frozen_on: BTreeSet::new(),
            delivered: BTreeMap::new(),
            pm_jobkey: score_auth::seal::random_key(),
        }
    }

    fn total_ranks(&self) -> usize {
        self.info
            .spec
            .as_ref()
            .map_or(0, |s| (s.nodes * s.ppn) as usize)
    }

    pub fn state(&self) -> JobState {
        JobState::try_from(self.info.state).unwrap_or(JobState::Unspecified)
    }

    pub fn is_active(&self) -> bool {
        !matches!(
            self.state(),
            JobState::Completed | JobState::Failed | JobState::Cancelled | JobState::Timeout
        )
    }

    /// Placed on `nodes` in row `row` of the matrix.
    pub fn place(&mut self, row: usize, nodes: Vec<String>) {
        self.launched = vec![false; nodes.len()];
        self.cleaned = vec![false; nodes.len()];
        self.info.slot = row as u32;
        self.info.nodes = nodes;
    }

    /// The nodes that have not cleaned up yet.
    fn uncleaned_nodes(&self) -> impl Iterator<Item = &String> {
        self.info
            .nodes
            .iter()
            .zip(&self.cleaned)
            .filter(|(_, &c)| !c)
            .map(|(n, _)| n)
    }

    /// Whether the agents of a restarted master have yet to report it.
    pub fn recovering(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// Sets the flag of `node` in `flags` (launched or cleaned).
    pub(super) fn mark(&mut self, node: &str, cleaned: bool) {
        let flags = if cleaned {
            &mut self.cleaned
        } else {
            &mut self.launched
        };
        if let Some(i) = self.info.nodes.iter().position(|n| n == node) {
            if let Some(f) = flags.get_mut(i) {
                *f = true;
            }
        }
    }
}

/// Every job the master knows, the queue of those waiting for a place in the
/// matrix, and the history of finished ones.
pub struct Jobs {
    table: HashMap<u64, Job>,
    /// Jobs waiting for a place, in submission order.
    queue: VecDeque<u64>,
    /// Finished jobs, oldest first, kept for scorectl.
    history: VecDeque<u64>,
    next_id: u64,
    /// Where the saved block of ids ends: a restarted master starts there
    /// ([`State::reserve_ids`](super::State)).
    reserved: u64,
    /// When this master started (ms since the epoch).
    epoch: u64,
}

/// Job ids promised per synchronous save of the state.
pub const ID_BLOCK: u64 = 1024;

impl Jobs {
    pub fn new() -> Self {
        Self {
            table: HashMap::new(),
            queue: VecDeque::new(),
            history: VecDeque::new(),
            next_id: 1,
            reserved: 1,
            epoch: now_ms(),
        }
    }

    pub fn get(&self, id: u64) -> Option<&Job> {
        self.table.get(&id)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Job> {
        self.table.get_mut(&id)
    }

    /// The next id is beyond the saved block: the end of the next block,
    /// to save (with [`Jobs::reserve`]) before that id goes out.
    pub fn reservation_needed(&self) -> Option<u64> {
        (self.next_id >= self.reserved).then(|| self.next_id + ID_BLOCK)
    }

    pub fn reserve(&mut self, end: u64) {
        self.reserved = end;
    }

    /// A new job, pending at the end of the queue; returns its id.
    pub fn add(&mut self, mut spec: JobSpec, who: Requester, user: String) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        if spec.name.is_empty() {
            spec.name = spec
                .argv
                .first()
                .and_then(|a| a.rsplit('/').next())
                .unwrap_or("job")
                .to_string();
        }
        let info = JobInfo {
            id,
            // The master's start time makes namespaces (and PM's segment
            // names derived from them) unique across restarts and clusters.
            nspace: format!("score.{}.{id}", self.epoch),
            name: spec.name.clone(),
            uid: who.uid,
            gid: who.gid,
            user,
            spec: Some(spec),
            state: JobState::Pending as i32,
            submit_time_ms: now_ms(),
            ..Default::default()
        };
        self.table.insert(id, Job::new(info));
        self.queue.push_back(id);
        id
    }

    /// The first job of the queue.
    pub fn head(&self) -> Option<u64> {
        self.queue.front().copied()
    }

    /// Takes a job out of the queue (placed, or ended while it waited).
    pub fn dequeue(&mut self, id: u64) {
        if self.head() == Some(id) {
            self.queue.pop_front();
        } else {
            self.queue.retain(|&q| q != id);
        }
    }

    /// Enters a finished job into the history, which keeps the last `keep`;
    /// returns the jobs forgotten to make room.
    pub fn retire(&mut self, id: u64, keep: usize) -> Vec<u64> {
        self.history.push_back(id);
        let mut forgotten = Vec::new();
        while self.history.len() > keep {
            if let Some(old) = self.history.pop_front() {
                self.table.remove(&old);
                forgotten.push(old);
            }
        }
        forgotten
    }

    /// Jobs whose processes run now: launching or running, not frozen.
    pub fn running(&self) -> impl Iterator<Item = &Job> {
        self.table.values().filter(|j| {
            matches!(j.state(), JobState::Launching | JobState::Running) && !j.info.frozen
        })
    }

    pub fn count(&self, state: JobState) -> usize {
        self.table.values().filter(|j| j.state() == state).count()
    }

    /// All jobs (`all`) or those not finished, by id.
    pub fn list(&self, all: bool) -> Vec<JobInfo> {
        let mut v: Vec<JobInfo> = self
            .table
            .values()
            .filter(|j| all || j.is_active())
            .map(|j| j.info.clone())
            .collect();
        v.sort_by_key(|j| j.id);
        v
    }

    /// Updates why each pending job waits, `free` nodes being idle; returns
    /// the jobs whose reason changed.
    pub fn pending_reasons(&mut self, free: usize) -> Vec<JobInfo> {
        let mut changed = Vec::new();
        let mut set = |job: &mut Job, reason: String| {
            if job.info.reason != reason {
                job.info.reason = reason;
                changed.push(job.info.clone());
            }
        };
        for job in self.table.values_mut() {
            if job.state() == JobState::Pending
                && !job.info.nodes.is_empty()
                && job.outcome.is_none()
            {
                let reason = format!("placed in time slot {}; waits for its turn", job.info.slot);
                set(job, reason);
            }
        }
        for (pos, id) in self.queue.iter().enumerate() {
            let Some(job) = self.table.get_mut(id) else {
                continue;
            };
            let want = job.info.spec.as_ref().map(|s| s.nodes).unwrap_or(0);
            let reason = if pos == 0 {
                format!("waiting for {want} node(s) ({free} free)")
            } else {
                format!("waiting behind {pos} earlier job(s)")
            };
            set(job, reason);
        }
        changed
    }
}

/// The saved form of the job table ([`super::saved`]).
pub struct SavedJobs {
    pub jobs: Vec<SavedJob>,
    pub queue: Vec<u64>,
    pub history: Vec<u64>,
    pub next_id: u64,
}

impl Jobs {
    /// Every job, for the state file.
    pub fn save(&self) -> SavedJobs {
        let mut jobs: Vec<SavedJob> = self
            .table
            .values()
            .map(|j| SavedJob {
                info: Some(j.info.clone()),
                outcome: j.outcome.as_ref().map(|o| SavedOutcome {
                    state: o.state as i32,
                    reason: o.reason.clone(),
                    exit_status: o.exit_status,
                }),
                launched: j.launched.clone(),
                cleaned: j.cleaned.clone(),
                cleanup_sent: j.cleanup_sent,
                pm_jobkey: j.pm_jobkey,
            })
            .collect();
        jobs.sort_by_key(|j| j.info.as_ref().map_or(0, |i| i.id));
        SavedJobs {
            jobs,
            queue: self.queue.iter().copied().collect(),
            history: self.history.iter().copied().collect(),
            next_id: self.next_id.max(self.reserved),
        }
    }

    /// The job table of a state file.  Jobs without a record are skipped
    /// (the file is the master's own, but a half-understood job must not
    /// stop the master from starting).
    pub fn restore(saved: SavedJobs) -> Self {
        let mut jobs = Self::new();
        for s in saved.jobs {
            let Some(info) = s.info else { continue };
            let mut job = Job::new(info);
            job.outcome = s.outcome.map(|o| Outcome {
                state: JobState::try_from(o.state).unwrap_or(JobState::Failed),
                reason: o.reason,
                exit_status: o.exit_status,
            });
            let n = job.info.nodes.len();
            job.launched = s.launched;
            job.cleaned = s.cleaned;
            if s.pm_jobkey != 0 {
                job.pm_jobkey = s.pm_jobkey;
            }
            job.launched.resize(n, false);
            job.cleaned.resize(n, false);
            job.cleanup_sent = s.cleanup_sent;
            job.ranks_exited = job.info.exits.len();
            jobs.table.insert(job.info.id, job);
        }
        let known = |id: &u64| jobs.table.contains_key(id);
        jobs.queue = saved.queue.into_iter().filter(known).collect();
        jobs.history = saved.history.into_iter().filter(known).collect();
        let highest = jobs.table.keys().copied().max().unwrap_or(0);
        jobs.next_id = saved.next_id.max(highest + 1);
        // Nothing of the saved block is known to be unused.
        jobs.reserved = jobs.next_id;
        jobs
    }

    pub fn ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.table.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Whether some job still waits for the agents of a restarted master.
    pub fn recovering(&self) -> bool {
        self.table.values().any(Job::recovering)
    }
}

pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    format!("{name} ({sig})")
}

fn fmt_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.3} s", ms as f64 / 1000.0)
    }
}

impl State {
    /// Starts a placed job on all its nodes.
    pub(super) fn launch(&mut self, id: u64) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        let nodes = job.info.nodes.clone();
        job.info.state = JobState::Launching as i32;
        job.info.reason.clear();
        job.launched = vec![false; nodes.len()];
        job.cleaned = vec![false; nodes.len()];
        job.launch_started = Some(Instant::now());
        job.running_since = Instant::now();
        self.links.changed();
        self.links
            .emit(id, job_event::Event::State(job.info.clone()));
        for (i, name) in nodes.iter().enumerate() {
            self.links.send(
                &self.nodes,
                name,
                id,
                master_message::Msg::Launch(LaunchJob {
                    job: Some(job.info.clone()),
                    node_index: i as u32,
                    pm_jobkey: job.pm_jobkey,
                }),
            );
        }
        let stdin = std::mem::take(&mut job.pending_stdin);
        if let Some(first) = nodes.first() {
            for chunk in stdin {
                self.links
                    .send(&self.nodes, first, id, master_message::Msg::Stdin(chunk));
            }
        }
        let limit = job.info.spec.as_ref().map(|s| s.time_limit_ms).unwrap_or(0);
        if limit > 0 {
            self.links
                .timer(Duration::from_millis(limit), id, TimerKind::TimeLimit);
        }
        self.flow_launched(id);
    }

    /// stdin for rank 0: kept while the job waits, else sent to its node.
    /// False when it is dropped (the job is over or unknown).
    pub(super) fn forward_stdin(&mut self, id: u64, chunk: StdinChunk) -> bool {
        let Some(job) = self.jobs.get_mut(id) else {
            return false;
        };
        match job.state() {
            JobState::Pending => job.pending_stdin.push(chunk),
            JobState::Launching | JobState::Running => {
                if let Some(first) = job.info.nodes.first() {
                    self.links
                        .send(&self.nodes, first, id, master_message::Msg::Stdin(chunk));
                }
            }
            _ => return false,
        }
        true
    }

    /// Cancel on behalf of `who` (scorectl) or of the job's own scrun.
    pub fn cancel(
        &mut self,
        id: u64,
        kill: bool,
        who: Requester,
        why: &str,
    ) -> Result<JobInfo, Status> {
        let job = self
            .jobs
            .get(id)
            .ok_or_else(|| Status::not_found(format!("no job {id}")))?;
        if !who.may_manage(&job.info) {
            return Err(Status::permission_denied(format!(
                "job {id} belongs to {} (uid {}); only its owner or root may cancel it",
                job.info.user, job.info.uid
            )));
        }
        let before = job.info.clone();
        if job.is_active() {
            // A frozen job cannot act on SIGTERM: it is killed at once.
            let kill = kill || job.info.frozen;
            self.decide(
                id,
                Outcome {
                    state: JobState::Cancelled,
                    reason: why.to_string(),
                    exit_status: EXIT_CANCELLED,
                },
                if kill { Stop::Kill } else { Stop::Terminate },
            );
        }
        // (With history = 0 a job that finished at once is forgotten.)
        Ok(self.jobs.get(id).map_or(before, |j| j.info.clone()))
    }

    /// The launcher of an adopted job (JobSpec.adopt) says its ranks ended:
    /// the job completes, or fails with their status.  Ignored for a job
    /// whose ranks scored started (their exits decide).
    pub fn step_done(&mut self, id: u64, exit_status: i32) {
        let adopted = self
            .jobs
            .get(id)
            .and_then(|j| j.info.spec.as_ref())
            .is_some_and(|s| s.adopt);
        if !adopted {
            return;
        }
        let outcome = if exit_status == 0 {
            Outcome {
                state: JobState::Completed,
                reason: String::new(),
                exit_status: 0,
            }
        } else {
            Outcome {
                state: JobState::Failed,
                reason: format!("its launcher reported status {exit_status}"),
                exit_status,
            }
        };
        self.decide(id, outcome, Stop::Kill);
    }

    /// The call `call` of the scrun following job `id` ended before the
    /// job did.  A call that another scrun's re-attachment replaced changes
    /// nothing.
    pub fn client_gone(&mut self, id: u64, call: u64) {
        if self.links.follower(id).is_some_and(|c| c != call) {
            return;
        }
        self.links.unfollow(id);
        self.flow_client_gone(id);
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        if job.is_active() && job.outcome.is_none() {
            self.decide(
                id,
                Outcome {
                    state: JobState::Cancelled,
                    reason: "cancelled: scrun disconnected".into(),
                    exit_status: EXIT_CANCELLED,
                },
                Stop::Terminate,
            );
        }
    }

    /// The call of the scrun following job `id`, if one does.
    pub fn follower(&self, id: u64) -> Option<u64> {
        self.links.follower(id)
    }

    pub fn job_info(&self, id: u64) -> Option<JobInfo> {
        self.jobs.get(id).map(|j| j.info.clone())
    }

    pub fn list_jobs(&self, all: bool) -> Vec<JobInfo> {
        self.jobs.list(all)
    }

    /// A node reports its share of the launch.
    pub(super) fn launched(&mut self, id: u64, node: &str, ok: bool, error: &str) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        if !ok {
            let reason = format!("launch failed on {node}: {error}");
            self.fail(id, reason, EXIT_SYSTEM_FAILURE);
            return;
        }
        job.mark(node, false);
        if job.info.start_time_ms == 0 && job.launched.iter().all(|&l| l) {
            // Started everywhere.  An agent reports the launch before any
            // exit, but another node's ranks may already have ended the job:
            // then only the start is recorded.
            job.info.start_time_ms = now_ms();
            stats::launched(&self.metrics, job.launch_started);
            if job.state() == JobState::Launching {
                job.info.state = JobState::Running as i32;
                job.running_since = Instant::now();
                self.links
                    .emit(id, job_event::Event::State(job.info.clone()));
            }
            self.refresh_gauges();
        }
    }

    pub(super) fn rank_exited(&mut self, id: u64, exit: RankExit) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        // An agent that re-attached to a restarted master reports its exits
        // again: each rank exits once.
        if job.info.exits.iter().any(|e| e.rank == exit.rank) {
            return;
        }
        job.ranks_exited += 1;
        job.info.exits.push(exit.clone());
        let all_done = job.ranks_exited >= job.total_ranks();
        if exit.signal != 0 || exit.code != 0 {
            let (what, status) = if exit.signal != 0 {
                (
                    format!("was killed by {}", signal_name(exit.signal)),
                    128 + exit.signal,
                )
            } else {
                (format!("exited with status {}", exit.code), exit.code)
            };
            let reason = format!("rank {} on {} {what}", exit.rank, exit.node);
            self.fail(id, reason, status);
        } else if all_done {
            self.decide(
                id,
                Outcome {
                    state: JobState::Completed,
                    reason: String::new(),
                    exit_status: 0,
                },
                Stop::Kill,
            );
        }
    }

    pub(super) fn fail(&mut self, id: u64, reason: String, exit_status: i32) {
        self.decide(
            id,
            Outcome {
                state: JobState::Failed,
                reason,
                exit_status,
            },
            Stop::Kill,
        );
    }

    /// Record the job's outcome (the first one wins) and start stopping it.
    pub(super) fn decide(&mut self, id: u64, outcome: Outcome, stop: Stop) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        if !job.is_active() {
            return;
        }
        let first = job.outcome.is_none();
        if first {
            tracing::info!(job = id, state = ?outcome.state, reason = %outcome.reason, "job ends");
            job.outcome = Some(outcome);
            self.links.changed();
        }
        if job.state() == JobState::Pending {
            self.jobs.dequeue(id);
            self.finish(id);
            self.update_pending_reasons();
            return;
        }
        if first {
            job.info.state = JobState::Completing as i32;
            job.info.reason = job
                .outcome
                .as_ref()
                .map(|o| o.reason.clone())
                .unwrap_or_default();
            self.links
                .emit(id, job_event::Event::State(job.info.clone()));
        }
        match stop {
            Stop::Kill => self.send_cleanup(id),
            Stop::Terminate if first => {
                self.signal_job(id, libc::SIGTERM);
                self.links
                    .timer(self.limits.kill_grace, id, TimerKind::KillGrace);
            }
            Stop::Terminate => {}
        }
        self.maybe_finish(id);
        self.refresh_gauges();
    }

    fn signal_job(&self, id: u64, signal: i32) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        for name in job.uncleaned_nodes() {
            self.links.send(
                &self.nodes,
                name,
                id,
                master_message::Msg::Signal(SignalJob { signal }),
            );
        }
    }

    fn send_cleanup(&mut self, id: u64) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        if job.cleanup_sent {
            return;
        }
        job.cleanup_sent = true;
        self.links.changed();
        for name in job.uncleaned_nodes() {
            self.links.send(
                &self.nodes,
                name,
                id,
                master_message::Msg::Cleanup(CleanupJob {}),
            );
        }
    }

    pub fn timer_fired(&mut self, id: u64, kind: TimerKind) {
        match kind {
            TimerKind::AgentsBack => return self.agents_back_timeout(),
            TimerKind::ClientBack => return self.client_back_timeout(id),
            _ => {}
        }
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        if !job.is_active() {
            return;
        }
        match kind {
            TimerKind::TimeLimit => {
                let limit = job.info.spec.as_ref().map(|s| s.time_limit_ms).unwrap_or(0);
                self.decide(
                    id,
                    Outcome {
                        state: JobState::Timeout,
                        reason: format!("time limit of {} exceeded", fmt_ms(limit)),
                        exit_status: EXIT_TIMEOUT,
                    },
                    Stop::Terminate,
                );
            }
            TimerKind::KillGrace => self.send_cleanup(id),
            TimerKind::Throttled(d) => self.throttle_timer(id, d),
            TimerKind::AgentsBack | TimerKind::ClientBack => {}
        }
    }

    /// A node reports that the job's processes are gone and its cgroup
    /// removed.
    pub(super) fn cleaned(&mut self, id: u64, node: &str) {
        self.nodes.release(id, node);
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        job.mark(node, true);
        if job.outcome.is_none() {
            // An agent cleaned a job nobody decided to end: it lost it.
            self.fail(
                id,
                format!("node {node} gave up the job"),
                EXIT_SYSTEM_FAILURE,
            );
        }
        self.maybe_finish(id);
        self.schedule();
        self.update_pending_reasons();
    }

    /// The job has lost `node`, which will never report it cleaned: its
    /// processes died with it or are killed by its agent when it comes
    /// back.
    pub(super) fn lost(&mut self, id: u64, node: &str, why: &str) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        job.mark(node, true);
        self.fail(id, format!("node {node} lost ({why})"), EXIT_SYSTEM_FAILURE);
        self.maybe_finish(id);
    }

    pub(super) fn maybe_finish(&mut self, id: u64) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        if job.outcome.is_some() && job.cleaned.iter().all(|&c| c) && job.is_active() {
            self.finish(id);
        }
    }

    /// The job's outcome is decided and every node has cleaned it: it is
    /// over.  Its cells in the matrix empty; it goes into the history.
    fn finish(&mut self, id: u64) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        let Some(outcome) = job.outcome.clone() else {
            return;
        };
        job.info.state = outcome.state as i32;
        job.info.reason = outcome.reason;
        job.info.exit_status = outcome.exit_status;
        job.info.end_time_ms = now_ms();
        self.fences.forget(id);
        self.links.changed();
        self.links
            .emit(id, job_event::Event::Finished(job.info.clone()));
        self.links.unfollow(id);
        for name in &job.info.nodes {
            self.nodes.release(id, name);
        }
        self.gang.job_gone(id);
        self.metrics
            .jobs_finished
            .get_or_create(&vec![("state".into(), outcome.state.label().into())])
            .inc();
        for old in self.jobs.retire(id, self.limits.history) {
            self.fences.forget(old);
        }
        self.flow_finished(id);
        self.refresh_gauges();
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;

    #[test]
    fn a_job_runs_to_completion() {
        let mut h = harness(4);
        let (id, mut rx) = h.submit(spec(4, 2));
        assert_eq!(h.state(id), JobState::Launching);
        for n in ["n1", "n2", "n3", "n4"] {
            let msgs = h.agent_hears(n);
            assert!(
                matches!(&msgs[..], [master_message::Msg::Launch(l), master_message::Msg::OutputCredit(c)]
                    if l.job.as_ref().unwrap().nodes.len() == 4 && c.bytes == 1 << 20),
                "the launch, and a quarter of the output buffer: {msgs:?}"
            );
        }
        h.launch_ok(id);
        assert_eq!(h.state(id), JobState::Running);
        for (i, n) in ["n1", "n2", "n3", "n4"].iter().enumerate() {
            h.exit(id, n, 2 * i as u32, 0, 0);
            h.exit(id, n, 2 * i as u32 + 1, 0, 0);
        }
        assert_eq!(h.state(id), JobState::Completing);
        assert!(h
            .agent_hears("n3")
            .iter()
            .any(|m| matches!(m, master_message::Msg::Cleanup(_))));
        h.clean_all(id);
        let info = finished(&mut rx).expect("finished event");
        assert_eq!(JobState::try_from(info.state).unwrap(), JobState::Completed);
        assert_eq!(info.exit_status, 0);
    }

    #[test]
    fn a_failing_rank_ends_the_job_with_its_status_and_name() {
        let mut h = harness(2);
        let (id, mut rx) = h.submit(spec(2, 2));
        h.launch_ok(id);
        h.exit(id, "n2", 3, 7, 0);
        assert_eq!(h.state(id), JobState::Completing);
        for n in ["n1", "n2"] {
            assert!(h
                .agent_hears(n)
                .iter()
                .any(|m| matches!(m, master_message::Msg::Cleanup(_))));
        }
        // The others die of the cleanup's SIGKILL; that does not change the outcome.
        h.exit(id, "n1", 0, 0, 9);
        h.clean_all(id);
        let info = finished(&mut rx).unwrap();
        assert_eq!(JobState::try_from(info.state).unwrap(), JobState::Failed);
        assert_eq!(info.reason, "rank 3 on n2 exited with status 7");
        assert_eq!(info.exit_status, 7);
    }

    #[test]
    fn a_signalled_rank_gives_128_plus_signal() {
        let mut h = harness(1);
        let (id, mut rx) = h.submit(spec(1, 1));
        h.launch_ok(id);
        h.exit(id, "n1", 0, 0, 11);
        h.clean_all(id);
        let info = finished(&mut rx).unwrap();
        assert_eq!(info.exit_status, 139);
        assert!(info.reason.contains("SIGSEGV (11)"), "{}", info.reason);
    }

    #[test]
    fn cancel_sends_sigterm_then_cleanup_after_the_grace_time() {
        let mut h = harness(1);
        let (id, mut rx) = h.submit(spec(1, 1));
        h.launch_ok(id);
        h.agent_hears("n1");
        h.st.cancel(id, false, USER, "cancelled by alice").unwrap();
        let m = h.agent_hears("n1");
        assert!(matches!(&m[..], [master_message::Msg::Signal(s)] if s.signal == libc::SIGTERM));
        let t = drain(&mut h.timers);
        assert!(t
            .iter()
            .any(|t| t.kind == TimerKind::KillGrace && t.job == id));
        h.st.timer_fired(id, TimerKind::KillGrace);
        assert!(h
            .agent_hears("n1")
            .iter()
            .any(|m| matches!(m, master_message::Msg::Cleanup(_))));
        h.clean_all(id);
        let info = finished(&mut rx).unwrap();
        assert_eq!(JobState::try_from(info.state).unwrap(), JobState::Cancelled);
        assert_eq!(info.exit_status, EXIT_CANCELLED);
    }

    #[test]
    fn cancelling_a_pending_job_finishes_it_at_once() {
        let mut h = harness(1);
        let (_a, _ra) = h.submit(spec(1, 1));
        let (b, mut rb) = h.submit(spec(1, 1));
        h.st.cancel(b, true, USER, "cancelled").unwrap();
        assert_eq!(
            JobState::try_from(finished(&mut rb).unwrap().state).unwrap(),
            JobState::Cancelled
        );
    }

    #[test]
    fn a_time_limit_ends_the_job_as_timeout() {
        let mut h = harness(1);
        let mut s = spec(1, 1);
        s.time_limit_ms = 2000;
        let (id, mut rx) = h.submit(s);
        assert!(drain(&mut h.timers)
            .iter()
            .any(|t| t.kind == TimerKind::TimeLimit && t.after == Duration::from_secs(2)));
        h.launch_ok(id);
        h.st.timer_fired(id, TimerKind::TimeLimit);
        h.st.timer_fired(id, TimerKind::KillGrace);
        h.exit(id, "n1", 0, 0, 15);
        h.clean_all(id);
        let info = finished(&mut rx).unwrap();
        assert_eq!(JobState::try_from(info.state).unwrap(), JobState::Timeout);
        assert_eq!(info.exit_status, EXIT_TIMEOUT);
        assert_eq!(info.reason, "time limit of 2 s exceeded");
    }

    #[test]
    fn a_job_with_hosts_runs_on_exactly_those_nodes() {
        let mut h = harness_with(4, 2);
        // n1 is busy in the other row: the matrix prefers idle nodes, yet
        // the ranks follow the order the job gave.
        let (_busy, _rb) = h.submit(JobSpec {
            hosts: vec!["n1".into()],
            ..spec(1, 1)
        });
        let (a, _ra) = h.submit(JobSpec {
            hosts: vec!["n1".into(), "n3".into()],
            ..spec(2, 1)
        });
        assert_eq!(h.st.job_info(a).unwrap().nodes, ["n1", "n3"]);
        let (tx, _r) = unbounded_channel();
        let bad = |hosts: &[&str], n| JobSpec {
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            ..spec(n, 1)
        };
        let e =
            h.st.submit(bad(&["n1", "n9"], 2), USER, "a".into(), tx.clone())
                .unwrap_err();
        assert!(
            e.message().contains("node n9, which is not in the cluster"),
            "{}",
            e.message()
        );
        let e =
            h.st.submit(bad(&["n1"], 2), USER, "a".into(), tx.clone())
                .unwrap_err();
        assert!(
            e.message().contains("names 1 hosts but asks for 2"),
            "{}",
            e.message()
        );
        let e =
            h.st.submit(bad(&["n2", "n2"], 2), USER, "a".into(), tx)
                .unwrap_err();
        assert!(
            e.message().contains("names node n2 twice"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn an_adopted_job_ends_when_its_launcher_says_so() {
        let mut h = harness(2);
        let adopted = JobSpec {
            hosts: vec!["n1".into(), "n2".into()],
            adopt: true,
            ..spec(2, 1)
        };
        let (a, mut ra) = h.submit(adopted.clone());
        h.launch_ok(a);
        assert_eq!(h.state(a), JobState::Running);
        h.st.step_done(a, 0);
        h.clean_all(a);
        let done = finished(&mut ra).expect("finished");
        assert_eq!(done.state, JobState::Completed as i32);
        // A status from the launcher fails the job with it.
        let (b, mut rb) = h.submit(adopted);
        h.launch_ok(b);
        h.st.step_done(b, 3);
        h.clean_all(b);
        let done = finished(&mut rb).expect("finished");
        assert_eq!(done.state, JobState::Failed as i32);
        assert_eq!(done.exit_status, 3);
        assert!(
            done.reason.contains("launcher reported status 3"),
            "{}",
            done.reason
        );
        // step_done means nothing to a job whose ranks scored started.
        let (c, _rc) = h.submit(spec(1, 1));
        h.launch_ok(c);
        h.st.step_done(c, 0);
        assert_eq!(h.state(c), JobState::Running);
    }

    #[test]
    fn a_scrun_that_goes_away_cancels_its_job() {
        let mut h = harness(1);
        let (id, rx) = h.submit(spec(1, 1));
        h.launch_ok(id);
        drop(rx);
        let call = h.st.follower(id).unwrap();
        h.st.client_gone(id, call);
        assert_eq!(h.state(id), JobState::Completing);
        assert!(h
            .st
            .job_info(id)
            .unwrap()
            .reason
            .contains("scrun disconnected"));
    }
}
