//! Gang scheduling: the switch protocol over the [`Matrix`] (see
//! docs/scored/gang.md).  Every quantum the cluster switches to the next row
//! of the matrix, on all nodes together: the outgoing jobs' PM contexts
//! quiesce (Preempt, Drained), then every node freezes them (Switch,
//! Switched), then every node thaws or launches the incoming ones.
//!
//! [`Gang`] is the protocol's state, plain data; the `impl State` below
//! drives it with the job table and the agents.

use score_proto::v1::{
    job_event, master_message, JobState, MatrixCell, MatrixReply, MatrixRow, Preempt, Switch,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::matrix::Matrix;
use super::State;

pub struct Gang {
    pub matrix: Matrix,
    switch: Option<SwitchRun>,
    next_switch: u64,
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

/// What the switch in progress needs next.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Nothing: no switch, or answers are still due.
    Wait,
    /// Every node drained: freeze `jobs` (the outgoing ones).
    Freeze { id: u64, jobs: BTreeSet<u64> },
    /// Every node froze: thaw or launch `jobs` (the incoming ones) and
    /// make `target` the active row.
    Thaw {
        id: u64,
        target: usize,
        jobs: BTreeSet<u64>,
    },
    /// Every node thawed: the switch is over after `took` seconds; its
    /// longest quiesce, if it preempted a job.
    Done {
        id: u64,
        took: f64,
        quiesce: Option<f64>,
    },
}

impl Gang {
    pub fn new(rows: usize) -> Self {
        Self {
            matrix: Matrix::new(rows),
            switch: None,
            next_switch: 1,
        }
    }

    /// The id the next switch will take (saved, so that a late answer to
    /// a switch of an earlier master is never taken for one of a later).
    pub fn next_switch(&self) -> u64 {
        self.next_switch
    }

    pub fn restore_next_switch(&mut self, next: u64) {
        self.next_switch = self.next_switch.max(next);
    }

    pub fn switching(&self) -> bool {
        self.switch.is_some()
    }

    /// Starts a switch to row `target`; returns its id.  The nodes that
    /// must answer its first phase follow with [`Gang::await_nodes`].
    pub fn begin(
        &mut self,
        target: usize,
        outgoing: BTreeSet<u64>,
        incoming: BTreeSet<u64>,
    ) -> u64 {
        let id = self.next_switch;
        self.next_switch += 1;
        tracing::debug!(switch = id, to = target, out = ?outgoing, inc = ?incoming, "switch");
        self.switch = Some(SwitchRun {
            id,
            started: Instant::now(),
            target,
            outgoing,
            incoming,
            waiting: BTreeSet::new(),
            phase: Phase::Draining,
            quiesce_ns: 0,
        });
        id
    }

    /// The nodes whose answer the current phase waits for.
    pub fn await_nodes(&mut self, nodes: BTreeSet<String>) {
        if let Some(sw) = &mut self.switch {
            sw.waiting = nodes;
        }
    }

    /// A node answered (`drained`: Drained, else Switched); false if the
    /// answer is not the one due (another switch, another phase).
    pub fn answer(&mut self, node: &str, switch_id: u64, drained: bool, quiesce_ns: u64) -> bool {
        let Some(sw) = &mut self.switch else {
            return false;
        };
        if sw.id != switch_id || (sw.phase == Phase::Draining) != drained {
            return false;
        }
        sw.waiting.remove(node);
        sw.quiesce_ns = sw.quiesce_ns.max(quiesce_ns);
        true
    }

    /// A lost node will not answer.
    pub fn node_lost(&mut self, node: &str) {
        if let Some(sw) = &mut self.switch {
            sw.waiting.remove(node);
        }
    }

    /// A job finished: its cells empty.  During a switch it leaves the
    /// switch's sets and the rows stay as they are (row numbers must not
    /// move under a switch); otherwise empty rows go at once.
    pub fn job_gone(&mut self, job: u64) {
        self.matrix.remove(job);
        if let Some(sw) = &mut self.switch {
            sw.outgoing.remove(&job);
            sw.incoming.remove(&job);
        } else {
            self.matrix.compact();
        }
    }

    /// Moves the switch to its next phase when every awaited node has
    /// answered: drained → frozen → thawed → done.
    pub fn step(&mut self) -> Step {
        let Some(sw) = &mut self.switch else {
            return Step::Wait;
        };
        if !sw.waiting.is_empty() {
            return Step::Wait;
        }
        match sw.phase {
            Phase::Draining => {
                sw.phase = Phase::Freezing;
                Step::Freeze {
                    id: sw.id,
                    jobs: sw.outgoing.clone(),
                }
            }
            Phase::Freezing => {
                sw.phase = Phase::Thawing;
                Step::Thaw {
                    id: sw.id,
                    target: sw.target,
                    jobs: sw.incoming.clone(),
                }
            }
            Phase::Thawing => {
                let done = Step::Done {
                    id: sw.id,
                    took: sw.started.elapsed().as_secs_f64(),
                    quiesce: (!sw.outgoing.is_empty()).then(|| sw.quiesce_ns as f64 / 1e9),
                };
                self.switch = None;
                done
            }
        }
    }
}

impl State {
    /// Start or thaw every job that may run in the active row and does not,
    /// when no switch is under way (nothing has to be preempted for them:
    /// their nodes are free in this row).
    pub(super) fn reconcile(&mut self) {
        // After a restart, nothing starts or thaws until every agent of the
        // saved jobs is back (or given up): the matrix is not yet known to
        // be what the nodes run.
        if self.gang.switching() || self.jobs.recovering() {
            return;
        }
        for id in self.gang.matrix.active_set(self.gang.matrix.current()) {
            let Some(job) = self.jobs.get(id) else {
                continue;
            };
            if job.outcome.is_some() {
                continue;
            }
            if job.state() == JobState::Pending {
                self.launch(id);
            } else if job.info.frozen {
                self.thaw_now(id);
            }
        }
        self.update_pending_reasons();
    }

    /// Thaws the job on every node at once, outside any switch (nothing
    /// else has to stop for it), and marks it running.
    pub(super) fn thaw_now(&mut self, id: u64) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        for name in &job.info.nodes {
            self.links.send(
                &self.nodes,
                name,
                0,
                master_message::Msg::Switch(Switch {
                    switch_id: 0,
                    freeze: Vec::new(),
                    thaw: vec![id],
                }),
            );
        }
        self.set_frozen(id, false);
    }

    pub(super) fn set_frozen(&mut self, id: u64, frozen: bool) {
        if let Some(job) = self.jobs.get_mut(id) {
            if !frozen {
                job.running_since = Instant::now();
            }
            if job.info.frozen != frozen {
                job.info.frozen = frozen;
                self.links
                    .emit(id, job_event::Event::State(job.info.clone()));
                self.links.changed();
            }
        }
    }

    /// The quantum is over: switch to the next row of the matrix, if the
    /// matrix has another and no switch is still under way.
    pub fn quantum_tick(&mut self) {
        if self.gang.switching() || self.jobs.recovering() {
            return;
        }
        let Some(target) = self.gang.matrix.next_row() else {
            return;
        };
        let next = self.gang.matrix.active_set(target);
        let running: BTreeSet<u64> = self
            .jobs
            .running()
            .filter(|j| j.outcome.is_none())
            .map(|j| j.info.id)
            .collect();
        let outgoing: BTreeSet<u64> = running.difference(&next).copied().collect();
        // Every job gets whole quanta: one (re)started late in this quantum
        // keeps running until its own quantum is over; the switch waits for
        // the next tick.  A job still launching is never frozen: an agent
        // may be starting its ranks, and a rank put into a frozen cgroup
        // before its exec would hold the agent's start of it (its quantum
        // counts from when every node reported it started).
        let quantum = self.limits.quantum;
        if outgoing.iter().any(|&j| {
            self.jobs.get(j).is_some_and(|j| {
                j.state() == JobState::Launching || j.running_since.elapsed() < quantum.mul_f64(0.9)
            })
        }) {
            return;
        }
        let incoming: BTreeSet<u64> = next
            .iter()
            .copied()
            .filter(|&id| {
                !running.contains(&id) && self.jobs.get(id).is_some_and(|j| j.outcome.is_none())
            })
            .collect();
        if outgoing.is_empty() && incoming.is_empty() {
            self.gang.matrix.set_current(target);
            return;
        }
        // Phase 1: every node of an outgoing job drains that job's contexts.
        let per_node = self.jobs_per_node(&outgoing);
        let id = self.gang.begin(target, outgoing, incoming);
        // Saved, so that a restarted master numbers its switches after it.
        self.links.changed();
        let waiting = self.ask_nodes(per_node, |jobs| {
            master_message::Msg::Preempt(Preempt {
                switch_id: id,
                jobs,
                network: self.limits.network_preemption,
                quiesce_timeout_ms: self.limits.quiesce_timeout.as_millis() as u64,
            })
        });
        self.gang.await_nodes(waiting);
        self.advance_switch();
    }

    /// The jobs of `jobs` on each node.
    fn jobs_per_node(&self, jobs: &BTreeSet<u64>) -> BTreeMap<String, Vec<u64>> {
        let mut per_node: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for &job in jobs {
            for n in self.jobs.get(job).map(|j| &j.info.nodes[..]).unwrap_or(&[]) {
                per_node.entry(n.clone()).or_default().push(job);
            }
        }
        per_node
    }

    /// A node answered the switch in progress.
    pub(super) fn switch_answer(
        &mut self,
        node: &str,
        switch_id: u64,
        drained: bool,
        quiesce_ns: u64,
    ) {
        if self.gang.answer(node, switch_id, drained, quiesce_ns) {
            self.advance_switch();
        }
    }

    /// Moves the switch on each time every awaited node has answered:
    /// drained → frozen → thawed → done.  Freezing everywhere before thawing
    /// anywhere keeps an incoming job from sending to a peer whose node has
    /// not thawed it yet (that would cost a retransmission).
    pub(super) fn advance_switch(&mut self) {
        loop {
            match self.gang.step() {
                Step::Wait => return,
                Step::Freeze { id, jobs } => {
                    let waiting = self.send_switch(id, &jobs, &BTreeSet::new());
                    for &job in &jobs {
                        self.set_frozen(job, true);
                    }
                    self.gang.await_nodes(waiting);
                }
                Step::Thaw { id, target, jobs } => {
                    let (launch, thaw): (BTreeSet<u64>, BTreeSet<u64>) =
                        jobs.iter().partition(|&&j| {
                            self.jobs.get(j).map(|j| j.state()) == Some(JobState::Pending)
                        });
                    let waiting = self.send_switch(id, &BTreeSet::new(), &thaw);
                    for &job in &thaw {
                        self.set_frozen(job, false);
                    }
                    for job in launch {
                        self.launch(job);
                    }
                    self.gang.matrix.set_current(target);
                    self.gang.await_nodes(waiting);
                }
                Step::Done { id, took, quiesce } => {
                    self.stats.switched(&self.metrics, took, quiesce);
                    tracing::debug!(switch = id, seconds = took, "switch done");
                    self.gang.matrix.compact();
                    self.links.changed();
                    self.schedule();
                    return;
                }
            }
        }
    }

    /// Sends each node its share of freezing and thawing; returns the nodes
    /// that will answer.
    fn send_switch(
        &self,
        id: u64,
        freeze: &BTreeSet<u64>,
        thaw: &BTreeSet<u64>,
    ) -> BTreeSet<String> {
        let mut per_node: BTreeMap<String, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
        for (name, jobs) in self.jobs_per_node(freeze) {
            per_node.entry(name).or_default().0 = jobs;
        }
        for (name, jobs) in self.jobs_per_node(thaw) {
            per_node.entry(name).or_default().1 = jobs;
        }
        self.ask_nodes(per_node, |(freeze, thaw)| {
            master_message::Msg::Switch(Switch {
                switch_id: id,
                freeze,
                thaw,
            })
        })
    }

    /// Sends each node that is up its message, made from its share; returns
    /// those nodes: their answers are due.
    fn ask_nodes<T>(
        &self,
        per_node: BTreeMap<String, T>,
        message: impl Fn(T) -> master_message::Msg,
    ) -> BTreeSet<String> {
        let mut waiting = BTreeSet::new();
        for (name, share) in per_node {
            if self.nodes.is_up(&name) {
                self.links.send(&self.nodes, &name, 0, message(share));
                waiting.insert(name);
            }
        }
        waiting
    }

    pub fn matrix_info(&self) -> MatrixReply {
        let nodes: Vec<String> = self.nodes.names().cloned().collect();
        let rows = self
            .gang
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
        MatrixReply {
            nodes,
            rows,
            current: self.gang.matrix.current() as u32,
            running: self.jobs.running().map(|j| j.info.id).collect(),
            quantum_ms: self.limits.quantum.as_millis() as u64,
            preemption: if self.limits.network_preemption {
                "network".into()
            } else {
                "freeze".into()
            },
            stats: Some(self.stats.summary()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    #[test]
    fn a_switch_goes_through_its_phases_as_nodes_answer() {
        let mut g = Gang::new(2);
        assert_eq!(g.step(), Step::Wait);
        let id = g.begin(1, BTreeSet::from([7]), BTreeSet::from([8]));
        g.await_nodes(BTreeSet::from(["n1".to_string()]));
        assert_eq!(g.step(), Step::Wait);
        assert!(!g.answer("n1", id, false, 0), "a Switched while draining");
        assert!(g.answer("n1", id, true, 5));
        assert_eq!(
            g.step(),
            Step::Freeze {
                id,
                jobs: BTreeSet::from([7])
            }
        );
        g.await_nodes(BTreeSet::from(["n1".to_string()]));
        g.node_lost("n1");
        assert_eq!(
            g.step(),
            Step::Thaw {
                id,
                target: 1,
                jobs: BTreeSet::from([8])
            }
        );
        g.job_gone(7);
        assert!(matches!(g.step(), Step::Done { quiesce: None, .. }));
        assert!(!g.switching());
    }

    #[test]
    fn jobs_that_share_nodes_take_turns_all_nodes_together() {
        let mut h = harness_with(2, 2);
        let (a, _ra) = h.submit(spec(2, 1));
        let (b, _rb) = h.submit(spec(2, 1));
        assert_eq!(h.state(a), JobState::Launching);
        assert_eq!(h.state(b), JobState::Pending);
        assert!(h.st.job_info(b).unwrap().reason.contains("time slot 1"));
        h.launch_ok(a);
        h.agent_hears("n1");
        h.agent_hears("n2");

        // Quantum 1: preempt a everywhere, then freeze it and launch b.
        h.st.quantum_tick();
        let mut id = 0;
        for n in ["n1", "n2"] {
            let p = preempt_of(&h.agent_hears(n)).expect("preempt");
            assert_eq!(p.jobs, vec![a]);
            assert!(p.network);
            id = p.switch_id;
        }
        h.drained("n1", id);
        assert!(
            h.agent_hears("n1").is_empty(),
            "nothing freezes before every node drained"
        );
        h.drained("n2", id);
        for n in ["n1", "n2"] {
            let sw = switch_of(&h.agent_hears(n)).expect("switch");
            assert_eq!((sw.freeze.clone(), sw.thaw.clone()), (vec![a], vec![]));
        }
        assert!(h.st.job_info(a).unwrap().frozen);
        h.switched("n1", id);
        assert!(
            h.agent_hears("n2").is_empty(),
            "nothing thaws before every node froze"
        );
        h.switched("n2", id);
        for n in ["n1", "n2"] {
            let msgs = h.agent_hears(n);
            assert!(
                msgs.iter()
                    .any(|m| matches!(m, master_message::Msg::Launch(_))),
                "b launches"
            );
        }
        h.launch_ok(b);
        assert_eq!(h.st.matrix_info().stats.unwrap().switches, 1);
        assert_eq!(h.st.matrix_info().current, 1);

        // Quantum 2: back to a, which is thawed, not launched again.
        h.st.quantum_tick();
        let p = preempt_of(&h.agent_hears("n1")).unwrap();
        assert_eq!(p.jobs, vec![b]);
        h.agent_hears("n2");
        h.drained("n1", p.switch_id);
        h.drained("n2", p.switch_id);
        h.agent_hears("n1");
        let sw = switch_of(&h.agent_hears("n2")).unwrap();
        assert_eq!((sw.freeze, sw.thaw), (vec![b], vec![]));
        h.switched("n1", p.switch_id);
        h.switched("n2", p.switch_id);
        let sw = switch_of(&h.agent_hears("n2")).unwrap();
        assert_eq!((sw.freeze, sw.thaw), (vec![], vec![a]));
        assert!(!h.st.job_info(a).unwrap().frozen);
        assert!(h.st.job_info(b).unwrap().frozen);
    }

    #[test]
    fn a_lone_job_is_never_switched() {
        let mut h = harness_with(2, 4);
        let (a, _ra) = h.submit(spec(2, 1));
        h.launch_ok(a);
        h.agent_hears("n1");
        h.st.quantum_tick();
        assert!(h.agent_hears("n1").is_empty());
        assert_eq!(h.st.matrix_info().stats.unwrap().switches, 0);
    }

    #[test]
    fn when_a_job_ends_the_next_one_runs_without_waiting_for_the_quantum() {
        let mut h = harness_with(1, 2);
        let (a, _ra) = h.submit(spec(1, 1));
        let (b, _rb) = h.submit(spec(1, 1));
        h.launch_ok(a);
        h.exit(a, "n1", 0, 0, 0);
        h.clean_all(a);
        assert_eq!(h.state(b), JobState::Launching);
        assert_eq!(h.st.matrix_info().rows.len(), 1);
    }

    #[test]
    fn a_frozen_job_is_killed_at_once_when_cancelled() {
        let mut h = harness_with(1, 2);
        let (a, mut ra) = h.submit(spec(1, 1));
        let (_b, _rb) = h.submit(spec(1, 1));
        h.launch_ok(a);
        h.st.quantum_tick();
        let p = preempt_of(&h.agent_hears("n1")).unwrap();
        h.drained("n1", p.switch_id);
        h.switched("n1", p.switch_id); // frozen; b launches
        h.agent_hears("n1");
        assert!(h.st.job_info(a).unwrap().frozen);
        h.st.cancel(a, false, USER, "cancelled").unwrap();
        let msgs = h.agent_hears("n1");
        assert!(msgs
            .iter()
            .any(|m| matches!(m, master_message::Msg::Cleanup(_))));
        assert!(!msgs
            .iter()
            .any(|m| matches!(m, master_message::Msg::Signal(_))));
        h.agent_says("n1", a, agent_message::Msg::Cleaned(Cleaned {}));
        assert_eq!(
            JobState::try_from(finished(&mut ra).unwrap().state).unwrap(),
            JobState::Cancelled
        );
    }

    #[test]
    fn a_node_lost_during_a_switch_fails_only_its_jobs_and_the_switch_completes() {
        let mut h = harness_with(3, 2);
        let (a, _ra) = h.submit(spec(2, 1)); // n1 n2
        let (c, _rc) = h.submit(spec(1, 1)); // n3, alone: never switched
        let (b, _rb) = h.submit(spec(2, 1)); // slot 1
        h.launch_ok(a);
        h.launch_ok(c);
        for n in ["n1", "n2", "n3"] {
            h.agent_hears(n);
        }
        h.st.quantum_tick();
        let p = preempt_of(&h.agent_hears("n1")).unwrap();
        h.drained("n1", p.switch_id);
        let conn = h.agents["n2"].0;
        h.st.agent_detached("n2", conn, "agent disconnected");
        // n2 will never answer: phase 2 goes on without it.
        let sw = switch_of(&h.agent_hears("n1")).unwrap();
        h.switched("n1", sw.switch_id);
        assert!(h.st.job_info(a).unwrap().reason.contains("node n2 lost"));
        assert_eq!(h.state(c), JobState::Running);
        assert_eq!(h.st.matrix_info().stats.unwrap().switches, 1);
        let _ = b;
    }

    #[test]
    fn a_job_still_launching_is_never_preempted() {
        let mut h = harness_quantum(1, 2, Duration::from_millis(1));
        let (a, _ra) = h.submit(spec(1, 1));
        let (_b, _rb) = h.submit(spec(1, 1));
        // a's agent has not reported its ranks started: however long that
        // takes, no switch freezes it meanwhile.
        h.agent_hears("n1");
        std::thread::sleep(Duration::from_millis(5));
        h.st.quantum_tick();
        assert_eq!(h.state(a), JobState::Launching);
        assert!(preempt_of(&h.agent_hears("n1")).is_none());
        assert_eq!(h.st.matrix_info().stats.unwrap().switches, 0);
        // Started: its quantum counts from now, and then it takes turns.
        h.launch_ok(a);
        h.agent_hears("n1");
        std::thread::sleep(Duration::from_millis(5));
        h.st.quantum_tick();
        assert!(preempt_of(&h.agent_hears("n1")).is_some());
    }

    #[test]
    fn a_job_that_just_started_keeps_its_first_quantum() {
        let mut h = harness_quantum(1, 2, Duration::from_secs(3600));
        let (a, _ra) = h.submit(spec(1, 1));
        let (_b, _rb) = h.submit(spec(1, 1));
        h.launch_ok(a);
        h.agent_hears("n1");
        h.st.quantum_tick();
        assert!(preempt_of(&h.agent_hears("n1")).is_none());
        assert_eq!(h.st.matrix_info().stats.unwrap().switches, 0);
    }
}
