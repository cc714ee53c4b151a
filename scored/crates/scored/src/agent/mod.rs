//! The agent role: one per node.  It keeps one connection (an Attach stream)
//! to the master for its whole life, launches the node's share of each job,
//! serves the job's PMIx clients and reports everything that happens.
//!
//! If the master connection is lost, the agent keeps the node's jobs running
//! and tries to re-attach: a restarted master adopts them (the agent
//! reports each in its `Register`, and resends the output their scruns
//! lack).  If no master is back within `[agent] master_wait_ms`, it kills
//! them: a job cannot go on for long without its stdio, fences and control.
//!
//! Every message to the master goes through one channel that outlives the
//! connections (the outbox); each connection forwards it to its stream.

mod adopt;
mod cgroup;
mod eth_grant;
mod job;
mod metrics;
mod pmi;
mod pmstats;
mod preempt;
mod provider;
mod rank;
mod retained;
mod spawn;

use anyhow::{anyhow, Context};
use cgroup::CgroupRoot;
use job::{AgentJob, FenceWaiter};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use score_auth::{MasterClient, Munge, RefusalHook};
use score_config::{Config, PmNetDevice};
use score_pmix::{PmixServer, ServerEvent};
use score_proto::v1::{
    agent_message, master_message, AgentMessage, Drained, FenceContribution, Heartbeat, Launched,
    MasterMessage, RankAborted, Register, Switched,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// Internal events from the agent's own tasks.
enum Internal {
    /// A rank's exit, for the master (after its output and any PMIx event
    /// already queued).
    Exited(AgentMessage),
    /// A job's processes are gone and its cgroup removed.
    CleanedUp(u64),
    /// Every rank of a job on this node entered a PMI barrier (pmi.rs):
    /// `data` is the node's contribution to the job's fence.
    PmiFence {
        job: u64,
        data: Vec<u8>,
        reply: tokio::sync::oneshot::Sender<pmi::FenceResult>,
    },
    /// A rank called PMI_Abort.
    PmiAbort {
        job: u64,
        rank: u32,
        status: i32,
        message: String,
    },
    /// libpmix has registered a job's namespace (or failed to).
    Registered {
        job: u64,
        nspace: String,
        result: Result<(), String>,
        /// Since the launch came: when the registration began and ended.
        began: Duration,
        ended: Duration,
    },
}

struct Agent {
    node: String,
    slots: u32,
    /// agent.cpus: the CPUs the ranks are bound to, in order.
    cpus: Vec<u32>,
    /// agent.pm_net_device = "eth": opens the ranks' raw Ethernet sockets.
    eth: Option<eth_grant::EthGrants>,
    boot_id: u64,
    metrics_url: String,
    cgroups: CgroupRoot,
    jobs_dir: PathBuf,
    stats_dir: PathBuf,
    pmix: Arc<PmixServer>,
    jobs: HashMap<u64, AgentJob>,
    /// The outbox: every message to the master, whichever connection
    /// carries it.
    out: mpsc::UnboundedSender<AgentMessage>,
    /// Since when the agent has had no master (None while attached).
    masterless_since: Option<Instant>,
    /// Connection attempts since the last success.
    retries: u32,
    internal_tx: mpsc::UnboundedSender<Internal>,
    killed_at_start: Vec<u64>,
    /// The uid the master runs as (`master.uid`): the agent obeys only
    /// messages signed by it.
    master_uid: u32,
    /// Logs and counts every message from "the master" that fails to open.
    on_refusal: RefusalHook,
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

fn send(out: &mpsc::UnboundedSender<AgentMessage>, job: u64, msg: agent_message::Msg) {
    let _ = out.send(AgentMessage {
        job,
        msg: Some(msg),
    });
}

/// agent.cpus must be CPUs the agent may run on: a rank bound elsewhere
/// would fail to start, long after the mistake.
fn check_cpus(cpus: &[u32]) -> anyhow::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    // SAFETY: sched_getaffinity fills the zeroed set it is given.
    let allowed = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
        }
        set
    };
    // SAFETY: CPU_ISSET reads the set; the config refuses numbers beyond CPU_SETSIZE.
    let outside: Vec<u32> = cpus
        .iter()
        .copied()
        .filter(|&c| unsafe { !libc::CPU_ISSET(c as usize, &allowed) })
        .collect();
    if !outside.is_empty() {
        anyhow::bail!(
            "agent.cpus names CPU(s) {outside:?}, which this agent may not use (its affinity); \
             see the node's topology (role score_smp) or leave agent.cpus empty"
        );
    }
    Ok(())
}

pub async fn run(config: Config, node: Option<String>) -> anyhow::Result<()> {
    let ac = &config.agent;
    let node = node
        .or_else(|| (!ac.node_name.is_empty()).then(|| ac.node_name.clone()))
        .unwrap_or_else(host_name);
    let slots = if ac.slots == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
    } else {
        ac.slots
    };
    check_cpus(&ac.cpus)?;
    let eth = match ac.pm_net_device {
        PmNetDevice::Udp => None,
        PmNetDevice::Eth => {
            let eth = eth_grant::EthGrants::load()?;
            tracing::info!(
                libpm = %eth.library,
                "agent.pm_net_device = \"eth\": ranks get raw Ethernet sockets opened by the agent"
            );
            Some(eth)
        }
    };
    let cgroups = CgroupRoot::open(&ac.cgroup_root).context("job cgroups (agent.cgroup_root)")?;
    let state_dir = PathBuf::from(&ac.state_dir);
    let jobs_dir = state_dir.join("jobs");
    let pmix_dir = state_dir.join("pmix");
    for d in [&state_dir, &jobs_dir, &pmix_dir] {
        std::fs::create_dir_all(d)
            .with_context(|| format!("cannot create {} (agent.state_dir)", d.display()))?;
    }

    // Whatever an earlier agent left on this node is dead weight: its job
    // ended when that agent's connection did.
    let killed_at_start = cgroups.leftover_jobs();
    for j in &killed_at_start {
        tracing::warn!(job = j, "killing a job left by an earlier agent");
        cgroups.job(*j).destroy(Duration::from_secs(10)).await;
        let _ = std::fs::remove_dir_all(jobs_dir.join(format!("job-{j}")));
    }

    let stats_dir =
        PathBuf::from(std::env::var("PM_STATS_DIR").unwrap_or_else(|_| "/dev/shm".into()));
    pmstats::remove_dead(&stats_dir);

    let (pmix, mut pmix_events) =
        PmixServer::init(&pmix_dir).map_err(|e| anyhow!("cannot start the PMIx server: {e}"))?;

    // Messages from whatever answers at the master's address that this
    // agent refused (an impostor, an altered message), by the check failed.
    let refused: Family<Vec<(String, String)>, Counter> = Family::default();
    let on_refusal: RefusalHook = {
        let (refused, master) = (refused.clone(), ac.master.clone());
        Arc::new(move |r, path, _| {
            refused
                .get_or_create(&vec![("check".into(), r.check.label().into())])
                .inc();
            tracing::warn!(
                %master,
                path,
                check = r.check.label(),
                "refused a message from the master: {}",
                r.reason
            );
        })
    };
    let metrics_url = if ac.metrics_listen.is_empty() {
        String::new()
    } else {
        let mut registry = Registry::default();
        registry.register(
            "score_agent_refused_messages",
            "Messages from the master's address refused by the agent (not sealed, bad \
             credential, altered or sealed without the call's key, out of sequence), by the check that failed",
            refused,
        );
        registry.register_collector(Box::new(metrics::AgentCollector {
            cgroups: cgroups.clone(),
            stats_dir: stats_dir.clone(),
            node: node.clone(),
        }));
        let addr =
            crate::metrics_http::serve(&ac.metrics_listen, Arc::new(Mutex::new(registry)), None)
                .await?;
        format!("http://{addr}/metrics")
    };

    let (stop_tx, mut stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        crate::shutdown_signal().await;
        let _ = stop_tx.send(true);
    });

    let (adopt_tx, mut adoptions) = mpsc::unbounded_channel();
    let adopt_socket = state_dir.join("adopt.sock");
    adopt::serve(&adopt_socket, adopt_tx).with_context(|| {
        format!(
            "cannot listen on {} (the adoption socket)",
            adopt_socket.display()
        )
    })?;

    let (internal_tx, mut internal_rx) = mpsc::unbounded_channel();
    let (out, mut outbox) = mpsc::unbounded_channel();
    let mut agent = Agent {
        node,
        slots,
        cpus: ac.cpus.clone(),
        eth,
        boot_id: score_config_boot_id(),
        metrics_url,
        cgroups,
        jobs_dir,
        stats_dir,
        pmix: Arc::new(pmix),
        jobs: HashMap::new(),
        out,
        masterless_since: Some(Instant::now()),
        retries: 0,
        internal_tx,
        killed_at_start,
        master_uid: config.master.uid,
        on_refusal,
    };
    let munge = Munge::new(&config.munge.socket);
    tracing::info!(node = %agent.node, slots, master = %ac.master, "agent starting");
    loop {
        let r = agent
            .session(
                &ac.master,
                &munge,
                &mut Channels {
                    outbox: &mut outbox,
                    pmix_events: &mut pmix_events,
                    internal_rx: &mut internal_rx,
                    adoptions: &mut adoptions,
                    stop: &mut stop_rx,
                },
            )
            .await;
        match r {
            Ok(()) => break,
            Err(e) => tracing::warn!("{e:#}; retrying"),
        }
        // The jobs keep running for a master that comes back in time.
        let since = *agent.masterless_since.get_or_insert_with(Instant::now);
        if !agent.jobs.is_empty() && since.elapsed() >= ac.master_wait_ms {
            tracing::warn!(
                jobs = agent.jobs.len(),
                "no master for {} s (agent.master_wait_ms): killing the node's jobs",
                since.elapsed().as_secs()
            );
            agent.abandon_all().await;
        }
        // Soon at first (a restarted master is back within a second or
        // two), then every reconnect_ms.
        let backoff = RETRY_FIRST
            .saturating_mul(1 << agent.retries.min(16))
            .min(ac.reconnect_ms);
        agent.retries += 1;
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop_rx.changed() => break,
        }
    }
    agent.abandon_all().await;
    tracing::info!("agent stopped");
    Ok(())
}

/// Distinguishes this start of the agent from earlier ones.
fn score_config_boot_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id())
}

/// What the agent's event loop listens to, besides the master.
struct Channels<'a> {
    outbox: &'a mut mpsc::UnboundedReceiver<AgentMessage>,
    pmix_events: &'a mut mpsc::UnboundedReceiver<ServerEvent>,
    internal_rx: &'a mut mpsc::UnboundedReceiver<Internal>,
    adoptions: &'a mut mpsc::UnboundedReceiver<adopt::Adoption>,
    stop: &'a mut watch::Receiver<bool>,
}

/// The first retry after the master was lost comes this soon; each next
/// one twice as late, up to `[agent] reconnect_ms`.
const RETRY_FIRST: Duration = Duration::from_millis(50);

/// A connection attempt that takes longer than this has failed.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);

impl Agent {
    /// One connection to the master, until it breaks (Err) or the agent is
    /// told to stop (Ok).
    async fn session(
        &mut self,
        master: &str,
        munge: &Munge,
        ch: &mut Channels<'_>,
    ) -> anyhow::Result<()> {
        // Sealed both ways: every message the agent sends carries its (root)
        // credential; every message it receives must carry the master's.
        let connect = score_auth::connect_channel(master, munge.clone(), self.master_uid);
        let channel = tokio::select! {
            c = tokio::time::timeout(CONNECT_WITHIN, connect) => c
                .map_err(|_| anyhow!("no answer from the master at {master} within {} s", CONNECT_WITHIN.as_secs()))??,
            _ = ch.stop.changed() => return Ok(()),
        };
        let mut client = MasterClient::new(channel.on_refusal(self.on_refusal.clone()));
        let (stream_tx, stream_rx) = mpsc::unbounded_channel();
        // What the last connection left in the outbox: launches, exits,
        // aborts and cleanups still count (the master ignores what it
        // already has); the rest answered the old master (switches,
        // credits, heartbeats) or is sent again (output, on OutputResume;
        // fences, in the Register).
        let mut kept = Vec::new();
        while let Ok(m) = ch.outbox.try_recv() {
            if matches!(
                m.msg,
                Some(
                    agent_message::Msg::Launched(_)
                        | agent_message::Msg::Exited(_)
                        | agent_message::Msg::Aborted(_)
                        | agent_message::Msg::Cleaned(_)
                )
            ) {
                kept.push(m);
            }
        }
        for j in self.jobs.values() {
            j.drop_credit();
        }
        send(
            &stream_tx,
            0,
            agent_message::Msg::Register(Register {
                node: self.node.clone(),
                slots: self.slots,
                boot_id: self.boot_id,
                metrics_url: self.metrics_url.clone(),
                jobs: self.killed_at_start.clone(),
                held: self.jobs.values().map(AgentJob::held).collect(),
            }),
        );
        for m in kept {
            let _ = stream_tx.send(m);
        }
        let mut inbound = client
            .attach(UnboundedReceiverStream::new(stream_rx))
            .await
            .map_err(|s| anyhow!("the master refused this agent: {}", s.message()))?
            .into_inner();
        self.killed_at_start.clear();
        self.retries = 0;
        if let Some(since) = self.masterless_since.take() {
            tracing::info!(
                master,
                jobs = self.jobs.len(),
                "attached to the master (after {:.1} s without one)",
                since.elapsed().as_secs_f64()
            );
        }
        let mut heartbeat = tokio::time::interval(Duration::from_secs(2));
        loop {
            // Biased: a PMIx event (an abort) queued before a rank's exit
            // reaches the master before that exit does.
            tokio::select! {
                biased;
                m = inbound.message() => match m {
                    Ok(Some(m)) => {
                        if let Some(period) = self.handle_master(m) {
                            heartbeat = tokio::time::interval(period);
                        }
                    }
                    Ok(None) => return Err(anyhow!("the master closed the connection")),
                    Err(s) => return Err(anyhow!("lost the master: {}", s.message())),
                },
                Some(ev) = ch.pmix_events.recv() => self.handle_pmix(ev),
                Some(ev) = ch.internal_rx.recv() => self.handle_internal(ev),
                Some(a) = ch.adoptions.recv() => self.adopt(a),
                Some(m) = ch.outbox.recv() => { let _ = stream_tx.send(m); }
                _ = heartbeat.tick() => send(&stream_tx, 0, agent_message::Msg::Heartbeat(Heartbeat {})),
                _ = ch.stop.changed() => return Ok(()),
            }
        }
    }

    /// Returns a new heartbeat period when the master sets one.
    fn handle_master(&mut self, m: MasterMessage) -> Option<Duration> {
        let id = m.job;
        match m.msg? {
            master_message::Msg::Welcome(w) => {
                return Some(Duration::from_millis(w.heartbeat_interval_ms.max(10)));
            }
            master_message::Msg::Launch(l) => {
                let info = l.job?;
                let (job, made) = AgentJob::prepare(
                    info,
                    l.node_index,
                    l.pm_jobkey,
                    &self.node,
                    &self.cgroups,
                    &self.jobs_dir,
                );
                match made {
                    // Another launcher starts its ranks: no namespace to
                    // register, nothing to start; they come through adopt.rs.
                    Ok(()) if job.adopts() => {
                        self.jobs.insert(id, job);
                        self.launched(id, Ok(Vec::new()));
                        return None;
                    }
                    Ok(()) => {
                        // Registering blocks on libpmix's progress thread,
                        // which a rank frozen in the middle of its PMIx
                        // handshake can hold up: never on the event loop.
                        let (pmix, layout) = (self.pmix.clone(), job.layout());
                        let done = self.internal_tx.clone();
                        let launch_at = job.launch_at;
                        tokio::task::spawn_blocking(move || {
                            let began = launch_at.elapsed();
                            let result = pmix
                                .register_job(&layout)
                                .map_err(|e| format!("PMIx cannot register the job: {e}"));
                            let _ = done.send(Internal::Registered {
                                job: id,
                                nspace: layout.nspace,
                                result,
                                began,
                                ended: launch_at.elapsed(),
                            });
                        });
                    }
                    Err(e) => self.launched(id, Err(e)),
                }
                self.jobs.insert(id, job);
            }
            master_message::Msg::Stdin(chunk) => {
                if let Some(j) = self.jobs.get_mut(&id) {
                    j.stdin(chunk);
                }
            }
            master_message::Msg::OutputCredit(c) => {
                if let Some(j) = self.jobs.get(&id) {
                    j.output_credit(c.bytes);
                }
            }
            master_message::Msg::OutputResume(r) => {
                if let Some(j) = self.jobs.get(&id) {
                    j.resume_output(&r.delivered, &self.out);
                }
            }
            master_message::Msg::OutputAck(a) => {
                if let Some(j) = self.jobs.get(&id) {
                    j.output_acked(&a.delivered);
                }
            }
            master_message::Msg::Signal(s) => {
                if let Some(j) = self.jobs.get(&id) {
                    j.cgroup.signal(s.signal);
                }
            }
            master_message::Msg::Fence(f) => {
                if let Some(j) = self.jobs.get_mut(&id) {
                    j.fence_complete(f.seq, f.ok, f.data);
                }
            }
            master_message::Msg::Preempt(p) => {
                let cgroups = self.cgroups_of(&p.jobs);
                let (out, stats_dir) = (self.out.clone(), self.stats_dir.clone());
                let timeout = Duration::from_millis(p.quiesce_timeout_ms);
                tokio::spawn(async move {
                    let r = if p.network {
                        preempt::drain(&cgroups, &stats_dir, timeout).await
                    } else {
                        preempt::DrainReport::default()
                    };
                    send(
                        &out,
                        0,
                        agent_message::Msg::Drained(Drained {
                            switch_id: p.switch_id,
                            contexts: r.contexts,
                            unanswered: r.unanswered,
                            quiesce_ns: r.quiesce_ns,
                            silent: r.silent,
                        }),
                    );
                });
            }
            master_message::Msg::Switch(sw) => {
                let freeze = self.cgroups_of(&sw.freeze);
                let thaw = self.cgroups_of(&sw.thaw);
                let (out, stats_dir) = (self.out.clone(), self.stats_dir.clone());
                tokio::spawn(async move {
                    preempt::switch(&freeze, &thaw, &stats_dir).await;
                    send(
                        &out,
                        0,
                        agent_message::Msg::Switched(Switched {
                            switch_id: sw.switch_id,
                        }),
                    );
                });
            }
            master_message::Msg::Cleanup(_) => match self.jobs.get_mut(&id) {
                Some(j) => j.start_cleanup(self.internal_tx.clone(), &self.stats_dir),
                // Never launched here (or already gone): nothing to clean.
                None => send(
                    &self.out,
                    id,
                    agent_message::Msg::Cleaned(Default::default()),
                ),
            },
        }
        None
    }

    /// A task of another launcher asks to join an adopted job (adopt.rs).
    fn adopt(&mut self, a: adopt::Adoption) {
        let adopt::Request { job, pid } = a.request;
        let result = match self.jobs.get(&job) {
            None => Err(format!("job {job} does not run on node {}", self.node)),
            Some(j) if !j.adopts() => Err(format!(
                "job {job} was not submitted for adoption (srun --score-gang)"
            )),
            Some(j) if j.is_cleaning() => Err(format!("job {job} is ending")),
            Some(j) => j
                .cgroup
                .add(pid)
                .map(|()| {
                    tracing::info!(job, pid, "adopted a process");
                    self.stats_dir.display().to_string()
                })
                .map_err(|e| format!("cannot move process {pid} into job {job}'s cgroup: {e}")),
        };
        let _ = a.reply.send(result);
    }

    /// The cgroups of those of `jobs` that run here.
    fn cgroups_of(&self, jobs: &[u64]) -> Vec<cgroup::JobCgroup> {
        jobs.iter()
            .filter_map(|j| self.jobs.get(j))
            .map(|j| j.cgroup.clone())
            .collect()
    }

    fn handle_pmix(&mut self, ev: ServerEvent) {
        match ev {
            ServerEvent::Fence {
                nspace,
                data,
                reply,
                ..
            } => {
                let Some(j) = self.jobs.values_mut().find(|j| j.nspace == nspace) else {
                    tracing::warn!(%nspace, "fence for an unknown job");
                    return; // dropping the reply fails the fence
                };
                let id = j.id;
                self.fence_enter(id, data, FenceWaiter::Pmix(reply));
            }
            ServerEvent::Abort {
                nspace,
                rank,
                status,
                message,
            } => {
                if let Some(j) = self.jobs.values().find(|j| j.nspace == nspace) {
                    self.aborted(j.id, rank, status, message);
                }
            }
            ServerEvent::ClientConnected { nspace, rank } => {
                tracing::debug!(%nspace, rank, "PMIx client connected")
            }
            ServerEvent::ClientFinalized { nspace, rank } => {
                tracing::debug!(%nspace, rank, "PMIx client finalized")
            }
        }
    }

    /// The node's ranks of job `id` entered a fence (PMIx's or a PMI
    /// barrier): completed here for a single-node job, else the node's
    /// contribution goes to the master.
    fn fence_enter(&mut self, id: u64, data: Vec<u8>, waiter: FenceWaiter) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return; // dropping the waiter fails the fence
        };
        if let Some((seq, data)) = j.fence_enter(data, waiter) {
            send(
                &self.out,
                id,
                agent_message::Msg::Fence(FenceContribution { seq, data }),
            );
        }
    }

    /// A rank of job `id` aborted the job (PMIx_Abort, PMI_Abort).
    fn aborted(&self, id: u64, rank: u32, status: i32, message: String) {
        send(
            &self.out,
            id,
            agent_message::Msg::Aborted(RankAborted {
                rank,
                status,
                message,
            }),
        );
    }

    /// Tell the master how the launch went; then follow the ranks.
    fn launched(&mut self, id: u64, result: Result<Vec<u32>, String>) {
        let reply = match result {
            Ok(pids) => Launched {
                ok: true,
                error: String::new(),
                pids,
            },
            Err(e) => {
                tracing::warn!(job = id, "launch failed: {e}");
                Launched {
                    ok: false,
                    error: e,
                    pids: Vec::new(),
                }
            }
        };
        send(&self.out, id, agent_message::Msg::Launched(reply));
        if let Some(job) = self.jobs.get_mut(&id) {
            job.watch(&self.out, &self.internal_tx);
        }
    }

    fn handle_internal(&mut self, ev: Internal) {
        match ev {
            Internal::Exited(msg) => {
                if let (Some(j), Some(agent_message::Msg::Exited(e))) =
                    (self.jobs.get_mut(&msg.job), &msg.msg)
                {
                    if let Some(exit) = &e.exit {
                        j.exited(exit.clone());
                    }
                }
                let _ = self.out.send(msg);
            }
            Internal::Registered {
                job,
                nspace,
                result,
                began,
                ended,
            } => match self.jobs.get_mut(&job) {
                Some(j) if !j.is_cleaning() => {
                    let picked_up = j.launch_at.elapsed();
                    let r = result.and_then(|()| {
                        j.start(
                            &self.pmix,
                            &self.out,
                            &self.internal_tx,
                            &self.cpus,
                            self.eth.as_ref(),
                        )
                    });
                    // Where a launch's time goes on this node (scrun -vv
                    // shows only the whole, between "launching" and
                    // "running"): RUST_LOG=debug.
                    tracing::debug!(
                        job,
                        register_began_us = began.as_micros() as u64,
                        registered_us = ended.as_micros() as u64,
                        start_began_us = picked_up.as_micros() as u64,
                        started_us = j.launch_at.elapsed().as_micros() as u64,
                        "launch timings since the master's launch came"
                    );
                    self.launched(job, r);
                }
                Some(_) => {} // being cleaned: its release deregisters
                None => {
                    // Gone while registering (the master lost): undo.
                    let pmix = self.pmix.clone();
                    tokio::task::spawn_blocking(move || pmix.deregister_job(&nspace));
                }
            },
            Internal::PmiFence { job, data, reply } => {
                self.fence_enter(job, data, FenceWaiter::Pmi(reply));
            }
            Internal::PmiAbort {
                job,
                rank,
                status,
                message,
            } => self.aborted(job, rank, status, message),
            Internal::CleanedUp(id) => {
                if let Some(j) = self.jobs.remove(&id) {
                    j.release(&self.pmix);
                }
                send(
                    &self.out,
                    id,
                    agent_message::Msg::Cleaned(Default::default()),
                );
            }
        }
    }

    /// Kill and forget every job (no master for too long, or we stop).
    async fn abandon_all(&mut self) {
        for (id, mut j) in self.jobs.drain() {
            tracing::warn!(job = id, "killing the job: no master");
            j.destroy(&self.stats_dir).await;
            j.release(&self.pmix);
        }
    }
}
