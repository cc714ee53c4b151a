//! Helpers shared by the integration tests: programs to build and run, bounded waits.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const PROGRAMS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs");

/// The repository's build directory (SCORE_BUILD overrides it, as in tests/pm).
pub fn score_build() -> PathBuf {
    std::env::var_os("SCORE_BUILD")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../build"))
}

/// The pmix-run example next to this test binary (cargo test builds examples).
pub fn pmix_run() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("examples").join("pmix-run");
    p.is_file().then_some(p)
}

/// Prints why a test does nothing and returns None.
pub fn skip<T>(why: &str) -> Option<T> {
    eprintln!("SKIPPED: {why}");
    None
}

/// Compiles tests/programs/`src` with `cc` (e.g. "cc" or "mpicc") and `extra` flags
/// into a fresh file in `dir`; None (skipped) when the compiler is missing.
pub fn compile(cc: &str, src: &str, extra: &[String], dir: &Path) -> Option<PathBuf> {
    let out = dir.join(src.trim_end_matches(".c"));
    let status = Command::new(cc)
        .arg("-O1")
        .arg("-o")
        .arg(&out)
        .arg(Path::new(PROGRAMS).join(src))
        .args(extra)
        .status();
    match status {
        Ok(s) if s.success() => Some(out),
        Ok(s) => panic!("{cc} {src} failed: {s}"),
        Err(e) => skip(&format!("{cc} not available ({e})")),
    }
}

pub fn pkg_config_pmix() -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", "pmix"])
        .output()
        .expect("pkg-config");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Runs `cmd` to completion, killing it (and failing) after `limit`.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {limit:?}, killed\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Open MPI as root, on its own transports (ob1 with vader/self).
pub fn ompi_env(cmd: &mut Command) -> &mut Command {
    cmd.env("OMPI_MCA_pml", "ob1")
        .env("OMPI_MCA_btl", "vader,self")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
}
