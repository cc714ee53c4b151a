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
pub fn pmix_run() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/pmix-run");
    assert!(
        p.is_file(),
        "{} is not built: a whole `cargo test` builds the examples, \
         `cargo test --test launch` alone does not (`cargo build --examples` does)",
        p.display()
    );
    p
}

/// A program of `make build`, in $SCORE_BUILD/bin.
pub fn built_program(name: &str) -> PathBuf {
    let p = score_build().join("bin").join(name);
    assert!(
        p.is_file(),
        "{} is missing: run `make build` first (or set SCORE_BUILD to a build directory)",
        p.display()
    );
    p
}

/// Compiles tests/programs/`src` with `cc` (e.g. "cc" or "mpicc") and `extra` flags
/// into a fresh file in `dir`.  A missing compiler fails the test, naming the
/// Debian package that brings it.
pub fn compile(cc: &str, src: &str, extra: &[String], dir: &Path) -> PathBuf {
    let out = dir.join(src.trim_end_matches(".c"));
    let status = Command::new(cc)
        .arg("-O1")
        .arg("-o")
        .arg(&out)
        .arg(Path::new(PROGRAMS).join(src))
        .args(extra)
        .status();
    let package = if cc == "mpicc" {
        "libopenmpi-dev"
    } else {
        "gcc"
    };
    match status {
        Ok(s) if s.success() => out,
        Ok(s) => panic!("{cc} {src} failed: {s}"),
        Err(e) => panic!("cannot run {cc} ({e}): install the Debian package {package}"),
    }
}

/// The compiler and linker flags of libpmix.
pub fn pkg_config_pmix() -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", "pmix"])
        .output()
        .expect("cannot run pkg-config: install the Debian package pkgconf");
    assert!(
        out.status.success(),
        "pkg-config knows no pmix: install the Debian package libpmix-dev\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
