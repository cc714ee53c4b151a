//! Watching one running rank: its stdout and stderr go to the master in
//! chunks, then its exit.  The output goes straight to the master's channel;
//! the exit, sent after the last chunk, goes through the agent's event loop,
//! which passes it on after any PMIx event already queued (a rank that calls
//! PMIx_Abort is reported as aborted, not just as exited), so the master
//! still sees every byte of output before the exit.

use score_proto::v1::{agent_message, AgentMessage, Output, RankExit, RankExited, Stream};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio::sync::mpsc::UnboundedSender;

use super::Internal;

const CHUNK: usize = 64 * 1024;
/// After the process exits, output still in flight (or held open by a
/// process it left behind) is read for at most this long.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

async fn pump<R: AsyncRead + Unpin>(
    mut r: R,
    job: u64,
    rank: u32,
    stream: Stream,
    out: UnboundedSender<AgentMessage>,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let msg = AgentMessage {
                    job,
                    msg: Some(agent_message::Msg::Output(Output {
                        rank,
                        stream: stream as i32,
                        data: buf[..n].to_vec(),
                    })),
                };
                if out.send(msg).is_err() {
                    return;
                }
            }
        }
    }
}

/// Follows `child` to its end and reports it.  Returns when the exit has
/// been sent.
pub async fn watch(
    mut child: Child,
    job: u64,
    rank: u32,
    node: String,
    out: UnboundedSender<AgentMessage>,
    exited: UnboundedSender<Internal>,
) {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let o = stdout.map(|s| tokio::spawn(pump(s, job, rank, Stream::Stdout, out.clone())));
    let e = stderr.map(|s| tokio::spawn(pump(s, job, rank, Stream::Stderr, out.clone())));
    let status = child.wait().await;
    for h in [o, e].into_iter().flatten() {
        let abort = h.abort_handle();
        if tokio::time::timeout(DRAIN_AFTER_EXIT, h).await.is_err() {
            abort.abort();
        }
    }
    let (code, signal) = match status {
        Ok(s) => (s.code().unwrap_or(0), s.signal().unwrap_or(0)),
        Err(e) => {
            tracing::error!(job, rank, "cannot wait for rank: {e}");
            (255, 0)
        }
    };
    let _ = exited.send(Internal::Exited(AgentMessage {
        job,
        msg: Some(agent_message::Msg::Exited(RankExited {
            exit: Some(RankExit {
                rank,
                node,
                code,
                signal,
            }),
        })),
    }));
}
