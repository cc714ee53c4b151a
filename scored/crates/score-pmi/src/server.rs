//! One job's PMI-1 service on one node: the answers to its ranks' requests,
//! and the barrier that gathers what every node's ranks put.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use crate::kvs::{decode_contributions, encode_contribution};
use crate::wire::{escape, parse, Request};

/// The longest request line taken; a longer one ends the connection.
pub const MAX_LINE: usize = 64 * 1024;
/// The limits announced by `get_maxes` (those of MPICH's hydra).
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;
/// The most a job's ranks may put, in key and value bytes, on one node
/// between two barriers and in the whole table: a rank that puts without
/// end gets errors, not the agent's memory.  MPICH puts a few hundred
/// bytes per rank.  A node's puts travel to the master as one message of
/// the agent's stream, whose gRPC limit is 4 MiB: well below it.
pub const PENDING_MAX_BYTES: usize = 1 << 20;
pub const KVS_MAX_BYTES: usize = 64 << 20;

/// What the job looks like: its ranks are `node * ppn + local`, as scored
/// places them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobShape {
    /// The key-value space's name (the job's PMIx namespace).
    pub kvsname: String,
    pub nodes: u32,
    pub ppn: u32,
    /// This node's index in the job's node list.
    pub node: u32,
}

impl JobShape {
    /// This node's ranks.
    pub fn local_ranks(&self) -> Range<u32> {
        self.node * self.ppn..(self.node + 1) * self.ppn
    }
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Send this line (with its `\n`) to the rank.
    Reply(String),
    /// Nothing to send: the rank waits in the barrier, or sent part of a
    /// multi-line request.
    Nothing,
    /// The last of this node's ranks entered the barrier: carry this
    /// contribution through the job's fence, then call
    /// [`JobPmi::fence_complete`], which answers the waiting ranks.
    Fence(Vec<u8>),
    /// The rank aborts the job (no reply).
    Abort { status: i32, message: String },
}

/// One job's PMI-1 state on one node.
#[derive(Debug)]
pub struct JobPmi {
    shape: JobShape,
    /// What every rank can get: the job's attributes and every pair put
    /// before the last barrier, on any node.
    kvs: HashMap<String, String>,
    /// What this node's ranks put since the last barrier.
    pending: Vec<(String, String)>,
    /// Key and value bytes in `pending` and in `kvs`.
    pending_bytes: usize,
    kvs_bytes: usize,
    in_barrier: BTreeSet<u32>,
    /// The contribution is out; the fence has not completed.
    fencing: bool,
    /// Ranks in the middle of a multi-line (`mcmd=`) request.
    in_mcmd: BTreeSet<u32>,
}

/// A reply line: `cmd=CMD rc=RC` and the attributes, values escaped.
fn reply_line(cmd: &str, rc: i32, attrs: &[(&str, &str)]) -> String {
    let mut line = format!("cmd={cmd} rc={rc}");
    for (k, v) in attrs {
        line.push_str(&format!(" {k}={}", escape(v)));
    }
    line.push('\n');
    line
}

/// A refusal line: rc -1 and why.
fn refuse_line(cmd: &str, why: &str) -> String {
    // A message without spaces reads better in MPICH's error output than
    // an escaped one.
    reply_line(cmd, -1, &[("msg", &why.replace(' ', "_"))])
}

fn reply(cmd: &str, rc: i32, attrs: &[(&str, &str)]) -> Outcome {
    Outcome::Reply(reply_line(cmd, rc, attrs))
}

fn refuse(cmd: &str, why: &str) -> Outcome {
    Outcome::Reply(refuse_line(cmd, why))
}

const NO_NAME_SERVICE: &str = "name publishing is not served by scored";

impl JobPmi {
    pub fn new(shape: JobShape) -> JobPmi {
        let mut kvs = HashMap::new();
        // MPICH's node map (hydra's format): `nodes` nodes from node 0,
        // `ppn` ranks each, in blocks.
        kvs.insert(
            "PMI_process_mapping".to_string(),
            format!("(vector,(0,{},{}))", shape.nodes, shape.ppn),
        );
        JobPmi {
            shape,
            kvs,
            pending: Vec::new(),
            pending_bytes: 0,
            kvs_bytes: 0,
            in_barrier: BTreeSet::new(),
            fencing: false,
            in_mcmd: BTreeSet::new(),
        }
    }

    fn size(&self) -> u32 {
        self.shape.nodes * self.shape.ppn
    }

    /// Rank `rank` (one of this node's) sent `line`.
    pub fn request(&mut self, rank: u32, line: &[u8]) -> Outcome {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        // spawn is the one multi-line request (mcmd=... up to endcmd).
        if self.in_mcmd.contains(&rank) {
            if line == b"endcmd" {
                self.in_mcmd.remove(&rank);
                return refuse("spawn_result", "scored does not spawn processes into a job");
            }
            return Outcome::Nothing;
        }
        if line.starts_with(b"mcmd=") {
            self.in_mcmd.insert(rank);
            return Outcome::Nothing;
        }
        match parse(line) {
            Ok(req) => self.command(rank, &req),
            Err(e) => refuse("error", &e.to_string()),
        }
    }

    fn command(&mut self, rank: u32, req: &Request) -> Outcome {
        let size = self.size().to_string();
        match req.cmd.as_str() {
            "init" => match req.get("pmi_version") {
                Some("1") => reply(
                    "response_to_init",
                    0,
                    &[("pmi_version", "1"), ("pmi_subversion", "1")],
                ),
                v => refuse(
                    "response_to_init",
                    &format!(
                        "PMI version {} is not served here: PMI-1 only",
                        v.unwrap_or("?")
                    ),
                ),
            },
            "get_maxes" => reply(
                "maxes",
                0,
                &[
                    ("kvsname_max", &KVSNAME_MAX.to_string()),
                    ("keylen_max", &KEYLEN_MAX.to_string()),
                    ("vallen_max", &VALLEN_MAX.to_string()),
                ],
            ),
            "get_appnum" => reply("appnum", 0, &[("appnum", "0")]),
            "get_universe_size" => reply("universe_size", 0, &[("size", &size)]),
            "get_my_kvsname" => reply("my_kvsname", 0, &[("kvsname", &self.shape.kvsname)]),
            "put" => self.put(req),
            "get" => self.get(req),
            "barrier_in" => self.barrier_in(rank),
            "finalize" => reply("finalize_ack", 0, &[]),
            "abort" => Outcome::Abort {
                status: req
                    .get("exitcode")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1),
                message: req.get("message").unwrap_or("PMI_Abort").to_string(),
            },
            "publish_name" => refuse("publish_result", NO_NAME_SERVICE),
            "unpublish_name" => refuse("unpublish_result", NO_NAME_SERVICE),
            "lookup_name" => refuse("lookup_result", NO_NAME_SERVICE),
            other => refuse("error", &format!("unknown command {other}")),
        }
    }

    fn kvsname_ok(&self, req: &Request) -> bool {
        !matches!(req.get("kvsname"), Some(k) if k != self.shape.kvsname)
    }

    fn put(&mut self, req: &Request) -> Outcome {
        if !self.kvsname_ok(req) {
            return refuse("put_result", "no such key-value space");
        }
        let (Some(key), Some(value)) = (req.get("key"), req.get("value")) else {
            return refuse("put_result", "put needs a key and a value");
        };
        if key.len() > KEYLEN_MAX || value.len() > VALLEN_MAX {
            return refuse(
                "put_result",
                &format!("key or value longer than {KEYLEN_MAX} or {VALLEN_MAX} bytes"),
            );
        }
        let bytes = key.len() + value.len();
        if self.pending_bytes + bytes > PENDING_MAX_BYTES {
            return refuse(
                "put_result",
                &format!(
                    "more than {PENDING_MAX_BYTES} bytes put on this node since the last barrier"
                ),
            );
        }
        self.pending_bytes += bytes;
        self.pending.push((key.to_string(), value.to_string()));
        reply("put_result", 0, &[])
    }

    fn get(&self, req: &Request) -> Outcome {
        if !self.kvsname_ok(req) {
            return refuse("get_result", "no such key-value space");
        }
        let Some(key) = req.get("key") else {
            return refuse("get_result", "get needs a key");
        };
        let found = self.kvs.get(key).map(String::as_str).or_else(|| {
            // This node's own puts are visible before the barrier too.
            self.pending
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        });
        match found {
            Some(v) => reply("get_result", 0, &[("value", v), ("found", "TRUE")]),
            None => reply(
                "get_result",
                -1,
                &[("found", "FALSE"), ("msg", &format!("key_{key}_not_found"))],
            ),
        }
    }

    fn barrier_in(&mut self, rank: u32) -> Outcome {
        if !self.in_barrier.insert(rank) {
            return refuse("barrier_out", "this rank is in the barrier already");
        }
        if self.fencing || self.in_barrier.len() < self.shape.local_ranks().len() {
            return Outcome::Nothing;
        }
        self.fencing = true;
        self.pending_bytes = 0;
        let pairs = std::mem::take(&mut self.pending);
        Outcome::Fence(encode_contribution(
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ))
    }

    /// The job's fence completed with every node's contribution (`Ok`), or
    /// failed: the replies to the ranks that waited in the barrier.
    pub fn fence_complete(&mut self, result: Result<&[u8], String>) -> Vec<(u32, String)> {
        self.fencing = false;
        let line = match result.and_then(|d| decode_contributions(d).map_err(|e| e.to_string())) {
            Ok(pairs) => {
                let bytes: usize = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
                if self.kvs_bytes + bytes > KVS_MAX_BYTES {
                    refuse_line(
                        "barrier_out",
                        &format!("the job's key-value space would pass {KVS_MAX_BYTES} bytes"),
                    )
                } else {
                    self.kvs_bytes += bytes;
                    self.kvs.extend(pairs);
                    reply_line("barrier_out", 0, &[])
                }
            }
            Err(e) => refuse_line("barrier_out", &format!("the job's barrier failed: {e}")),
        };
        std::mem::take(&mut self.in_barrier)
            .into_iter()
            .map(|r| (r, line.clone()))
            .collect()
    }

    /// Whether a fence is out for this node's barrier.
    pub fn fencing(&self) -> bool {
        self.fencing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(index: u32, ppn: u32) -> JobPmi {
        JobPmi::new(JobShape {
            kvsname: "score.7".into(),
            nodes: 2,
            ppn,
            node: index,
        })
    }

    fn line(o: Outcome) -> String {
        match o {
            Outcome::Reply(l) => l,
            o => panic!("not a reply: {o:?}"),
        }
    }

    #[test]
    fn mpichs_start_up_sequence_is_answered() {
        let mut p = node(0, 2);
        let exchanges: [(u32, &[u8], &str); 7] = [
            (
                0,
                b"cmd=init pmi_version=1 pmi_subversion=1\n",
                "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n",
            ),
            (
                0,
                b"cmd=get_maxes\n",
                "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n",
            ),
            (0, b"cmd=get_appnum\n", "cmd=appnum rc=0 appnum=0\n"),
            (
                0,
                b"cmd=get_universe_size\n",
                "cmd=universe_size rc=0 size=4\n",
            ),
            (
                0,
                b"cmd=get_my_kvsname\n",
                "cmd=my_kvsname rc=0 kvsname=score.7\n",
            ),
            (
                0,
                b"cmd=get kvsname=score.7 key=PMI_process_mapping\n",
                "cmd=get_result rc=0 value=(vector,(0,2,2)) found=TRUE\n",
            ),
            (1, b"cmd=finalize\n", "cmd=finalize_ack rc=0\n"),
        ];
        for (rank, request, want) in exchanges {
            assert_eq!(line(p.request(rank, request)), want);
        }
    }

    #[test]
    fn puts_reach_every_node_through_the_barrier() {
        let (mut a, mut b) = (node(0, 2), node(1, 2));
        for rank in 0..4 {
            let p = if rank < 2 { &mut a } else { &mut b };
            let put = format!("cmd=put kvsname=score.7 key=bc-{rank} value=addr{rank}\n");
            assert_eq!(
                line(p.request(rank, put.as_bytes())),
                "cmd=put_result rc=0\n"
            );
        }
        // Not yet visible on the other node.
        assert!(line(b.request(2, b"cmd=get kvsname=score.7 key=bc-0\n")).contains("rc=-1"));
        assert_eq!(a.request(0, b"cmd=barrier_in\n"), Outcome::Nothing);
        let Outcome::Fence(from_a) = a.request(1, b"cmd=barrier_in\n") else {
            panic!("the last local rank in the barrier starts the fence")
        };
        assert!(a.fencing());
        assert_eq!(b.request(3, b"cmd=barrier_in\n"), Outcome::Nothing);
        let Outcome::Fence(from_b) = b.request(2, b"cmd=barrier_in\n") else {
            panic!("the last local rank in the barrier starts the fence")
        };
        let all = [from_a, from_b].concat();
        for p in [&mut a, &mut b] {
            let replies = p.fence_complete(Ok(&all));
            assert_eq!(replies.len(), 2);
            assert!(replies.iter().all(|(_, l)| l == "cmd=barrier_out rc=0\n"));
            for rank in 0..4 {
                let get = format!("cmd=get kvsname=score.7 key=bc-{rank}\n");
                assert_eq!(
                    line(p.request(0, get.as_bytes())),
                    format!("cmd=get_result rc=0 value=addr{rank} found=TRUE\n")
                );
            }
        }
        // The next barrier carries only what was put since.
        let Outcome::Fence(empty) = ({
            a.request(0, b"cmd=barrier_in\n");
            a.request(1, b"cmd=barrier_in\n")
        }) else {
            panic!("second barrier")
        };
        assert!(empty.is_empty());
    }

    #[test]
    fn a_rank_that_puts_without_end_gets_errors() {
        let mut p = node(0, 1);
        let value = "v".repeat(VALLEN_MAX);
        let mut refused = 0;
        for i in 0..PENDING_MAX_BYTES / VALLEN_MAX + 10 {
            let put = format!("cmd=put key=k{i} value={value}\n");
            if line(p.request(0, put.as_bytes())).contains("rc=-1") {
                refused += 1;
            }
        }
        let tries = PENDING_MAX_BYTES / VALLEN_MAX + 10;
        let accepted = tries - refused;
        assert!(refused >= 10, "{refused} puts refused");
        assert!(
            accepted * VALLEN_MAX <= PENDING_MAX_BYTES,
            "{accepted} puts accepted"
        );
        // The barrier takes the space back.
        let Outcome::Fence(data) = p.request(0, b"cmd=barrier_in\n") else {
            panic!("fence")
        };
        assert!(data.len() <= PENDING_MAX_BYTES + 8 * (PENDING_MAX_BYTES / VALLEN_MAX));
        p.fence_complete(Ok(&data));
        assert_eq!(
            line(p.request(0, b"cmd=put key=again value=1\n")),
            "cmd=put_result rc=0\n"
        );
    }

    #[test]
    fn a_failed_fence_fails_the_barrier_for_every_waiting_rank() {
        let mut p = node(0, 2);
        p.request(0, b"cmd=barrier_in\n");
        p.request(1, b"cmd=barrier_in\n");
        let replies = p.fence_complete(Err("a node died".into()));
        assert_eq!(replies.len(), 2);
        assert!(replies[0]
            .1
            .starts_with("cmd=barrier_out rc=-1 msg=the_job's_barrier_failed"));
        p.request(0, b"cmd=barrier_in\n");
        p.request(1, b"cmd=barrier_in\n");
        let replies = p.fence_complete(Ok(b"\x05\x00"));
        assert!(replies[0].1.contains("rc=-1"), "{replies:?}");
    }

    #[test]
    fn bad_requests_get_an_error_reply_and_change_nothing() {
        let mut p = node(0, 1);
        assert!(line(p.request(0, b"000032cmd=init;pmi_version=2;\n"))
            .starts_with("cmd=error rc=-1 msg=a_request_starts_with_cmd="));
        assert!(line(p.request(0, b"cmd=init pmi_version=2\n"))
            .starts_with("cmd=response_to_init rc=-1"));
        assert!(line(p.request(0, b"cmd=frobnicate\n")).contains("unknown_command_frobnicate"));
        assert!(line(p.request(0, b"cmd=put kvsname=other key=k value=v\n")).contains("rc=-1"));
        assert!(line(p.request(0, b"cmd=put kvsname=score.7 key=k\n")).contains("rc=-1"));
        let long = format!("cmd=put key=k value={}\n", "x".repeat(VALLEN_MAX + 1));
        assert!(line(p.request(0, long.as_bytes())).contains("rc=-1"));
        assert!(line(p.request(0, b"cmd=lookup_name service=s\n"))
            .starts_with("cmd=lookup_result rc=-1"));
        // A spawn (multi-line) is read to its end and refused once.
        assert_eq!(p.request(0, b"mcmd=spawn\n"), Outcome::Nothing);
        assert_eq!(p.request(0, b"nprocs=2\n"), Outcome::Nothing);
        assert!(line(p.request(0, b"endcmd\n")).starts_with("cmd=spawn_result rc=-1"));
        // Entering the barrier twice.
        let mut q = node(0, 2);
        assert_eq!(q.request(0, b"cmd=barrier_in\n"), Outcome::Nothing);
        assert!(line(q.request(0, b"cmd=barrier_in\n")).starts_with("cmd=barrier_out rc=-1"));
        assert_eq!(
            p.request(0, b"cmd=abort exitcode=3\n"),
            Outcome::Abort {
                status: 3,
                message: "PMI_Abort".into()
            }
        );
    }
}
