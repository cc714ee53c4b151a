//! scorectl against a fake scored master (a tonic server with canned
//! answers), with real MUNGE authentication (sealed both ways, as the real master is): a munged of the test's own,
//! started in a temporary directory and killed by PID when the test ends.
//! The tests are `#[ignore]`d for a plain `cargo test` because they need
//! munged; `scripts/run-tests` runs them, and without munged they fail.

use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use score_proto::v1::master_server::Master;
use score_proto::v1::*;
use tonic::{Request, Response, Status, Streaming};

const SCORECTL: &str = env!("CARGO_BIN_EXE_scorectl");

// ------------------------------------------------------------------ munged

type Munged = score_auth::testing::TestMunged;

// ------------------------------------------------------------ fake master

#[derive(Debug, Default)]
struct Seen {
    uids: Vec<u32>,
    list_all: Option<bool>,
    cancel: Option<(u64, bool)>,
    drain: Option<(String, String)>,
}

#[derive(Clone)]
struct Fake {
    seen: Arc<Mutex<Seen>>,
}

impl Fake {
    fn auth<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let caller = score_auth::caller(req)?;
        self.seen.lock().unwrap().uids.push(caller.uid);
        Ok(())
    }
}

fn node(name: &str, state: NodeState, jobs: Vec<u64>, reason: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        state: state as i32,
        reason: reason.into(),
        slots: 8,
        jobs,
        last_seen_ms: 1_700_000_000_000,
        address: "10.0.0.1:40000".into(),
        metrics_url: "http://10.0.0.1:7102/metrics".into(),
        boot_id: 7,
    }
}

fn job(id: u64, state: JobState) -> JobInfo {
    JobInfo {
        id,
        name: "a.out".into(),
        uid: 1000,
        gid: 1000,
        user: "alice".into(),
        spec: Some(JobSpec {
            nodes: 2,
            ppn: 4,
            argv: vec!["./a.out".into(), "in put".into()],
            cwd: "/home/alice".into(),
            ..Default::default()
        }),
        state: state as i32,
        nodes: vec!["n1".into(), "n2".into()],
        submit_time_ms: 1_700_000_000_000,
        start_time_ms: 1_700_000_001_000,
        ..Default::default()
    }
}

type Never<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl Master for Fake {
    type RunStream = Never<JobEvent>;
    type AttachStream = Never<MasterMessage>;

    async fn run(
        &self,
        _: Request<Streaming<RunRequest>>,
    ) -> Result<Response<Self::RunStream>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn list_jobs(
        &self,
        req: Request<ListJobsRequest>,
    ) -> Result<Response<ListJobsReply>, Status> {
        self.auth(&req)?;
        let all = req.get_ref().all;
        self.seen.lock().unwrap().list_all = Some(all);
        let mut jobs = vec![job(13, JobState::Running)];
        if all {
            let mut done = job(12, JobState::Failed);
            done.reason = "rank 3 on n2 exited with status 7".into();
            done.end_time_ms = done.start_time_ms + 61_000;
            jobs.push(done);
        }
        Ok(Response::new(ListJobsReply { jobs }))
    }
    async fn show_job(&self, req: Request<ShowJobRequest>) -> Result<Response<JobInfo>, Status> {
        self.auth(&req)?;
        match req.get_ref().job {
            13 => Ok(Response::new(job(13, JobState::Running))),
            n => Err(Status::not_found(format!("no job {n}"))),
        }
    }
    async fn cancel(&self, req: Request<CancelRequest>) -> Result<Response<CancelReply>, Status> {
        self.auth(&req)?;
        let r = req.get_ref();
        self.seen.lock().unwrap().cancel = Some((r.job, r.kill));
        Ok(Response::new(CancelReply {
            job: Some(job(r.job, JobState::Completing)),
        }))
    }
    async fn list_nodes(
        &self,
        req: Request<ListNodesRequest>,
    ) -> Result<Response<ListNodesReply>, Status> {
        self.auth(&req)?;
        Ok(Response::new(ListNodesReply {
            nodes: vec![
                node("n1", NodeState::Up, vec![13], ""),
                node("n2", NodeState::Down, vec![], "no heartbeat for 10000 ms"),
            ],
        }))
    }
    async fn drain(&self, req: Request<NodeRequest>) -> Result<Response<NodeReply>, Status> {
        self.auth(&req)?;
        let r = req.get_ref();
        self.seen.lock().unwrap().drain = Some((r.node.clone(), r.reason.clone()));
        Ok(Response::new(NodeReply {
            node: Some(node(&r.node, NodeState::Drained, vec![], &r.reason)),
        }))
    }
    async fn resume(&self, req: Request<NodeRequest>) -> Result<Response<NodeReply>, Status> {
        self.auth(&req)?;
        Err(Status::permission_denied(
            "only root may resume a node (you are uid 1000)",
        ))
    }
    async fn matrix(&self, req: Request<MatrixRequest>) -> Result<Response<MatrixReply>, Status> {
        self.auth(&req)?;
        let cell = |node: &str, job| MatrixCell {
            node: node.into(),
            job,
        };
        Ok(Response::new(MatrixReply {
            nodes: vec!["n1".into(), "n2".into()],
            rows: vec![
                MatrixRow {
                    slot: 0,
                    cells: vec![cell("n1", 13), cell("n2", 13)],
                },
                MatrixRow {
                    slot: 1,
                    cells: vec![cell("n1", 14), cell("n2", 0)],
                },
            ],
            current: 1,
            running: vec![14],
            quantum_ms: 500,
            preemption: "network".into(),
            stats: Some(SwitchStats {
                switches: 9,
                last_s: 0.0021,
                median_s: 0.002,
                p99_s: 0.004,
                quiesce_median_s: 0.001,
                unanswered: 1,
                silent: 1,
            }),
        }))
    }
    async fn attach(
        &self,
        _: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        Err(Status::unimplemented(""))
    }
}

struct Cluster {
    munged: Munged,
    config: PathBuf,
    seen: Arc<Mutex<Seen>>,
}

async fn cluster() -> Cluster {
    let munged = Munged::start("scorectl-test");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let fake = Fake { seen: seen.clone() };
    let config = munged.serve_master(fake).await;
    Cluster {
        munged,
        config,
        seen,
    }
}

impl Cluster {
    /// Runs scorectl with `--config` (not $SCORE_CONFIG, to test the option).
    async fn scorectl(&self, args: &[&str]) -> (i32, String, String) {
        let o = tokio::process::Command::new(SCORECTL)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("SCORE_CONFIG")
            .env_remove("SCORE_MASTER")
            .current_dir(self.munged.dir())
            .stdin(Stdio::null())
            .output();
        let o = tokio::time::timeout(Duration::from_secs(30), o)
            .await
            .unwrap()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
}

// ------------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn nodes_as_json_and_table() {
    let c = cluster().await;
    let (code, out, err) = c.scorectl(&["nodes", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let nodes = v.as_array().expect("an array");
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0]["name"], "n1");
    assert_eq!(nodes[0]["state"], "up");
    assert_eq!(nodes[0]["jobs"], serde_json::json!([13]));
    assert_eq!(nodes[1]["state"], "down");
    for key in [
        "name",
        "state",
        "reason",
        "slots",
        "jobs",
        "last_seen_ms",
        "address",
        "metrics_url",
    ] {
        assert!(nodes[1].get(key).is_some(), "{key} missing in {out}");
    }

    let (code, out, _) = c.scorectl(&["nodes"]).await;
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "NODE  STATE  SLOTS  JOBS  REASON\n\
         n1    up         8  13\n\
         n2    down       8  -     no heartbeat for 10000 ms\n"
    );
    let me = unsafe { libc::getuid() };
    assert!(c.seen.lock().unwrap().uids.iter().all(|&u| u == me));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn matrix_as_table_and_json() {
    let c = cluster().await;
    let (code, out, err) = c.scorectl(&["matrix"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        concat!(
            "time sharing: quantum 500 ms, network preemption; * marks the active slot\n",
            "SLOT  n1  n2\n",
            "   0  13  13\n",
            "  *1  14   -\n",
            "running now: 14\n",
            "switches: 9; last 2.1 ms, median 2.0 ms, p99 4.0 ms; quiesce median 1.0 ms; ",
            "frozen without answering: 1 (1 with PM)\n"
        )
    );
    let (code, out, _) = c.scorectl(&["matrix", "--json"]).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rows"][1]["jobs"], serde_json::json!([14, null]));
    assert_eq!(v["current"], 1);
    assert_eq!(v["switches"], 9);
    assert_eq!(v["unanswered"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn jobs_and_show() {
    let c = cluster().await;
    let (code, out, err) = c.scorectl(&["jobs", "--all"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(c.seen.lock().unwrap().list_all, Some(true));
    // The running job started in 2023: its ELAPSED is days long and widens
    // the column, so compare words.
    let words: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        words[0],
        ["JOBID", "NAME", "USER", "STATE", "NODES", "ELAPSED", "NODELIST", "REASON"]
    );
    assert_eq!(
        words[1].join(" "),
        "12 a.out alice failed 2x4 1:01 n1,n2 rank 3 on n2 exited with status 7"
    );
    assert_eq!(words[2][..5], ["13", "a.out", "alice", "running", "2x4"]);
    assert!(words[2][5].contains('-'), "{out}");
    let header = out.lines().next().unwrap();
    let row = out.lines().nth(1).unwrap();
    assert_eq!(
        header.find("REASON"),
        row.find("rank 3"),
        "columns align:\n{out}"
    );

    let (code, out, _) = c.scorectl(&["--json", "jobs"]).await;
    assert_eq!(code, 0);
    assert_eq!(c.seen.lock().unwrap().list_all, Some(false));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["id"], 13);
    assert_eq!(v[0]["state"], "running");
    assert_eq!(v[0]["nodes_requested"], 2);
    assert_eq!(v[0]["ppn"], 4);
    assert_eq!(v[0]["argv"], serde_json::json!(["./a.out", "in put"]));

    let (code, out, _) = c.scorectl(&["show", "13"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("\ncommand:     ./a.out 'in put'\n"), "{out}");
    assert!(out.contains("\nallocation:  n1,n2\n"), "{out}");

    let (code, out, err) = c.scorectl(&["show", "99"]).await;
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(err, "scorectl: error: no job 99\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn cancel_drain_resume() {
    let c = cluster().await;
    let (code, out, err) = c.scorectl(&["cancel", "13", "--kill"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "job 13: killing (state: completing)\n");
    assert_eq!(c.seen.lock().unwrap().cancel, Some((13, true)));

    let (code, out, _) = c.scorectl(&["drain", "n2", "--reason", "bad DIMM"]).await;
    assert_eq!(code, 0);
    assert_eq!(out, "node n2: drained (bad DIMM)\n");
    assert_eq!(
        c.seen.lock().unwrap().drain,
        Some(("n2".to_string(), "bad DIMM".to_string()))
    );
    let (code, out, _) = c.scorectl(&["drain", "n2", "--json"]).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["state"], "drained");

    let (code, _, err) = c.scorectl(&["resume", "n2"]).await;
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "scorectl: error: only root may resume a node (you are uid 1000)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn usage_errors_exit_2_and_no_master_exits_1() {
    let c = cluster().await;
    let (code, _, err) = c.scorectl(&["show", "twelve"]).await;
    assert_eq!(code, 2);
    assert!(
        err.starts_with("scorectl: error: invalid value 'twelve'"),
        "{err}"
    );
    let (code, _, err) = c.scorectl(&["--master", "127.0.0.1:1", "nodes"]).await;
    assert_eq!(code, 1);
    assert!(
        err.starts_with("scorectl: error: cannot reach the scored master at http://127.0.0.1:1"),
        "{err}"
    );
}
