//! The master role: one per cluster.  It keeps the node table and the job
//! queue, allocates nodes to jobs and drives the agents.
//!
//! [`state`] is the state machine, split by concern, behind one lock that a
//! panic cannot poison (state.rs says why); [`service`] is its gRPC face;
//! the tasks below drive its timers, heartbeat checks and quantum clock.

mod metrics;
mod service;
pub mod state;
mod store;

use anyhow::Context;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use score_auth::{Munge, SealedServer};
use score_config::Config;
use score_proto::v1::master_server::MasterServer;
use state::{Limits, State, Timer};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

pub use metrics::MasterMetrics;

pub async fn run(config: Config) -> anyhow::Result<()> {
    let mc = &config.master;
    let mut registry = Registry::default();
    let metrics = MasterMetrics::new(&mut registry);
    let (timer_tx, mut timer_rx) = mpsc::unbounded_channel::<Timer>();
    let mut savers = Vec::new();
    let limits = Limits {
        allow_root_jobs: mc.allow_root_jobs,
        kill_grace: mc.kill_grace_ms,
        heartbeat_timeout: mc.heartbeat_timeout_ms,
        history: mc.history,
        gang_slots: mc.gang_slots,
        quantum: mc.quantum_ms,
        network_preemption: mc.preemption == score_config::Preemption::Network,
        quiesce_timeout: mc.quiesce_timeout_ms,
        stdio_buffer: mc.stdio_buffer_kib * 1024,
        reattach_timeout: mc.reattach_timeout_ms,
    };
    let mut st = State::new(limits, &mc.nodes, timer_tx, metrics);
    // The saved state first: a master that cannot read it must not start
    // empty and make the agents kill the jobs it would have adopted.
    if mc.state_dir.is_empty() {
        tracing::warn!("master.state_dir is empty: a restart of the master will lose every job");
    } else {
        let store = Arc::new(store::Store::open(&mc.state_dir)?);
        if let Some(saved) = store.load()? {
            tracing::info!(
                file = %store::describe(std::path::Path::new(&mc.state_dir)),
                jobs = saved.jobs.len(),
                "restoring the saved state"
            );
            st.restore(saved);
        }
        let saver = Arc::new(tokio::sync::Notify::new());
        st.save_with(saver.clone(), store.clone());
        saver.notify_one();
        savers.push((store, saver));
    }
    let state = Arc::new(Mutex::new(st));
    for (store, saver) in savers {
        tokio::spawn(store::keep_saved(store, state.clone(), saver));
    }

    // Timers: each sleeps on its own task, then calls back into the state.
    let st = state.clone();
    tokio::spawn(async move {
        while let Some(t) = timer_rx.recv().await {
            let st = st.clone();
            tokio::spawn(async move {
                tokio::time::sleep(t.after).await;
                st.lock().timer_fired(t.job, t.kind);
            });
        }
    });

    // Heartbeats: look for silent agents twice per interval.
    let st = state.clone();
    let period = mc.heartbeat_interval_ms / 2;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            st.lock().check_heartbeats();
        }
    });

    // Gang scheduling: the quantum clock of the matrix.
    let st = state.clone();
    let quantum = mc.quantum_ms;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(quantum);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            st.lock().quantum_tick();
        }
    });

    if !mc.metrics_listen.is_empty() {
        let addr = crate::metrics_http::serve(
            &mc.metrics_listen,
            Arc::new(std::sync::Mutex::new(registry)),
            None,
        )
        .await?;
        tracing::info!("metrics on http://{addr}/metrics");
    }

    let addr: std::net::SocketAddr = mc
        .listen
        .parse()
        .with_context(|| format!("master.listen = {:?} is not an address:port", mc.listen))?;
    // Agents and clients accept only messages signed by master.uid: running
    // as anybody else would have every one of them refuse this master.
    let uid = nix::unistd::getuid().as_raw();
    if uid != mc.uid {
        anyhow::bail!(
            "the master runs as uid {uid} but master.uid is {}: agents, scrun and scorectl \
             would refuse every message it signs (run it as uid {} or set master.uid)",
            mc.uid,
            mc.uid
        );
    }
    let munge = Munge::new(&config.munge.socket);
    munge
        .encode(&[])
        .context("the master signs every message it sends with MUNGE")?;
    // Every refused message is logged with its reason and counted as an
    // unauthenticated request.
    let rejected = state.lock().metrics.requests_rejected.clone();
    let on_refusal: score_auth::RefusalHook = Arc::new(move |r, path, peer| {
        rejected
            .get_or_create(&vec![("reason".into(), "unauthenticated".into())])
            .inc();
        score_auth::log_refusal(r, path, peer);
    });
    let service = service::MasterService::new(state, mc.heartbeat_interval_ms);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (master.listen)"))?;
    tracing::info!("master listening on {addr}");
    // Peers that died are found by TCP keepalive, which the kernel answers
    // for a stopped process, not by HTTP/2 pings, which a scrun stopped
    // with Ctrl-Z or SIGSTOP cannot answer: its job waits for it (its output
    // is flow-controlled), it is not cancelled.  Agents have heartbeats.
    // Small messages (fences, switches, launches) go out at once: tonic's
    // `tcp_nodelay` does not apply to connections it is handed, and
    // Nagle's algorithm would hold each behind the peer's delayed ACK.
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        if let Ok(c) = &conn {
            if let Err(e) = keepalive(c) {
                tracing::warn!("cannot turn on TCP keepalive: {e}");
            }
            if let Err(e) = c.set_nodelay(true) {
                tracing::warn!("cannot turn off Nagle's algorithm: {e}");
            }
        }
        conn
    });
    // On SIGTERM the server stops accepting and lets the calls under way
    // finish, but the agents' and scruns' streams never finish by
    // themselves: after STOP_GRACE they are closed.  The state is saved
    // at every change, so the agents keep their jobs and a master started
    // again adopts them, as after a crash.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        crate::shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|&s| s).await;
    };
    let server = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(SealedServer::new(MasterServer::new(service), munge).on_refusal(on_refusal))
        .serve_with_incoming_shutdown(incoming, stopped(stop_rx.clone()));
    tokio::select! {
        served = server => served.context("gRPC server failed")?,
        () = async {
            stopped(stop_rx).await;
            tokio::time::sleep(STOP_GRACE).await;
        } => tracing::info!(
            "closed the streams still open (agents, scruns) {} s after the signal",
            STOP_GRACE.as_secs_f64()
        ),
    }
    tracing::info!("master stopped");
    Ok(())
}

/// How long the calls under way may take to finish once the master is told
/// to stop.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// TCP keepalive on an accepted connection: probes after 10 s of silence,
/// every 5 s; the connection is closed when 3 go unanswered (its host is
/// gone or cut off).
fn keepalive(conn: &tokio::net::TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = conn.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, value: libc::c_int| {
        // SAFETY: `fd` is the open socket `conn` owns for the whole call, and
        // each of these options takes an int.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                std::ptr::from_ref(&value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)
}
