//! A job's output on this node that scrun has not yet printed.
//!
//! Every chunk a pump sends is numbered (1, 2, 3, ... per rank and stream)
//! and kept here until scrun acknowledges it (`OutputAck`, relayed by the
//! master).  If the master restarts, chunks it had received but not
//! delivered are lost with it: when scrun re-attaches, the master tells
//! this agent what scrun printed last (`OutputResume`) and the agent sends
//! the rest again.  scrun prints a chunk only if it is the next one of its
//! rank and stream, so every chunk is printed exactly once.
//!
//! What is kept is bounded by the output credit: the master grants credit
//! as scrun takes the output, and scrun acknowledges what it printed soon
//! after, so this holds about the job's window (`[master]
//! stdio_buffer_kib`) and never more than the credit granted since the
//! last acknowledgement.

use score_proto::v1::{agent_message, AgentMessage, Output, OutputMark};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::mpsc::UnboundedSender;

type Key = (u32, i32);

#[derive(Default)]
pub struct Retained {
    /// Per (rank, stream): the chunks sent and not yet acknowledged, in
    /// order.  Sending and resending hold the lock, so that a resend never
    /// overtakes a chunk, nor a chunk a resend.
    chunks: Mutex<BTreeMap<Key, VecDeque<Output>>>,
}

fn output_msg(job: u64, o: Output) -> AgentMessage {
    AgentMessage {
        job,
        msg: Some(agent_message::Msg::Output(o)),
    }
}

impl Retained {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, VecDeque<Output>>> {
        // A panic elsewhere while holding it leaves plain data behind.
        self.chunks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `o` and sends it; false if `out` is closed.
    pub fn send(&self, job: u64, o: Output, out: &UnboundedSender<AgentMessage>) -> bool {
        let mut chunks = self.lock();
        chunks
            .entry((o.rank, o.stream))
            .or_default()
            .push_back(o.clone());
        out.send(output_msg(job, o)).is_ok()
    }

    /// scrun printed every chunk up to each mark: forget them.
    pub fn acked(&self, marks: &[OutputMark]) {
        let mut chunks = self.lock();
        for m in marks {
            if let Some(q) = chunks.get_mut(&(m.rank, m.stream)) {
                while q.front().is_some_and(|o| o.seq <= m.seq) {
                    q.pop_front();
                }
            }
        }
    }

    /// scrun printed every chunk up to each mark (none of a rank and
    /// stream without a mark): forget those, send the rest again, in order.
    /// Returns the number of chunks resent.
    pub fn resend(
        &self,
        job: u64,
        marks: &[OutputMark],
        out: &UnboundedSender<AgentMessage>,
    ) -> usize {
        let mut chunks = self.lock();
        let printed: BTreeMap<Key, u64> =
            marks.iter().map(|m| ((m.rank, m.stream), m.seq)).collect();
        let mut n = 0;
        for (key, q) in chunks.iter_mut() {
            let last = printed.get(key).copied().unwrap_or(0);
            while q.front().is_some_and(|o| o.seq <= last) {
                q.pop_front();
            }
            for o in q.iter() {
                let _ = out.send(output_msg(job, o.clone()));
                n += 1;
            }
        }
        n
    }

    /// Bytes kept.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.lock()
            .values()
            .flat_map(|q| q.iter().map(|o| o.data.len()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    fn chunk(rank: u32, seq: u64) -> Output {
        Output {
            rank,
            stream: 1,
            data: format!("{rank}:{seq}\n").into_bytes(),
            seq,
        }
    }

    fn seqs(rx: &mut tokio::sync::mpsc::UnboundedReceiver<AgentMessage>) -> Vec<(u32, u64)> {
        let mut v = Vec::new();
        while let Ok(m) = rx.try_recv() {
            if let Some(agent_message::Msg::Output(o)) = m.msg {
                v.push((o.rank, o.seq));
            }
        }
        v
    }

    #[test]
    fn what_scrun_lacks_is_sent_again_in_order_and_acknowledged_chunks_are_forgotten() {
        let r = Retained::default();
        let (out, mut rx) = unbounded_channel();
        for seq in 1..=4 {
            assert!(r.send(7, chunk(0, seq), &out));
            assert!(r.send(7, chunk(1, seq), &out));
        }
        assert_eq!(seqs(&mut rx).len(), 8);
        r.acked(&[OutputMark {
            rank: 0,
            stream: 1,
            seq: 2,
        }]);
        assert_eq!(r.bytes(), 6 * 4);
        // scrun printed up to 3 of rank 0, nothing of rank 1.
        let n = r.resend(
            7,
            &[OutputMark {
                rank: 0,
                stream: 1,
                seq: 3,
            }],
            &out,
        );
        assert_eq!(n, 5);
        assert_eq!(seqs(&mut rx), vec![(0, 4), (1, 1), (1, 2), (1, 3), (1, 4)]);
    }
}
