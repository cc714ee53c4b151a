//! The master's gRPC face, behind score-auth's `SealedServer` (which opens
//! every request message and seals every reply, see `super::run`): it takes
//! the caller from the opened call, then turns the call into operations on the [`State`] behind one lock (parking_lot's, which a
//! panic does not poison: see [`super::state`]).

use super::state::{Requester, State};
use futures::Stream;
use parking_lot::{Mutex, MutexGuard};
use score_proto::v1::{
    agent_message, job_event, master_message, master_server::Master, run_request, AgentMessage,
    CancelReply, CancelRequest, JobEvent, JobInfo, ListJobsReply, ListJobsRequest, ListNodesReply,
    ListNodesRequest, MasterMessage, MatrixReply, MatrixRequest, NodeReply, NodeRequest,
    RunRequest, ShowJobRequest, Welcome,
};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

pub struct MasterService {
    state: Arc<Mutex<State>>,
    heartbeat_interval: Duration,
}

type EventStream = Pin<Box<dyn Stream<Item = Result<JobEvent, Status>> + Send>>;
type CommandStream = Pin<Box<dyn Stream<Item = Result<MasterMessage, Status>> + Send>>;

impl MasterService {
    pub fn new(state: Arc<Mutex<State>>, heartbeat_interval: Duration) -> Self {
        Self {
            state,
            heartbeat_interval,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The caller, as the sealed first message of the call proved it (a call
    /// whose messages do not open never gets here: `SealedServer` refused,
    /// logged and counted it).
    fn authenticate<T>(&self, req: &Request<T>) -> Result<Requester, Status> {
        match score_auth::caller(req) {
            Ok(c) => Ok(Requester {
                uid: c.uid,
                gid: c.gid,
            }),
            Err(status) => {
                self.reject("unauthenticated");
                tracing::warn!(peer = ?req.remote_addr(), "refused: {}", status.message());
                Err(status)
            }
        }
    }

    fn reject(&self, reason: &str) {
        self.lock()
            .metrics
            .requests_rejected
            .get_or_create(&vec![("reason".into(), reason.into())])
            .inc();
    }

    /// Count refusals of valid, authenticated requests by their kind.
    fn count<T>(&self, r: Result<T, Status>) -> Result<T, Status> {
        self.count_locked(&mut self.lock(), r)
    }

    /// [`MasterService::count`] with the lock already held.
    fn count_locked<T>(&self, st: &mut State, r: Result<T, Status>) -> Result<T, Status> {
        if let Err(s) = &r {
            let reason = match s.code() {
                tonic::Code::PermissionDenied => "permission",
                tonic::Code::NotFound => "not_found",
                _ => "invalid",
            };
            st.metrics
                .requests_rejected
                .get_or_create(&vec![("reason".into(), reason.into())])
                .inc();
        }
        r
    }
}

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

#[tonic::async_trait]
impl Master for MasterService {
    type RunStream = EventStream;

    async fn run(
        &self,
        req: Request<Streaming<RunRequest>>,
    ) -> Result<Response<Self::RunStream>, Status> {
        let who = self.authenticate(&req)?;
        let mut inbound = req.into_inner();
        let first = inbound.message().await?.ok_or_else(|| {
            Status::invalid_argument("the Run stream closed before a job was submitted")
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (id, call) =
            match first.msg {
                Some(run_request::Msg::Submit(spec)) => {
                    let user = user_name(who.uid);
                    let mut st = self.lock();
                    let r = st.submit(spec, who, user, tx);
                    let id = self.count_locked(&mut st, r)?;
                    tracing::info!(job = id, uid = who.uid, "job submitted");
                    (id, st.follower(id).unwrap_or(0))
                }
                Some(run_request::Msg::Reattach(r)) => {
                    let mut st = self.lock();
                    let res = st.reattach(r.job, who, r.delivered, tx);
                    let call = self.count_locked(&mut st, res)?;
                    (r.job, call)
                }
                _ => return self.count(Err(Status::invalid_argument(
                    "the first message of a Run stream must be a job submission or a re-attachment",
                ))),
            };

        // Stdin, cancel requests and acknowledgements until scrun closes
        // its side; a stream that breaks before the job ended cancels it.
        let state = self.state.clone();
        tokio::spawn(async move {
            loop {
                match inbound.message().await {
                    Ok(Some(RunRequest { msg: Some(m) })) => {
                        let mut st = state.lock();
                        match m {
                            run_request::Msg::Stdin(chunk) => {
                                if st.stdin(id, chunk).is_err() {
                                    // Beyond its credit: the call is ended
                                    // and the job cancelled (logged, counted).
                                    return;
                                }
                            }
                            run_request::Msg::Cancel(c) => {
                                let why = format!("cancelled by {} (scrun)", user_name(who.uid));
                                let _ = st.cancel(id, c.kill, who, &why);
                            }
                            run_request::Msg::Ack(a) => st.output_acked(id, a.delivered),
                            run_request::Msg::StepDone(d) => st.step_done(id, d.exit_status),
                            run_request::Msg::Submit(_) | run_request::Msg::Reattach(_) => {}
                        }
                    }
                    Ok(Some(RunRequest { msg: None })) => {}
                    Ok(None) => {
                        // scrun half-closed: it sends nothing more but still
                        // follows the job; the event stream tells when it goes.
                        break;
                    }
                    Err(_) => {
                        state.lock().client_gone(id, call);
                        return;
                    }
                }
            }
        });

        // When scrun disconnects, the event stream is dropped: cancel then.
        let guard = ClientGuard {
            state: self.state.clone(),
            job: id,
            call,
        };
        // The stream takes an event only when HTTP/2 lets it send to scrun:
        // output taken is output the agents may send again (flow control,
        // `state::flow`).
        let state = self.state.clone();
        let stream = UnboundedReceiverStream::new(rx).map(move |ev| {
            let _keep = &guard;
            if let Ok(JobEvent {
                event: Some(job_event::Event::Output(o)),
            }) = &ev
            {
                state.lock().output_taken(id, o.data.len() as u64);
            }
            ev
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_jobs(
        &self,
        req: Request<ListJobsRequest>,
    ) -> Result<Response<ListJobsReply>, Status> {
        self.authenticate(&req)?;
        let jobs = self.lock().list_jobs(req.get_ref().all);
        Ok(Response::new(ListJobsReply { jobs }))
    }

    async fn show_job(&self, req: Request<ShowJobRequest>) -> Result<Response<JobInfo>, Status> {
        self.authenticate(&req)?;
        let id = req.get_ref().job;
        let r = self.lock().job_info(id).ok_or_else(|| {
            Status::not_found(format!(
                "no job {id} (finished jobs are kept for a while, then forgotten)"
            ))
        });
        self.count(r).map(Response::new)
    }

    async fn cancel(&self, req: Request<CancelRequest>) -> Result<Response<CancelReply>, Status> {
        let who = self.authenticate(&req)?;
        let CancelRequest { job, kill } = *req.get_ref();
        let why = format!("cancelled by {} (scorectl)", user_name(who.uid));
        let r = self.lock().cancel(job, kill, who, &why);
        self.count(r)
            .map(|job| Response::new(CancelReply { job: Some(job) }))
    }

    async fn list_nodes(
        &self,
        req: Request<ListNodesRequest>,
    ) -> Result<Response<ListNodesReply>, Status> {
        self.authenticate(&req)?;
        let nodes = self.lock().list_nodes();
        Ok(Response::new(ListNodesReply { nodes }))
    }

    async fn drain(&self, req: Request<NodeRequest>) -> Result<Response<NodeReply>, Status> {
        let who = self.authenticate(&req)?;
        let r = req.get_ref();
        let res = self.lock().drain(&r.node, &r.reason, who);
        self.count(res)
            .map(|node| Response::new(NodeReply { node: Some(node) }))
    }

    async fn resume(&self, req: Request<NodeRequest>) -> Result<Response<NodeReply>, Status> {
        let who = self.authenticate(&req)?;
        let res = self.lock().resume(&req.get_ref().node, who);
        self.count(res)
            .map(|node| Response::new(NodeReply { node: Some(node) }))
    }

    async fn matrix(&self, req: Request<MatrixRequest>) -> Result<Response<MatrixReply>, Status> {
        self.authenticate(&req)?;
        Ok(Response::new(self.lock().matrix_info()))
    }

    type AttachStream = CommandStream;

    async fn attach(
        &self,
        req: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let who = self.authenticate(&req)?;
        if who.uid != 0 {
            return self.count(Err(Status::permission_denied(format!(
                "only root may attach an agent (the credential is of uid {})",
                who.uid
            ))));
        }
        let peer = req
            .remote_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        let mut inbound = req.into_inner();
        let first = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no Register message within 10 s"))??
            .ok_or_else(|| Status::invalid_argument("the agent stream closed before Register"))?;
        let Some(agent_message::Msg::Register(reg)) = first.msg else {
            return self.count(Err(Status::invalid_argument(
                "the first message of an Attach stream must be Register",
            )));
        };
        if reg.node.is_empty() {
            return self.count(Err(Status::invalid_argument(
                "Register without a node name",
            )));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(MasterMessage {
            msg: Some(master_message::Msg::Welcome(Welcome {
                heartbeat_interval_ms: self.heartbeat_interval.as_millis() as u64,
            })),
            job: 0,
        });
        let name = reg.node.clone();
        let killed = reg.jobs.clone();
        let conn = self.lock().agent_attached(reg, peer, tx);
        if !killed.is_empty() {
            tracing::warn!(node = %name, jobs = ?killed, "agent killed leftover jobs at start");
        }
        let state = self.state.clone();
        tokio::spawn(async move {
            let why = loop {
                match inbound.message().await {
                    Ok(Some(m)) => state.lock().agent_message(&name, conn, m),
                    Ok(None) => break "agent disconnected".to_string(),
                    Err(e) => break format!("agent connection broke: {}", e.message()),
                }
            };
            state.lock().agent_detached(&name, conn, &why);
        });
        let stream = UnboundedReceiverStream::new(rx).map(Ok);
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Dropped with the event stream of a Run call: if the job is still going
/// and no other scrun re-attached to it, its scrun has gone away.
struct ClientGuard {
    state: Arc<Mutex<State>>,
    job: u64,
    call: u64,
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.state.lock().client_gone(self.job, self.call);
    }
}
