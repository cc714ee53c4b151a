//! PMI-1 for the ranks the agent starts, so that MPICH programs (which
//! speak PMI, not PMIx) run under scrun as under hydra's `mpiexec`.
//!
//! Each rank inherits one end of a socket pair, named by `PMI_FD` (with
//! `PMI_RANK` and `PMI_SIZE`), as hydra's proxies do.  One task per job
//! and node owns the other ends and the protocol state ([`JobPmi`],
//! crate score-pmi): it answers each request line; the barrier goes
//! through the agent's event loop into the job's fence at the master, the
//! same sequence of fences as PMIx's (a job's ranks make their collective
//! calls in one order everywhere), and its completion answers the waiting
//! ranks.  The task ends when every rank has closed its end, or with the
//! job.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;

use score_pmi::{JobPmi, JobShape, Outcome, MAX_LINE};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::Internal;

/// The answer to a PMI barrier's fence: every node's contributions, or why
/// the fence failed.
pub type FenceResult = Result<Vec<u8>, String>;

/// A socket pair for one rank: (the rank's end, to inherit; the agent's).
pub fn socket_pair() -> io::Result<(OwnedFd, UnixStream)> {
    let (rank, ours) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    Ok((rank.into(), UnixStream::from_std(ours)?))
}

/// Serves the job's PMI on this node for the ranks of `conns`.
pub fn serve(
    job: u64,
    shape: JobShape,
    conns: Vec<(u32, UnixStream)>,
    internal: mpsc::UnboundedSender<Internal>,
) -> JoinHandle<()> {
    tokio::spawn(run(job, shape, conns, internal))
}

async fn run(
    job: u64,
    shape: JobShape,
    conns: Vec<(u32, UnixStream)>,
    internal: mpsc::UnboundedSender<Internal>,
) {
    let (lines_tx, mut lines) = mpsc::channel(64);
    let mut writers: HashMap<u32, OwnedWriteHalf> = HashMap::new();
    for (rank, stream) in conns {
        let (r, w) = stream.into_split();
        writers.insert(rank, w);
        tokio::spawn(read_lines(job, rank, r, lines_tx.clone()));
    }
    drop(lines_tx);
    let mut pmi = JobPmi::new(shape);
    let mut fence: Option<oneshot::Receiver<FenceResult>> = None;
    loop {
        tokio::select! {
            msg = lines.recv() => match msg {
                None => return, // every rank closed its end
                Some((rank, None)) => {
                    writers.remove(&rank);
                }
                Some((rank, Some(line))) => match pmi.request(rank, &line) {
                    Outcome::Reply(reply) => {
                        if reply.starts_with("cmd=error ") {
                            // The rank's MPI reports only a failed PMI call.
                            tracing::warn!(job, rank, request = %String::from_utf8_lossy(&line).trim_end(),
                                           "PMI request refused: {}", reply.trim_end());
                        }
                        write(&mut writers, rank, &reply).await
                    }
                    Outcome::Nothing => {}
                    Outcome::Fence(data) => {
                        let (tx, rx) = oneshot::channel();
                        fence = Some(rx);
                        let _ = internal.send(Internal::PmiFence { job, data, reply: tx });
                    }
                    Outcome::Abort { status, message } => {
                        let _ = internal.send(Internal::PmiAbort { job, rank, status, message });
                    }
                },
            },
            done = async { fence.as_mut().expect("guarded").await }, if fence.is_some() => {
                fence = None;
                let done = done.unwrap_or_else(|_| Err("the job's fence was abandoned".into()));
                for (rank, reply) in pmi.fence_complete(done.as_deref().map_err(Clone::clone)) {
                    write(&mut writers, rank, &reply).await;
                }
            }
        }
    }
}

async fn write(writers: &mut HashMap<u32, OwnedWriteHalf>, rank: u32, line: &str) {
    if let Some(w) = writers.get_mut(&rank) {
        if w.write_all(line.as_bytes()).await.is_err() {
            writers.remove(&rank); // the rank is gone
        }
    }
}

/// Forwards the rank's request lines; `None` when it closed its end (or
/// sent a line too long to be PMI).
async fn read_lines(
    job: u64,
    rank: u32,
    r: OwnedReadHalf,
    to: mpsc::Sender<(u32, Option<Vec<u8>>)>,
) {
    let mut r = BufReader::new(r);
    loop {
        let mut line = Vec::new();
        match (&mut r)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) if !line.ends_with(b"\n") => {
                if line.len() >= MAX_LINE {
                    tracing::warn!(
                        job,
                        rank,
                        "PMI request longer than {MAX_LINE} bytes: connection closed"
                    );
                }
                break;
            }
            Ok(_) => {
                if to.send((rank, Some(line))).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = to.send((rank, None)).await;
}
