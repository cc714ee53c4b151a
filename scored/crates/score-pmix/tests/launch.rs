//! Real programs under the pmix-run example: PM's pmcheck and an Open MPI program,
//! direct-launched (no mpirun), and an abort. Each test is its own pmix-run process.
//!
//! Every test here needs something outside cargo (pmcheck from `make build`,
//! Open MPI's mpicc, root), so a plain `cargo test` reports them as ignored;
//! `scripts/run-tests` runs them with `--include-ignored`, and a missing
//! prerequisite fails them with its name.  The tests that need root live in
//! the module `needs_root`, which the runner leaves out (and counts as
//! skipped) when it is not root.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

fn pmcheck(n: u32) {
    let pmcheck = built_program("pmcheck");
    let out = run_bounded(
        Command::new(pmix_run())
            .arg("-n")
            .arg(n.to_string())
            .arg(&pmcheck)
            .args([
                "--quiet",
                "--count",
                "2000",
                "--pattern",
                "all",
                "--timeout",
                "60",
            ]),
        LIMIT,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pmcheck -n {n}: {}\n{stdout}\n{stderr}",
        out.status
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(lines.len(), n as usize, "one JSON line per rank:\n{stdout}");
    for r in 0..n {
        let me = lines
            .iter()
            .find(|l| l.contains(&format!("\"rank\":{r},")))
            .unwrap_or_else(|| panic!("no line of rank {r}:\n{stdout}"));
        assert!(me.contains(&format!("\"size\":{n},")), "{me}");
        assert!(
            me.contains("\"ok\":true") && me.contains("\"errors\":0,"),
            "{me}"
        );
        assert!(
            me.contains("\"device\":\"shm\""),
            "one node means shm: {me}"
        );
    }
}

#[test]
#[ignore = "needs pmcheck from `make build`; scripts/run-tests runs it"]
fn pmcheck_2_ranks() {
    pmcheck(2);
}

#[test]
#[ignore = "needs pmcheck from `make build`; scripts/run-tests runs it"]
fn pmcheck_4_ranks() {
    pmcheck(4);
}

fn mpi_hello(args: &[&str], n: u32) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let prog = compile("mpicc", "mpi_hello.c", &[], dir.path());
    run_bounded(
        ompi_env(
            Command::new(pmix_run())
                .arg("-n")
                .arg(n.to_string())
                .arg(&prog)
                .args(args),
        ),
        LIMIT,
    )
}

#[test]
#[ignore = "needs Open MPI's mpicc (Debian package libopenmpi-dev); scripts/run-tests runs it"]
fn open_mpi_direct_launch() {
    let out = mpi_hello(&[], 2);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    // Two ranks of one job, not two singletons.
    for (r, from) in [(0, 1), (1, 0)] {
        let want = format!("mpi_hello rank {r} of 2 on ");
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("no line of rank {r}:\n{stdout}\n{stderr}"));
        assert!(
            line.ends_with(&format!("allreduce 1 ring from {from} ok")),
            "{line}"
        );
    }
}

#[test]
#[ignore = "needs Open MPI's mpicc (Debian package libopenmpi-dev); scripts/run-tests runs it"]
fn open_mpi_abort() {
    let out = mpi_hello(&["abort", "7"], 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // pmix-run prints the Abort event and exits with its status.
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(
        stderr.contains("rank 1 aborted (status 7)"),
        "no Abort event:\n{stderr}"
    );
}

mod needs_root {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The agent runs as root and the job as its user: the job's processes must reach
    /// the server and read their data without touching root's files.
    #[test]
    #[ignore = "needs root (runs a job as nobody); scripts/run-tests runs it as root"]
    fn job_as_another_user() {
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "needs root to run a job as another user (scripts/run-tests leaves it out otherwise)"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let prog = compile("cc", "pmix_client.c", &pkg_config_pmix(), dir.path());
        let out = run_bounded(
            Command::new(pmix_run())
                .args(["-u", "65534:65534", "-n", "2"])
                .arg(&prog)
                .current_dir("/"),
            LIMIT,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
        assert!(
            stdout.contains("rank=0 done") && stdout.contains("rank=1 done"),
            "{stdout}"
        );
        // Both ranks report nobody's uid and gid, not root's.
        let ids: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("nspace="))
            .map(|l| l.split_once(" uid=").map_or("", |(_, ids)| ids))
            .collect();
        assert_eq!(ids, ["65534 gid=65534"; 2], "{stdout}");
        assert!(!stderr.contains("PMIX ERROR"), "{stderr}");
    }
}
