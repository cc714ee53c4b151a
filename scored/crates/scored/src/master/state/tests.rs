//! The state machine without a network: agents and clients are channels.

use super::*;
use prometheus_client::registry::Registry;
use score_proto::v1::{Cleaned, FenceContribution, Launched, RankExited};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

struct Harness {
    st: State,
    agents: BTreeMap<String, (u64, UnboundedReceiver<MasterMessage>)>,
    timers: UnboundedReceiver<Timer>,
}

const USER: Requester = Requester {
    uid: 1000,
    gid: 1000,
};

fn harness(nodes: usize) -> Harness {
    harness_with(nodes, 1)
}

fn harness_with(nodes: usize, gang_slots: usize) -> Harness {
    // A zero quantum: every tick may switch (no job is "too fresh").
    harness_quantum(nodes, gang_slots, Duration::ZERO)
}

fn harness_quantum(nodes: usize, gang_slots: usize, quantum: Duration) -> Harness {
    let (ttx, timers) = unbounded_channel();
    let names: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
    let mut st = State::new(
        Limits {
            allow_root_jobs: false,
            kill_grace: Duration::from_secs(5),
            heartbeat_timeout: Duration::from_secs(10),
            history: 10,
            gang_slots,
            quantum,
            network_preemption: true,
            quiesce_timeout: Duration::from_secs(1),
        },
        &names,
        ttx,
        MasterMetrics::new(&mut Registry::default()),
    );
    let mut agents = BTreeMap::new();
    for n in &names {
        let (tx, rx) = unbounded_channel();
        let conn = st.agent_attached(n, 2, 1, "10.0.0.1".into(), String::new(), tx);
        agents.insert(n.clone(), (conn, rx));
    }
    Harness { st, agents, timers }
}

fn spec(nodes: u32, ppn: u32) -> JobSpec {
    JobSpec {
        nodes,
        ppn,
        argv: vec!["/bin/prog".into()],
        cwd: "/tmp".into(),
        ..Default::default()
    }
}

fn drain<T>(rx: &mut UnboundedReceiver<T>) -> Vec<T> {
    let mut v = Vec::new();
    while let Ok(m) = rx.try_recv() {
        v.push(m);
    }
    v
}

impl Harness {
    fn submit(&mut self, s: JobSpec) -> (u64, UnboundedReceiver<Result<JobEvent, Status>>) {
        let (tx, rx) = unbounded_channel();
        let id = self
            .st
            .submit(s, USER, "alice".into(), tx)
            .expect("accepted");
        (id, rx)
    }

    fn agent_says(&mut self, node: &str, job: u64, msg: agent_message::Msg) {
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

    fn agent_hears(&mut self, node: &str) -> Vec<master_message::Msg> {
        drain(&mut self.agents.get_mut(node).unwrap().1)
            .into_iter()
            .filter_map(|m| m.msg)
            .collect()
    }

    fn launch_ok(&mut self, job: u64) {
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

    fn exit(&mut self, job: u64, node: &str, rank: u32, code: i32, signal: i32) {
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

    fn clean_all(&mut self, job: u64) {
        for n in self.st.job_info(job).unwrap().nodes {
            self.agent_says(&n, job, agent_message::Msg::Cleaned(Cleaned {}));
        }
    }

    fn state(&self, job: u64) -> JobState {
        JobState::try_from(self.st.job_info(job).unwrap().state).unwrap()
    }
}

fn finished(rx: &mut UnboundedReceiver<Result<JobEvent, Status>>) -> Option<JobInfo> {
    drain(rx).into_iter().find_map(|e| match e.ok()?.event? {
        job_event::Event::Finished(i) => Some(i),
        _ => None,
    })
}

#[test]
fn a_job_runs_to_completion() {
    let mut h = harness(4);
    let (id, mut rx) = h.submit(spec(4, 2));
    assert_eq!(h.state(id), JobState::Launching);
    for n in ["n1", "n2", "n3", "n4"] {
        let msgs = h.agent_hears(n);
        assert!(
            matches!(&msgs[..], [master_message::Msg::Launch(l)] if l.job.as_ref().unwrap().nodes.len() == 4)
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
fn a_lost_node_fails_its_jobs_and_only_those() {
    let mut h = harness(4);
    let (a, mut ra) = h.submit(spec(2, 1));
    let (b, _rb) = h.submit(spec(2, 1));
    h.launch_ok(a);
    h.launch_ok(b);
    let lost = h.st.job_info(a).unwrap().nodes[1].clone();
    let conn = h.agents[&lost].0;
    h.st.agent_detached(&lost, conn, "agent disconnected");
    assert_eq!(h.state(b), JobState::Running);
    let survivor = h.st.job_info(a).unwrap().nodes[0].clone();
    assert!(h
        .agent_hears(&survivor)
        .iter()
        .any(|m| matches!(m, master_message::Msg::Cleanup(_))));
    h.agent_says(&survivor, a, agent_message::Msg::Cleaned(Cleaned {}));
    let info = finished(&mut ra).unwrap();
    assert_eq!(JobState::try_from(info.state).unwrap(), JobState::Failed);
    assert_eq!(
        info.reason,
        format!("node {lost} lost (agent disconnected)")
    );
    let node =
        h.st.list_nodes()
            .into_iter()
            .find(|n| n.name == lost)
            .unwrap();
    assert_eq!(NodeState::try_from(node.state).unwrap(), NodeState::Down);
    assert_eq!(node.reason, "agent disconnected");
}

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
fn drained_nodes_take_no_new_jobs_until_resumed() {
    let mut h = harness(1);
    let root = Requester { uid: 0, gid: 0 };
    h.st.drain("n1", "maintenance", root).unwrap();
    let (id, _rx) = h.submit(spec(1, 1));
    assert_eq!(h.state(id), JobState::Pending);
    let e = h.st.drain("n1", "", USER).unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().starts_with("only root may drain a node"),
        "{e:?}"
    );
    h.st.resume("n1", root).unwrap();
    assert_eq!(h.state(id), JobState::Launching);
}

#[test]
fn a_scrun_that_goes_away_cancels_its_job() {
    let mut h = harness(1);
    let (id, rx) = h.submit(spec(1, 1));
    h.launch_ok(id);
    drop(rx);
    h.st.client_gone(id);
    assert_eq!(h.state(id), JobState::Completing);
    assert!(h
        .st
        .job_info(id)
        .unwrap()
        .reason
        .contains("scrun disconnected"));
}

// ---------------------------------------------------------------- gang scheduling

use score_proto::v1::{Drained, Switched};

impl Harness {
    fn drained(&mut self, node: &str, switch_id: u64) {
        let d = Drained {
            switch_id,
            contexts: 2,
            unanswered: 0,
            quiesce_ns: 1000,
            silent: 0,
        };
        self.agent_says(node, 0, agent_message::Msg::Drained(d));
    }

    fn switched(&mut self, node: &str, switch_id: u64) {
        self.agent_says(
            node,
            0,
            agent_message::Msg::Switched(Switched { switch_id }),
        );
    }
}

fn preempt_of(msgs: &[master_message::Msg]) -> Option<Preempt> {
    msgs.iter().find_map(|m| match m {
        master_message::Msg::Preempt(p) => Some(p.clone()),
        _ => None,
    })
}

fn switch_of(msgs: &[master_message::Msg]) -> Option<Switch> {
    msgs.iter().find_map(|m| match m {
        master_message::Msg::Switch(s) => Some(s.clone()),
        _ => None,
    })
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
