//! pmix-run: a one-node launcher on score-pmix, the smallest agent there is.
//!
//!     pmix-run [-v] -n N PROG ARGS...
//!
//! Starts a PMIx server in a temporary directory, registers a one-node job of N
//! ranks, forks N children with the server's variables added to the current
//! environment, answers each fence with the local blob as the whole job's data,
//! prints Abort events, and exits with the abort's status, or else the first
//! non-zero exit status of a child (128+signal for a signal). When a rank aborts
//! or fails, the others are killed, as mpirun does.

use std::path::Path;
use std::process::{exit, ExitStatus};

use score_pmix::{JobLayout, PmixServer, ServerEvent};
use tokio::process::Command;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinSet;

struct Args {
    n: u32,
    repeat: u32,
    user: Option<(u32, u32)>,
    verbose: bool,
    prog: Vec<String>,
}

fn usage() -> ! {
    eprintln!("usage: pmix-run [-v] [-r TIMES] [-u UID:GID] -n N PROG [ARGS...]");
    exit(2)
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let mut n = None;
    let mut verbose = false;
    let mut repeat = 1;
    let mut user = None;
    while let Some(a) = it.next() {
        match a.as_str() {
            "-n" | "--np" => n = it.next().and_then(|v| v.parse().ok()),
            "-v" | "--verbose" => verbose = true,
            "-u" | "--user" => {
                user = it.next().and_then(|v| {
                    let (u, g) = v.split_once(':')?;
                    Some((u.parse().ok()?, g.parse().ok()?))
                });
                if user.is_none() {
                    usage()
                }
            }
            "-r" | "--repeat" => repeat = it.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            "-h" | "--help" => usage(),
            _ => {
                let mut prog = vec![a];
                prog.extend(it);
                return match n {
                    Some(n) if n > 0 && repeat > 0 => Args {
                        n,
                        repeat,
                        user,
                        verbose,
                        prog,
                    },
                    _ => usage(),
                };
            }
        }
    }
    usage()
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn code_of(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

fn kill_all(pids: &[u32]) {
    for &pid in pids {
        // SAFETY: plain kill(2) of our own children (reaped only by their tasks).
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
}

fn main() {
    let args = parse_args();
    let dir = tempfile::Builder::new()
        .prefix("pmix-run.")
        .tempdir()
        .unwrap_or_else(|e| {
            eprintln!("pmix-run: temporary directory: {e}");
            exit(1)
        });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = rt.block_on(run(&args, dir.path()));
    drop(rt);
    drop(dir);
    exit(code);
}

async fn run(args: &Args, dir: &Path) -> i32 {
    let (server, mut events) = match PmixServer::init(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pmix-run: {e}");
            return 1;
        }
    };
    // With -r, the same server runs the job again as a new namespace each time.
    for i in 0..args.repeat {
        let code = run_job(args, dir, &server, &mut events, i).await;
        if code != 0 {
            return code;
        }
    }
    0
}

async fn run_job(
    args: &Args,
    dir: &Path,
    server: &PmixServer,
    events: &mut UnboundedReceiver<ServerEvent>,
    i: u32,
) -> i32 {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = args
        .user
        .unwrap_or_else(|| unsafe { (libc::getuid(), libc::getgid()) });
    let job = JobLayout {
        nspace: format!("pmix-run.{}.{i}", std::process::id()),
        uid,
        gid,
        nodes: vec![hostname()],
        ppn: args.n,
        node_index: 0,
        tmpdir: dir.to_path_buf(),
        pm_jobkey: 0,
    };
    if let Err(e) = server.register_job(&job) {
        eprintln!("pmix-run: {e}");
        return 1;
    }

    let mut children = JoinSet::new();
    let mut pids = Vec::new();
    for rank in job.local_ranks() {
        let env = match server.setup_fork(&job.nspace, rank) {
            Ok(env) => env,
            Err(e) => {
                eprintln!("pmix-run: {e}");
                kill_all(&pids);
                return 1;
            }
        };
        let mut cmd = Command::new(&args.prog[0]);
        cmd.args(&args.prog[1..]).envs(env).kill_on_drop(true);
        // As the agent does: Open MPI's shared-memory segments go to the
        // job's directory, removed at the end, not to /dev/shm, where those
        // of a rank that aborts would stay.
        if std::env::var_os("OMPI_MCA_btl_vader_backing_directory").is_none() {
            cmd.env("OMPI_MCA_btl_vader_backing_directory", &job.tmpdir);
        }
        if args.user.is_some() {
            // As the agent does: the job's processes run as its user.
            cmd.uid(uid).gid(gid);
        }
        match cmd.spawn() {
            Ok(mut child) => {
                pids.push(child.id().unwrap_or(0));
                children.spawn(async move { (rank, child.wait().await) });
            }
            Err(e) => {
                eprintln!("pmix-run: {}: {e}", args.prog[0]);
                kill_all(&pids);
                return 127;
            }
        }
    }

    let mut code = 0;
    let mut aborted = None;
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Some(ServerEvent::Fence { nspace, data, collect, reply }) => {
                    if args.verbose {
                        eprintln!("pmix-run: fence {nspace} collect={collect} {} bytes", data.len());
                    }
                    // One node: the local contribution is the whole job's data.
                    reply.complete(Ok(data));
                }
                Some(ServerEvent::Abort { nspace, rank, status, message }) => {
                    eprintln!("pmix-run: {nspace} rank {rank} aborted (status {status}): {message}");
                    if aborted.is_none() {
                        aborted = Some(if status != 0 { status } else { 1 });
                        kill_all(&pids);
                    }
                }
                Some(ev) => {
                    if args.verbose {
                        eprintln!("pmix-run: {ev:?}");
                    }
                }
                None => break,
            },
            done = children.join_next() => match done {
                Some(Ok((rank, Ok(st)))) => {
                    let c = code_of(st);
                    if args.verbose {
                        eprintln!("pmix-run: rank {rank} exited {c}");
                    }
                    if c != 0 && code == 0 {
                        code = c;
                        kill_all(&pids);
                    }
                }
                Some(Ok((rank, Err(e)))) => {
                    eprintln!("pmix-run: rank {rank}: wait: {e}");
                    code = code.max(1);
                }
                Some(Err(e)) => {
                    eprintln!("pmix-run: {e}");
                    code = code.max(1);
                }
                None => break,
            },
        }
    }
    server.deregister_job(&job.nspace);
    aborted.unwrap_or(code)
}
