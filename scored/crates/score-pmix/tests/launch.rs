//! Real programs under the pmix-run example: PM's pmcheck and an Open MPI program,
//! direct-launched (no mpirun), and an abort. Each test is its own pmix-run process.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

fn pmcheck(n: u32) {
    let Some(run) = pmix_run().or_else(|| skip("pmix-run example not built")) else {
        return;
    };
    let pmcheck = score_build().join("bin/pmcheck");
    if !pmcheck.is_file() {
        skip::<()>(&format!(
            "{} missing: run `make -C /work/main build`",
            pmcheck.display()
        ));
        return;
    }
    let out = run_bounded(
        Command::new(run)
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
fn pmcheck_2_ranks() {
    pmcheck(2);
}

#[test]
fn pmcheck_4_ranks() {
    pmcheck(4);
}

fn mpi_hello(args: &[&str], n: u32) -> Option<std::process::Output> {
    let run = pmix_run().or_else(|| skip("pmix-run example not built"))?;
    let dir = tempfile::tempdir().unwrap();
    let prog = compile("mpicc", "mpi_hello.c", &[], dir.path())?;
    Some(run_bounded(
        ompi_env(
            Command::new(run)
                .arg("-n")
                .arg(n.to_string())
                .arg(&prog)
                .args(args),
        ),
        LIMIT,
    ))
}

#[test]
fn open_mpi_direct_launch() {
    let Some(out) = mpi_hello(&[], 2) else { return };
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
fn open_mpi_abort() {
    let Some(out) = mpi_hello(&["abort", "7"], 2) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    // pmix-run prints the Abort event and exits with its status.
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(
        stderr.contains("rank 1 aborted (status 7)"),
        "no Abort event:\n{stderr}"
    );
}

/// The agent runs as root and the job as its user: the job's processes must reach
/// the server and read their data without touching root's files.
#[test]
fn job_as_another_user() {
    if unsafe { libc::geteuid() } != 0 {
        skip::<()>("needs root to run a job as another user");
        return;
    }
    let Some(run) = pmix_run().or_else(|| skip("pmix-run example not built")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(prog) = compile("cc", "pmix_client.c", &pkg_config_pmix(), dir.path()) else {
        return;
    };
    let out = run_bounded(
        Command::new(run)
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
    assert!(!stderr.contains("PMIX ERROR"), "{stderr}");
}
