//! Flow control of the jobs' stdio: the master holds at most
//! `[master] stdio_buffer_kib` of each job's output and, separately, of its
//! stdin, however slowly the other end takes it.
//!
//! Every sender of stdio data sends only within the credit its receiver
//! granted it ([`Credits`]):
//!
//! - **output**: the master grants each agent of a job a window of the job's
//!   budget (`OutputCredit`).  An agent's pumps read a rank's pipe, then wait
//!   for credit before sending what they read; while they wait they read no
//!   more, so the pipe fills and the rank blocks in `write`.  The master
//!   hands the output to the scrun's event stream and grants again as that
//!   stream takes it ([`State::output_taken`]), which it does only as fast
//!   as HTTP/2 flow control lets it send to scrun: a scrun that stops
//!   reading stops the job's output, and nothing is dropped.
//! - **stdin**: the master grants scrun (`JobEvent.stdin_credit`) and grants
//!   again as the agent of rank 0 reports the bytes written to its pipe
//!   (`AgentMessage.stdin_written`).
//!
//! Credits are per job, so a job whose scrun does not read never stalls an
//! agent's Attach stream, which carries every job's traffic and the
//! heartbeats: the master always reads it, and what arrives is always within
//! a credit.

use score_proto::v1::{job_event, master_message, Credit, Output, StdinChunk};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tonic::Status;

use super::{State, TimerKind};

/// The largest data a message of stdio carries (a pipe's read, scrun's
/// stdin chunk).
pub const CHUNK: u64 = score_proto::STDIO_CHUNK as u64;

/// The smallest window of a sender: two chunks, so that a sender whose
/// credit fell by half a window (when it is granted again) can still send a
/// whole chunk.
pub const MIN_WINDOW: u64 = 2 * CHUNK;

/// A job throttled this long is logged (short waits are the normal pace of
/// a scrun that writes to a slow pipe)...
const LOG_AFTER: Duration = Duration::from_secs(1);
/// ... at most this often.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// One direction of one job's stdio: the credit each sender holds and the
/// bytes the receiver (the master) holds.  Plain arithmetic, no I/O: every
/// operation returns what to send.
#[derive(Debug, Clone)]
pub struct Credits {
    /// Each sender's credit is topped up to this.
    window: u64,
    /// `window` times the senders: what the master may hold at most.
    budget: u64,
    /// Per sender: credit granted and not yet used.
    granted: Vec<u64>,
    /// Received and not yet taken by the other end.
    held: u64,
    /// The sender served first by the next round of grants (round robin).
    next: usize,
}

impl Credits {
    /// `budget` bytes shared by `senders` (at least one), each with a window
    /// of at least [`MIN_WINDOW`].
    pub fn new(budget: u64, senders: usize) -> Self {
        let senders = senders.max(1);
        let window = (budget / senders as u64).max(MIN_WINDOW);
        Self {
            window,
            budget: window * senders as u64,
            granted: vec![0; senders],
            held: 0,
            next: 0,
        }
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    pub fn held(&self) -> u64 {
        self.held
    }

    fn outstanding(&self) -> u64 {
        self.granted.iter().sum()
    }

    /// What the master may still grant without ever holding more than the
    /// budget.
    fn room(&self) -> u64 {
        self.budget
            .saturating_sub(self.held)
            .saturating_sub(self.outstanding())
    }

    /// A sender is granted again once its credit fell by this much.
    fn threshold(&self) -> u64 {
        self.window / 2
    }

    /// `n` bytes arrived from `sender`; false when they exceed its credit
    /// (they are held all the same).
    pub fn received(&mut self, sender: usize, n: u64) -> bool {
        self.held += n;
        match self.granted.get_mut(sender) {
            Some(g) if n <= *g => {
                *g -= n;
                true
            }
            Some(g) => {
                *g = 0;
                false
            }
            None => false,
        }
    }

    /// The other end took `n` of the bytes held.
    pub fn released(&mut self, n: u64) {
        self.held = self.held.saturating_sub(n);
    }

    /// The sender starts again from no credit (it dropped what it held).
    pub fn forget_sender(&mut self, sender: usize) {
        if let Some(g) = self.granted.get_mut(sender) {
            *g = 0;
        }
    }

    /// Nobody will take what is held (scrun is gone): forget it.
    pub fn release_all(&mut self) {
        self.held = 0;
    }

    /// The credit to grant now, as (sender, bytes): each sender whose credit
    /// fell by half a window or more is topped up, as far as the budget
    /// allows.  Grants come in batches of at least half a window, so that a
    /// busy stream needs few of them.
    pub fn grants(&mut self) -> Vec<(usize, u64)> {
        let n = self.granted.len();
        let threshold = self.threshold();
        let mut out = Vec::new();
        for k in 0..n {
            let i = (self.next + k) % n;
            let room = self.room();
            let Some(g) = self.granted.get_mut(i) else {
                continue;
            };
            let give = self.window.saturating_sub(*g).min(room);
            if give >= threshold && give > 0 {
                *g += give;
                out.push((i, give));
            }
        }
        if !out.is_empty() {
            self.next = (self.next + 1) % n;
        }
        out
    }

    /// Some sender is held back: it has used its credit (less than a
    /// chunk is left) and the bytes held use up the budget, so that none can
    /// be granted.
    pub fn throttled(&self) -> bool {
        self.room() < self.threshold() && self.granted.iter().any(|g| *g < CHUNK)
    }
}

/// Whether a direction of a job is throttled now, and what its log said.
#[derive(Debug, Default)]
struct Throttle {
    since: Option<Instant>,
    /// When a throttle was last logged.
    logged: Option<Instant>,
    /// This one was logged (so is its end).
    logged_this: bool,
}

/// Output (ranks to scrun) or stdin (scrun to rank 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Output,
    Stdin,
}

impl Direction {
    pub fn label(self) -> &'static str {
        match self {
            Direction::Output => "output",
            Direction::Stdin => "stdin",
        }
    }
}

/// One job's stdio.
#[derive(Debug)]
struct JobFlow {
    /// Senders: the job's nodes, in allocation order (from its launch on).
    output: Option<Credits>,
    nodes: Vec<String>,
    /// The one sender: scrun.
    stdin: Credits,
    throttle_output: Throttle,
    throttle_stdin: Throttle,
    /// An agent sent beyond its credit (logged once).
    overrun_logged: bool,
}

impl JobFlow {
    fn credits(&self, d: Direction) -> Option<&Credits> {
        match d {
            Direction::Output => self.output.as_ref(),
            Direction::Stdin => Some(&self.stdin),
        }
    }

    fn throttle(&mut self, d: Direction) -> &mut Throttle {
        match d {
            Direction::Output => &mut self.throttle_output,
            Direction::Stdin => &mut self.throttle_stdin,
        }
    }
}

/// The stdio of every active job.
#[derive(Debug)]
pub struct Flows {
    jobs: HashMap<u64, JobFlow>,
    /// Bytes per job and direction: `[master] stdio_buffer_kib`.
    budget: u64,
}

impl Flows {
    pub fn new(budget: u64) -> Self {
        Self {
            jobs: HashMap::new(),
            budget,
        }
    }

    /// The job is over: its stdio is forgotten.
    pub fn forget(&mut self, id: u64) {
        self.jobs.remove(&id);
    }

    /// Bytes held in `d` over every job.
    pub fn held(&self, d: Direction) -> u64 {
        self.jobs
            .values()
            .filter_map(|j| j.credits(d))
            .map(Credits::held)
            .sum()
    }

    /// Jobs throttled in `d` now.
    pub fn throttled(&self, d: Direction) -> usize {
        self.jobs
            .values()
            .filter(|j| j.credits(d).is_some_and(Credits::throttled))
            .count()
    }
}

impl State {
    /// A job was accepted: scrun may send stdin up to the budget.
    pub(super) fn flow_submitted(&mut self, id: u64) {
        let mut stdin = Credits::new(self.flows.budget, 1);
        let grants = stdin.grants();
        self.flows.jobs.insert(
            id,
            JobFlow {
                output: None,
                nodes: Vec::new(),
                stdin,
                throttle_output: Throttle::default(),
                throttle_stdin: Throttle::default(),
                overrun_logged: false,
            },
        );
        self.grant_stdin(id, grants);
        self.refresh_stdio_gauges();
    }

    /// A job is launched on its nodes: each agent may send output up to its
    /// share of the budget.
    pub(super) fn flow_launched(&mut self, id: u64) {
        let Some(nodes) = self.jobs.get(id).map(|j| j.info.nodes.clone()) else {
            return;
        };
        let Some(flow) = self.flows.jobs.get_mut(&id) else {
            return;
        };
        let mut output = Credits::new(self.flows.budget, nodes.len());
        let grants = output.grants();
        flow.output = Some(output);
        flow.nodes = nodes;
        self.grant_output(id, grants);
    }

    /// A chunk of output from `node`: to the job's scrun, if it still
    /// follows the job.
    pub(super) fn output(&mut self, id: u64, node: &str, o: Output) {
        if self.jobs.get(id).is_none() {
            return;
        }
        let n = o.data.len() as u64;
        let followed = self.links.follows(id);
        if let Some(flow) = self.flows.jobs.get_mut(&id) {
            let sender = flow.nodes.iter().position(|x| x == node);
            if let (Some(credits), Some(i)) = (flow.output.as_mut(), sender) {
                if !credits.received(i, n) && !flow.overrun_logged {
                    flow.overrun_logged = true;
                    tracing::warn!(job = id, node, "the agent sent output beyond its credit");
                }
                if !followed {
                    credits.released(n);
                }
            }
        }
        if followed {
            self.links.emit(id, job_event::Event::Output(o));
        }
        self.after_output(id);
    }

    /// The event stream of the job's scrun took `n` bytes of output (to
    /// send them): the agents may send as much again.
    pub fn output_taken(&mut self, id: u64, n: u64) {
        let Some(credits) = self.flows.jobs.get_mut(&id).and_then(|f| f.output.as_mut()) else {
            return;
        };
        credits.released(n);
        self.after_output(id);
    }

    fn after_output(&mut self, id: u64) {
        let grants = self
            .flows
            .jobs
            .get_mut(&id)
            .and_then(|f| f.output.as_mut())
            .map(Credits::grants)
            .unwrap_or_default();
        self.grant_output(id, grants);
        self.note_throttle(id, Direction::Output);
        self.refresh_stdio_gauges();
    }

    /// stdin from the job's scrun, for rank 0.  A scrun that sends beyond
    /// its credit breaks the protocol: the call ends with an error and the
    /// job is cancelled, as when scrun goes away.
    pub fn stdin(&mut self, id: u64, chunk: StdinChunk) -> Result<(), Status> {
        let n = chunk.data.len() as u64;
        let within = match self.flows.jobs.get_mut(&id) {
            Some(flow) => flow.stdin.received(0, n),
            None => true,
        };
        if !within {
            let status = Status::invalid_argument(format!(
                "scrun sent {n} bytes of stdin beyond the credit the master granted"
            ));
            tracing::warn!(job = id, "refused: {}", status.message());
            self.metrics
                .requests_rejected
                .get_or_create(&vec![("reason".into(), "invalid".into())])
                .inc();
            self.links.end_follow(id, status.clone());
            self.client_gone(id, 0);
            return Err(status);
        }
        if !self.forward_stdin(id, chunk) {
            // Nobody will write it (the job is over): as good as written.
            self.stdin_released(id, n);
        } else {
            self.note_throttle(id, Direction::Stdin);
            self.refresh_stdio_gauges();
        }
        Ok(())
    }

    /// The agent of rank 0 wrote `n` bytes of stdin to its pipe: scrun may
    /// send as much again.
    pub(super) fn stdin_written(&mut self, id: u64, node: &str, n: u64) {
        let first = self
            .jobs
            .get(id)
            .and_then(|j| j.info.nodes.first())
            .is_some_and(|f| f == node);
        if first {
            self.stdin_released(id, n);
        }
    }

    fn stdin_released(&mut self, id: u64, n: u64) {
        let Some(flow) = self.flows.jobs.get_mut(&id) else {
            return;
        };
        flow.stdin.released(n);
        let grants = flow.stdin.grants();
        self.grant_stdin(id, grants);
        self.note_throttle(id, Direction::Stdin);
        self.refresh_stdio_gauges();
    }

    /// The agent of `node` dropped the job's output credit it held (it
    /// resends what the job's scrun lacks): grant it a fresh window.
    pub(super) fn flow_sender_reset(&mut self, id: u64, node: &str) {
        let Some(flow) = self.flows.jobs.get_mut(&id) else {
            return;
        };
        let Some(i) = flow.nodes.iter().position(|n| n == node) else {
            return;
        };
        if let Some(c) = flow.output.as_mut() {
            c.forget_sender(i);
        }
        // What it resends arrives beyond its fresh credit: expected.
        flow.overrun_logged = true;
        self.after_output(id);
    }

    /// The job's scrun is gone: the output held for it never will be taken.
    pub(super) fn flow_client_gone(&mut self, id: u64) {
        if let Some(credits) = self.flows.jobs.get_mut(&id).and_then(|f| f.output.as_mut()) {
            credits.release_all();
        }
        self.after_output(id);
    }

    /// The job is over.
    pub(super) fn flow_finished(&mut self, id: u64) {
        for d in [Direction::Output, Direction::Stdin] {
            self.end_throttle(id, d);
        }
        self.flows.forget(id);
        self.refresh_stdio_gauges();
    }

    fn grant_output(&self, id: u64, grants: Vec<(usize, u64)>) {
        let Some(flow) = self.flows.jobs.get(&id) else {
            return;
        };
        for (i, bytes) in grants {
            if let Some(node) = flow.nodes.get(i) {
                self.links.send(
                    &self.nodes,
                    node,
                    id,
                    master_message::Msg::OutputCredit(Credit { bytes }),
                );
            }
        }
    }

    fn grant_stdin(&self, id: u64, grants: Vec<(usize, u64)>) {
        for (_, bytes) in grants {
            self.links
                .emit(id, job_event::Event::StdinCredit(Credit { bytes }));
        }
    }

    /// Counts a job that starts being throttled in `d` (and has it logged
    /// if it lasts), or notes that it no longer is.
    fn note_throttle(&mut self, id: u64, d: Direction) {
        let Some(flow) = self.flows.jobs.get_mut(&id) else {
            return;
        };
        let Some(throttled) = flow.credits(d).map(Credits::throttled) else {
            return;
        };
        let t = flow.throttle(d);
        match (t.since, throttled) {
            (None, true) => {
                t.since = Some(Instant::now());
                t.logged_this = false;
                self.metrics
                    .stdio_throttles
                    .get_or_create(&vec![("direction".into(), d.label().into())])
                    .inc();
                self.links.timer(LOG_AFTER, id, TimerKind::Throttled(d));
            }
            (Some(_), false) => self.end_throttle(id, d),
            _ => {}
        }
    }

    /// [`LOG_AFTER`] after a throttle began: logged if it still lasts (and
    /// none was logged lately).
    pub(super) fn throttle_timer(&mut self, id: u64, d: Direction) {
        let Some(flow) = self.flows.jobs.get_mut(&id) else {
            return;
        };
        let Some((held, budget)) = flow.credits(d).map(|c| (c.held(), c.budget())) else {
            return;
        };
        let t = flow.throttle(d);
        let Some(since) = t.since else {
            return;
        };
        let now = Instant::now();
        if t.logged_this
            || now.duration_since(since) < LOG_AFTER
            || t.logged.is_some_and(|l| now.duration_since(l) < LOG_EVERY)
        {
            return;
        }
        t.logged_this = true;
        t.logged = Some(now);
        match d {
            Direction::Output => tracing::info!(
                job = id,
                buffered = held,
                budget,
                "output throttled: scrun takes it slower than the ranks write it; the ranks wait"
            ),
            Direction::Stdin => tracing::info!(
                job = id,
                buffered = held,
                budget,
                "stdin throttled: rank 0 reads it slower than scrun sends it; scrun waits"
            ),
        }
    }

    fn end_throttle(&mut self, id: u64, d: Direction) {
        let Some(flow) = self.flows.jobs.get_mut(&id) else {
            return;
        };
        let t = flow.throttle(d);
        if let Some(since) = t.since.take() {
            if t.logged_this {
                tracing::info!(
                    job = id,
                    "{} resumed after {:.1} s",
                    d.label(),
                    since.elapsed().as_secs_f64()
                );
            }
        }
    }

    /// The stdio gauges: bytes held and jobs throttled, by direction.
    fn refresh_stdio_gauges(&self) {
        for d in [Direction::Output, Direction::Stdin] {
            let labels = vec![("direction".into(), d.label().into())];
            self.metrics
                .stdio_buffered
                .get_or_create(&labels)
                .set(self.flows.held(d) as i64);
            self.metrics
                .stdio_throttled_jobs
                .get_or_create(&labels)
                .set(self.flows.throttled(d) as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    const KIB: u64 = 1024;

    /// A sender that sends `n` bytes in chunks within its credit; returns
    /// what it sent.
    fn send(c: &mut Credits, credit: &mut u64, sender: usize, n: u64) -> u64 {
        let mut sent = 0;
        while sent < n && *credit > 0 {
            let k = (n - sent).min(CHUNK).min(*credit);
            assert!(c.received(sender, k));
            *credit -= k;
            sent += k;
        }
        sent
    }

    #[test]
    fn windows_share_the_budget_and_are_never_below_two_chunks() {
        let c = Credits::new(4096 * KIB, 4);
        assert_eq!(c.window, 1024 * KIB);
        assert_eq!(c.budget(), 4096 * KIB);
        let c = Credits::new(256 * KIB, 64);
        assert_eq!(c.window, MIN_WINDOW);
        assert_eq!(c.budget(), 64 * MIN_WINDOW);
        assert_eq!(Credits::new(1, 0).budget(), MIN_WINDOW);
    }

    #[test]
    fn a_receiver_that_takes_nothing_holds_at_most_the_budget() {
        let mut c = Credits::new(1024 * KIB, 2);
        let mut credit = [0u64; 2];
        for (i, g) in c.grants() {
            credit[i] += g;
        }
        assert_eq!(credit, [512 * KIB, 512 * KIB]);
        // Both send all they may; nobody takes anything.
        for (i, credit) in credit.iter_mut().enumerate() {
            assert_eq!(send(&mut c, credit, i, 10 << 20), 512 * KIB);
        }
        assert_eq!(c.held(), 1024 * KIB);
        assert!(c.grants().is_empty());
        assert!(c.throttled());
        // Taking a little is not enough for a batch; half a window is.
        c.released(100 * KIB);
        assert!(c.grants().is_empty());
        assert!(c.throttled());
        c.released(156 * KIB);
        let g = c.grants();
        assert_eq!(g.iter().map(|(_, b)| b).sum::<u64>(), 256 * KIB);
        for (i, b) in g {
            credit[i] += b;
        }
        assert!(c.held() + credit.iter().sum::<u64>() <= c.budget());
        // Everything taken: both windows full again, nothing throttled.
        c.released(c.held());
        for (i, g) in c.grants() {
            credit[i] += g;
        }
        assert_eq!(credit, [512 * KIB, 512 * KIB]);
        assert!(!c.throttled());
    }

    #[test]
    fn a_streaming_sender_is_granted_in_batches_and_never_starves() {
        // One sender, a receiver that takes every chunk at once: a grant
        // every half window, and the credit never runs out.
        let mut c = Credits::new(256 * KIB, 1);
        let mut credit: u64 = c.grants().iter().map(|(_, b)| b).sum();
        let mut grants = 0;
        for _ in 0..1000 {
            assert!(credit >= CHUNK, "a whole chunk can always be sent");
            assert_eq!(send(&mut c, &mut credit, 0, CHUNK), CHUNK);
            c.released(CHUNK);
            for (_, b) in c.grants() {
                grants += 1;
                credit += b;
            }
            assert!(!c.throttled());
        }
        assert_eq!(grants, 500, "one grant per half window (two chunks)");
    }

    #[test]
    fn a_sender_beyond_its_credit_is_told_and_counted() {
        let mut c = Credits::new(256 * KIB, 1);
        c.grants();
        assert!(c.received(0, 256 * KIB));
        assert!(!c.received(0, 1));
        assert_eq!(c.held(), 256 * KIB + 1);
        assert!(!c.received(7, 1), "an unknown sender has no credit");
        c.release_all();
        assert_eq!(c.held(), 0);
    }

    #[test]
    fn grants_go_round_the_senders() {
        // Room for one sender's batch at a time: the senders take turns.
        let mut c = Credits::new(4 * MIN_WINDOW, 4);
        let mut credit = [0u64; 4];
        for (i, g) in c.grants() {
            credit[i] += g;
        }
        for (i, credit) in credit.iter_mut().enumerate() {
            send(&mut c, credit, i, MIN_WINDOW);
        }
        let mut first = Vec::new();
        for _ in 0..4 {
            c.released(CHUNK);
            let g = c.grants();
            assert_eq!(g.len(), 1);
            first.push(g[0].0);
            send(&mut c, &mut credit[g[0].0], g[0].0, g[0].1);
        }
        first.sort();
        assert_eq!(first, [0, 1, 2, 3]);
    }

    fn output(rank: u32, data: &[u8]) -> agent_message::Msg {
        agent_message::Msg::Output(score_proto::v1::Output {
            rank,
            stream: 1,
            data: data.to_vec(),
            ..Default::default()
        })
    }

    fn credits_of(msgs: &[master_message::Msg]) -> u64 {
        msgs.iter()
            .filter_map(|m| match m {
                master_message::Msg::OutputCredit(c) => Some(c.bytes),
                _ => None,
            })
            .sum()
    }

    fn events(rx: &mut UnboundedReceiver<Result<JobEvent, Status>>) -> Vec<job_event::Event> {
        drain(rx)
            .into_iter()
            .filter_map(|e| e.ok()?.event)
            .collect()
    }

    #[test]
    fn the_master_grants_output_as_scrun_takes_it() {
        let mut h = harness(2);
        h.st.flows.budget = 512 * KIB;
        let (id, mut rx) = h.submit(spec(2, 1));
        // Each agent gets half the budget with the launch.
        for n in ["n1", "n2"] {
            assert_eq!(credits_of(&h.agent_hears(n)), 256 * KIB);
        }
        h.launch_ok(id);
        events(&mut rx);
        let chunk = vec![b'x'; CHUNK as usize];
        for _ in 0..4 {
            h.agent_says("n1", id, output(0, &chunk));
        }
        // The output is held for scrun; n1's credit is used up.
        let outs = events(&mut rx);
        assert_eq!(outs.len(), 4);
        assert_eq!(h.st.flows.held(Direction::Output), 256 * KIB);
        assert!(credits_of(&h.agent_hears("n1")) == 0);
        assert_eq!(
            h.st.metrics
                .stdio_buffered
                .get_or_create(&vec![("direction".into(), "output".into())])
                .get(),
            256 * KIB as i64
        );
        // scrun takes two chunks: n1 gets half its window again.
        h.st.output_taken(id, CHUNK);
        h.st.output_taken(id, CHUNK);
        assert_eq!(credits_of(&h.agent_hears("n1")), 128 * KIB);
        assert_eq!(credits_of(&h.agent_hears("n2")), 0, "n2 has its window");
    }

    #[test]
    fn a_scrun_that_takes_nothing_throttles_only_its_own_job() {
        let mut h = harness(2);
        h.st.flows.budget = 256 * KIB;
        let (a, _ra) = h.submit(spec(1, 1));
        let (b, _rb) = h.submit(spec(1, 1));
        let na = h.st.job_info(a).unwrap().nodes[0].clone();
        let nb = h.st.job_info(b).unwrap().nodes[0].clone();
        assert_ne!(na, nb);
        h.launch_ok(a);
        h.launch_ok(b);
        h.agent_hears(&na);
        h.agent_hears(&nb);
        let chunk = vec![b'x'; CHUNK as usize];
        for _ in 0..4 {
            h.agent_says(&na, a, output(0, &chunk));
        }
        assert_eq!(h.st.flows.throttled(Direction::Output), 1);
        let throttled =
            h.st.metrics
                .stdio_throttled_jobs
                .get_or_create(&vec![("direction".into(), "output".into())])
                .get();
        assert_eq!(throttled, 1);
        let throttles =
            h.st.metrics
                .stdio_throttles
                .get_or_create(&vec![("direction".into(), "output".into())])
                .get();
        assert_eq!(throttles, 1);
        // Logged if it lasts: a timer asks again.
        let timers = drain(&mut h.timers);
        assert!(timers
            .iter()
            .any(|t| t.job == a && t.kind == TimerKind::Throttled(Direction::Output)));
        h.st.timer_fired(a, TimerKind::Throttled(Direction::Output));
        // Job b's output flows on: its scrun takes every chunk.
        for _ in 0..8 {
            h.agent_says(&nb, b, output(0, &chunk));
            h.st.output_taken(b, CHUNK);
        }
        assert_eq!(credits_of(&h.agent_hears(&nb)), 8 * CHUNK);
        assert_eq!(credits_of(&h.agent_hears(&na)), 0);
        // a's scrun goes away: what was held for it is dropped, and its
        // agent may send again (the job is being cancelled).
        let call = h.st.follower(a).unwrap();
        h.st.client_gone(a, call);
        assert_eq!(h.st.flows.held(Direction::Output), 0);
        assert!(credits_of(&h.agent_hears(&na)) >= 2 * CHUNK);
        assert_eq!(h.st.flows.throttled(Direction::Output), 0);
    }

    #[test]
    fn stdin_is_granted_as_rank_0_reads_it_and_kept_while_pending() {
        let mut h = harness(1);
        h.st.flows.budget = 256 * KIB;
        let (a, mut ra) = h.submit(spec(1, 1));
        let (b, mut rb) = h.submit(spec(1, 1)); // waits for a's node
        let granted = |ev: Vec<job_event::Event>| -> u64 {
            ev.iter()
                .filter_map(|e| match e {
                    job_event::Event::StdinCredit(c) => Some(c.bytes),
                    _ => None,
                })
                .sum()
        };
        assert_eq!(granted(events(&mut rb)), 256 * KIB);
        let chunk = |n: u64| StdinChunk {
            data: vec![b'i'; n as usize],
            eof: false,
        };
        for _ in 0..4 {
            h.st.stdin(b, chunk(CHUNK)).unwrap();
        }
        assert_eq!(h.st.flows.held(Direction::Stdin), 256 * KIB);
        assert_eq!(h.st.flows.throttled(Direction::Stdin), 1);
        assert_eq!(granted(events(&mut rb)), 0);
        // A chunk beyond the credit ends the call and cancels the job.
        let e = h.st.stdin(b, chunk(1)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        let ev = drain(&mut rb);
        assert!(
            ev.iter().any(|e| e.is_err()),
            "the stream ends with the error"
        );
        assert_eq!(h.state(b), JobState::Cancelled);
        // Job a: rank 0's agent reports what it wrote; scrun is granted again.
        events(&mut ra);
        h.launch_ok(a);
        h.st.stdin(a, chunk(CHUNK)).unwrap();
        h.st.stdin(a, chunk(CHUNK)).unwrap();
        assert_eq!(granted(events(&mut ra)), 0);
        let n1 = h.st.job_info(a).unwrap().nodes[0].clone();
        h.agent_says(
            &n1,
            a,
            agent_message::Msg::StdinWritten(Credit { bytes: 2 * CHUNK }),
        );
        assert_eq!(granted(events(&mut ra)), 2 * CHUNK);
        assert_eq!(h.st.flows.held(Direction::Stdin), 0);
    }

    #[test]
    fn a_finished_job_forgets_its_stdio() {
        let mut h = harness(1);
        let (id, _rx) = h.submit(spec(1, 1));
        h.launch_ok(id);
        h.agent_says("n1", id, output(0, b"hello"));
        assert_eq!(h.st.flows.held(Direction::Output), 5);
        h.exit(id, "n1", 0, 0, 0);
        h.clean_all(id);
        assert_eq!(h.state(id), JobState::Completed);
        assert_eq!(h.st.flows.held(Direction::Output), 0);
        // The stream takes the last bytes after the end: nothing to do.
        h.st.output_taken(id, 5);
    }
}
