//! Tests against a real munged, started for each test in a directory of its
//! own (key, socket, log, seed) and killed by PID when the test ends, even
//! when it panics.  Those tests are `#[ignore]`d for a plain `cargo test`;
//! `scripts/run-tests` runs them (`--include-ignored`), and without munged
//! they fail.

use prost::Message;
use score_auth::seal::{CallKey, Opener, Sealed, Sealer};
use score_auth::{code, AuthError, Check, Munge, Refusal, RefusalHook};
use score_proto::v1::master_server::Master;
use score_proto::v1::*;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tonic::{Request, Response, Status, Streaming};

type Munged = score_auth::testing::TestMunged;

fn start() -> Munged {
    Munged::start("score-auth-test")
}

fn me() -> (u32, u32) {
    // SAFETY: getuid/getgid cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn roundtrip_gives_uid_gid_and_payload() {
    let d = start();
    let m = d.munge();
    assert_eq!(m.socket(), d.socket());
    let cred = m.encode(b"job 42").unwrap();
    assert!(cred.starts_with("MUNGE:"), "{cred}");
    let c = m.decode(&cred).unwrap();
    assert_eq!((c.uid, c.gid), me());
    assert_eq!(c.payload, b"job 42");

    let empty = m.encode(&[]).unwrap();
    let c = m.decode(&format!("{empty}\n")).unwrap();
    assert!(c.payload.is_empty());
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn a_credential_is_good_once() {
    let d = start();
    let m = d.munge();
    let cred = m.encode(&[]).unwrap();
    m.decode(&cred).unwrap();
    let e = m.decode(&cred).unwrap_err();
    assert_eq!(e.code(), Some(code::CRED_REPLAYED), "{e}");
    assert!(e.to_string().contains("Replayed credential"), "{e}");
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn garbage_and_foreign_credentials_are_rejected() {
    let d = start();
    let m = d.munge();
    for bad in ["", "hello", "MUNGE:AAAAAAAAAAAAAAAA:"] {
        let e = m.decode(bad).unwrap_err();
        assert!(
            matches!(e, AuthError::Munge { op: "decode", .. }),
            "{bad:?}: {e:?}"
        );
    }
    assert!(matches!(m.decode("a\0b"), Err(AuthError::Invalid(_))));

    // A credential made with another key.
    let other = start();
    let foreign = other.munge().encode(&[]).unwrap();
    let e = m.decode(&foreign).unwrap_err();
    assert!(matches!(e, AuthError::Munge { op: "decode", .. }), "{e:?}");
    assert_eq!(e.code(), Some(code::CRED_INVALID), "{e}");
    assert!(e.to_string().contains("Invalid credential"), "{e}");
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn two_daemons_with_one_key_trust_each_other() {
    let a = start();
    let b = Munged::start_with_key("score-auth-test", Some(&a));
    let cred = a.munge().encode(b"x").unwrap();
    assert_eq!(b.munge().decode(&cred).unwrap().payload, b"x");
}

#[test]
fn missing_munged_is_a_clear_error() {
    let m = Munge::new("/nonexistent/score-test/munge.socket");
    let e = m.encode(&[]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, AuthError::Unreachable { .. }), "{e:?}");
    assert!(
        msg.starts_with("cannot reach munged at /nonexistent/score-test/munge.socket: "),
        "{msg}"
    );
    assert_eq!(e.code(), Some(code::SOCKET));
    let e = m.decode("MUNGE:x:").unwrap_err();
    assert!(matches!(e, AuthError::Unreachable { .. }), "{e:?}");
    assert_eq!(e.code(), Some(code::SOCKET));
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn a_sealed_message_opens_once_and_only_unaltered() {
    let d = start();
    let m = d.munge();
    let call = score_auth::seal::new_call();
    let path = "/score.v1.Master/Cancel";
    let body = CancelRequest {
        job: 7,
        kill: false,
    }
    .encode_to_vec();
    let frame = Sealer::requests(path, call, CallKey::random(), me().0)
        .seal(&m, &body)
        .unwrap();

    // A man in the middle swaps the body and keeps the credential.
    let mut forged = Sealed::decode(frame.as_slice()).unwrap();
    forged.body = CancelRequest { job: 8, kill: true }.encode_to_vec();
    let mut open = Opener::requests(path);
    let r = open.open(&m, &forged.encode_to_vec()).unwrap_err();
    assert_eq!(r.check, Check::Digest, "{r}");
    assert!(r.reason.contains("altered in transit"), "{r}");

    // The genuine message, on a second munged of the cluster (the first one
    // spent the credential on the forgery).
    let other = Munged::start_with_key("score-auth-test", Some(&d));
    let mut open = Opener::requests(path);
    assert_eq!(open.open(&other.munge(), &frame).unwrap(), body);
    assert_eq!(
        open.caller().map(|c| (c.uid, c.gid)),
        Some(me()),
        "the caller is who made the credential"
    );
    // Again: munged's replay cache.
    let mut open = Opener::requests(path);
    let r = open.open(&other.munge(), &frame).unwrap_err();
    assert_eq!(r.check, Check::Credential, "{r}");
    assert!(r.reason.contains("Replayed credential"), "{r}");
}

/// A master that answers ListNodes with one node and counts who asked.
#[derive(Clone, Default)]
struct Fake {
    callers: Arc<Mutex<Vec<u32>>>,
}

type Events = Pin<Box<dyn tokio_stream::Stream<Item = Result<JobEvent, Status>> + Send>>;
type Commands = Pin<Box<dyn tokio_stream::Stream<Item = Result<MasterMessage, Status>> + Send>>;

#[tonic::async_trait]
impl Master for Fake {
    type RunStream = Events;
    type AttachStream = Commands;
    async fn run(&self, _: Request<Streaming<RunRequest>>) -> Result<Response<Events>, Status> {
        Err(Status::unimplemented(""))
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
        req: Request<ListNodesRequest>,
    ) -> Result<Response<ListNodesReply>, Status> {
        let caller = score_auth::caller(&req)?;
        self.callers.lock().unwrap().push(caller.uid);
        Ok(Response::new(ListNodesReply {
            nodes: vec![NodeInfo {
                name: "n1".into(),
                ..Default::default()
            }],
        }))
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
    ) -> Result<Response<Commands>, Status> {
        Err(Status::unimplemented(""))
    }
}

fn master_url(config: &std::path::Path) -> String {
    let text = std::fs::read_to_string(config).unwrap();
    let line = text.lines().find(|l| l.starts_with("master = ")).unwrap();
    line.trim_start_matches("master = ")
        .trim_matches('"')
        .to_string()
}

fn recorder() -> (RefusalHook, Arc<Mutex<Vec<Refusal>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    (
        Arc::new(move |r: &Refusal, _: &str, _| s.lock().unwrap().push(r.clone())),
        seen,
    )
}

#[tokio::test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn a_sealed_call_reaches_the_handler_with_its_caller() {
    let d = start();
    let fake = Fake::default();
    let url = master_url(&d.serve_master(fake.clone()).await);
    let mut client = score_auth::connect(&url, d.munge(), me().0).await.unwrap();
    for _ in 0..3 {
        let nodes = client.list_nodes(ListNodesRequest {}).await.unwrap();
        assert_eq!(nodes.into_inner().nodes[0].name, "n1");
    }
    assert_eq!(*fake.callers.lock().unwrap(), vec![me().0; 3]);
}

#[tokio::test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn a_server_of_another_uid_cannot_read_the_call() {
    // The client expects another master uid than the server's: what an
    // impostor with the cluster's key is.  munged does not give the server
    // request 0's payload (the call key), so the server can neither reach
    // the handler nor seal a reply the client would take.
    let d = start();
    let fake = Fake::default();
    let url = master_url(&d.serve_master(fake.clone()).await);
    let (hook, seen) = recorder();
    let channel = score_auth::connect_channel(&url, d.munge(), me().0 + 4242)
        .await
        .unwrap()
        .on_refusal(hook);
    let mut client = master_client::MasterClient::new(channel);
    let st = client.list_nodes(ListNodesRequest {}).await.unwrap_err();
    assert_eq!(st.code(), tonic::Code::Unauthenticated, "{st:?}");
    assert!(
        st.message().starts_with(
            "MUNGE credential rejected: MUNGE decode failed: Unauthorized credential for client UID="
        ),
        "{st:?}"
    );
    assert!(fake.callers.lock().unwrap().is_empty(), "the handler ran");
    // The refusal was the server's; no reply reached the client to refuse.
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
async fn a_client_of_another_key_is_refused_before_the_handler() {
    let d = start();
    let fake = Fake::default();
    let url = master_url(&d.serve_master(fake.clone()).await);
    let foreign = start();
    let mut client = score_auth::connect(&url, foreign.munge(), me().0)
        .await
        .unwrap();
    let st = client.list_nodes(ListNodesRequest {}).await.unwrap_err();
    assert_eq!(st.code(), tonic::Code::Unauthenticated, "{st:?}");
    assert_eq!(
        st.message(),
        "MUNGE credential rejected: MUNGE decode failed: Invalid credential (munge error 14)"
    );
    assert!(fake.callers.lock().unwrap().is_empty(), "the handler ran");
}

#[tokio::test]
async fn connecting_without_munged_is_a_clear_error() {
    // A listener that accepts the TCP connection; munged is what is missing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let e = score_auth::connect(&url, Munge::new("/nonexistent/munge.socket"), 0)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot reach munged at /nonexistent/munge.socket: "),
        "{e}"
    );
}

#[tokio::test]
async fn connect_error_names_the_master() {
    // Port 1 on loopback: nothing listens there.
    let e = score_auth::connect("http://127.0.0.1:1", Munge::new("/nonexistent"), 0)
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("cannot reach the scored master at http://127.0.0.1:1: "),
        "{msg}"
    );
    assert!(msg.to_lowercase().contains("refused"), "{msg}");

    let e = score_auth::connect("not a url", Munge::new("/nonexistent"), 0)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not a url"), "{e}");
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn a_long_call_needs_munged_once_on_each_side() {
    // Request 0 through munged, then 500 messages each way under the call
    // key: a credential is good only once, so if any later message went
    // through munged again, it would carry a credential; none does.
    let d = start();
    let m = d.munge();
    let call = score_auth::seal::new_call();
    let path = "/score.v1.Master/Attach";
    let body = vec![7u8; 300];
    let mut seal = Sealer::requests(path, call, CallKey::random(), me().0);
    let mut open = Opener::requests(path);
    let t0 = std::time::Instant::now();
    let f = seal.seal(&m, &body).unwrap();
    assert!(!Sealed::decode(f.as_slice()).unwrap().credential.is_empty());
    assert_eq!(open.open(&m, &f).unwrap(), body);
    let first = t0.elapsed();
    let mut reply = Sealer::replies(path, call, open.key().unwrap().clone());
    let n = 500;
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        let f = seal.seal(&m, &body).unwrap();
        let s = Sealed::decode(f.as_slice()).unwrap();
        assert!(s.credential.is_empty() && s.mac.len() == 32);
        assert_eq!(open.open(&m, &f).unwrap(), body);
        let f = reply.seal(&m, &body).unwrap();
        assert!(Sealed::decode(f.as_slice()).unwrap().credential.is_empty());
    }
    eprintln!(
        "request 0 through munged: {first:?}; every later message: {:?}",
        t0.elapsed() / (2 * n)
    );
    assert_eq!(open.opened(), n as u64 + 1);
}
