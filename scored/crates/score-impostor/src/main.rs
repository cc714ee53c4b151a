//! score-impostor: an impostor scored master and a man in the middle, for
//! tests/scored/test_security.py (see README.md).  Not part of score.

use anyhow::{anyhow, Context as _};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use prost::Message;
use score_auth::frames::{frame, FrameBuf};
use score_auth::seal::{CallKey, Sealed, Sealer, DIGEST_LEN, KEY_LEN};
use score_auth::Munge;
use score_proto::v1::{
    agent_message, master_message, AgentMessage, CancelRequest, JobInfo, JobSpec, JobState,
    LaunchJob, MasterMessage, Welcome,
};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::body::Body;
use tonic::Status;
use tower_service::Service;

#[derive(Parser)]
#[command(
    name = "score-impostor",
    about = "An impostor scored master and a man in the middle (test tool)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Listen where agents expect the master; send every agent that attaches
    /// a LaunchJob of ARGV (as root), sealed by the given munged as this
    /// process's uid, or not sealed at all.
    Master {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        munge_socket: PathBuf,
        /// Plain protobuf, no envelope, no credential.
        #[arg(long)]
        unsealed: bool,
        /// The uid (and gid) the LaunchJob asks the agent to run ARGV as.
        #[arg(long, default_value_t = 0)]
        job_uid: u32,
        #[arg(required = true, last = true)]
        argv: Vec<String>,
    },
    /// Forward every call to the master at UPSTREAM and back, swapping the
    /// body of chosen messages and keeping their envelope and credential.
    Proxy {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        upstream: String,
        /// OLD=NEW: in every LaunchJob the master sends an agent, an argument
        /// equal to OLD becomes NEW.
        #[arg(long, value_parser = pair)]
        swap_argv: Vec<(String, String)>,
        /// OLD=NEW: a Cancel request for job OLD becomes one for job NEW.
        #[arg(long, value_parser = pair)]
        swap_cancel: Vec<(String, String)>,
    },
}

fn pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .ok_or_else(|| format!("{s:?}: expected OLD=NEW"))
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

fn grpc_response(body: Body) -> http::Response<Body> {
    let mut r = http::Response::new(body);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    r
}

// ------------------------------------------------------------------ impostor

#[derive(Clone)]
struct Impostor {
    munge: Munge,
    unsealed: bool,
    job_uid: u32,
    argv: Vec<String>,
    next_job: Arc<AtomicU64>,
}

impl tonic::server::NamedService for Impostor {
    const NAME: &'static str = "score.v1.Master";
}

/// The first gRPC message of `body`.
async fn first_message(body: &mut Body) -> anyhow::Result<Bytes> {
    let mut frames = FrameBuf::default();
    loop {
        if let Some(m) = frames.next(8 << 20).map_err(|e| anyhow!("{e}"))? {
            return Ok(m);
        }
        match body.frame().await {
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => frames.push(d),
                Err(_) => return Err(anyhow!("trailers before any message")),
            },
            Some(Err(e)) => return Err(anyhow!("{e}")),
            None => return Err(anyhow!("no message")),
        }
    }
}

impl Impostor {
    async fn attach(self, path: String, peer: String, mut body: Body) -> http::Response<Body> {
        // The agent's Register: its envelope says the call's nonce in clear,
        // so the impostor answers in the agent's own call, numbered as the
        // real master would.  It seals with the call's key if its munged
        // gives it request 0's payload (only the master's uid gets it), or
        // else with a key of its own: its best guess.
        let first = match first_message(&mut body).await {
            Ok(m) => m,
            Err(e) => {
                eprintln!("impostor: {peer}: cannot read the agent's first message: {e}");
                return Status::invalid_argument("no message").into_http();
            }
        };
        let (call, register, key) = match Sealed::decode(first.clone()) {
            Ok(s) if s.call.len() == 16 => {
                let call: [u8; 16] = s.call.as_slice().try_into().unwrap();
                let key = match self.munge.decode(&s.credential) {
                    Ok(c) if c.payload.len() == DIGEST_LEN + KEY_LEN => {
                        eprintln!("impostor: {peer}: read the call key");
                        CallKey::from_bytes(c.payload[DIGEST_LEN..].try_into().unwrap())
                    }
                    Ok(c) => {
                        eprintln!(
                            "impostor: {peer}: request 0 carries {} bytes",
                            c.payload.len()
                        );
                        CallKey::random()
                    }
                    Err(e) => {
                        eprintln!("impostor: {peer}: cannot read the call key: {e}");
                        CallKey::random()
                    }
                };
                (call, AgentMessage::decode(s.body.as_slice()).ok(), key)
            }
            _ => (
                [0u8; 16],
                AgentMessage::decode(first).ok(),
                CallKey::random(),
            ),
        };
        let node = match register.and_then(|m| m.msg) {
            Some(agent_message::Msg::Register(r)) => r.node,
            _ => String::new(),
        };
        let job = self.next_job.fetch_add(1, Ordering::SeqCst);
        let launch = LaunchJob {
            job: Some(JobInfo {
                id: job,
                name: "impostor".into(),
                uid: self.job_uid,
                gid: self.job_uid,
                user: "root".into(),
                spec: Some(JobSpec {
                    nodes: 1,
                    ppn: 1,
                    argv: self.argv.clone(),
                    env: [(
                        "PATH".to_string(),
                        "/usr/local/bin:/usr/bin:/bin".to_string(),
                    )]
                    .into(),
                    cwd: "/".into(),
                    name: "impostor".into(),
                    ..Default::default()
                }),
                state: JobState::Launching as i32,
                nodes: vec![node.clone()],
                nspace: format!("impostor-{job}"),
                ..Default::default()
            }),
            node_index: 0,
            pm_jobkey: 0,
        };
        let messages = [
            MasterMessage {
                msg: Some(master_message::Msg::Welcome(Welcome {
                    heartbeat_interval_ms: 2000,
                })),
                job: 0,
            },
            MasterMessage {
                msg: Some(master_message::Msg::Launch(launch)),
                job,
            },
        ];
        let mut sealer = Sealer::replies(path, call, key);
        let mut out = Vec::new();
        for m in &messages {
            let bytes = m.encode_to_vec();
            if self.unsealed {
                out.push(frame(&bytes));
            } else {
                match sealer.seal(&self.munge, &bytes) {
                    Ok(s) => out.push(frame(&s)),
                    Err(e) => {
                        eprintln!("impostor: cannot seal: {e}");
                        return Status::internal(e.to_string()).into_http();
                    }
                }
            }
        }
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        eprintln!(
            "impostor: agent {node} attached from {peer}; sent Welcome and LaunchJob {job} of {:?} \
             (run as uid {}), {}",
            self.argv,
            self.job_uid,
            if self.unsealed {
                "unsealed".to_string()
            } else {
                format!(
                    "sealed with the best call key uid {uid} could get through {}",
                    self.munge.socket().display()
                )
            }
        );
        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Status>>(8);
        tokio::spawn(async move {
            for f in out {
                if tx.send(Ok(Frame::data(f))).await.is_err() {
                    break;
                }
            }
            // Until the agent hangs up (it should, at once) or 60 s.
            let t0 = Instant::now();
            let gone = tokio::time::timeout(Duration::from_secs(60), async {
                while let Some(Ok(_)) = body.frame().await {}
            })
            .await;
            match gone {
                Ok(()) => eprintln!(
                    "impostor: agent {node} hung up after {:.3} s",
                    t0.elapsed().as_secs_f64()
                ),
                Err(_) => eprintln!("impostor: agent {node} still attached after 60 s"),
            }
            drop(tx);
        });
        grpc_response(Body::new(StreamBody::new(ReceiverStream::new(rx))))
    }
}

impl Service<http::Request<Body>> for Impostor {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> BoxFuture {
        let this = self.clone();
        Box::pin(async move {
            let path = req.uri().path().to_string();
            let peer = req
                .extensions()
                .get::<tonic::transport::server::TcpConnectInfo>()
                .and_then(|i| i.remote_addr())
                .map(|a| a.to_string())
                .unwrap_or_default();
            if path != "/score.v1.Master/Attach" {
                eprintln!("impostor: {peer}: {path}: not implemented");
                return Ok(Status::unimplemented("an impostor").into_http());
            }
            Ok(this.attach(path, peer, req.into_body()).await)
        })
    }
}

// ------------------------------------------------------------------ proxy

/// A body whose every gRPC message goes through `swap` (which may leave it
/// as it is).
struct Tamper {
    inner: Body,
    frames: FrameBuf,
    swap: Box<dyn FnMut(Bytes) -> Bytes + Send>,
}

impl http_body::Body for Tamper {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        loop {
            match this.frames.next(u32::MAX as usize) {
                Ok(Some(m)) => return Poll::Ready(Some(Ok(Frame::data(frame(&(this.swap)(m)))))),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Some(Err(Status::internal(e.to_string())))),
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => this.frames.push(d),
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                },
                other => return Poll::Ready(other),
            }
        }
    }
}

fn tamper(inner: Body, swap: impl FnMut(Bytes) -> Bytes + Send + 'static) -> Body {
    Body::new(Tamper {
        inner,
        frames: FrameBuf::default(),
        swap: Box::new(swap),
    })
}

/// The envelope of `m` with its body changed by `f` (None: left as it is);
/// the credential, call and sequence number stay.
fn reseal<M: Message + Default>(m: Bytes, f: impl FnOnce(&mut M) -> bool) -> Bytes {
    let Ok(mut sealed) = Sealed::decode(m.clone()) else {
        return m;
    };
    let Ok(mut inner) = M::decode(sealed.body.as_slice()) else {
        return m;
    };
    if !f(&mut inner) {
        return m;
    }
    sealed.body = inner.encode_to_vec();
    Bytes::from(sealed.encode_to_vec())
}

#[derive(Clone)]
struct Proxy {
    upstream: tonic::transport::Channel,
    base: http::Uri,
    swap_argv: Arc<Vec<(String, String)>>,
    swap_cancel: Arc<Vec<(String, String)>>,
}

impl tonic::server::NamedService for Proxy {
    const NAME: &'static str = "score.v1.Master";
}

impl Service<http::Request<Body>> for Proxy {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> BoxFuture {
        let this = self.clone();
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let path = parts.uri.path().to_string();
            let mut uri = this.base.clone().into_parts();
            uri.path_and_query = parts.uri.path_and_query().cloned();
            parts.uri = http::Uri::from_parts(uri).expect("an absolute URI");
            let body = if path.ends_with("/Cancel") && !this.swap_cancel.is_empty() {
                let swaps = this.swap_cancel.clone();
                tamper(body, move |m| {
                    reseal(m, |c: &mut CancelRequest| {
                        for (old, new) in swaps.iter() {
                            if c.job.to_string() == *old {
                                eprintln!("proxy: swapped Cancel of job {old} for job {new}");
                                c.job = new.parse().unwrap_or(c.job);
                                return true;
                            }
                        }
                        false
                    })
                })
            } else {
                body
            };
            let mut ch = this.upstream.clone();
            if let Err(e) = std::future::poll_fn(|cx| ch.poll_ready(cx)).await {
                return Ok(Status::unavailable(e.to_string()).into_http());
            }
            let resp = match ch.call(http::Request::from_parts(parts, body)).await {
                Ok(r) => r,
                Err(e) => return Ok(Status::unavailable(e.to_string()).into_http()),
            };
            if path.ends_with("/Attach") && !this.swap_argv.is_empty() {
                let swaps = this.swap_argv.clone();
                return Ok(resp.map(|b| {
                    tamper(b, move |m| {
                        reseal(m, |mm: &mut MasterMessage| {
                            let job = mm.job;
                            let Some(master_message::Msg::Launch(l)) = mm.msg.as_mut() else {
                                return false;
                            };
                            let Some(spec) = l.job.as_mut().and_then(|j| j.spec.as_mut()) else {
                                return false;
                            };
                            let mut swapped = false;
                            for a in spec.argv.iter_mut() {
                                if let Some((_, new)) = swaps.iter().find(|(old, _)| old == a) {
                                    eprintln!(
                                        "proxy: swapped an argument of LaunchJob {job}: {a:?} -> {new:?}"
                                    );
                                    *a = new.clone();
                                    swapped = true;
                                }
                            }
                            swapped
                        })
                    })
                }));
            }
            Ok(resp)
        })
    }
}

async fn serve<S>(listen: SocketAddr, svc: S) -> anyhow::Result<()>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    eprintln!("listening on {listen}");
    tonic::transport::Server::builder()
        .add_service(svc)
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Master {
            listen,
            munge_socket,
            unsealed,
            job_uid,
            argv,
        } => {
            let svc = Impostor {
                munge: Munge::new(munge_socket),
                unsealed,
                job_uid,
                argv,
                next_job: Arc::new(AtomicU64::new(900_001)),
            };
            serve(listen, svc).await
        }
        Cmd::Proxy {
            listen,
            upstream,
            swap_argv,
            swap_cancel,
        } => {
            let base: http::Uri = upstream.parse().context("--upstream")?;
            let channel = tonic::transport::Endpoint::from_shared(upstream.clone())?.connect_lazy();
            let svc = Proxy {
                upstream: channel,
                base,
                swap_argv: Arc::new(swap_argv),
                swap_cancel: Arc::new(swap_cancel),
            };
            serve(listen, svc).await
        }
    }
}
