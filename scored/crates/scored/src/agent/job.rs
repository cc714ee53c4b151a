//! A job's share of one node: its cgroup, its PMIx namespace, its ranks,
//! their stdin and the fences in progress.

use super::cgroup::{CgroupRoot, JobCgroup};
use super::eth_grant::EthGrants;
use super::pmi;
use super::pmstats;
use super::rank;
use super::retained::Retained;
use super::spawn::{spawn, RankProcess, RankSpawn};
use super::Internal;
use score_pmix::{FenceReply, JobLayout, PmixServer};
use score_proto::v1::{
    agent_message, AgentMessage, Credit, FenceComplete, FenceContribution, HeldJob, JobInfo,
    OutputMark, RankExit, StdinChunk,
};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;

/// How long a cleanup waits for the processes to die and their output and
/// exits to be reported.
const CLEANUP_WITHIN: Duration = Duration::from_secs(10);

/// Who waits for a fence of the job on this node: libpmix's clients, or
/// the ranks in a PMI barrier (pmi.rs).  Dropped uncompleted, it fails the
/// fence for them.
pub enum FenceWaiter {
    Pmix(FenceReply),
    Pmi(oneshot::Sender<pmi::FenceResult>),
}

impl FenceWaiter {
    fn complete(self, data: Vec<u8>) {
        match self {
            FenceWaiter::Pmix(reply) => reply.complete(Ok(data)),
            FenceWaiter::Pmi(reply) => {
                let _ = reply.send(Ok(data));
            }
        }
    }
}

pub struct AgentJob {
    pub id: u64,
    pub nspace: String,
    pub cgroup: JobCgroup,
    tmpdir: PathBuf,
    single_node: bool,
    watchers: Vec<JoinHandle<()>>,
    /// Ranks started but not yet followed: watching starts only after the
    /// agent reported the launch, so that no exit overtakes it.
    unwatched: Vec<(RankProcess, u32)>,
    node: String,
    stdin: Option<mpsc::UnboundedSender<StdinChunk>>,
    /// Bytes of output the master lets this node send (flow control):
    /// the ranks' pumps take from it, the master's credits add to it.
    credit: Arc<Semaphore>,
    /// The output sent and not yet printed by scrun.
    retained: Arc<Retained>,
    /// stdin for rank 0 that came before rank 0 was started.
    pending_stdin: Vec<StdinChunk>,
    next_fence: u64,
    /// Fences entered here and not complete: the reply to the clients and
    /// the contribution (sent again to a restarted master).
    fences: BTreeMap<u64, (FenceWaiter, Vec<u8>)>,
    /// The task serving the node's ranks PMI-1 (pmi.rs).
    pmi: Option<JoinHandle<()>>,
    /// The last fence completed here, (seq, data): reported to a restarted
    /// master, for the nodes its completion may not have reached.
    last_fence: Option<(u64, Vec<u8>)>,
    started: bool,
    /// The launch was reported a success.
    launched: bool,
    /// The exits of the node's ranks, as reported.
    exits: Vec<RankExit>,
    cleaning: bool,
    info: JobInfo,
    node_index: u32,
    /// The master's secret PM key for the job (LaunchJob.pm_jobkey).
    pm_jobkey: u64,
    /// When the master's launch came, for the launch's timings.
    pub launch_at: Instant,
}

impl AgentJob {
    /// The job's record on this node, with its cgroup and working directory
    /// made.  Registering its PMIx namespace ([`AgentJob::layout`]) blocks
    /// on libpmix's progress thread, so the agent does it off its event
    /// loop and then calls [`AgentJob::start`].  The record is kept even
    /// when a step fails, so that the master's cleanup finds whatever was
    /// made.
    pub fn prepare(
        info: JobInfo,
        node_index: u32,
        pm_jobkey: u64,
        node: &str,
        cgroups: &CgroupRoot,
        jobs_dir: &Path,
    ) -> (AgentJob, Result<(), String>) {
        let mut job = AgentJob {
            id: info.id,
            nspace: if info.nspace.is_empty() {
                format!("score.{}", info.id)
            } else {
                info.nspace.clone()
            },
            cgroup: cgroups.job(info.id),
            tmpdir: jobs_dir.join(format!("job-{}", info.id)),
            single_node: info.nodes.len() == 1,
            watchers: Vec::new(),
            unwatched: Vec::new(),
            node: node.to_string(),
            stdin: None,
            credit: Arc::new(Semaphore::new(0)),
            retained: Arc::default(),
            pending_stdin: Vec::new(),
            next_fence: 0,
            fences: BTreeMap::new(),
            pmi: None,
            last_fence: None,
            started: false,
            launched: false,
            exits: Vec::new(),
            cleaning: false,
            info,
            node_index,
            pm_jobkey,
            launch_at: Instant::now(),
        };
        let r = job.make_room();
        (job, r)
    }

    fn make_room(&mut self) -> Result<(), String> {
        let info = &self.info;
        self.cgroup
            .create()
            .map_err(|e| format!("cannot create the job cgroup: {e}"))?;
        std::fs::create_dir_all(&self.tmpdir)
            .and_then(|()| {
                std::fs::set_permissions(&self.tmpdir, std::fs::Permissions::from_mode(0o700))
            })
            .and_then(|()| std::os::unix::fs::chown(&self.tmpdir, Some(info.uid), Some(info.gid)))
            .map_err(|e| format!("cannot create {}: {e}", self.tmpdir.display()))
    }

    /// What PMIx must know of the job.
    pub fn layout(&self) -> JobLayout {
        JobLayout {
            nspace: self.nspace.clone(),
            uid: self.info.uid,
            gid: self.info.gid,
            nodes: self.info.nodes.clone(),
            ppn: self.info.spec.as_ref().map_or(0, |s| s.ppn),
            node_index: self.node_index,
            tmpdir: self.tmpdir.clone(),
            pm_jobkey: self.pm_jobkey,
        }
    }

    /// The namespace is registered: start the node's ranks.  Runs on the
    /// agent's event loop, whose threads live as long as the agent (the
    /// ranks die with the thread that started them: PR_SET_PDEATHSIG).
    /// What is written to rank 0's stdin is reported on `out`.
    pub fn start(
        &mut self,
        pmix: &PmixServer,
        out: &mpsc::UnboundedSender<AgentMessage>,
        internal: &mpsc::UnboundedSender<Internal>,
        cpus: &[u32],
        eth: Option<&EthGrants>,
    ) -> Result<Vec<u32>, String> {
        self.started = true;
        let info = self.info.clone();
        let (node_index, node) = (self.node_index, self.node.clone());
        let spec = info.spec.as_ref().ok_or("the job has no spec")?;
        let cgroup = self.cgroup.path().to_path_buf();
        let size = spec.nodes * spec.ppn;
        let mut pids = Vec::new();
        let mut pmi_conns = Vec::new();
        for local in 0..spec.ppn {
            let rank = node_index * spec.ppn + local;
            let mut env: BTreeMap<String, String> = spec.env.clone().into_iter().collect();
            for (k, v) in pmix
                .setup_fork(&self.nspace, rank)
                .map_err(|e| format!("PMIx setup for rank {rank}: {e}"))?
            {
                env.insert(k, v);
            }
            // Open MPI's shared-memory segments go to the job's directory,
            // which goes with the job, not to /dev/shm, where a killed
            // rank's would stay.
            env.entry("OMPI_MCA_btl_vader_backing_directory".into())
                .or_insert_with(|| self.tmpdir.display().to_string());
            if let Some(dir) = super::provider::provider_dir() {
                env.entry("FI_PROVIDER_PATH".into())
                    .or_insert_with(|| dir.display().to_string());
            }
            for (k, v) in [
                ("SCORE_JOB_ID", info.id.to_string()),
                ("SCORE_RANK", rank.to_string()),
                ("SCORE_SIZE", size.to_string()),
                ("SCORE_LOCAL_RANK", local.to_string()),
                ("SCORE_NODE", node.to_string()),
                ("SCORE_NODES", info.nodes.join(",")),
            ] {
                env.insert(k.to_string(), v);
            }
            // PMI-1 (MPICH), as hydra's proxies offer it: an inherited
            // socket.  A job that brings its own PMI keeps it.
            let pmi_end = if env.contains_key("PMI_FD") {
                None
            } else {
                let (theirs, ours) =
                    pmi::socket_pair().map_err(|e| format!("PMI socket for rank {rank}: {e}"))?;
                for (k, v) in [
                    ("PMI_FD", theirs.as_raw_fd().to_string()),
                    ("PMI_RANK", rank.to_string()),
                    ("PMI_SIZE", size.to_string()),
                ] {
                    env.insert(k.to_string(), v);
                }
                // MPICH refuses to guess between PMI and PMIx when it
                // finds both; the wheel's has no PMIx client anyway.
                env.entry("MPIR_CVAR_PMI_VERSION".into())
                    .or_insert_with(|| "1".into());
                pmi_conns.push((rank, ours));
                Some(theirs)
            };
            // agent.pm_net_device = "eth": the rank's raw Ethernet sockets,
            // unless the job chose its device itself.
            let grant = match eth {
                Some(eth)
                    if env
                        .get("PM_NET_DEVICE")
                        .is_none_or(|d| d.is_empty() || d == "eth") =>
                {
                    let g = eth
                        .grant(
                            env.get("PM_UDP_NICS").map(String::as_str),
                            env.get("PM_UDP_CONF").map(String::as_str),
                        )
                        .map_err(|e| {
                            format!(
                                "agent.pm_net_device = \"eth\": cannot open the raw Ethernet \
                                 sockets of rank {rank}: {e}"
                            )
                        })?;
                    env.insert("PM_ETH_GRANT".into(), g.env.clone());
                    env.insert("PM_NET_DEVICE".into(), "eth".into());
                    Some(g)
                }
                _ => None,
            };
            let mut inherit_fds: Vec<_> = pmi_end.iter().map(|fd| fd.as_raw_fd()).collect();
            inherit_fds.extend(
                grant
                    .iter()
                    .flat_map(|g| g.fds.iter().map(|fd| fd.as_raw_fd())),
            );
            let with_stdin = rank == 0 && spec.stdin_open;
            let mut child = spawn(&RankSpawn {
                argv: &spec.argv,
                env: env.into_iter().collect(),
                cwd: &spec.cwd,
                uid: info.uid,
                gid: info.gid,
                user: &info.user,
                cgroup: &cgroup,
                stdin: with_stdin,
                cpu: (!cpus.is_empty()).then(|| cpus[local as usize % cpus.len()]),
                inherit_fds,
            })
            .map_err(|e| {
                format!(
                    "cannot start {} (rank {rank}) as {} in {}: {e}",
                    spec.argv[0], info.user, spec.cwd
                )
            })?;
            pids.push(child.id());
            tracing::debug!(
                job = self.id,
                rank,
                pid = child.id(),
                born_in_cgroup = child.born_in_cgroup,
                "rank started"
            );
            if let Some(mut w) = child.stdin.take() {
                let (tx, mut rx) = mpsc::unbounded_channel::<StdinChunk>();
                for chunk in self.pending_stdin.drain(..) {
                    let _ = tx.send(chunk);
                }
                self.stdin = Some(tx);
                let (out, job) = (out.clone(), self.id);
                tokio::spawn(async move {
                    while let Some(c) = rx.recv().await {
                        if !c.data.is_empty() {
                            if w.write_all(&c.data).await.is_err() {
                                return; // rank 0 closed its stdin
                            }
                            // Written: scrun may send as much again.
                            let _ = out.send(AgentMessage {
                                job,
                                msg: Some(agent_message::Msg::StdinWritten(Credit {
                                    bytes: c.data.len() as u64,
                                })),
                            });
                        }
                        if c.eof {
                            return;
                        }
                    }
                });
            }
            self.unwatched.push((child, rank));
        }
        if !pmi_conns.is_empty() {
            let shape = score_pmi::JobShape {
                kvsname: self.nspace.clone(),
                nodes: spec.nodes,
                ppn: spec.ppn,
                node: node_index,
            };
            self.pmi = Some(pmi::serve(self.id, shape, pmi_conns, internal.clone()));
        }
        Ok(pids)
    }

    /// Follow the started ranks: their output, then their exits, go to
    /// `out`.  Called after the launch was reported.
    pub fn watch(
        &mut self,
        out: &mpsc::UnboundedSender<AgentMessage>,
        exited: &mpsc::UnboundedSender<Internal>,
    ) {
        self.launched = true;
        let links = rank::RankLinks {
            job: self.id,
            node: self.node.clone(),
            out: out.clone(),
            credit: self.credit.clone(),
            retained: self.retained.clone(),
            exited: exited.clone(),
        };
        for (child, rank) in self.unwatched.drain(..) {
            self.watchers
                .push(tokio::spawn(rank::watch(child, rank, links.clone())));
        }
    }

    /// A rank of this node exited (as reported to the master).
    pub fn exited(&mut self, exit: RankExit) {
        self.exits.push(exit);
    }

    /// What this node runs of the job, for a master it registers with.
    pub fn held(&self) -> HeldJob {
        HeldJob {
            job: self.id,
            launched: self.launched,
            frozen: self.cgroup.is_frozen(),
            exits: self.exits.clone(),
            fences: self
                .fences
                .iter()
                .map(|(&seq, (_, data))| FenceContribution {
                    seq,
                    data: data.clone(),
                })
                .collect(),
            cleaning: self.cleaning,
            last_fence: self.last_fence.as_ref().map(|(seq, data)| FenceComplete {
                seq: *seq,
                data: data.clone(),
                ok: true,
            }),
        }
    }

    /// The credit for output granted by a master that is gone: a new
    /// master grants its own once the job's scrun follows it.
    pub fn drop_credit(&self) {
        let n = self.credit.available_permits();
        self.credit.forget_permits(n);
    }

    /// The job's scrun follows it (again) and has printed up to `printed`:
    /// the credit held is dropped (the master grants afresh), and what
    /// scrun lacks is sent again.
    pub fn resume_output(&self, printed: &[OutputMark], out: &mpsc::UnboundedSender<AgentMessage>) {
        self.drop_credit();
        let n = self.retained.resend(self.id, printed, out);
        if n > 0 {
            tracing::info!(
                job = self.id,
                chunks = n,
                "resent the output its scrun lacks"
            );
        }
    }

    /// scrun printed these chunks.
    pub fn output_acked(&self, printed: &[OutputMark]) {
        self.retained.acked(printed);
    }

    /// The master lets this node send `bytes` more of the job's output.
    pub fn output_credit(&self, bytes: u64) {
        let room = Semaphore::MAX_PERMITS - self.credit.available_permits();
        self.credit
            .add_permits(usize::try_from(bytes).unwrap_or(usize::MAX).min(room));
    }

    pub fn stdin(&mut self, chunk: StdinChunk) {
        if !self.started {
            self.pending_stdin.push(chunk);
            return;
        }
        if let Some(tx) = &self.stdin {
            let eof = chunk.eof;
            let _ = tx.send(chunk);
            if eof {
                self.stdin = None;
            }
        }
    }

    /// The node's ranks entered a fence.  Single-node jobs complete it here;
    /// otherwise returns the contribution to send to the master.
    pub fn fence_enter(&mut self, data: Vec<u8>, reply: FenceWaiter) -> Option<(u64, Vec<u8>)> {
        if self.single_node {
            reply.complete(data);
            return None;
        }
        if data.len() > score_proto::FENCE_MAX_BYTES {
            tracing::warn!(
                job = self.id,
                bytes = data.len(),
                limit = score_proto::FENCE_MAX_BYTES,
                "the node's fence contribution is too large to send: the fence fails"
            );
            return None; // dropping the reply fails the fence for the ranks
        }
        let seq = self.next_fence;
        self.next_fence += 1;
        self.fences.insert(seq, (reply, data.clone()));
        Some((seq, data))
    }

    pub fn fence_complete(&mut self, seq: u64, ok: bool, data: Vec<u8>) {
        if let Some((reply, _)) = self.fences.remove(&seq) {
            if ok {
                self.last_fence = Some((seq, data.clone()));
                reply.complete(data);
            }
            // else: dropping the reply fails the fence for the clients.
        }
    }

    /// Kill the processes and wait for their reports, in the background;
    /// `done` hears about it when the cgroup is gone.
    pub fn start_cleanup(&mut self, done: mpsc::UnboundedSender<Internal>, stats_dir: &Path) {
        if self.cleaning {
            return;
        }
        self.cleaning = true;
        self.stdin = None;
        self.fences.clear();
        if let Some(pmi) = self.pmi.take() {
            pmi.abort();
        }
        let cgroup = self.cgroup.clone();
        let watchers = std::mem::take(&mut self.watchers);
        let id = self.id;
        let stats_dir = stats_dir.to_path_buf();
        let credit = self.credit.clone();
        tokio::spawn(async move {
            cgroup.destroy(CLEANUP_WITHIN).await;
            pmstats::remove_dead(&stats_dir);
            for w in watchers {
                let abort = w.abort_handle();
                if tokio::time::timeout(CLEANUP_WITHIN, w).await.is_err() {
                    // Output that waits for credit (its scrun does not
                    // read) is given up with the job.
                    credit.close();
                    abort.abort();
                }
            }
            let _ = done.send(Internal::CleanedUp(id));
        });
    }

    /// Kill everything now (no reports): the master is gone.
    pub async fn destroy(&mut self, stats_dir: &Path) {
        self.fences.clear();
        if let Some(pmi) = self.pmi.take() {
            pmi.abort();
        }
        self.stdin = None;
        self.credit.close();
        self.cgroup.destroy(CLEANUP_WITHIN).await;
        pmstats::remove_dead(stats_dir);
        for w in self.watchers.drain(..) {
            w.abort();
        }
    }

    /// Forget the PMIx namespace (off the event loop: it may block on
    /// libpmix) and the job's files.
    pub fn release(self, pmix: &Arc<PmixServer>) {
        let _ = std::fs::remove_dir_all(&self.tmpdir);
        if self.adopts() {
            return; // its namespace is its launcher's, never registered here
        }
        let pmix = pmix.clone();
        let nspace = self.nspace;
        tokio::task::spawn_blocking(move || pmix.deregister_job(&nspace));
    }

    /// Another launcher starts the ranks and hands them over (adopt.rs).
    pub fn adopts(&self) -> bool {
        self.info.spec.as_ref().is_some_and(|s| s.adopt)
    }

    pub fn is_cleaning(&self) -> bool {
        self.cleaning
    }
}
