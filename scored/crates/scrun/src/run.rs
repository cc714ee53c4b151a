//! Following one job: the `Run` stream, stdin forwarding, signals, output.

use crate::client::{self, Target};
use crate::label::{Labeller, Stream as LStream};
use crate::EXIT_SCRUN_ERROR;
use anyhow::{anyhow, Result};
use score_proto::v1::{
    job_event, run_request, CancelRequest, JobEvent, JobInfo, JobSpec, JobState, RunRequest,
    StdinChunk, Stream,
};
use std::io::{Read, Write};
use std::sync::Arc;
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

    let (tx, rx) = mpsc::channel::<RunRequest>(16);
    tx.send(RunRequest {
        msg: Some(run_request::Msg::Submit(spec)),
    })
    .await
    .map_err(|_| anyhow!("internal error: the request stream closed"))?;
    if !forward {
        tx.send(stdin_msg(Vec::new(), true)).await.ok();
    }

    let mut client = client::connect(target).await?;
    let mut events = match client.run(ReceiverStream::new(rx)).await {
        Ok(resp) => resp.into_inner(),
        Err(status) => return Err(anyhow!(client::status_message(&status, &target.master))),
    };

    let mut rep = Reporter { opts, job: None };
    let mut out = Output::new(opts, ranks);
    let mut interrupts = 0u32;
    let mut cancelled = false;
    let mut stdin_started = false;
    let stdin_credit = Arc::new(Semaphore::new(0));
    let mut quiet_cancel = false;

    loop {
        let event: Option<JobEvent> = tokio::select! {
            ev = events.message() => match ev {
                Ok(Some(ev)) => Some(ev),
                Ok(None) => {
                    out.finish();
                    return Err(lost(&rep, target, None));
                }
                Err(status) => {
                    out.finish();
                    return Err(lost(&rep, target, Some(&status)));
                }
            },
            _ = sigint.recv() => {
                interrupts += 1;
                match interrupts {
                    1 => {
                        rep.info(format!("cancelling {} (press Ctrl-C again to kill it)", rep.job()));
                        cancelled = true;
                        tx.send(cancel_msg(false)).await.ok();
                    }
                    2 => {
                        rep.info(format!("killing {} (press Ctrl-C again to stop waiting for it)", rep.job()));
                        tx.send(cancel_msg(true)).await.ok();
                    }
                    _ => {
                        out.finish();
                        eprintln!("scrun: error: not waiting for {} to end; the master cleans it up", rep.job());
                        return Ok(EXIT_SCRUN_ERROR);
                    }
                }
                None
            },
            _ = sigterm.recv() => { soft_cancel(&rep, &tx, &mut cancelled, "SIGTERM").await; None },
            _ = sighup.recv() => { soft_cancel(&rep, &tx, &mut cancelled, "SIGHUP").await; None },
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
            }
            job_event::Event::StdinCredit(c) => {
                let room = Semaphore::MAX_PERMITS - stdin_credit.available_permits();
                stdin_credit.add_permits(usize::try_from(c.bytes).unwrap_or(usize::MAX).min(room));
            }
            job_event::Event::Output(o) => {
                if !out.write(o.rank, o.stream, &o.data) && !cancelled {
                    // `scrun ... | head`: end quietly, as a local pipeline does.
                    quiet_cancel = true;
                    rep.verbose(format!(
                        "standard output is closed: cancelling {}",
                        rep.job()
                    ));
                    cancelled = true;
                    tx.send(cancel_msg(false)).await.ok();
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
