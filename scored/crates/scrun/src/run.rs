//! Following one job: the `Run` stream, stdin forwarding, signals, output.

use crate::client::{self, Target};
use crate::label::{Labeller, Stream as LStream};
use crate::EXIT_SCRUN_ERROR;
use anyhow::{anyhow, Result};
use score_proto::v1::{
    job_event, run_request, CancelRequest, JobEvent, JobInfo, JobSpec, JobState, OutputAck,
    OutputMark, Reattach, RunRequest, StdinChunk, StepDone, Stream,
};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::ReceiverStream;

/// stdin goes to the master in chunks of at most this many bytes.
pub const STDIN_CHUNK: usize = score_proto::STDIO_CHUNK;

#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub label: bool,
    pub verbose: bool,
    pub quiet: bool,
    pub forward_stdin: bool,
    pub reattach_timeout: Duration,
    /// The job is adopted (JobSpec.adopt): print `SCORE_JOB_ID=N` once it
    /// runs, then take `done STATUS` from stdin (adopted_stdin).
    pub adopt: bool,
}

/// Printed output is acknowledged once this much is unacknowledged...
const ACK_BYTES: u64 = 64 * 1024;
/// ... or this long after it was printed.
const ACK_EVERY: Duration = Duration::from_millis(100);

/// What scrun has printed of each rank's stream: the chunks come numbered,
/// and after a restart of the master the agents resend what scrun lacks,
/// so a chunk is printed only if it is the next of its (rank, stream).
#[derive(Default)]
struct Printed {
    last: BTreeMap<(u32, i32), u64>,
    /// Marks printed since the last acknowledgement, and their bytes.
    unacked: BTreeMap<(u32, i32), u64>,
    unacked_bytes: u64,
}

impl Printed {
    /// Whether the chunk `seq` of (`rank`, `stream`) is the next to print
    /// (0: not numbered, always printed).
    fn take(&mut self, rank: u32, stream: i32, seq: u64, len: usize) -> bool {
        if seq == 0 {
            return true;
        }
        let last = self.last.entry((rank, stream)).or_default();
        if seq != *last + 1 {
            return false; // printed already, or one before it is missing
        }
        *last = seq;
        self.unacked.insert((rank, stream), seq);
        self.unacked_bytes += len as u64;
        true
    }

    fn marks(map: &BTreeMap<(u32, i32), u64>) -> Vec<OutputMark> {
        map.iter()
            .map(|(&(rank, stream), &seq)| OutputMark { rank, stream, seq })
            .collect()
    }

    /// Everything printed, for a re-attachment.
    fn all(&self) -> Vec<OutputMark> {
        Self::marks(&self.last)
    }

    /// The acknowledgement to send now, if one is due (`force`: any).
    fn ack(&mut self, force: bool) -> Option<RunRequest> {
        if self.unacked.is_empty() || (!force && self.unacked_bytes < ACK_BYTES) {
            return None;
        }
        let delivered = Self::marks(&std::mem::take(&mut self.unacked));
        self.unacked_bytes = 0;
        Some(RunRequest {
            msg: Some(run_request::Msg::Ack(OutputAck { delivered })),
        })
    }
}

pub fn flush_all() {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
}

/// What scrun says about the job on stderr.
struct Reporter {
    opts: Options,
    job: Option<u64>,
}

impl Reporter {
    fn job(&self) -> String {
        match self.job {
            Some(id) => format!("job {id}"),
            None => "the job".to_string(),
        }
    }
    fn info(&self, msg: impl AsRef<str>) {
        if !self.opts.quiet {
            eprintln!("scrun: {}", msg.as_ref());
        }
    }
    fn verbose(&self, msg: impl AsRef<str>) {
        if self.opts.verbose {
            eprintln!("scrun: {}", msg.as_ref());
        }
    }
}

pub fn state_name(state: i32) -> &'static str {
    match JobState::try_from(state).map_or("unknown", JobState::label) {
        "unknown" => "in an unknown state",
        word => word,
    }
}

/// The `-v` line for a state change.
pub fn describe_state(job: &JobInfo) -> String {
    let reason = |s: String| {
        if job.reason.is_empty() {
            s
        } else {
            format!("{s} ({})", job.reason)
        }
    };
    let nodes = job.nodes.join(",");
    match JobState::try_from(job.state) {
        Ok(JobState::Pending) => reason(format!("job {} queued", job.id)),
        Ok(JobState::Launching) => format!("job {} launching on {nodes}", job.id),
        Ok(JobState::Running) => format!("job {} running on {nodes}", job.id),
        _ => reason(format!("job {} {}", job.id, state_name(job.state))),
    }
}

/// The exit status scrun returns for a finished job: the master's, which
/// is 0..=255 by contract; anything else is reported as 1.
pub fn exit_code(job: &JobInfo) -> u8 {
    u8::try_from(job.exit_status).unwrap_or(1)
}

/// Writes the job's output to ours.
struct Output {
    labeller: Option<Labeller>,
    /// Set once our stdout is closed (`scrun ... | head`).
    stdout_closed: bool,
}

impl Output {
    fn new(opts: Options, ranks: u64) -> Self {
        Self {
            labeller: opts.label.then(|| Labeller::new(ranks)),
            stdout_closed: false,
        }
    }

    /// Returns false when our stdout has just been found closed.
    fn write(&mut self, rank: u32, stream: i32, data: &[u8]) -> bool {
        let stream = if stream == Stream::Stderr as i32 {
            LStream::Stderr
        } else {
            LStream::Stdout
        };
        let bytes = match &mut self.labeller {
            Some(l) => l.feed(rank, stream, data),
            None => data.to_vec(),
        };
        self.emit(stream, &bytes)
    }

    fn emit(&mut self, stream: LStream, bytes: &[u8]) -> bool {
        if bytes.is_empty() {
            return true;
        }
        match stream {
            LStream::Stdout => {
                if self.stdout_closed {
                    return true;
                }
                let mut out = std::io::stdout().lock();
                if out.write_all(bytes).and_then(|_| out.flush()).is_err() {
                    self.stdout_closed = true;
                    return false;
                }
            }
            LStream::Stderr => {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(bytes).and_then(|_| err.flush());
            }
        }
        true
    }

    fn finish(&mut self) {
        if let Some(mut l) = self.labeller.take() {
            let out = l.finish(LStream::Stdout);
            self.emit(LStream::Stdout, &out);
            let err = l.finish(LStream::Stderr);
            self.emit(LStream::Stderr, &err);
        }
    }
}

/// Reads our stdin on a thread of its own (a read from a terminal cannot be
/// cancelled, so no runtime thread is tied up) and sends it to rank 0, each
/// chunk once the master has granted `credit` for it (flow control: the
/// master holds a bounded amount of stdin, and grants again as rank 0 reads
/// it; meanwhile this thread reads no more).
fn forward_stdin(tx: mpsc::Sender<RunRequest>, credit: Arc<Semaphore>) {
    let rt = tokio::runtime::Handle::current();
    let spawned = std::thread::Builder::new()
        .name("scrun-stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; STDIN_CHUNK];
            loop {
                let (data, eof) = match stdin.read(&mut buf) {
                    Ok(0) => (Vec::new(), true),
                    Ok(n) => (buf[..n].to_vec(), false),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        eprintln!(
                            "scrun: cannot read standard input: {e}; rank 0 gets end-of-file"
                        );
                        (Vec::new(), true)
                    }
                };
                if !data.is_empty() {
                    match rt.block_on(credit.acquire_many(data.len() as u32)) {
                        Ok(permit) => permit.forget(),
                        Err(_) => return,
                    }
                }
                let msg = stdin_msg(data, eof);
                if tx.blocking_send(msg).is_err() || eof {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("scrun: cannot forward standard input: {e}");
    }
}

/// The launcher's side of an adopted job (`scrun --adopt`, started by the
/// SPANK plugin): a line `done STATUS` on stdin says the step ended; end of
/// file without it (the launcher died) cancels the job.
fn adopted_stdin(tx: mpsc::Sender<RunRequest>) {
    let spawned = std::thread::Builder::new()
        .name("scrun-adopt".into())
        .spawn(move || {
            let mut line = String::new();
            let msg = loop {
                line.clear();
                match std::io::stdin().read_line(&mut line) {
                    Ok(0) | Err(_) => break cancel_msg(false),
                    Ok(_) => {
                        let status = line.trim().strip_prefix("done ").map(str::parse::<i32>);
                        match status {
                            Some(Ok(exit_status)) => {
                                break RunRequest {
                                    msg: Some(run_request::Msg::StepDone(StepDone { exit_status })),
                                }
                            }
                            _ => eprintln!(
                                "scrun: --adopt: ignoring {:?} on stdin (expected: done STATUS)",
                                line.trim()
                            ),
                        }
                    }
                }
            };
            let _ = tx.blocking_send(msg);
        });
    if let Err(e) = spawned {
        eprintln!("scrun: cannot read standard input: {e}");
    }
}

fn stdin_msg(data: Vec<u8>, eof: bool) -> RunRequest {
    RunRequest {
        msg: Some(run_request::Msg::Stdin(StdinChunk { data, eof })),
    }
}

fn cancel_msg(kill: bool) -> RunRequest {
    RunRequest {
        msg: Some(run_request::Msg::Cancel(CancelRequest { job: 0, kill })),
    }
}

pub async fn run(target: &Target, spec: JobSpec, opts: Options) -> Result<u8> {
    let ranks = u64::from(spec.nodes) * u64::from(spec.ppn);
    let forward = opts.forward_stdin && spec.stdin_open;

    // Signals first, so that a Ctrl-C during the connection is ours.
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;

    // Everything scrun sends (stdin, cancels, acknowledgements) goes through
    // `tx`; the loop below passes it on to the call of the moment, which a
    // re-attachment replaces.
    let (tx, mut local) = mpsc::channel::<RunRequest>(16);
    let (mut call, call_rx) = mpsc::channel::<RunRequest>(16);
    call.send(RunRequest {
        msg: Some(run_request::Msg::Submit(spec)),
    })
    .await
    .map_err(|_| anyhow!("internal error: the request stream closed"))?;
    if !forward {
        call.send(stdin_msg(Vec::new(), true)).await.ok();
    }

    let mut client = client::connect(target).await?;
    let mut events = match client.run(ReceiverStream::new(call_rx)).await {
        Ok(resp) => resp.into_inner(),
        Err(status) => return Err(anyhow!(client::status_message(&status, &target.master))),
    };

    let mut rep = Reporter { opts, job: None };
    let mut out = Output::new(opts, ranks);
    let mut printed = Printed::default();
    let mut interrupts = 0u32;
    let mut cancelled = false;
    let mut stdin_started = false;
    let stdin_credit = Arc::new(Semaphore::new(0));
    let mut quiet_cancel = false;
    let mut announced = false;
    let mut ack_tick = tokio::time::interval(ACK_EVERY);

    loop {
        let event: Option<JobEvent> = tokio::select! {
            ev = events.message() => match ev {
                Ok(Some(ev)) => Some(ev),
                Ok(None) | Err(_) if rep.job.is_some() && !matches!(&ev, Err(s) if refused(s)) => {
                    let why = match &ev {
                        Err(s) => client::status_message(s, &target.master),
                        _ => "the master closed the stream before the job finished".into(),
                    };
                    let id = rep.job.unwrap_or(0);
                    let (e, c) = reattach(target, id, &printed, &why, opts).await.inspect_err(|_| out.finish())?;
                    events = e;
                    call = c;
                    // The new master grants its own stdin credit.
                    stdin_credit.forget_permits(stdin_credit.available_permits());
                    rep.info(format!("re-attached to job {id}"));
                    None
                }
                Ok(None) => {
                    out.finish();
                    return Err(lost(&rep, target, None));
                }
                Err(status) => {
                    out.finish();
                    return Err(lost(&rep, target, Some(&status)));
                }
            },
            Some(m) = local.recv() => { call.send(m).await.ok(); None }
            _ = ack_tick.tick() => {
                if let Some(ack) = printed.ack(true) {
                    call.send(ack).await.ok();
                }
                None
            }
            _ = sigint.recv() => {
                interrupts += 1;
                match interrupts {
                    1 => {
                        rep.info(format!("cancelling {} (press Ctrl-C again to kill it)", rep.job()));
                        cancelled = true;
                        call.send(cancel_msg(false)).await.ok();
                    }
                    2 => {
                        rep.info(format!("killing {} (press Ctrl-C again to stop waiting for it)", rep.job()));
                        call.send(cancel_msg(true)).await.ok();
                    }
                    _ => {
                        out.finish();
                        eprintln!("scrun: error: not waiting for {} to end; the master cleans it up", rep.job());
                        return Ok(EXIT_SCRUN_ERROR);
                    }
                }
                None
            },
            _ = sigterm.recv() => { soft_cancel(&rep, &call, &mut cancelled, "SIGTERM").await; None },
            _ = sighup.recv() => { soft_cancel(&rep, &call, &mut cancelled, "SIGHUP").await; None },
        };
        let Some(JobEvent { event: Some(event) }) = event else {
            continue;
        };
        match event {
            job_event::Event::Accepted(job) => {
                rep.job = Some(job.id);
                rep.verbose(format!("job {} submitted", job.id));
                if forward && !stdin_started {
                    stdin_started = true;
                    forward_stdin(tx.clone(), stdin_credit.clone());
                }
            }
            job_event::Event::State(job) => {
                rep.job.get_or_insert(job.id);
                rep.verbose(describe_state(&job));
                if opts.adopt && !announced && job.state == JobState::Running as i32 {
                    // The agents made the job's cgroups: its launcher may
                    // start the tasks and hand them over.
                    announced = true;
                    println!("SCORE_JOB_ID={}", job.id);
                    flush_all();
                    adopted_stdin(tx.clone());
                }
            }
            job_event::Event::StdinCredit(c) => {
                let room = Semaphore::MAX_PERMITS - stdin_credit.available_permits();
                stdin_credit.add_permits(usize::try_from(c.bytes).unwrap_or(usize::MAX).min(room));
            }
            job_event::Event::Output(o) => {
                if !printed.take(o.rank, o.stream, o.seq, o.data.len()) {
                    continue;
                }
                if !out.write(o.rank, o.stream, &o.data) && !cancelled {
                    // `scrun ... | head`: end quietly, as a local pipeline does.
                    quiet_cancel = true;
                    rep.verbose(format!(
                        "standard output is closed: cancelling {}",
                        rep.job()
                    ));
                    cancelled = true;
                    call.send(cancel_msg(false)).await.ok();
                }
                if let Some(ack) = printed.ack(false) {
                    call.send(ack).await.ok();
                }
            }
            job_event::Event::Finished(job) => {
                rep.job.get_or_insert(job.id);
                out.finish();
                match JobState::try_from(job.state) {
                    Ok(JobState::Completed) => rep.verbose(format!("job {} completed", job.id)),
                    Ok(JobState::Cancelled) if quiet_cancel => {
                        rep.verbose(format!("job {} cancelled: {}", job.id, job.reason))
                    }
                    _ => {
                        let what = format!("job {} {}", job.id, state_name(job.state));
                        if job.reason.is_empty() {
                            rep.info(what);
                        } else {
                            rep.info(format!("{what}: {}", job.reason));
                        }
                    }
                }
                drop(tx);
                return Ok(exit_code(&job));
            }
        }
    }
}

/// Whether the master refused the call on purpose (as opposed to going
/// away): then re-attaching would be refused too.
fn refused(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::PermissionDenied
            | tonic::Code::NotFound
            | tonic::Code::InvalidArgument
            | tonic::Code::Aborted
            | tonic::Code::Unauthenticated
    )
}

type Events = tonic::Streaming<JobEvent>;

/// Follows job `id` again after the master was lost (`why`), from after
/// what was `printed`; tries until `opts.reattach_timeout` has passed.
async fn reattach(
    target: &Target,
    id: u64,
    printed: &Printed,
    why: &str,
    opts: Options,
) -> Result<(Events, mpsc::Sender<RunRequest>)> {
    if !opts.quiet {
        eprintln!("scrun: lost the scored master ({why}); re-attaching to job {id}");
    }
    let deadline = Instant::now() + opts.reattach_timeout;
    let mut last;
    loop {
        let (call, call_rx) = mpsc::channel::<RunRequest>(16);
        call.send(RunRequest {
            msg: Some(run_request::Msg::Reattach(Reattach {
                job: id,
                delivered: printed.all(),
            })),
        })
        .await
        .ok();
        match client::connect(target).await {
            Ok(mut client) => match client.run(ReceiverStream::new(call_rx)).await {
                Ok(resp) => return Ok((resp.into_inner(), call)),
                Err(s) if refused(&s) => {
                    return Err(anyhow!(
                        "cannot re-attach to job {id}: {}",
                        client::status_message(&s, &target.master)
                    ))
                }
                Err(s) => last = client::status_message(&s, &target.master),
            },
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            return Err(anyhow!(
                "lost the connection to the scored master (job {id}) and could not re-attach within {} s: {last}",
                opts.reattach_timeout.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn soft_cancel(
    rep: &Reporter,
    tx: &mpsc::Sender<RunRequest>,
    cancelled: &mut bool,
    sig: &str,
) {
    if !*cancelled {
        rep.info(format!("{sig}: cancelling {}", rep.job()));
        *cancelled = true;
        tx.send(cancel_msg(false)).await.ok();
    }
}

fn lost(rep: &Reporter, target: &Target, status: Option<&tonic::Status>) -> anyhow::Error {
    let why = match status {
        Some(s) => client::status_message(s, &target.master),
        None => "the master closed the stream before the job finished".to_string(),
    };
    match rep.job {
        Some(id) => anyhow!("lost the connection to the scored master (job {id}): {why}"),
        // Nothing was accepted: the master refused the job.
        None => anyhow!("{why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: JobState, reason: &str, nodes: &[&str]) -> JobInfo {
        JobInfo {
            id: 12,
            state: state as i32,
            reason: reason.into(),
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn state_lines() {
        assert_eq!(
            describe_state(&job(JobState::Pending, "waiting for 4 nodes", &[])),
            "job 12 queued (waiting for 4 nodes)"
        );
        assert_eq!(
            describe_state(&job(JobState::Pending, "", &[])),
            "job 12 queued"
        );
        assert_eq!(
            describe_state(&job(JobState::Running, "", &["n1", "n2"])),
            "job 12 running on n1,n2"
        );
        assert_eq!(
            describe_state(&job(JobState::Completing, "", &[])),
            "job 12 completing"
        );
    }

    #[test]
    fn exit_codes() {
        let mut j = job(JobState::Failed, "", &[]);
        j.exit_status = 7;
        assert_eq!(exit_code(&j), 7);
        j.exit_status = 255;
        assert_eq!(exit_code(&j), 255);
        j.exit_status = -1;
        assert_eq!(exit_code(&j), 1);
        j.exit_status = 256;
        assert_eq!(exit_code(&j), 1);
    }
}
