//! scorectl: show and manage the jobs and nodes of a score cluster.
//! The user guide is docs/scored/user.md.

use score_client as client;
mod json;
mod table;

use anyhow::{anyhow, Result};
use clap::{Parser, Subcommand};
use score_proto::v1::{
    CancelRequest, ListJobsRequest, ListNodesRequest, MatrixRequest, NodeRequest, ShowJobRequest,
};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// The master refused the request, or could not be reached.
const EXIT_ERROR: u8 = 1;
/// The command line is wrong.
const EXIT_USAGE: u8 = 2;

const LONG_ABOUT: &str = "\
Show and manage the jobs and nodes of a score cluster.

scorectl asks the scored master (authenticated with MUNGE, like scrun) and \
prints what it answers: aligned tables for people, or JSON with --json for \
scripts. The master decides who may cancel a job or drain and resume a \
node, and says why when it refuses.";

const AFTER_LONG_HELP: &str = "\
EXAMPLES:
    scorectl nodes
        NODE  STATE    SLOTS  JOBS  REASON
        n1    up           8  12
        n2    drained      8  -     bad DIMM

    scorectl jobs --all
        Queued, running and recently finished jobs.

    scorectl show 12
        Everything the master knows about job 12, including which rank failed.

    scorectl cancel 12            SIGTERM, then SIGKILL after the grace time
    scorectl cancel --kill 12     SIGKILL now

    scorectl drain n2 --reason 'bad DIMM'
    scorectl resume n2

    scorectl nodes --json | jq -r '.[] | select(.state == \"up\") | .name'
        Names of the nodes that are up (scripts wait for readiness this way).

EXIT STATUS:
    0    success
    1    the master refused the request (the message says why) or could not
         be reached
    2    the command line is wrong

ENVIRONMENT:
    SCORE_MASTER   the master's address, unless --master is given
    SCORE_CONFIG   the configuration file, unless --config is given
                   (default /etc/score/scored.toml: [client] master,
                   [munge] socket)

See docs/scored/user.md for the JSON fields and the full guide.";

#[derive(Debug, Parser)]
#[command(
    name = "scorectl",
    version,
    about = "Show and manage the jobs and nodes of a score cluster",
    long_about = LONG_ABOUT,
    after_long_help = AFTER_LONG_HELP,
    propagate_version = true
)]
struct Cli {
    /// Print JSON for scripts instead of tables (field names are stable)
    #[arg(long, global = true)]
    json: bool,

    /// The scored master's address, e.g. http://head:7100 or head
    #[arg(long, value_name = "URL", env = "SCORE_MASTER", global = true)]
    master: Option<String>,

    /// The configuration file [default: $SCORE_CONFIG, else /etc/score/scored.toml]
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List the nodes: state (up, down, drained), slots, jobs, reason
    #[command(long_about = "\
List every node the master knows: its state (up: its agent is connected; \
down: expected but not connected, or lost; drained: takes no new jobs), its \
slots (processes per job), the jobs with processes on it and why it is down \
or drained.

With --json: an array of objects with the fields name, state, reason, slots, \
jobs, last_seen_ms, address, metrics_url, boot_id.")]
    Nodes,

    /// Show the gang-scheduling matrix and switch statistics
    #[command(long_about = "\
Show the Ousterhout matrix of gang scheduling: one line per time slot, one \
column per node, the job that owns each node in each slot; `*` marks the \
slot that runs now. Then the jobs running now (a job also runs outside its \
slot when none of its nodes is taken there), and the switch statistics: \
how many switches, their duration (last, median, p99), the median time PM \
contexts took to quiesce, and how many processes were frozen without \
answering the quiesce request.

With --json: one object with the fields nodes, rows (each {slot, jobs: one \
job id or null per node}), current, running, quantum_ms, preemption \
(\"network\" or \"freeze\"), switches, switch_last_s, switch_median_s, \
switch_p99_s, quiesce_median_s, unanswered.")]
    Matrix,

    /// List the queued and running jobs (--all: also finished ones)
    #[command(long_about = "\
List the jobs in the queue and running, oldest first: id, name, owner, state, \
the nodes asked for (NODESxPPN), the time it has run, the nodes it runs on \
and, for a waiting or failed job, the reason.

With --json: an array of job objects (see `scorectl show --help`).")]
    Jobs {
        /// Include finished jobs still in the master's history
        #[arg(short, long)]
        all: bool,
    },

    /// Show everything about one job
    #[command(long_about = "\
Show one job: its command, allocation, times, exit status and, for each rank \
that has exited, its exit code or signal.

With --json: one object with the fields id, name, user, uid, gid, state, \
reason, nodes (the allocation in rank order), nodes_requested, ppn, argv, \
cwd, time_limit_ms, submit_time_ms, start_time_ms, end_time_ms, exit_status, \
exits (an array of {rank, node, code, signal}). Times are Unix epoch \
milliseconds, 0 when not yet reached.")]
    Show {
        /// The job's id (JOBID in `scorectl jobs`)
        job: u64,
    },

    /// Cancel a job: SIGTERM, then SIGKILL after the grace time (--kill: SIGKILL now)
    #[command(long_about = "\
Cancel a job, queued or running. Its processes get SIGTERM, then SIGKILL \
after the master's grace time (kill_grace_ms); with --kill they get SIGKILL \
at once. The job ends in the state cancelled and its scrun exits with 130.")]
    Cancel {
        /// The job's id
        job: u64,
        /// Kill the processes with SIGKILL at once
        #[arg(short, long)]
        kill: bool,
    },

    /// Drain a node: it takes no new jobs; its running jobs go on
    #[command(long_about = "\
Drain a node: the master places no new job on it; the jobs running there go \
on until they end. The reason is shown by `scorectl nodes`. Undo with \
`scorectl resume NODE`.")]
    Drain {
        /// The node's name, as `scorectl nodes` shows it
        node: String,
        /// Why (shown in the REASON column)
        #[arg(short, long, value_name = "TEXT", default_value = "")]
        reason: String,
    },

    /// Resume a drained node: it takes jobs again
    Resume {
        /// The node's name, as `scorectl nodes` shows it
        node: String,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            eprint!("scorectl: {}", e.render());
            return ExitCode::from(EXIT_USAGE);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("scorectl: error: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    match runtime.block_on(real_main(cli)) {
        Ok(text) => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`scorectl jobs | head -1`) is not an error.
            let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("scorectl: error: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs the command and returns what to print on stdout.
async fn real_main(cli: Cli) -> Result<String> {
    let target = client::resolve(cli.master.as_deref(), cli.config.as_deref())?;
    let mut master = client::connect(&target).await?;
    let status = |s: tonic::Status| anyhow!(client::status_message(&s, &target.master));
    let json = cli.json;
    Ok(match cli.command {
        Cmd::Nodes => {
            let nodes = master
                .list_nodes(ListNodesRequest {})
                .await
                .map_err(status)?
                .into_inner()
                .nodes;
            if json {
                json::to_string(&json::nodes(&nodes))
            } else {
                table::nodes_table(&nodes)
            }
        }
        Cmd::Matrix => {
            let m = master
                .matrix(MatrixRequest {})
                .await
                .map_err(status)?
                .into_inner();
            if json {
                json::to_string(&json::Matrix::from(&m))
            } else {
                table::matrix_table(&m)
            }
        }
        Cmd::Jobs { all } => {
            let mut jobs = master
                .list_jobs(ListJobsRequest { all })
                .await
                .map_err(status)?
                .into_inner()
                .jobs;
            jobs.sort_by_key(|j| j.id);
            if json {
                json::to_string(&json::jobs(&jobs))
            } else {
                table::jobs_table(&jobs, now_ms())
            }
        }
        Cmd::Show { job } => {
            let info = master
                .show_job(ShowJobRequest { job })
                .await
                .map_err(status)?
                .into_inner();
            if json {
                json::to_string(&json::Job::from(&info))
            } else {
                table::show_job(&info, now_ms())
            }
        }
        Cmd::Cancel { job, kill } => {
            let reply = master
                .cancel(CancelRequest { job, kill })
                .await
                .map_err(status)?
                .into_inner();
            let info = reply.job.unwrap_or_default();
            if json {
                json::to_string(&json::Job::from(&info))
            } else {
                let what = if kill { "killing" } else { "cancelling" };
                format!(
                    "job {job}: {what} (state: {})\n",
                    json::job_state(info.state)
                )
            }
        }
        Cmd::Drain { node, reason } => {
            let reply = master
                .drain(NodeRequest {
                    node: node.clone(),
                    reason,
                })
                .await
                .map_err(status)?
                .into_inner();
            node_reply(reply.node, &node, json)
        }
        Cmd::Resume { node } => {
            let reply = master
                .resume(NodeRequest {
                    node: node.clone(),
                    reason: String::new(),
                })
                .await
                .map_err(status)?
                .into_inner();
            node_reply(reply.node, &node, json)
        }
    })
}

fn node_reply(node: Option<score_proto::v1::NodeInfo>, name: &str, json: bool) -> String {
    let node = node.unwrap_or_else(|| score_proto::v1::NodeInfo {
        name: name.to_string(),
        ..Default::default()
    });
    if json {
        return json::to_string(&json::Node::from(&node));
    }
    let state = json::node_state(node.state);
    if node.reason.is_empty() {
        format!("node {}: {state}\n", node.name)
    } else {
        format!("node {}: {state} ({})\n", node.name, node.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_anywhere() {
        let c = Cli::try_parse_from(["scorectl", "nodes", "--json"]).unwrap();
        assert!(c.json && matches!(c.command, Cmd::Nodes));
        let c = Cli::try_parse_from(["scorectl", "--json", "jobs", "-a"]).unwrap();
        assert!(c.json && matches!(c.command, Cmd::Jobs { all: true }));
        let c =
            Cli::try_parse_from(["scorectl", "cancel", "12", "--kill", "--master", "h"]).unwrap();
        assert!(matches!(
            c.command,
            Cmd::Cancel {
                job: 12,
                kill: true
            }
        ));
        assert_eq!(c.master.as_deref(), Some("h"));
        let c = Cli::try_parse_from(["scorectl", "drain", "n2", "--reason", "bad DIMM"]).unwrap();
        assert!(
            matches!(c.command, Cmd::Drain { ref node, ref reason } if node == "n2" && reason == "bad DIMM")
        );
    }

    #[test]
    fn bad_command_lines() {
        use clap::error::ErrorKind;
        let kind = |argv: &[&str]| Cli::try_parse_from(argv).map(|_| ()).unwrap_err().kind();
        assert_eq!(
            kind(&["scorectl"]),
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        );
        assert_eq!(
            kind(&["scorectl", "show", "twelve"]),
            ErrorKind::ValueValidation
        );
        assert_eq!(
            kind(&["scorectl", "drain"]),
            ErrorKind::MissingRequiredArgument
        );
    }

    #[test]
    fn node_replies() {
        let n = score_proto::v1::NodeInfo {
            name: "n2".into(),
            state: score_proto::v1::NodeState::Drained as i32,
            reason: "bad DIMM".into(),
            ..Default::default()
        };
        assert_eq!(
            node_reply(Some(n.clone()), "n2", false),
            "node n2: drained (bad DIMM)\n"
        );
        assert!(node_reply(Some(n), "n2", true).contains("\"state\": \"drained\""));
    }
}
