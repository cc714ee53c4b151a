//! Watching one running rank: its stdout and stderr go to the master in
//! chunks, then its exit.  The output goes straight to the master's channel;
//! the exit, sent after the last chunk, goes through the agent's event loop,
//! which passes it on after any PMIx event already queued (a rank that calls
//! PMIx_Abort is reported as aborted, not just as exited), so the master
//! still sees every byte of output before the exit.
//!
//! Output is flow-controlled (`master::state::flow`): a chunk read from a
//! pipe is sent only once the job has credit for it, granted by the master
//! as scrun takes the output.  Until then the pump reads no more, the pipe
//! fills and the rank blocks in `write`: nothing is dropped, however long
//! scrun stops reading.

use super::spawn::RankProcess;
use score_proto::v1::{agent_message, AgentMessage, Output, RankExit, RankExited, Stream};
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{watch, Semaphore};

use super::retained::Retained;
use super::Internal;

const CHUNK: usize = score_proto::STDIO_CHUNK;
/// After the process exits, a pipe that stays silent this long (held open
/// by a process it left behind) is given up.  Waiting for credit does not
/// count: the output already written is all delivered.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// Resolves `DRAIN_AFTER_EXIT` after the rank has exited (at once if the
/// watcher is gone).
async fn silent_after_exit(exited: &mut watch::Receiver<bool>) {
    let _ = exited.wait_for(|&e| e).await;
    tokio::time::sleep(DRAIN_AFTER_EXIT).await;
}

/// What a pump sends its chunks with.
#[derive(Clone)]
struct PumpTo {
    job: u64,
    rank: u32,
    out: UnboundedSender<AgentMessage>,
    /// The job's output credit on this node, shared by its pumps (first
    /// come, first served); closed when the job is given up.
    credit: Arc<Semaphore>,
    /// The job's chunks sent and not yet printed by scrun.
    retained: Arc<Retained>,
    /// Set when the rank has exited.
    exited: watch::Receiver<bool>,
}

async fn pump<R: AsyncRead + Unpin>(mut r: R, stream: Stream, mut to: PumpTo) {
    let mut buf = vec![0u8; CHUNK];
    let mut seq = 0;
    loop {
        let n = tokio::select! {
            r = r.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            () = silent_after_exit(&mut to.exited) => return,
        };
        match to.credit.acquire_many(n as u32).await {
            Ok(permit) => permit.forget(),
            Err(_) => return,
        }
        seq += 1;
        let chunk = Output {
            rank: to.rank,
            stream: stream as i32,
            data: buf[..n].to_vec(),
            seq,
        };
        if !to.retained.send(to.job, chunk, &to.out) {
            return;
        }
    }
}

/// Where a job's ranks on this node report to.
#[derive(Clone)]
pub struct RankLinks {
    pub job: u64,
    pub node: String,
    /// The agent's messages to the master.
    pub out: UnboundedSender<AgentMessage>,
    pub credit: Arc<Semaphore>,
    pub retained: Arc<Retained>,
    /// The exit goes through the agent's event loop.
    pub exited: UnboundedSender<Internal>,
}

/// Follows `child` to its end and reports it.  Returns when the exit has
/// been sent.
pub async fn watch(mut child: RankProcess, rank: u32, links: RankLinks) {
    let RankLinks {
        job,
        node,
        out,
        credit,
        retained,
        exited,
    } = links;
    let (gone_tx, gone) = watch::channel(false);
    let to = PumpTo {
        job,
        rank,
        out,
        credit,
        retained,
        exited: gone,
    };
    let o = child
        .stdout
        .take()
        .map(|s| tokio::spawn(pump(s, Stream::Stdout, to.clone())));
    let e = child
        .stderr
        .take()
        .map(|s| tokio::spawn(pump(s, Stream::Stderr, to.clone())));
    drop(to);
    // Aborted with this task (the job is given up), the pumps go too.
    let pumps: Vec<_> = [o, e].into_iter().flatten().collect();
    let _abort = AbortOnDrop(pumps.iter().map(|h| h.abort_handle()).collect());
    let status = child.wait().await;
    let _ = gone_tx.send(true);
    for h in pumps {
        let _ = h.await;
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

struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::AsyncWriteExt;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    /// A pump of job 1 rank 0 reading `r` (an in-memory pipe of one chunk);
    /// its credit, its "rank has exited" flag and what it sends.
    #[allow(clippy::type_complexity)]
    fn start(
        r: tokio::io::DuplexStream,
    ) -> (
        tokio::task::JoinHandle<()>,
        Arc<Semaphore>,
        watch::Sender<bool>,
        UnboundedReceiver<AgentMessage>,
    ) {
        let credit = Arc::new(Semaphore::new(0));
        let (exited_tx, exited) = watch::channel(false);
        let (out, rx) = unbounded_channel();
        let to = PumpTo {
            job: 1,
            rank: 0,
            out,
            credit: credit.clone(),
            retained: Arc::default(),
            exited,
        };
        (
            tokio::spawn(pump(r, Stream::Stdout, to)),
            credit,
            exited_tx,
            rx,
        )
    }

    fn data_of(rx: &mut UnboundedReceiver<AgentMessage>) -> Vec<u8> {
        let mut v = Vec::new();
        while let Ok(m) = rx.try_recv() {
            match m.msg {
                Some(agent_message::Msg::Output(o)) => v.extend(o.data),
                other => panic!("not output: {other:?}"),
            }
        }
        v
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[tokio::test]
    async fn without_credit_the_pump_stops_reading_and_the_writer_blocks() {
        let (mut w, r) = tokio::io::duplex(CHUNK);
        let (_pump, credit, _exited, mut rx) = start(r);
        let data = pattern(6 * CHUNK);
        let expected = data.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&data).await.unwrap();
            w
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            data_of(&mut rx).is_empty(),
            "nothing is sent without credit"
        );
        assert!(!writer.is_finished(), "the writer waits: the pipe is full");
        // Credit a little at a time: everything comes, in order.
        let (mut got, mut credited) = (Vec::new(), 0);
        while got.len() < expected.len() {
            credit.add_permits(CHUNK / 2);
            credited += CHUNK / 2;
            tokio::time::sleep(Duration::from_millis(20)).await;
            got.extend(data_of(&mut rx));
            assert!(got.len() <= credited, "never more than the credit");
        }
        assert_eq!(got, expected);
        assert!(writer.await.is_ok());
    }

    #[tokio::test]
    async fn after_the_exit_waiting_for_credit_does_not_count_as_silence() {
        let (mut w, r) = tokio::io::duplex(4 * CHUNK);
        let (pump, credit, exited, mut rx) = start(r);
        let data = pattern(2 * CHUNK);
        w.write_all(&data).await.unwrap();
        // The rank exits; a process it left holds the pipe open (`w`).
        exited.send(true).unwrap();
        tokio::time::sleep(DRAIN_AFTER_EXIT + Duration::from_millis(500)).await;
        assert!(
            !pump.is_finished(),
            "output waiting for credit is not given up"
        );
        credit.add_permits(2 * CHUNK);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(data_of(&mut rx), data);
        // Then a silent pipe is given up.
        let t = Instant::now();
        pump.await.unwrap();
        assert!(t.elapsed() >= DRAIN_AFTER_EXIT - Duration::from_millis(200));
        drop(w);
    }
}
