//! Sealing and opening every gRPC message of a call, under tonic.
//!
//! [`SealedChannel`] wraps a client's channel: it picks a fresh call nonce
//! and call key for each call, seals every request message (request 0 with
//! a credential only the master's uid can decode) and opens every reply
//! (sealed with the key, so only the master's uid can have sealed it).
//! [`SealedServer`] wraps a service: it opens the first request message
//! before the handler runs (the handler finds the caller with [`caller`]),
//! then every later one, and seals every reply.  A message that fails to
//! open ends the call with UNAUTHENTICATED and the reason, and is reported
//! to a [`RefusalHook`] (for the log and the metrics) before anything acts
//! on it.
//!
//! Statuses (grpc-status, grpc-message) are not sealed: they carry no
//! command, and whoever can alter them in flight can also cut the connection.

use crate::frames::{frame, FrameBuf};
use crate::seal::{CallKey, Caller, Check, Opener, Refusal, Sealer};
use crate::Munge;
use bytes::Bytes;
use http_body::{Body as _, Frame};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tonic::body::Body;
use tonic::Status;
use tower_service::Service;

/// The largest sealed message accepted: tonic's own limit for a decoded
/// message (4 MiB) plus room for the envelope.
pub const MAX_SEALED: usize = (4 << 20) + 4096;

/// How long a server waits for the first message of a call: it must know who
/// calls before the handler runs.
pub const FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Told about every refused message: the refusal, the method path, and the
/// peer's address where the server knows it.
pub type RefusalHook = Arc<dyn Fn(&Refusal, &str, Option<SocketAddr>) + Send + Sync>;

/// The default hook: a warning with the check that failed and the reason.
pub fn log_refusal(r: &Refusal, path: &str, peer: Option<SocketAddr>) {
    tracing::warn!(
        ?peer,
        path,
        check = r.check.label(),
        "refused: {}",
        r.reason
    );
}

/// A body whose every gRPC message is sealed on its way out.
struct SealBody {
    inner: Body,
    frames: FrameBuf,
    sealer: Sealer,
    munge: Munge,
    done: bool,
}

impl SealBody {
    fn new(inner: Body, sealer: Sealer, munge: Munge) -> Self {
        Self {
            inner,
            frames: FrameBuf::default(),
            sealer,
            munge,
            done: false,
        }
    }

    fn fail(&mut self, status: Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.done = true;
        Poll::Ready(Some(Err(status)))
    }
}

impl http_body::Body for SealBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match this.frames.next(u32::MAX as usize) {
                Ok(Some(message)) => {
                    return match this.sealer.seal(&this.munge, &message) {
                        Ok(sealed) => Poll::Ready(Some(Ok(Frame::data(frame(&sealed))))),
                        Err(e) => {
                            tracing::warn!("cannot seal a message: {e}");
                            this.fail(Status::unauthenticated(format!(
                                "cannot seal a message: {e}"
                            )))
                        }
                    };
                }
                Ok(None) => {}
                Err(e) => return this.fail(Status::internal(format!("cannot seal {e}"))),
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(f)) => match f.into_data() {
                    Ok(data) => this.frames.push(data),
                    Err(trailers) => {
                        if let Err(e) = this.frames.finish() {
                            return this.fail(Status::internal(format!("cannot seal: {e}")));
                        }
                        return Poll::Ready(Some(Ok(trailers)));
                    }
                },
                Some(Err(e)) => return this.fail(e),
                None => {
                    this.done = true;
                    if let Err(e) = this.frames.finish() {
                        return Poll::Ready(Some(Err(Status::internal(format!(
                            "cannot seal: {e}"
                        )))));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// A body whose every gRPC message is opened (checked and unwrapped) on its
/// way in; the first refused one ends it with UNAUTHENTICATED.
struct OpenBody {
    inner: Body,
    frames: FrameBuf,
    opener: Opener,
    munge: Munge,
    hook: RefusalHook,
    path: String,
    peer: Option<SocketAddr>,
    /// The first message, opened by the server before the handler ran.
    pending: Option<Frame<Bytes>>,
    done: bool,
}

impl OpenBody {
    fn refuse(&mut self, r: Refusal) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        (self.hook)(&r, &self.path, self.peer);
        self.done = true;
        Poll::Ready(Some(Err(r.status())))
    }
}

impl http_body::Body for OpenBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(f) = this.pending.take() {
            return Poll::Ready(Some(Ok(f)));
        }
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match this.frames.next(MAX_SEALED) {
                Ok(Some(message)) => {
                    return match this.opener.open(&this.munge, &message) {
                        Ok(body) => Poll::Ready(Some(Ok(Frame::data(frame(&body))))),
                        Err(r) => this.refuse(r),
                    };
                }
                Ok(None) => {}
                Err(e) => return this.refuse(Refusal::new(Check::Unsealed, e.to_string())),
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(f)) => match f.into_data() {
                    Ok(data) => this.frames.push(data),
                    Err(trailers) => {
                        if let Err(e) = this.frames.finish() {
                            return this.refuse(Refusal::new(Check::Unsealed, e.to_string()));
                        }
                        this.done = true;
                        return Poll::Ready(Some(Ok(trailers)));
                    }
                },
                Some(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    if let Err(e) = this.frames.finish() {
                        return this.refuse(Refusal::new(Check::Unsealed, e.to_string()));
                    }
                    this.done = true;
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && self.done
    }
}

/// A client channel that seals every request and opens every reply,
/// accepting only replies sealed by `master_uid` (the only uid that can read
/// the call's key).
#[derive(Clone)]
pub struct SealedChannel {
    inner: tonic::transport::Channel,
    munge: Munge,
    master_uid: u32,
    hook: RefusalHook,
}

impl SealedChannel {
    pub fn new(inner: tonic::transport::Channel, munge: Munge, master_uid: u32) -> Self {
        Self {
            inner,
            munge,
            master_uid,
            hook: Arc::new(log_refusal),
        }
    }

    /// Calls `hook` for every refused reply (instead of a warning in the log).
    pub fn on_refusal(mut self, hook: RefusalHook) -> Self {
        self.hook = hook;
        self
    }
}

impl std::fmt::Debug for SealedChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedChannel")
            .field("munge", &self.munge)
            .field("master_uid", &self.master_uid)
            .finish_non_exhaustive()
    }
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl Service<http::Request<Body>> for SealedChannel {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let call = crate::seal::new_call();
        let key = CallKey::random();
        let path = req.uri().path().to_string();
        let munge = self.munge.clone();
        let sealer = Sealer::requests(path.clone(), call, key.clone(), self.master_uid);
        let req = req.map(|b| Body::new(SealBody::new(b, sealer, munge.clone())));
        let fut = Service::call(&mut self.inner, req);
        let hook = self.hook.clone();
        Box::pin(async move {
            let resp = fut.await?;
            let opener = Opener::replies(path.clone(), call, key);
            Ok(resp.map(|b| {
                Body::new(OpenBody {
                    inner: b,
                    frames: FrameBuf::default(),
                    opener,
                    munge,
                    hook,
                    path,
                    peer: None,
                    pending: None,
                    done: false,
                })
            }))
        })
    }
}

/// A gRPC service (e.g. `MasterServer`) whose calls are all sealed: the
/// first request message is opened before the service sees the call, and
/// its signer is in the request's extensions ([`caller`]).
#[derive(Clone)]
pub struct SealedServer<S> {
    inner: S,
    munge: Munge,
    hook: RefusalHook,
}

impl<S> SealedServer<S> {
    pub fn new(inner: S, munge: Munge) -> Self {
        Self {
            inner,
            munge,
            hook: Arc::new(log_refusal),
        }
    }

    /// Calls `hook` for every refused message (instead of a warning in the log).
    pub fn on_refusal(mut self, hook: RefusalHook) -> Self {
        self.hook = hook;
        self
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for SealedServer<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for SealedServer<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // The ready service goes to this call; a fresh clone stays (tower's rule).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (munge, hook) = (self.munge.clone(), self.hook.clone());
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let path = parts.uri.path().to_string();
            let peer = parts
                .extensions
                .get::<tonic::transport::server::TcpConnectInfo>()
                .and_then(|i| i.remote_addr());
            let mut open = OpenBody {
                inner: body,
                frames: FrameBuf::default(),
                opener: Opener::requests(path.clone()),
                munge: munge.clone(),
                hook: hook.clone(),
                path: path.clone(),
                peer,
                pending: None,
                done: false,
            };
            let refuse = |r: Refusal| {
                hook(&r, &path, peer);
                Ok(r.status().into_http())
            };
            let first = tokio::time::timeout(
                FIRST_MESSAGE_TIMEOUT,
                std::future::poll_fn(|cx| Pin::new(&mut open).poll_frame(cx)),
            )
            .await;
            match first {
                Err(_) => {
                    return refuse(Refusal::new(
                        Check::Unsealed,
                        format!(
                            "no message within {} s of the call's start",
                            FIRST_MESSAGE_TIMEOUT.as_secs()
                        ),
                    ))
                }
                // Refused (already reported) or the transport failed.
                Ok(Some(Err(status))) => return Ok(status.into_http()),
                Ok(Some(Ok(f))) if f.is_data() => open.pending = Some(f),
                Ok(_) => {
                    return refuse(Refusal::new(
                        Check::Unsealed,
                        "the request carries no message: it must carry at least one sealed message",
                    ))
                }
            }
            let (Some(caller), Some(call), Some(key)) = (
                open.opener.caller(),
                open.opener.call(),
                open.opener.key().cloned(),
            ) else {
                unreachable!("request 0 was opened");
            };
            parts.extensions.insert(caller);
            let req = http::Request::from_parts(parts, Body::new(open));
            let Ok(resp) = inner.call(req).await;
            let sealer = Sealer::replies(path, call, key);
            Ok(resp.map(|b| Body::new(SealBody::new(b, sealer, munge))))
        })
    }
}

/// The signer of a request that came through a [`SealedServer`].
pub fn caller<T>(req: &tonic::Request<T>) -> Result<Caller, Status> {
    req.extensions().get::<Caller>().copied().ok_or_else(|| {
        Status::unauthenticated(
            "the request was not opened by score-auth (the service is not behind SealedServer)",
        )
    })
}
