//! The master's state without a network, for the unit tests of its parts:
//! agents and clients are channels, timers a channel too.

pub use super::super::metrics::MasterMetrics;
pub use super::jobs::{EXIT_CANCELLED, EXIT_TIMEOUT};
pub use super::{Limits, Requester, SaveNow, State, Timer, TimerKind};
pub use prometheus_client::registry::Registry;
pub use score_proto::v1::{
    agent_message, job_event, master_message, AgentMessage, Cleaned, Drained, FenceContribution,
    HeldJob, JobEvent, JobInfo, JobSpec, JobState, Launched, MasterMessage, NodeState, OutputMark,
    Preempt, RankExit, RankExited, Register, SavedState, Switch, Switched,
};
pub use std::collections::BTreeMap;
pub use std::time::Duration;
pub use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
pub use tonic::Status;

pub struct Harness {
    pub st: State,
    pub agents: BTreeMap<String, (u64, UnboundedReceiver<MasterMessage>)>,
    pub timers: UnboundedReceiver<Timer>,
}

pub const USER: Requester = Requester {
    uid: 1000,
    gid: 1000,
};

pub fn harness(nodes: usize) -> Harness {
    harness_with(nodes, 1)
}

pub fn harness_with(nodes: usize, gang_slots: usize) -> Harness {
    // A zero quantum: every tick may switch (no job is "too fresh").
    harness_quantum(nodes, gang_slots, Duration::ZERO)
}

pub fn harness_quantum(nodes: usize, gang_slots: usize, quantum: Duration) -> Harness {
    let mut h = detached(nodes, gang_slots, quantum);
    for i in 1..=nodes {
        h.attach(&format!("n{i}"), Vec::new());
    }
    h
}

/// A master restarted from `saved` (1 s quantum), before any agent is back.
pub fn restarted(nodes: usize, gang_slots: usize, saved: SavedState) -> Harness {
    restarted_quantum(nodes, gang_slots, Duration::from_secs(1), saved)
}

pub fn restarted_quantum(
    nodes: usize,
    gang_slots: usize,
    quantum: Duration,
    saved: SavedState,
) -> Harness {
    let mut h = detached(nodes, gang_slots, quantum);
    h.st.restore(saved);
    h
}

/// A master of `nodes` nodes, none of them attached yet.
fn detached(nodes: usize, gang_slots: usize, quantum: Duration) -> Harness {
    let (ttx, timers) = unbounded_channel();
    let names: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
    let st = State::new(
        Limits {
            allow_root_jobs: false,
            kill_grace: Duration::from_secs(5),
            heartbeat_timeout: Duration::from_secs(10),
            history: 10,
            gang_slots,
            quantum,
            network_preemption: true,
            quiesce_timeout: Duration::from_secs(1),
            stdio_buffer: 4 << 20,
            reattach_timeout: Duration::from_secs(30),
        },
        &names,
        ttx,
        MasterMetrics::new(&mut Registry::default()),
    );
    Harness {
        st,
        agents: BTreeMap::new(),
        timers,
    }
}

pub fn spec(nodes: u32, ppn: u32) -> JobSpec {
    JobSpec {
        nodes,
        ppn,
        argv: vec!["/bin/prog".into()],
        cwd: "/tmp".into(),
        ..Default::default()
    }
}

pub fn drain<T>(rx: &mut UnboundedReceiver<T>) -> Vec<T> {
    let mut v = Vec::new();
    while let Ok(m) = rx.try_recv() {
        v.push(m);
    }
    v
}

/// The state directory of a unit test: what the master wrote at once.
#[derive(Default)]
pub struct Disk {
    written: parking_lot::Mutex<Vec<SavedState>>,
}

impl Disk {
    pub fn saves(&self) -> usize {
        self.written.lock().len()
    }

    pub fn last_next_job(&self) -> u64 {
        self.written.lock().last().map_or(0, |s| s.next_job)
    }
}

impl SaveNow for Disk {
    fn save_now(&self, state: SavedState) -> anyhow::Result<()> {
        self.written.lock().push(state);
        Ok(())
    }
}

impl Harness {
    /// From now on the master saves to a [`Disk`] (synchronous saves only).
    pub fn durable(&mut self) -> std::sync::Arc<Disk> {
        let disk = std::sync::Arc::new(Disk::default());
        self.st.save_with(
            std::sync::Arc::new(tokio::sync::Notify::new()),
            disk.clone(),
        );
        disk
    }

    /// The agent of `node` registers (again), holding the jobs `held`.
    pub fn attach(&mut self, node: &str, held: Vec<HeldJob>) {
        let (tx, rx) = unbounded_channel();
        let reg = Register {
            node: node.to_string(),
            slots: 2,
            boot_id: 1,
            held,
            ..Default::default()
        };
        let conn = self.st.agent_attached(reg, "10.0.0.1".into(), tx);
        self.agents.insert(node.to_string(), (conn, rx));
    }

    pub fn submit(&mut self, s: JobSpec) -> (u64, UnboundedReceiver<Result<JobEvent, Status>>) {
        let (tx, rx) = unbounded_channel();
        let id = self
            .st
            .submit(s, USER, "alice".into(), tx)
            .expect("accepted");
        (id, rx)
    }

    pub fn agent_says(&mut self, node: &str, job: u64, msg: agent_message::Msg) {
        let conn = self.agents[node].0;
        self.st.agent_message(
            node,
            conn,
            AgentMessage {
                msg: Some(msg),
                job,
            },
        );
    }

    pub fn agent_hears(&mut self, node: &str) -> Vec<master_message::Msg> {
        drain(&mut self.agents.get_mut(node).unwrap().1)
            .into_iter()
            .filter_map(|m| m.msg)
            .collect()
    }

    pub fn launch_ok(&mut self, job: u64) {
        for n in self.st.job_info(job).unwrap().nodes {
            self.agent_says(
                &n,
                job,
                agent_message::Msg::Launched(Launched {
                    ok: true,
                    ..Default::default()
                }),
            );
        }
    }

    pub fn exit(&mut self, job: u64, node: &str, rank: u32, code: i32, signal: i32) {
        let exit = RankExit {
            rank,
            node: node.into(),
            code,
            signal,
        };
        self.agent_says(
            node,
            job,
            agent_message::Msg::Exited(RankExited { exit: Some(exit) }),
        );
    }

    pub fn clean_all(&mut self, job: u64) {
        for n in self.st.job_info(job).unwrap().nodes {
            self.agent_says(&n, job, agent_message::Msg::Cleaned(Cleaned {}));
        }
    }

    pub fn state(&self, job: u64) -> JobState {
        JobState::try_from(self.st.job_info(job).unwrap().state).unwrap()
    }
}

pub fn finished(rx: &mut UnboundedReceiver<Result<JobEvent, Status>>) -> Option<JobInfo> {
    drain(rx).into_iter().find_map(|e| match e.ok()?.event? {
        job_event::Event::Finished(i) => Some(i),
        _ => None,
    })
}

impl Harness {
    pub fn drained(&mut self, node: &str, switch_id: u64) {
        let d = Drained {
            switch_id,
            contexts: 2,
            unanswered: 0,
            quiesce_ns: 1000,
            silent: 0,
        };
        self.agent_says(node, 0, agent_message::Msg::Drained(d));
    }

    pub fn switched(&mut self, node: &str, switch_id: u64) {
        self.agent_says(
            node,
            0,
            agent_message::Msg::Switched(Switched { switch_id }),
        );
    }
}

pub fn preempt_of(msgs: &[master_message::Msg]) -> Option<Preempt> {
    msgs.iter().find_map(|m| match m {
        master_message::Msg::Preempt(p) => Some(p.clone()),
        _ => None,
    })
}

pub fn switch_of(msgs: &[master_message::Msg]) -> Option<Switch> {
    msgs.iter().find_map(|m| match m {
        master_message::Msg::Switch(s) => Some(s.clone()),
        _ => None,
    })
}
