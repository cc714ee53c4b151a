//! The server API in this process, with a PMIx client program of our own
//! (tests/programs/pmix_client.c). One test function: libpmix allows one server
//! per process, so the scenarios run in order on one server.
//!
//! The jobs span two nodes, this one and a node that does not exist: a fence then
//! reaches the host (libpmix answers fences of all-local jobs by itself), and the
//! test plays the master by appending the absent node's (empty) contribution.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use score_pmix::{JobLayout, PmixError, PmixServer, ServerEvent};
use tokio::process::Command;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinSet;

#[derive(Clone, Copy, PartialEq)]
enum FencePolicy {
    /// Complete with the local blob (the absent node contributes nothing).
    Complete,
    /// Drop the FenceReply unanswered: clients must get an error, not hang.
    Drop,
}

#[derive(Default, Debug)]
struct JobRun {
    /// rank -> (exit code, stdout, stderr)
    ranks: BTreeMap<u32, (i32, String, String)>,
    fences: Vec<(bool, usize)>,
    aborts: Vec<(u32, i32, String)>,
    connected: Vec<u32>,
    finalized: Vec<u32>,
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

fn layout(nspace: &str, node_index: u32, tmp: &Path) -> JobLayout {
    let mut nodes = vec!["absent-node".to_string()];
    nodes.insert(node_index as usize, hostname());
    JobLayout {
        nspace: nspace.into(),
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
        nodes,
        ppn: 2,
        node_index,
        tmpdir: tmp.to_path_buf(),
        pm_jobkey: 0,
    }
}

async fn run_job(
    server: &PmixServer,
    events: &mut UnboundedReceiver<ServerEvent>,
    job: &JobLayout,
    prog: &Path,
    args: &[&str],
    policy: FencePolicy,
) -> JobRun {
    server.register_job(job).expect("register_job");
    let mut children = JoinSet::new();
    let mut pids = Vec::new();
    for rank in job.local_ranks() {
        let env = server.setup_fork(&job.nspace, rank).expect("setup_fork");
        assert!(env
            .iter()
            .any(|(k, v)| k == "PMIX_RANK" && *v == rank.to_string()));
        assert!(env
            .iter()
            .any(|(k, v)| k == "PMIX_NAMESPACE" && *v == job.nspace));
        assert!(env.iter().any(|(k, _)| k.starts_with("PMIX_SERVER_URI")));
        let child = Command::new(prog)
            .args(args)
            .envs(env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        pids.push(child.id().unwrap() as libc::pid_t);
        children.spawn(async move { (rank, child.wait_with_output().await.unwrap()) });
    }
    let mut run = JobRun::default();
    while !children.is_empty() {
        tokio::select! {
            ev = events.recv() => {
                let ev = ev.expect("event channel closed");
                handle(ev, job, policy, &pids, &mut run);
            }
            done = children.join_next() => {
                eprintln!("{}: child {done:?}", job.nspace);
                if let Some(Ok((rank, out))) = done {
                    run.ranks.insert(rank, (
                        out.status.code().unwrap_or(-1),
                        String::from_utf8_lossy(&out.stdout).into_owned(),
                        String::from_utf8_lossy(&out.stderr).into_owned(),
                    ));
                }
            }
        }
    }
    // Events that raced with the children's exit.
    while let Ok(ev) = events.try_recv() {
        match ev {
            ServerEvent::ClientFinalized { nspace, rank } if nspace == job.nspace => {
                run.finalized.push(rank)
            }
            ServerEvent::Abort {
                rank,
                status,
                message,
                ..
            } => run.aborts.push((rank, status, message)),
            _ => {}
        }
    }
    server.deregister_job(&job.nspace);
    server.deregister_job(&job.nspace); // idempotent
    run.connected.sort();
    run.finalized.sort();
    run
}

/// What the agent does with one event (events of other jobs are late ones of
/// earlier jobs: a late fence reply is dropped, which answers it with an error).
fn handle(
    ev: ServerEvent,
    job: &JobLayout,
    policy: FencePolicy,
    pids: &[libc::pid_t],
    run: &mut JobRun,
) {
    eprintln!("{}: {ev:?}", job.nspace);
    match ev {
        ServerEvent::Fence { nspace, .. } if nspace != job.nspace => {}
        ServerEvent::Fence {
            data,
            collect,
            reply,
            ..
        } => {
            assert_eq!(reply.nspace(), job.nspace);
            run.fences.push((collect, data.len()));
            if policy == FencePolicy::Complete {
                // Node order: this node's blob, then the absent node's (empty) one.
                reply.complete(Ok(data));
            } else {
                drop(reply);
            }
        }
        ServerEvent::Abort {
            nspace,
            rank,
            status,
            message,
        } => {
            assert_eq!(nspace, job.nspace);
            if run.aborts.is_empty() {
                // As the agent does: end the job (run_job reaps it).
                for &pid in pids {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            run.aborts.push((rank, status, message));
        }
        ServerEvent::ClientConnected { nspace, rank } if nspace == job.nspace => {
            run.connected.push(rank);
        }
        ServerEvent::ClientFinalized { nspace, rank } if nspace == job.nspace => {
            run.finalized.push(rank);
        }
        ServerEvent::ClientConnected { .. } | ServerEvent::ClientFinalized { .. } => {}
    }
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

fn check_normal_run(run: &JobRun, job: &JobLayout) {
    let local: Vec<u32> = job.local_ranks().collect();
    for r in &local {
        let (code, out, err) = &run.ranks[r];
        assert_eq!(*code, 0, "rank {r}: {out}\n{err}\n{run:?}");
        let line = out.lines().next().unwrap();
        assert_eq!(field(line, "nspace"), job.nspace);
        assert_eq!(field(line, "rank"), r.to_string());
        assert_eq!(field(line, "size"), "4");
        assert_eq!(field(line, "univ"), "4");
        assert_eq!(field(line, "nodes"), "2");
        assert_eq!(field(line, "local_size"), "2");
        assert_eq!(field(line, "local_peers"), job.local_peers());
        assert_eq!(field(line, "local_rank"), (r % 2).to_string());
        assert_eq!(field(line, "nodeid"), job.node_index.to_string());
        assert_eq!(field(line, "host"), hostname());
        assert_eq!(field(line, "rank0_host"), job.nodes[0]);
        assert_eq!(field(line, "uid"), job.uid.to_string());
        assert!(out.contains(&format!("rank={r} done")), "{out}");
    }
    // Two fences in a row: the collecting one carries the local data.
    assert_eq!(run.fences.len(), 2, "{run:?}");
    assert!(run.fences[0].0 && run.fences[0].1 > 0, "{run:?}");
    assert!(!run.fences[1].0, "{run:?}");
    assert_eq!(run.connected, local, "{run:?}");
    assert_eq!(run.finalized, local, "{run:?}");
    assert!(run.aborts.is_empty());
}

#[test]
fn server_jobs_fences_abort() {
    let dir = tempfile::Builder::new().prefix("pmixt.").tempdir().unwrap();
    let prog = compile("cc", "pmix_client.c", &pkg_config_pmix(), dir.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (server, mut events) = PmixServer::init(dir.path()).expect("init");
    assert_eq!(
        PmixServer::init(dir.path()).err(),
        Some(PmixError::AlreadyRunning),
        "a second server in one process"
    );
    let limit = Duration::from_secs(60);
    rt.block_on(async {
        tokio::time::timeout(limit, async {
            // A job whose local node is node 0, then after deregistering it a
            // second job in the same server whose local node is node 1.
            let a = layout("score.test-a", 0, dir.path());
            let run = run_job(&server, &mut events, &a, &prog, &[], FencePolicy::Complete).await;
            check_normal_run(&run, &a);
            assert!(server.registered_jobs().is_empty());

            let b = layout("score.test-b", 1, dir.path());
            let run = run_job(&server, &mut events, &b, &prog, &[], FencePolicy::Complete).await;
            check_normal_run(&run, &b);

            // Registering one namespace twice is refused.
            server.register_job(&b).unwrap();
            assert!(matches!(
                server.register_job(&b),
                Err(PmixError::AlreadyRegistered(_))
            ));
            server.deregister_job(&b.nspace);

            // PMIx_Abort from local rank 0 (rank 2) arrives as an Abort event.
            let c = layout("score.test-c", 1, dir.path());
            let run = run_job(
                &server,
                &mut events,
                &c,
                &prog,
                &["abort", "3"],
                FencePolicy::Complete,
            )
            .await;
            assert_eq!(run.aborts.len(), 1, "{run:?}");
            let (rank, status, msg) = &run.aborts[0];
            assert_eq!((*rank, *status), (2, 3), "{run:?}");
            assert!(msg.contains("told to abort"), "{msg}");

            // A FenceReply dropped unanswered fails the clients' fence (exit 2).
            let d = layout("score.test-d", 0, dir.path());
            let run = run_job(&server, &mut events, &d, &prog, &[], FencePolicy::Drop).await;
            assert_eq!(run.fences.len(), 1, "{run:?}");
            for (code, out, err) in run.ranks.values() {
                assert_eq!(*code, 2, "{out}\n{err}");
                assert!(err.contains("fence"), "{err}");
            }
        })
        .await
        .expect("the scenarios took longer than a minute");
    });
    // Invalid layouts never reach libpmix.
    let mut bad = layout("score.bad", 0, dir.path());
    bad.ppn = 0;
    assert!(matches!(
        server.register_job(&bad),
        Err(PmixError::InvalidJob(_))
    ));
    drop(server);
}
