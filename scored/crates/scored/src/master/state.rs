//! The master's state machine: nodes, the job queue, allocation and each job's
//! life from submission to its last cleaned node.
//!
//! Everything here is synchronous and runs under one lock held by
//! [`super::service`]; messages leave through unbounded channels (one per
//! agent, one per following scrun) and timers through `timers`, so the logic
//! is testable without a network.

use score_proto::v1::{
    agent_message, job_event, master_message, AgentMessage, CleanupJob, FenceComplete, JobEvent,
    JobInfo, JobSpec, JobState, LaunchJob, MasterMessage, MatrixCell, MatrixReply, MatrixRow,
    NodeInfo, NodeState, Preempt, RankExit, SignalJob, StdinChunk, Switch, SwitchStats,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::UnboundedSender;
use tonic::Status;

use super::matrix::Matrix;
use super::metrics::MasterMetrics;

pub type ClientTx = UnboundedSender<Result<JobEvent, Status>>;
pub type AgentTx = UnboundedSender<MasterMessage>;

/// Exit statuses scrun returns for outcomes that are not a rank's own status.
pub const EXIT_CANCELLED: i32 = 130;
pub const EXIT_TIMEOUT: i32 = 124;
pub const EXIT_SYSTEM_FAILURE: i32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKind {
    /// The job's time limit ran out.
    TimeLimit,
    /// The grace time after SIGTERM is over: kill what is left.
    KillGrace,
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
}

/// A switch of the matrix from one row to the next, in progress.
struct SwitchRun {
    id: u64,
    started: Instant,
    target: usize,
    outgoing: BTreeSet<u64>,
    incoming: BTreeSet<u64>,
    /// Nodes whose answer (Drained, then Switched twice) is due.
    waiting: BTreeSet<String>,
    phase: Phase,
    quiesce_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The outgoing jobs' contexts quiesce.
    Draining,
    /// Every node drained: the outgoing jobs' cgroups freeze.
    Freezing,
    /// Every node froze: the incoming jobs thaw (or launch).
    Thawing,
}

/// Switch durations kept for scorectl's median and p99.
const SWITCH_SAMPLES: usize = 1000;

struct Node {
    name: String,
    slots: u32,
    /// The live connection; None while the node is down.
    conn: Option<AgentConn>,
    drained: Option<String>,
    down_reason: String,
    jobs: BTreeSet<u64>,
    last_seen: Instant,
    last_seen_ms: u64,
    address: String,
    metrics_url: String,
    boot_id: u64,
}

struct AgentConn {
    id: u64,
    tx: AgentTx,
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

    fn state(&self) -> NodeState {
        match (&self.conn, &self.drained) {
            (None, _) => NodeState::Down,
            (Some(_), Some(_)) => NodeState::Drained,
            (Some(_), None) => NodeState::Up,
        }
    }

    fn is_usable(&self, ppn: u32) -> bool {
        self.state() == NodeState::Up && self.slots >= ppn
    }

    fn send(&self, job: u64, msg: master_message::Msg) {
        if let Some(c) = &self.conn {
            // A closed channel means the agent is going away; its loss is
            // handled when its stream ends.
            let _ = c.tx.send(MasterMessage {
                msg: Some(msg),
                job,
            });
        }
    }

    fn info(&self) -> NodeInfo {
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

/// How a job ends, decided once: the first failure wins.
#[derive(Debug, Clone)]
struct Outcome {
    state: JobState,
    reason: String,
    exit_status: i32,
}

struct Job {
    info: JobInfo,
    client: Option<ClientTx>,
    outcome: Option<Outcome>,
    /// Per allocated node (same order as info.nodes): launched, cleaned.
    launched: Vec<bool>,
    cleaned: Vec<bool>,
    ranks_exited: usize,
    fences: BTreeMap<u64, BTreeMap<usize, Vec<u8>>>,
    /// stdin that arrived before the job was launched.
    pending_stdin: Vec<StdinChunk>,
    submitted: Instant,
    launch_started: Option<Instant>,
    cleanup_sent: bool,
    /// Since when it runs without interruption (launch or last thaw): a
    /// job is not preempted before it had a whole quantum.
    running_since: Instant,
}

impl Job {
    fn total_ranks(&self) -> usize {
        let s = self.info.spec.as_ref().expect("job has a spec");
        (s.nodes * s.ppn) as usize
    }

    fn state(&self) -> JobState {
        JobState::try_from(self.info.state).unwrap_or(JobState::Unspecified)
    }

    fn is_active(&self) -> bool {
        !matches!(
            self.state(),
            JobState::Completed | JobState::Failed | JobState::Cancelled | JobState::Timeout
        )
    }

    fn emit(&self, event: job_event::Event) {
        if let Some(c) = &self.client {
            let _ = c.send(Ok(JobEvent { event: Some(event) }));
        }
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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

pub struct State {
    limits: Limits,
    nodes: BTreeMap<String, Node>,
    jobs: HashMap<u64, Job>,
    queue: VecDeque<u64>,
    /// Finished jobs, oldest first, kept for scorectl.
    history: VecDeque<u64>,
    next_job: u64,
    next_conn: u64,
    timers: UnboundedSender<Timer>,
    pub metrics: MasterMetrics,
    matrix: Matrix,
    switch: Option<SwitchRun>,
    next_switch: u64,
    switch_times: VecDeque<f64>,
    quiesce_times: VecDeque<f64>,
    switches: u64,
    unanswered: u64,
    silent: u64,
    /// When this master started (ms since the epoch).
    epoch: u64,
}

/// Who asks: the authenticated MUNGE identity of a request.
#[derive(Debug, Clone, Copy)]
pub struct Requester {
    pub uid: u32,
    pub gid: u32,
}

impl Requester {
    fn may_manage(&self, job: &JobInfo) -> bool {
        self.uid == 0 || self.uid == job.uid
    }
}

impl State {
    pub fn new(
        limits: Limits,
        expected_nodes: &[String],
        timers: UnboundedSender<Timer>,
        metrics: MasterMetrics,
    ) -> Self {
        let nodes = expected_nodes
            .iter()
            .map(|n| (n.clone(), Node::new(n)))
            .collect();
        let matrix = Matrix::new(limits.gang_slots);
        let s = Self {
            matrix,
            switch: None,
            next_switch: 1,
            switch_times: VecDeque::new(),
            quiesce_times: VecDeque::new(),
            switches: 0,
            unanswered: 0,
            silent: 0,
            epoch: now_ms(),
            limits,
            nodes,
            jobs: HashMap::new(),
            queue: VecDeque::new(),
            history: VecDeque::new(),
            next_job: 1,
            next_conn: 1,
            timers,
            metrics,
        };
        s.refresh_gauges();
        s
    }

    // ------------------------------------------------------------ clients

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
        let id = self.next_job;
        self.next_job += 1;
        let mut spec = spec;
        if spec.name.is_empty() {
            spec.name = spec.argv[0].rsplit('/').next().unwrap_or("job").to_string();
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
        let job = Job {
            info,
            client: Some(client),
            outcome: None,
            launched: Vec::new(),
            cleaned: Vec::new(),
            ranks_exited: 0,
            fences: BTreeMap::new(),
            pending_stdin: Vec::new(),
            submitted: Instant::now(),
            launch_started: None,
            cleanup_sent: false,
            running_since: Instant::now(),
        };
        job.emit(job_event::Event::Accepted(job.info.clone()));
        self.jobs.insert(id, job);
        self.queue.push_back(id);
        self.metrics.jobs_submitted.inc();
        self.schedule();
        self.update_pending_reasons();
        Ok(id)
    }

    fn validate(&self, spec: &JobSpec, who: Requester) -> Result<(), Status> {
        if spec.argv.is_empty() || spec.argv[0].is_empty() {
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
        let known = self.nodes.len() as u32;
        if spec.nodes > known {
            return Err(Status::invalid_argument(format!(
                "the job asks for {} nodes; the cluster has {known}",
                spec.nodes
            )));
        }
        let big_enough = self
            .nodes
            .values()
            .filter(|n| n.slots >= spec.ppn || n.conn.is_none())
            .count() as u32;
        if big_enough < spec.nodes {
            let max = self.nodes.values().map(|n| n.slots).max().unwrap_or(0);
            return Err(Status::invalid_argument(format!(
                "the job asks for {} processes per node on {} nodes; only {big_enough} nodes have that many slots (the largest has {max})",
                spec.ppn, spec.nodes
            )));
        }
        Ok(())
    }

    /// Place queued jobs in the matrix, in order, while the head of the
    /// queue finds a place; start those whose turn it is.
    pub fn schedule(&mut self) {
        while let Some(&id) = self.queue.front() {
            let spec = self.jobs[&id].info.spec.clone().expect("spec");
            let usable: Vec<String> = self
                .nodes
                .values()
                .filter(|n| n.is_usable(spec.ppn))
                .map(|n| n.name.clone())
                .collect();
            let Some((row, nodes)) = self.matrix.place(id, spec.nodes as usize, &usable) else {
                break;
            };
            self.queue.pop_front();
            let job = self.jobs.get_mut(&id).expect("job");
            job.info.nodes = nodes.clone();
            job.info.slot = row as u32;
            job.launched = vec![false; nodes.len()];
            job.cleaned = vec![false; nodes.len()];
            for n in &nodes {
                self.nodes.get_mut(n).expect("placed node").jobs.insert(id);
            }
            self.metrics
                .queue_wait
                .observe(job.submitted.elapsed().as_secs_f64());
        }
        self.reconcile();
        self.refresh_gauges();
    }

    /// Start or thaw every job that may run in the active row and does not,
    /// when no switch is under way (nothing has to be preempted for them:
    /// their nodes are free in this row).
    fn reconcile(&mut self) {
        if self.switch.is_some() {
            return;
        }
        for id in self.matrix.active_set(self.matrix.current()) {
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            if job.outcome.is_some() {
                continue;
            }
            if job.state() == JobState::Pending {
                self.launch(id);
            } else if job.info.frozen {
                let nodes = job.info.nodes.clone();
                self.set_frozen(id, false);
                for name in nodes {
                    self.nodes[&name].send(
                        0,
                        master_message::Msg::Switch(Switch {
                            switch_id: 0,
                            freeze: Vec::new(),
                            thaw: vec![id],
                        }),
                    );
                }
            }
        }
        self.update_pending_reasons();
    }

    fn set_frozen(&mut self, id: u64, frozen: bool) {
        if let Some(job) = self.jobs.get_mut(&id) {
            if !frozen {
                job.running_since = Instant::now();
            }
            if job.info.frozen != frozen {
                job.info.frozen = frozen;
                job.emit(job_event::Event::State(job.info.clone()));
            }
        }
    }

    fn update_pending_reasons(&mut self) {
        let free_nodes = self
            .nodes
            .values()
            .filter(|n| n.is_usable(1) && n.jobs.is_empty())
            .count();
        for job in self.jobs.values_mut() {
            if job.state() == JobState::Pending
                && !job.info.nodes.is_empty()
                && job.outcome.is_none()
            {
                let reason = format!("placed in time slot {}; waits for its turn", job.info.slot);
                if job.info.reason != reason {
                    job.info.reason = reason;
                    job.emit(job_event::Event::State(job.info.clone()));
                }
            }
        }
        for (pos, id) in self.queue.iter().enumerate() {
            let job = self.jobs.get_mut(id).expect("queued job exists");
            let want = job.info.spec.as_ref().map(|s| s.nodes).unwrap_or(0);
            let reason = if pos == 0 {
                format!("waiting for {want} node(s) ({free_nodes} free)")
            } else {
                format!("waiting behind {pos} earlier job(s)")
            };
            if job.info.reason != reason {
                job.info.reason = reason;
                job.emit(job_event::Event::State(job.info.clone()));
            }
        }
    }

    fn launch(&mut self, id: u64) {
        let job = self.jobs.get_mut(&id).expect("job");
        let nodes = job.info.nodes.clone();
        job.info.state = JobState::Launching as i32;
        job.info.reason.clear();
        job.launched = vec![false; nodes.len()];
        job.cleaned = vec![false; nodes.len()];
        job.launch_started = Some(Instant::now());
        job.running_since = Instant::now();
        job.emit(job_event::Event::State(job.info.clone()));
        for (i, name) in nodes.iter().enumerate() {
            let node = self.nodes.get_mut(name).expect("allocated node");
            node.send(
                id,
                master_message::Msg::Launch(LaunchJob {
                    job: Some(job.info.clone()),
                    node_index: i as u32,
                }),
            );
        }
        let stdin = std::mem::take(&mut job.pending_stdin);
        for chunk in stdin {
            self.nodes[&nodes[0]].send(id, master_message::Msg::Stdin(chunk));
        }
        let limit = job.info.spec.as_ref().map(|s| s.time_limit_ms).unwrap_or(0);
        if limit > 0 {
            let _ = self.timers.send(Timer {
                after: Duration::from_millis(limit),
                job: id,
                kind: TimerKind::TimeLimit,
            });
        }
    }

    pub fn stdin(&mut self, id: u64, chunk: StdinChunk) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        match job.state() {
            JobState::Pending => job.pending_stdin.push(chunk),
            JobState::Launching | JobState::Running => {
                if let Some(n) = self.nodes.get(&job.info.nodes[0]) {
                    n.send(id, master_message::Msg::Stdin(chunk));
                }
            }
            _ => {}
        }
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
            .get(&id)
            .ok_or_else(|| Status::not_found(format!("no job {id}")))?;
        if !who.may_manage(&job.info) {
            return Err(Status::permission_denied(format!(
                "job {id} belongs to {} (uid {}); only its owner or root may cancel it",
                job.info.user, job.info.uid
            )));
        }
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
        Ok(self.jobs[&id].info.clone())
    }

    /// scrun went away before its job ended.
    pub fn client_gone(&mut self, id: u64) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.client = None;
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

    pub fn job_info(&self, id: u64) -> Option<JobInfo> {
        self.jobs.get(&id).map(|j| j.info.clone())
    }

    pub fn list_jobs(&self, all: bool) -> Vec<JobInfo> {
        let mut v: Vec<JobInfo> = self
            .jobs
            .values()
            .filter(|j| all || j.is_active())
            .map(|j| j.info.clone())
            .collect();
        v.sort_by_key(|j| j.id);
        v
    }

    pub fn list_nodes(&self) -> Vec<NodeInfo> {
        self.nodes.values().map(Node::info).collect()
    }

    pub fn drain(&mut self, name: &str, reason: &str, who: Requester) -> Result<NodeInfo, Status> {
        Self::require_root(who, "drain a node")?;
        let node = self.node_mut(name)?;
        node.drained = Some(if reason.is_empty() {
            "drained by administrator".into()
        } else {
            reason.to_string()
        });
        let info = node.info();
        self.refresh_gauges();
        Ok(info)
    }

    pub fn resume(&mut self, name: &str, who: Requester) -> Result<NodeInfo, Status> {
        Self::require_root(who, "resume a node")?;
        let node = self.node_mut(name)?;
        node.drained = None;
        let info = node.info();
        self.schedule();
        self.update_pending_reasons();
        Ok(info)
    }

    fn require_root(who: Requester, what: &str) -> Result<(), Status> {
        if who.uid != 0 {
            return Err(Status::permission_denied(format!(
                "only root may {what} (you are uid {})",
                who.uid
            )));
        }
        Ok(())
    }

    fn node_mut(&mut self, name: &str) -> Result<&mut Node, Status> {
        let known: Vec<String> = self.nodes.keys().cloned().collect();
        self.nodes.get_mut(name).ok_or_else(|| {
            Status::not_found(format!("no node {name:?} (known: {})", known.join(", ")))
        })
    }

    // ------------------------------------------------------------ agents

    /// An agent registered.  Returns the connection id its stream must
    /// present for later messages.
    pub fn agent_attached(
        &mut self,
        name: &str,
        slots: u32,
        boot_id: u64,
        address: String,
        metrics_url: String,
        tx: AgentTx,
    ) -> u64 {
        // A node that re-registers while we still think it is up lost its
        // previous agent: fail what ran there first.
        if self.nodes.get(name).is_some_and(|n| n.conn.is_some()) {
            self.node_lost(name, "its agent restarted");
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        let node = self
            .nodes
            .entry(name.to_string())
            .or_insert_with(|| Node::new(name));
        node.conn = Some(AgentConn { id: conn, tx });
        node.slots = slots;
        node.boot_id = boot_id;
        node.address = address;
        node.metrics_url = metrics_url;
        node.last_seen = Instant::now();
        node.last_seen_ms = now_ms();
        node.down_reason.clear();
        tracing::info!(node = name, slots, "node up");
        self.schedule();
        self.update_pending_reasons();
        conn
    }

    fn is_current(&self, name: &str, conn: u64) -> bool {
        self.nodes
            .get(name)
            .and_then(|n| n.conn.as_ref())
            .is_some_and(|c| c.id == conn)
    }

    /// A message from the agent of `name` over connection `conn`.
    pub fn agent_message(&mut self, name: &str, conn: u64, msg: AgentMessage) {
        if !self.is_current(name, conn) {
            return; // a stale stream of a replaced agent
        }
        let node = self.nodes.get_mut(name).expect("current node");
        node.last_seen = Instant::now();
        node.last_seen_ms = now_ms();
        let id = msg.job;
        let Some(m) = msg.msg else { return };
        match m {
            agent_message::Msg::Heartbeat(_) | agent_message::Msg::Register(_) => {}
            agent_message::Msg::Launched(l) => self.launched(id, name, l.ok, &l.error),
            agent_message::Msg::Output(o) => {
                if let Some(job) = self.jobs.get(&id) {
                    job.emit(job_event::Event::Output(o));
                }
            }
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
                self.unanswered += u64::from(d.unanswered);
                self.silent += u64::from(d.silent);
                if d.unanswered > 0 {
                    self.metrics.unanswered.inc_by(u64::from(d.unanswered));
                }
                if d.contexts > 0 {
                    self.metrics.quiesce.observe(d.quiesce_ns as f64 / 1e9);
                }
                self.switch_answer(name, d.switch_id, true, d.quiesce_ns);
            }
            agent_message::Msg::Switched(sw) => self.switch_answer(name, sw.switch_id, false, 0),
        }
    }

    /// The agent's stream ended (or went silent): the node is lost.
    pub fn agent_detached(&mut self, name: &str, conn: u64, why: &str) {
        if self.is_current(name, conn) {
            self.node_lost(name, why);
        }
    }

    /// Nodes whose agent has been silent longer than the heartbeat timeout.
    pub fn check_heartbeats(&mut self) {
        let timeout = self.limits.heartbeat_timeout;
        let silent: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.conn.is_some() && n.last_seen.elapsed() > timeout)
            .map(|n| n.name.clone())
            .collect();
        for name in silent {
            let why = format!("no heartbeat for {} ms", timeout.as_millis());
            self.node_lost(&name, &why);
        }
    }

    fn node_lost(&mut self, name: &str, why: &str) {
        let Some(node) = self.nodes.get_mut(name) else {
            return;
        };
        tracing::warn!(node = name, why, "node down");
        node.conn = None;
        if let Some(sw) = &mut self.switch {
            sw.waiting.remove(name);
        }
        node.down_reason = why.to_string();
        let jobs: Vec<u64> = std::mem::take(&mut node.jobs).into_iter().collect();
        for id in jobs {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            // The lost node will never report Cleaned: its processes died
            // with it or are killed by its agent when it comes back.
            if let Some(i) = job.info.nodes.iter().position(|n| n == name) {
                job.cleaned[i] = true;
            }
            self.fail(id, format!("node {name} lost ({why})"), EXIT_SYSTEM_FAILURE);
            self.maybe_finish(id);
        }
        self.advance_switch();
        self.schedule();
        self.update_pending_reasons();
    }

    fn launched(&mut self, id: u64, node: &str, ok: bool, error: &str) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if !ok {
            let reason = format!("launch failed on {node}: {error}");
            self.fail(id, reason, EXIT_SYSTEM_FAILURE);
            return;
        }
        if let Some(i) = job.info.nodes.iter().position(|n| n == node) {
            job.launched[i] = true;
        }
        if job.info.start_time_ms == 0 && job.launched.iter().all(|&l| l) {
            // Started everywhere.  An agent reports the launch before any
            // exit, but another node's ranks may already have ended the job:
            // then only the start is recorded.
            job.info.start_time_ms = now_ms();
            if let Some(t) = job.launch_started {
                self.metrics.launch_time.observe(t.elapsed().as_secs_f64());
            }
            if job.state() == JobState::Launching {
                job.info.state = JobState::Running as i32;
                job.emit(job_event::Event::State(job.info.clone()));
            }
            self.refresh_gauges();
        }
    }

    fn rank_exited(&mut self, id: u64, exit: RankExit) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
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

    fn fail(&mut self, id: u64, reason: String, exit_status: i32) {
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
    fn decide(&mut self, id: u64, outcome: Outcome, stop: Stop) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if !job.is_active() {
            return;
        }
        let first = job.outcome.is_none();
        if first {
            tracing::info!(job = id, state = ?outcome.state, reason = %outcome.reason, "job ends");
            job.outcome = Some(outcome);
        }
        if job.state() == JobState::Pending {
            self.queue.retain(|&q| q != id);
            self.finish(id);
            self.update_pending_reasons();
            return;
        }
        if first {
            job.info.state = JobState::Completing as i32;
            job.info.reason = job.outcome.as_ref().expect("outcome").reason.clone();
            job.emit(job_event::Event::State(job.info.clone()));
        }
        match stop {
            Stop::Kill => self.send_cleanup(id),
            Stop::Terminate if first => {
                self.signal_job(id, libc::SIGTERM);
                let _ = self.timers.send(Timer {
                    after: self.limits.kill_grace,
                    job: id,
                    kind: TimerKind::KillGrace,
                });
            }
            Stop::Terminate => {}
        }
        self.maybe_finish(id);
        self.refresh_gauges();
    }

    fn signal_job(&self, id: u64, signal: i32) {
        let job = &self.jobs[&id];
        for (i, name) in job.info.nodes.iter().enumerate() {
            if !job.cleaned[i] {
                if let Some(n) = self.nodes.get(name) {
                    n.send(id, master_message::Msg::Signal(SignalJob { signal }));
                }
            }
        }
    }

    fn send_cleanup(&mut self, id: u64) {
        let job = self.jobs.get_mut(&id).expect("job");
        if job.cleanup_sent {
            return;
        }
        job.cleanup_sent = true;
        for (i, name) in job.info.nodes.iter().enumerate() {
            if !job.cleaned[i] {
                if let Some(n) = self.nodes.get(name) {
                    n.send(id, master_message::Msg::Cleanup(CleanupJob {}));
                }
            }
        }
    }

    pub fn timer_fired(&mut self, id: u64, kind: TimerKind) {
        let Some(job) = self.jobs.get(&id) else {
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
        }
    }

    fn fence(&mut self, id: u64, node: &str, seq: u64, data: Vec<u8>) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let Some(index) = job.info.nodes.iter().position(|n| n == node) else {
            return;
        };
        let contributions = job.fences.entry(seq).or_default();
        contributions.insert(index, data);
        if contributions.len() < job.info.nodes.len() {
            return;
        }
        let contributions = job.fences.remove(&seq).expect("fence");
        let data: Vec<u8> = contributions.into_values().flatten().collect();
        for name in &job.info.nodes {
            if let Some(n) = self.nodes.get(name) {
                n.send(
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

    fn cleaned(&mut self, id: u64, node: &str) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.jobs.remove(&id);
        }
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if let Some(i) = job.info.nodes.iter().position(|n| n == node) {
            job.cleaned[i] = true;
        }
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

    fn maybe_finish(&mut self, id: u64) {
        let job = &self.jobs[&id];
        if job.outcome.is_some() && job.cleaned.iter().all(|&c| c) && job.is_active() {
            self.finish(id);
        }
    }

    fn finish(&mut self, id: u64) {
        let job = self.jobs.get_mut(&id).expect("job");
        let outcome = job.outcome.clone().expect("decided");
        job.info.state = outcome.state as i32;
        job.info.reason = outcome.reason;
        job.info.exit_status = outcome.exit_status;
        job.info.end_time_ms = now_ms();
        job.fences.clear();
        job.emit(job_event::Event::Finished(job.info.clone()));
        job.client = None;
        for name in &job.info.nodes {
            if let Some(n) = self.nodes.get_mut(name) {
                n.jobs.remove(&id);
            }
        }
        self.matrix.remove(id);
        if let Some(sw) = &mut self.switch {
            sw.outgoing.remove(&id);
            sw.incoming.remove(&id);
        } else {
            self.matrix.compact();
        }
        self.metrics
            .jobs_finished
            .get_or_create(&vec![("state".into(), outcome.state.label().into())])
            .inc();
        self.history.push_back(id);
        while self.history.len() > self.limits.history {
            if let Some(old) = self.history.pop_front() {
                self.jobs.remove(&old);
            }
        }
        self.refresh_gauges();
    }

    // ------------------------------------------------------------ gang scheduling

    /// The quantum is over: switch to the next row of the matrix, if the
    /// matrix has another and no switch is still under way.
    pub fn quantum_tick(&mut self) {
        if self.switch.is_some() {
            return;
        }
        let Some(target) = self.matrix.next_row() else {
            return;
        };
        let next = self.matrix.active_set(target);
        let running: BTreeSet<u64> = self
            .jobs
            .values()
            .filter(|j| {
                matches!(j.state(), JobState::Launching | JobState::Running)
                    && !j.info.frozen
                    && j.outcome.is_none()
            })
            .map(|j| j.info.id)
            .collect();
        let outgoing: BTreeSet<u64> = running.difference(&next).copied().collect();
        // Every job gets whole quanta: one (re)started late in this quantum
        // (a job that just launched is still starting up) keeps running
        // until its own quantum is over; the switch waits for the next tick.
        let quantum = self.limits.quantum;
        if outgoing
            .iter()
            .any(|j| self.jobs[j].running_since.elapsed() < quantum.mul_f64(0.9))
        {
            return;
        }
        let incoming: BTreeSet<u64> = next
            .iter()
            .copied()
            .filter(|id| {
                !running.contains(id) && self.jobs.get(id).is_some_and(|j| j.outcome.is_none())
            })
            .collect();
        if outgoing.is_empty() && incoming.is_empty() {
            self.matrix.set_current(target);
            return;
        }
        let id = self.next_switch;
        self.next_switch += 1;
        let mut sw = SwitchRun {
            id,
            started: Instant::now(),
            target,
            outgoing,
            incoming,
            waiting: BTreeSet::new(),
            phase: Phase::Draining,
            quiesce_ns: 0,
        };
        // Phase 1: every node of an outgoing job drains that job's contexts.
        let mut per_node: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for job in &sw.outgoing {
            for n in &self.jobs[job].info.nodes {
                per_node.entry(n.clone()).or_default().push(*job);
            }
        }
        for (name, jobs) in per_node {
            let Some(node) = self.nodes.get(&name).filter(|n| n.conn.is_some()) else {
                continue;
            };
            node.send(
                0,
                master_message::Msg::Preempt(Preempt {
                    switch_id: id,
                    jobs,
                    network: self.limits.network_preemption,
                    quiesce_timeout_ms: self.limits.quiesce_timeout.as_millis() as u64,
                }),
            );
            sw.waiting.insert(name);
        }
        tracing::debug!(switch = id, to = target, out = ?sw.outgoing, inc = ?sw.incoming, "switch");
        self.switch = Some(sw);
        self.advance_switch();
    }

    fn switch_answer(&mut self, node: &str, switch_id: u64, drained: bool, quiesce_ns: u64) {
        let Some(sw) = &mut self.switch else { return };
        if sw.id != switch_id || (sw.phase == Phase::Draining) != drained {
            return;
        }
        sw.waiting.remove(node);
        sw.quiesce_ns = sw.quiesce_ns.max(quiesce_ns);
        self.advance_switch();
    }

    /// Moves the switch on each time every awaited node has answered:
    /// drained → frozen → thawed → done.  Freezing everywhere before thawing
    /// anywhere keeps an incoming job from sending to a peer whose node has
    /// not thawed it yet (that would cost a retransmission).
    fn advance_switch(&mut self) {
        loop {
            let Some(sw) = &mut self.switch else { return };
            if !sw.waiting.is_empty() {
                return;
            }
            let (id, outgoing, incoming) = (sw.id, sw.outgoing.clone(), sw.incoming.clone());
            match sw.phase {
                Phase::Draining => {
                    sw.phase = Phase::Freezing;
                    let waiting = self.send_switch(id, &outgoing, &BTreeSet::new());
                    for job in &outgoing {
                        self.set_frozen(*job, true);
                    }
                    self.switch.as_mut().expect("switch").waiting = waiting;
                }
                Phase::Freezing => {
                    sw.phase = Phase::Thawing;
                    let target = sw.target;
                    let (launch, thaw): (BTreeSet<u64>, BTreeSet<u64>) = incoming
                        .iter()
                        .partition(|j| self.jobs[*j].state() == JobState::Pending);
                    let waiting = self.send_switch(id, &BTreeSet::new(), &thaw);
                    for job in &thaw {
                        self.set_frozen(*job, false);
                    }
                    for job in launch {
                        self.launch(job);
                    }
                    self.matrix.set_current(target);
                    self.switch.as_mut().expect("switch").waiting = waiting;
                }
                Phase::Thawing => break,
            }
        }
        let sw = self.switch.take().expect("switch");
        let took = sw.started.elapsed().as_secs_f64();
        self.switches += 1;
        self.metrics.switches.inc();
        self.metrics.switch_time.observe(took);
        push_sample(&mut self.switch_times, took);
        if !sw.outgoing.is_empty() {
            push_sample(&mut self.quiesce_times, sw.quiesce_ns as f64 / 1e9);
        }
        tracing::debug!(switch = sw.id, seconds = took, "switch done");
        self.matrix.compact();
        self.schedule();
    }

    /// Sends each node its share of freezing and thawing; returns the nodes
    /// that will answer.
    fn send_switch(
        &self,
        id: u64,
        freeze: &BTreeSet<u64>,
        thaw: &BTreeSet<u64>,
    ) -> BTreeSet<String> {
        let mut per_node: BTreeMap<&String, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
        for job in freeze {
            for n in &self.jobs[job].info.nodes {
                per_node.entry(n).or_default().0.push(*job);
            }
        }
        for job in thaw {
            for n in &self.jobs[job].info.nodes {
                per_node.entry(n).or_default().1.push(*job);
            }
        }
        let mut waiting = BTreeSet::new();
        for (name, (freeze, thaw)) in per_node {
            let Some(node) = self.nodes.get(name).filter(|n| n.conn.is_some()) else {
                continue;
            };
            node.send(
                0,
                master_message::Msg::Switch(Switch {
                    switch_id: id,
                    freeze,
                    thaw,
                }),
            );
            waiting.insert(name.clone());
        }
        waiting
    }

    pub fn matrix_info(&self) -> MatrixReply {
        let nodes: Vec<String> = self.nodes.keys().cloned().collect();
        let rows = self
            .matrix
            .rows()
            .iter()
            .enumerate()
            .map(|(i, r)| MatrixRow {
                slot: i as u32,
                cells: nodes
                    .iter()
                    .map(|n| MatrixCell {
                        node: n.clone(),
                        job: r.get(n).copied().unwrap_or(0),
                    })
                    .collect(),
            })
            .collect();
        let running = self
            .jobs
            .values()
            .filter(|j| {
                matches!(j.state(), JobState::Launching | JobState::Running) && !j.info.frozen
            })
            .map(|j| j.info.id)
            .collect();
        MatrixReply {
            nodes,
            rows,
            current: self.matrix.current() as u32,
            running,
            quantum_ms: self.limits.quantum.as_millis() as u64,
            preemption: if self.limits.network_preemption {
                "network".into()
            } else {
                "freeze".into()
            },
            stats: Some(SwitchStats {
                switches: self.switches,
                last_s: self.switch_times.back().copied().unwrap_or(0.0),
                median_s: quantile(&self.switch_times, 0.5),
                p99_s: quantile(&self.switch_times, 0.99),
                quiesce_median_s: quantile(&self.quiesce_times, 0.5),
                unanswered: self.unanswered,
                silent: self.silent,
            }),
        }
    }

    fn refresh_gauges(&self) {
        for s in [
            JobState::Pending,
            JobState::Launching,
            JobState::Running,
            JobState::Completing,
        ] {
            let n = self.jobs.values().filter(|j| j.state() == s).count();
            self.metrics
                .jobs
                .get_or_create(&vec![("state".into(), s.label().into())])
                .set(n as i64);
        }
        self.metrics.slots.set(self.matrix.rows().len() as i64);
        for s in [NodeState::Up, NodeState::Down, NodeState::Drained] {
            let n = self.nodes.values().filter(|x| x.state() == s).count();
            self.metrics
                .nodes
                .get_or_create(&vec![("state".into(), s.label().into())])
                .set(n as i64);
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Stop {
    /// SIGTERM now, SIGKILL (cleanup) after the grace time.
    Terminate,
    /// Cleanup now: the agents kill the job's cgroups.
    Kill,
}

fn push_sample(v: &mut VecDeque<f64>, x: f64) {
    if v.len() == SWITCH_SAMPLES {
        v.pop_front();
    }
    v.push_back(x);
}

fn quantile(v: &VecDeque<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s: Vec<f64> = v.iter().copied().collect();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((s.len() - 1) as f64 * q).round() as usize;
    s[i]
}

fn fmt_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.3} s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests;
