//! Compiles the C shim against libpmix with the flags pkg-config gives.

use std::process::Command;

fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("pmix")
        .output()
        .expect("score-pmix: cannot run pkg-config (apt-get install pkg-config libpmix-dev)");
    assert!(
        out.status.success(),
        "score-pmix: pkg-config {args:?} pmix failed: {} (apt-get install libpmix-dev)",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8(out.stdout)
        .expect("pkg-config output is not UTF-8")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/pmix_shim.c");
    println!("cargo:rerun-if-changed=csrc/pmix_shim.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let mut build = cc::Build::new();
    build
        .file("csrc/pmix_shim.c")
        .flag("-std=gnu11")
        .flag("-Wall")
        .flag("-Wextra")
        .flag("-Werror");
    for flag in pkg_config(&["--cflags"]) {
        if let Some(dir) = flag.strip_prefix("-I") {
            // libpmix's headers are not ours to keep -Wextra clean.
            build.flag("-isystem").flag(dir);
        } else {
            build.flag(&flag);
        }
    }
    build.compile("pmix_shim");

    // -L and -l for this crate and everything that links it; the rpath
    // (pkg-config's -Wl,...) reaches only this package's own binaries, tests
    // and examples: Debian also links libpmix.so.2 into the default library
    // path, so dependents find it without one.
    let libs = pkg_config(&["--libs"]);
    for flag in &libs {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        } else if flag.starts_with("-Wl,") {
            println!("cargo:rustc-link-arg={flag}");
        }
    }
    println!("cargo:rustc-link-lib=dylib=pthread");
}
