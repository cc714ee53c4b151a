//! scrun against a fake scored master: a tonic server whose `Run` plays a
//! scenario chosen by the job's argv[0], with real MUNGE authentication (sealed both ways, as the real master is)
//! (a munged of the test's own, started in a temporary directory and killed
//! by PID when the test ends).  The tests are `#[ignore]`d for a plain
//! `cargo test` because they need munged; `scripts/run-tests` runs them, and
//! without munged they fail.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use score_proto::v1::master_server::Master;
use score_proto::v1::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

const SCRUN: &str = env!("CARGO_BIN_EXE_scrun");

// ------------------------------------------------------------------ munged

type Munged = score_auth::testing::TestMunged;

// ------------------------------------------------------------ fake master

/// What the fake master saw.
#[derive(Debug, Default)]
struct Seen {
    uid: Option<u32>,
    spec: Option<JobSpec>,
    stdin: Vec<u8>,
    stdin_eof: bool,
    cancels: Vec<bool>,
    /// stdin-credit: the bytes that came before the second grant.
    stdin_within_first_credit: Option<usize>,
    /// restart: what scrun said it had printed when it re-attached.
    reattached: Option<Reattach>,
}

#[derive(Clone)]
struct Fake {
    seen: Arc<Mutex<Seen>>,
}

type EventStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<JobEvent, Status>> + Send>>;

fn info(state: JobState, reason: &str, nodes: &[&str], exit_status: i32) -> JobInfo {
    JobInfo {
        id: 12,
        name: "prog".into(),
        state: state as i32,
        reason: reason.into(),
        nodes: nodes.iter().map(|s| s.to_string()).collect(),
        exit_status,
        ..Default::default()
    }
}

fn ev(e: job_event::Event) -> Result<JobEvent, Status> {
    Ok(JobEvent { event: Some(e) })
}

/// Chunk `seq` of rank `rank`'s stdout.
fn numbered(rank: u32, seq: u64, data: &str) -> Result<JobEvent, Status> {
    ev(job_event::Event::Output(Output {
        rank,
        stream: score_proto::v1::Stream::Stdout as i32,
        data: data.as_bytes().to_vec(),
        seq,
    }))
}

fn out(rank: u32, stream: score_proto::v1::Stream, data: &str) -> Result<JobEvent, Status> {
    ev(job_event::Event::Output(Output {
        rank,
        stream: stream as i32,
        data: data.as_bytes().to_vec(),
        ..Default::default()
    }))
}

use job_event::Event::{Accepted, Finished, State, StdinCredit};

/// The stdin-credit scenario's first grant: less than scrun has to send.
const STDIN_FIRST_CREDIT: usize = 100 * 1024;
use score_proto::v1::Stream::{Stderr as ERR, Stdout as OUT};

#[tonic::async_trait]
impl Master for Fake {
    type RunStream = EventStream;
    type AttachStream =
        Pin<Box<dyn tokio_stream::Stream<Item = Result<MasterMessage, Status>> + Send>>;

    async fn run(
        &self,
        request: Request<Streaming<RunRequest>>,
    ) -> Result<Response<EventStream>, Status> {
        let caller = score_auth::caller(&request)?;
        self.seen.lock().unwrap().uid = Some(caller.uid);
        let mut inbound = request.into_inner();
        let spec = match inbound.message().await? {
            Some(RunRequest {
                msg: Some(run_request::Msg::Submit(spec)),
            }) => spec,
            Some(RunRequest {
                msg: Some(run_request::Msg::Reattach(r)),
            }) => {
                // The second act of "restart": what scrun lacks, once more
                // what it has, and one chunk out of turn.  Other scenarios
                // know nothing of re-attaching.
                let mut seen = self.seen.lock().unwrap();
                if seen.spec.as_ref().is_none_or(|s| s.argv[0] != "restart") {
                    return Err(Status::invalid_argument("expected submit, got a Reattach"));
                }
                seen.reattached = Some(r);
                drop(seen);
                let nodes = ["n1", "n2"];
                let events = vec![
                    ev(Accepted(info(JobState::Running, "", &nodes, 0))),
                    numbered(0, 2, "two\n"),
                    numbered(0, 3, "three\n"),
                    numbered(1, 3, "early\n"),
                    numbered(1, 2, "y\n"),
                    ev(Finished(info(
                        JobState::Failed,
                        "rank 1 exited with status 5",
                        &nodes,
                        5,
                    ))),
                ];
                return Ok(Response::new(Box::pin(tokio_stream::iter(events))));
            }
            other => {
                return Err(Status::invalid_argument(format!(
                    "expected submit, got {other:?}"
                )))
            }
        };
        self.seen.lock().unwrap().spec = Some(spec.clone());
        let scenario = spec.argv[0].clone();
        if scenario == "refuse" {
            return Err(Status::permission_denied(
                "jobs of uid 0 are refused on this cluster",
            ));
        }
        let (tx, rx) = mpsc::channel(64);
        let seen = self.seen.clone();
        tokio::spawn(async move {
            let send = |e| {
                let tx = tx.clone();
                async move { tx.send(e).await.is_ok() }
            };
            send(ev(Accepted(info(JobState::Pending, "", &[], 0)))).await;
            // Flow control: scrun sends stdin only within its credit.
            let first_credit = if scenario == "stdin-credit" {
                STDIN_FIRST_CREDIT
            } else {
                1 << 20
            };
            send(ev(StdinCredit(Credit {
                bytes: first_credit as u64,
            })))
            .await;
            send(ev(State(info(
                JobState::Pending,
                "waiting for 4 nodes",
                &[],
                0,
            ))))
            .await;
            let nodes = ["n1", "n2", "n3", "n4"];
            send(ev(State(info(JobState::Running, "", &nodes, 0)))).await;
            match scenario.as_str() {
                "exit3" => {
                    for e in [
                        out(0, OUT, "hel"),
                        out(1, OUT, "world\n"),
                        out(0, OUT, "lo\n"),
                        out(3, ERR, "oops\n"),
                        out(1, OUT, "tail"),
                    ] {
                        send(e).await;
                    }
                    let reason = "rank 3 on n2 exited with status 3";
                    send(ev(Finished(info(JobState::Failed, reason, &nodes, 3)))).await;
                }
                "echo-stdin" | "cancel" => loop {
                    let msg = match inbound.message().await {
                        Ok(Some(m)) => m.msg,
                        _ => return,
                    };
                    match msg {
                        Some(run_request::Msg::Stdin(c)) => {
                            {
                                let mut s = seen.lock().unwrap();
                                s.stdin.extend_from_slice(&c.data);
                                s.stdin_eof |= c.eof;
                            }
                            if scenario == "echo-stdin" {
                                send(out(0, OUT, &String::from_utf8_lossy(&c.data))).await;
                                if c.eof {
                                    send(ev(Finished(info(JobState::Completed, "", &nodes, 0))))
                                        .await;
                                    return;
                                }
                            } else if c.eof {
                                // Ready for the test's Ctrl-C.
                                send(out(0, OUT, "ready\n")).await;
                            }
                        }
                        Some(run_request::Msg::Cancel(c)) => {
                            seen.lock().unwrap().cancels.push(c.kill);
                            send(out(0, OUT, &format!("cancel kill={}\n", c.kill))).await;
                            if c.kill {
                                let why = "cancelled by user";
                                send(ev(Finished(info(JobState::Cancelled, why, &nodes, 130))))
                                    .await;
                                return;
                            }
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                },
                "stdin-credit" => {
                    // Take what comes until scrun is silent: no more than the
                    // first credit; then grant the rest and take it all.
                    let mut n = 0;
                    let mut granted = false;
                    loop {
                        let wait = Duration::from_millis(if granted { 30_000 } else { 500 });
                        let msg = match tokio::time::timeout(wait, inbound.message()).await {
                            Ok(Ok(Some(m))) => m.msg,
                            Ok(_) => return,
                            Err(_) if !granted => {
                                seen.lock().unwrap().stdin_within_first_credit = Some(n);
                                granted = true;
                                send(ev(StdinCredit(Credit { bytes: 1 << 30 }))).await;
                                continue;
                            }
                            Err(_) => return,
                        };
                        if let Some(run_request::Msg::Stdin(c)) = msg {
                            n += c.data.len();
                            seen.lock().unwrap().stdin.extend_from_slice(&c.data);
                            if c.eof {
                                send(out(0, OUT, &format!("{n} bytes\n"))).await;
                                send(ev(Finished(info(JobState::Completed, "", &nodes, 0)))).await;
                                return;
                            }
                        }
                    }
                }
                "drop" => {
                    send(out(0, OUT, "bye\n")).await;
                    send(Err(Status::unavailable("master shutting down"))).await;
                }
                "restart" => {
                    for e in [
                        numbered(0, 1, "one\n"),
                        numbered(0, 2, "two\n"),
                        numbered(1, 1, "x\n"),
                    ] {
                        send(e).await;
                    }
                    send(Err(Status::unavailable("master restarting"))).await;
                }
                _ => {
                    send(ev(Finished(info(JobState::Completed, "", &nodes, 0)))).await;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_jobs(
        &self,
        _: Request<ListJobsRequest>,
    ) -> Result<Response<ListJobsReply>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn show_job(&self, _: Request<ShowJobRequest>) -> Result<Response<JobInfo>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn cancel(&self, _: Request<CancelRequest>) -> Result<Response<CancelReply>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn list_nodes(
        &self,
        _: Request<ListNodesRequest>,
    ) -> Result<Response<ListNodesReply>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn drain(&self, _: Request<NodeRequest>) -> Result<Response<NodeReply>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn resume(&self, _: Request<NodeRequest>) -> Result<Response<NodeReply>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn matrix(&self, _: Request<MatrixRequest>) -> Result<Response<MatrixReply>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn attach(
        &self,
        _: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        Err(Status::unimplemented(""))
    }
}

/// A munged, a fake master and a configuration file pointing at both.
struct Cluster {
    munged: Munged,
    config: PathBuf,
    seen: Arc<Mutex<Seen>>,
}

async fn cluster() -> Cluster {
    let munged = Munged::start("scrun-test");
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
    fn scrun(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(SCRUN);
        c.args(args)
            .env("SCORE_CONFIG", &self.config)
            .env_remove("SCORE_MASTER")
            .current_dir(self.munged.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }
}

async fn output(mut c: tokio::process::Command) -> (i32, String, String) {
    let o = tokio::time::timeout(Duration::from_secs(30), c.output())
        .await
        .expect("scrun did not finish in 30 s")
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

// ------------------------------------------------------------------ tests

async fn next(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("no output from scrun in 30 s")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn output_exit_status_and_reason() {
    let c = cluster().await;
    let (code, stdout, stderr) = output(c.scrun(&["-nodes=4x2", "exit3", "--nodes", "9"])).await;
    assert_eq!(code, 3, "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stdout, "helworld\nlo\ntail");
    assert_eq!(
        stderr,
        "oops\nscrun: job 12 failed: rank 3 on n2 exited with status 3\n"
    );

    let seen = c.seen.lock().unwrap();
    assert_eq!(seen.uid, Some(unsafe { libc::getuid() }));
    let spec = seen.spec.as_ref().unwrap();
    assert_eq!((spec.nodes, spec.ppn), (4, 2));
    assert_eq!(spec.argv, ["exit3", "--nodes", "9"]);
    assert_eq!(Path::new(&spec.cwd), c.munged.dir());
    assert_eq!(
        spec.env.get("SCORE_CONFIG").map(PathBuf::from),
        Some(c.config.clone())
    );
    assert!(!spec.stdin_open || seen.stdin_eof || seen.stdin.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn label_verbose_and_options() {
    let c = cluster().await;
    let (code, stdout, stderr) = output(c.scrun(&[
        "-l",
        "-v",
        "--nodes",
        "4",
        "--ppn",
        "2",
        "--time",
        "1:30",
        "--env",
        "FOO=bar",
        "--name",
        "job-x",
        "--no-stdin",
        "exit3",
    ]))
    .await;
    assert_eq!(code, 3, "stderr: {stderr}");
    // Whole lines, each with its rank; the partial "tail" comes at the end.
    assert_eq!(stdout, "1: world\n0: hello\n1: tail\n");
    assert_eq!(
        stderr,
        "scrun: job 12 submitted\n\
         scrun: job 12 queued (waiting for 4 nodes)\n\
         scrun: job 12 running on n1,n2,n3,n4\n\
         3: oops\n\
         scrun: job 12 failed: rank 3 on n2 exited with status 3\n"
    );
    let seen = c.seen.lock().unwrap();
    let spec = seen.spec.as_ref().unwrap();
    assert_eq!((spec.nodes, spec.ppn), (4, 2));
    assert_eq!(spec.time_limit_ms, 90_000);
    assert_eq!(spec.env.get("FOO").map(String::as_str), Some("bar"));
    assert_eq!(spec.name, "job-x");
    assert!(!spec.stdin_open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn stdin_goes_to_the_job() {
    let c = cluster().await;
    let mut cmd = c.scrun(&["echo-stdin"]);
    cmd.stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"line 1\nline 2\n").await.unwrap();
    drop(stdin);
    let o = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(stdout, "line 1\nline 2\n");
    let seen = c.seen.lock().unwrap();
    assert!(seen.spec.as_ref().unwrap().stdin_open);
    assert_eq!(seen.stdin, b"line 1\nline 2\n");
    assert!(seen.stdin_eof);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn stdin_waits_for_the_masters_credit() {
    let c = cluster().await;
    let mut cmd = c.scrun(&["stdin-credit"]);
    cmd.stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let writer = {
        let data = data.clone();
        tokio::spawn(async move {
            stdin.write_all(&data).await.unwrap();
        })
    };
    let o = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    writer.await.unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1000000 bytes\n");
    let seen = c.seen.lock().unwrap();
    let first = seen.stdin_within_first_credit.unwrap();
    assert!(
        first > 0 && first <= STDIN_FIRST_CREDIT,
        "{first} bytes sent on a credit of {STDIN_FIRST_CREDIT}"
    );
    assert!(seen.stdin == data, "every byte, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn ctrl_c_cancels_then_kills() {
    let c = cluster().await;
    let mut child = c.scrun(&["cancel"]).spawn().unwrap();
    let pid = child.id().unwrap() as i32;
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(next(&mut stdout).await.as_deref(), Some("ready"));
    unsafe { libc::kill(pid, libc::SIGINT) };
    assert_eq!(
        next(&mut stdout).await.as_deref(),
        Some("cancel kill=false")
    );
    unsafe { libc::kill(pid, libc::SIGINT) };
    assert_eq!(next(&mut stdout).await.as_deref(), Some("cancel kill=true"));
    assert_eq!(next(&mut stdout).await, None);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert_eq!(
        stderr,
        "scrun: cancelling job 12 (press Ctrl-C again to kill it)\n\
         scrun: killing job 12 (press Ctrl-C again to stop waiting for it)\n\
         scrun: job 12 cancelled: cancelled by user\n"
    );
    assert_eq!(c.seen.lock().unwrap().cancels, [false, true]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn after_a_restart_scrun_reattaches_and_prints_each_chunk_once_in_order() {
    let c = cluster().await;
    let (code, stdout, stderr) = output(c.scrun(&["-N", "2", "restart"])).await;
    assert_eq!(code, 5, "{stderr}");
    assert_eq!(stdout, "one\ntwo\nx\nthree\ny\n", "{stderr}");
    assert!(
        stderr.contains("master restarting); re-attaching to job 12\n")
            && stderr.contains("scrun: re-attached to job 12\n"),
        "{stderr}"
    );
    let r = c
        .seen
        .lock()
        .unwrap()
        .reattached
        .clone()
        .expect("a Reattach");
    assert_eq!(r.job, 12);
    let marks: Vec<(u32, u64)> = r.delivered.iter().map(|m| (m.rank, m.seq)).collect();
    assert_eq!(marks, [(0, 2), (1, 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn a_lost_stream_is_reattached_and_a_refusal_exits_255() {
    // This master refuses the re-attachment (it knows only submissions).
    let c = cluster().await;
    let (code, stdout, stderr) = output(c.scrun(&["drop"])).await;
    assert_eq!(code, 255, "{stderr}");
    assert_eq!(stdout, "bye\n");
    assert!(
        stderr.starts_with("scrun: lost the scored master (")
            && stderr.contains("master shutting down); re-attaching to job 12\n")
            && stderr.contains("scrun: error: cannot re-attach to job 12: "),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn refusals_are_shown_verbatim() {
    let c = cluster().await;
    let (code, _, stderr) = output(c.scrun(&["-q", "refuse"])).await;
    assert_eq!(code, 255);
    assert_eq!(
        stderr,
        "scrun: error: jobs of uid 0 are refused on this cluster\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn no_master_exits_255_naming_it() {
    let c = cluster().await;
    let mut cmd = c.scrun(&["true"]);
    cmd.env("SCORE_MASTER", "127.0.0.1:1");
    let (code, _, stderr) = output(cmd).await;
    assert_eq!(code, 255);
    assert!(
        stderr.starts_with("scrun: error: cannot reach the scored master at http://127.0.0.1:1"),
        "{stderr}"
    );
}
