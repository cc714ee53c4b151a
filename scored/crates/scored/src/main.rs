//! scored: the global daemon of score.  `scored master` runs the cluster's
//! master (job queue, allocation); `scored agent` runs on every node (spawns
//! and watches the processes of jobs, hosts their PMIx server).

mod agent;
mod master;
mod metrics_http;

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "scored",
    version,
    about = "The score cluster daemon: master (one per cluster) or agent (one per node)",
    long_about = "The score cluster daemon.\n\n\
`scored master` keeps the node table and the job queue, allocates nodes to jobs \
and drives the agents. `scored agent` runs on every compute node: it registers with \
the master, starts each job's processes in a cgroup of their own as the submitting \
user, hosts the PMIx server they bootstrap from, relays their output and reports \
their exits.\n\n\
Both read one configuration file, /etc/score/scored.toml by default (see \
docs/scored/admin.md). Logs go to stderr; RUST_LOG (e.g. RUST_LOG=debug) sets the \
level.\n\n\
Examples:\n  scored master --config /etc/score/scored.toml\n  scored agent"
)]
struct Cli {
    /// Configuration file [default: $SCORE_CONFIG, else /etc/score/scored.toml]
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand)]
enum Role {
    /// Run the master: job queue, node allocation, the agents' control.
    Master,
    /// Run a node's agent: processes, cgroups, PMIx server, metrics.
    Agent {
        /// This node's name [default: agent.node_name, else the host name]
        #[arg(long)]
        node: Option<String>,
    },
}

/// Resolves on SIGTERM or SIGINT: both stop the daemon cleanly.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let config = score_config::Config::load(cli.config.as_deref()).context("configuration")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let result = rt.block_on(async move {
        match cli.role {
            Role::Master => master::run(config).await,
            Role::Agent { node } => agent::run(config, node).await,
        }
    });
    if let Err(e) = &result {
        eprintln!("scored: error: {e:#}");
        std::process::exit(1);
    }
    Ok(())
}
