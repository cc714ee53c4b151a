//! scrun: submit a job to the scored master and follow it to the end.
//! The user guide is docs/scored/user.md.

mod args;
use score_client as client;
mod label;
mod run;

use anyhow::{bail, Context, Result};
use args::{EnvArg, MpiTransport, NodeShape};
use clap::{CommandFactory, Parser};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// scrun's own failures (bad command line, no master, lost connection): the
/// job's status is unknown.
pub const EXIT_SCRUN_ERROR: u8 = 255;

const LONG_ABOUT: &str = "\
Run PROGRAM as a parallel job on the cluster managed by scored.

scrun submits the job to the scored master, waits while it is queued, and \
follows it until every process has exited: the standard output and error of \
every rank appear on scrun's own, scrun's standard input goes to rank 0, \
Ctrl-C cancels the job, and scrun exits with the job's exit status.

The job gets NODES whole nodes and starts PPN processes (ranks) on each, \
NODES x PPN ranks in all, numbered from 0 in node order. Every rank runs \
PROGRAM with ARGS in the current directory with scrun's environment (plus \
--env); PROGRAM is looked up in PATH on the node. The processes run as the \
user who runs scrun.

SCore's form -nodes=NxP is accepted as well as --nodes. Options go before \
PROGRAM: everything after PROGRAM is passed to it unchanged.";

const AFTER_LONG_HELP: &str = "\
EXAMPLES:
    scrun -nodes=4x2 ./a.out input.dat
        4 nodes, 2 processes on each (8 ranks).

    scrun --nodes 4 --ppn 2 --time 30m ./a.out
        The same with GNU options, killed if it runs longer than 30 minutes.

    scrun -l -N 2 hostname
        One rank on each of 2 nodes, every line prefixed with its rank:
        0: n1
        1: n2

    scrun --env OMP_NUM_THREADS=4 -N 8 ./hybrid < params.txt
        params.txt is read by rank 0.

    scrun -nodes=4x2 ./mpi_app
        An Open MPI or MPICH program: its messages go over PM (shared memory
        within a node, PM's udp device between nodes). MPICH finds its peers
        through the agent's PMI-1 (PMI_FD), Open MPI through PMIx. --mpi own
        leaves the MPI library's own transports (Open MPI: vader, tcp).

    scrun -v --name sweep -N 16 ./sweep --nodes 3
        \"--nodes 3\" is an argument of ./sweep, not of scrun.

SIGNALS:
    The first Ctrl-C (SIGINT) cancels the job: its processes get SIGTERM, then
    SIGKILL after the master's grace time. A second Ctrl-C kills them at once
    (SIGKILL); a third one makes scrun exit without waiting (the master still
    cleans up). SIGTERM and SIGHUP cancel the job like the first Ctrl-C.
    scrun waits for the job to end and exits with its status.

MASTER RESTARTS:
    If the connection to the master breaks while the job runs (the master
    was restarted), scrun re-attaches to the job, for up to --reattach-timeout
    seconds, and goes on: every line of output is printed exactly once, and
    scrun still exits with the job's status.

EXIT STATUS:
    0      every rank exited with status 0
    N      the first rank that failed exited with status N
    128+N  the first rank that failed was killed by signal N
    130    the job was cancelled (Ctrl-C, scorectl cancel)
    124    the job ran out of its time limit
    1      a node was lost or the job could not be launched
    255    scrun failed: bad command line, no master, the job was refused,
           or the connection to the master was lost (the message says which)

ENVIRONMENT:
    SCORE_MASTER   the master's address, unless --master is given
    SCORE_CONFIG   the configuration file, unless --config is given
                   (default /etc/score/scored.toml: [client] master,
                   [munge] socket)

See docs/scored/user.md for the full guide.";

#[derive(Debug, Parser)]
#[command(
    name = "scrun",
    version,
    about = "Run a parallel job on a score cluster and follow it to the end",
    long_about = LONG_ABOUT,
    after_long_help = AFTER_LONG_HELP,
    trailing_var_arg = true,
    override_usage = "scrun [OPTIONS] PROGRAM [ARGS]...\n       scrun -nodes=NxP [OPTIONS] PROGRAM [ARGS]..."
)]
struct Cli {
    /// Nodes to run on: N, or NxP for P processes on each (SCore: -nodes=NxP) [default: 1]
    #[arg(short = 'N', long, value_name = "N[xP]", value_parser = args::parse_node_shape)]
    nodes: Option<NodeShape>,

    /// Processes (ranks) per node [default: 1]
    #[arg(short = 'p', long, value_name = "P", value_parser = args::parse_ppn)]
    ppn: Option<u32>,

    /// Time limit: minutes (90), 90s, 5m, 1h, 2d, M:SS, H:MM:SS or D-HH:MM:SS; 0 means none
    #[arg(short = 't', long, value_name = "LIMIT", value_parser = args::parse_time_limit)]
    time: Option<std::time::Duration>,

    /// Set a variable in the job's environment; NAME alone copies scrun's value (repeatable)
    #[arg(short = 'e', long = "env", value_name = "NAME[=VALUE]", value_parser = args::parse_env_arg)]
    env: Vec<EnvArg>,

    /// How MPI programs communicate: pm (Open MPI and MPICH over PM, through
    /// the libfabric provider pm) or own (the MPI library's own transports).
    /// Variables set in the environment or with --env win
    #[arg(long, value_enum, value_name = "TRANSPORT", default_value_t = MpiTransport::Pm)]
    mpi: MpiTransport,

    /// Prefix every output line with the rank that wrote it ("3: text")
    #[arg(short = 'l', long)]
    label: bool,

    /// The job's name, shown by `scorectl jobs` [default: PROGRAM's base name]
    #[arg(short = 'J', long, value_name = "NAME")]
    name: Option<String>,

    /// Do not forward standard input: rank 0 reads end-of-file at once
    #[arg(long)]
    no_stdin: bool,

    /// Report the job's progress on standard error (queued, running on which nodes, ...)
    #[arg(short, long, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    verbose: u8,

    /// Print nothing of scrun's own except errors
    #[arg(short, long)]
    quiet: bool,

    /// If the master is lost while the job runs (it restarts), keep trying to
    /// re-attach to the job this long
    #[arg(long, value_name = "SECONDS", default_value_t = 90, value_parser = clap::value_parser!(u64).range(0..=86400))]
    reattach_timeout: u64,

    /// Run on exactly these nodes (comma-separated), ranks in their order;
    /// --nodes may be left out.
    #[arg(long, value_name = "NODE,...", value_delimiter = ',')]
    hosts: Vec<String>,

    /// For launchers (the SPANK plugin of `srun --score-gang`): another
    /// launcher starts the ranks and hands each to its node's agent;
    /// scored starts nothing and gang-schedules them.  PROGRAM only names
    /// the job.  scrun prints SCORE_JOB_ID=N once the job runs, and reads
    /// `done STATUS` from its stdin when the ranks ended (end of file:
    /// the job is cancelled).  docs/admin/slurm.md.
    #[arg(long, requires = "hosts")]
    adopt: bool,

    /// The scored master's address, e.g. http://head:7100 or head
    #[arg(long, value_name = "URL", env = "SCORE_MASTER")]
    master: Option<String>,

    /// The configuration file [default: $SCORE_CONFIG, else /etc/score/scored.toml]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// The program and its arguments
    #[arg(value_name = "PROGRAM", required = true, num_args = 1.., allow_hyphen_values = true)]
    command: Vec<String>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(args::preprocess_args(
        std::env::args_os(),
        &options_with_value(),
    )) {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // "scrun: error: ..." like every other error of scrun's.
            eprint!("scrun: {}", e.render());
            return ExitCode::from(EXIT_SCRUN_ERROR);
        }
        Err(e) => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    if cli.verbose >= 2 {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::new(if cli.verbose >= 3 {
                "trace"
            } else {
                "debug"
            }))
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("scrun: error: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_SCRUN_ERROR);
        }
    };
    let code = match runtime.block_on(real_main(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("scrun: error: {e:#}");
            EXIT_SCRUN_ERROR
        }
    };
    // The stdin thread may sit in a read(2) that never returns: leave
    // without waiting for it.
    run::flush_all();
    std::process::exit(code.into());
}

async fn real_main(cli: Cli) -> Result<u8> {
    let spec = job_spec(&cli)?;
    let target = client::resolve(cli.master.as_deref(), cli.config.as_deref())?;
    let opts = run::Options {
        label: cli.label,
        verbose: cli.verbose > 0,
        quiet: cli.quiet,
        forward_stdin: !cli.no_stdin,
        reattach_timeout: std::time::Duration::from_secs(cli.reattach_timeout),
        adopt: cli.adopt,
    };
    run::run(&target, spec, opts).await
}

/// scrun's options that take a value as a separate word, as clap knows them.
fn options_with_value() -> Vec<String> {
    Cli::command()
        .get_arguments()
        .filter(|a| !a.is_positional() && a.get_action().takes_values())
        .flat_map(|a| {
            let short = a.get_short().map(|c| format!("-{c}"));
            let long = a.get_long().map(|l| format!("--{l}"));
            short.into_iter().chain(long)
        })
        .collect()
}

fn job_spec(cli: &Cli) -> Result<score_proto::v1::JobSpec> {
    let shape = match (cli.nodes, cli.hosts.len()) {
        (None, n) if n > 0 => Some(NodeShape {
            nodes: n as u32,
            ppn: None,
        }),
        (shape, _) => shape,
    };
    let (nodes, ppn) = args::resolve_shape(shape, cli.ppn).map_err(anyhow::Error::msg)?;
    if !cli.hosts.is_empty() && cli.hosts.len() != nodes as usize {
        bail!(
            "--hosts names {} nodes but the job asks for {nodes}",
            cli.hosts.len()
        );
    }
    if cli.command.first().is_none_or(|p| p.is_empty()) {
        bail!("no program to run");
    }
    let mut env: HashMap<String, String> = HashMap::new();
    for (k, v) in std::env::vars_os() {
        match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => {
                env.insert(k, v);
            }
            (Ok(k), Err(_)) | (Err(_), Ok(k)) if cli.verbose > 0 => {
                eprintln!("scrun: not passing {k:?} to the job: not UTF-8");
            }
            _ => {}
        }
    }
    let extra =
        args::resolve_env_args(&cli.env, |n| std::env::var(n).ok()).map_err(anyhow::Error::msg)?;
    env.extend(extra);
    args::add_mpi_env(cli.mpi, &mut env);
    let cwd = std::env::current_dir().context("cannot get the current directory")?;
    let cwd = cwd
        .into_os_string()
        .into_string()
        .map_err(|d| anyhow::anyhow!("the current directory {d:?} is not UTF-8"))?;
    Ok(score_proto::v1::JobSpec {
        nodes,
        ppn,
        argv: cli.command.clone(),
        env,
        cwd,
        time_limit_ms: cli
            .time
            .map_or(0, |t| t.as_millis().min(u64::MAX as u128) as u64),
        name: cli.name.clone().unwrap_or_default(),
        stdin_open: !cli.no_stdin && !cli.adopt,
        hosts: cli.hosts.clone(),
        adopt: cli.adopt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(args::preprocess_args(
            argv.iter().map(|s| s.into()),
            &options_with_value(),
        ))
    }

    #[test]
    fn clap_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_option_with_a_value_is_known_to_the_preprocessor() {
        let with_value = options_with_value();
        for o in [
            "-N",
            "--nodes",
            "-p",
            "--ppn",
            "-t",
            "--time",
            "-e",
            "--env",
            "-J",
            "--name",
            "--master",
            "--config",
            "--mpi",
            "--reattach-timeout",
        ] {
            assert!(
                with_value.iter().any(|w| w == o),
                "{o} missing from {with_value:?}"
            );
        }
        assert!(!with_value.iter().any(|w| w == "-l" || w == "--no-stdin"));
    }

    #[test]
    fn mpi_takes_its_value_before_the_score_nodes_form() {
        let cli = parse(&["scrun", "--mpi", "own", "-nodes=2x1", "prog", "-nodes=9"]).unwrap();
        assert_eq!(cli.mpi, MpiTransport::Own);
        assert_eq!(cli.command, ["prog", "-nodes=9"]);
        assert!(parse(&["scrun", "--mpi", "tcp", "prog"]).is_err());
    }

    #[test]
    fn score_form_and_program_arguments() {
        let c = parse(&["scrun", "-nodes=4x2", "./prog", "--nodes", "9", "-v"]).unwrap();
        assert_eq!(
            c.nodes,
            Some(NodeShape {
                nodes: 4,
                ppn: Some(2)
            })
        );
        assert_eq!(c.command, ["./prog", "--nodes", "9", "-v"]);
        assert_eq!(c.verbose, 0);
        let s = job_spec(&c).unwrap();
        assert_eq!((s.nodes, s.ppn), (4, 2));
        assert_eq!(s.argv, ["./prog", "--nodes", "9", "-v"]);
        assert!(s.stdin_open);
        assert_eq!(s.time_limit_ms, 0);
    }

    #[test]
    fn gnu_options() {
        let c = parse(&[
            "scrun",
            "--nodes",
            "4",
            "--ppn",
            "2",
            "-t",
            "1:30",
            "-e",
            "A=1",
            "--no-stdin",
            "-l",
            "-J",
            "x",
            "prog",
        ])
        .unwrap();
        let s = job_spec(&c).unwrap();
        assert_eq!((s.nodes, s.ppn), (4, 2));
        assert_eq!(s.time_limit_ms, 90_000);
        assert_eq!(s.env.get("A").map(String::as_str), Some("1"));
        assert!(!s.stdin_open);
        assert_eq!(s.name, "x");
        assert!(c.label);
        let c = parse(&["scrun", "-N", "3", "prog"]).unwrap();
        assert_eq!(job_spec(&c).map(|s| (s.nodes, s.ppn)).unwrap(), (3, 1));
        let c = parse(&["scrun", "--nodes=2x8", "prog"]).unwrap();
        assert_eq!(job_spec(&c).map(|s| (s.nodes, s.ppn)).unwrap(), (2, 8));
    }

    #[test]
    fn bad_command_lines() {
        use clap::error::ErrorKind;
        let kind = |argv: &[&str]| parse(argv).map(|_| ()).unwrap_err().kind();
        assert_eq!(kind(&["scrun"]), ErrorKind::MissingRequiredArgument);
        assert!(parse(&["scrun", "-nodes=0x2", "p"])
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
        assert_eq!(
            kind(&["scrun", "-v", "-q", "p"]),
            ErrorKind::ArgumentConflict
        );
        let c = parse(&["scrun", "-nodes=4x2", "--ppn", "3", "p"]).unwrap();
        assert!(job_spec(&c)
            .unwrap_err()
            .to_string()
            .contains("--ppn asks for 3"));
    }
}
