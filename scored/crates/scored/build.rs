//! Generates the layout of PM's statistics page (`pm/src/stats.h`) for the
//! agent: a small C program compiled against the header prints the offsets,
//! so the Rust side can never drift from the C side (docs/pm/stats.md).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.join("../../..");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let src = manifest.join("layout/pmstats_layout.c");
    let exe = out.join("pmstats_layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());

    for f in ["pm/src/stats.h", "pm/include/pm.h"] {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed=build.rs");

    let status = Command::new(&cc)
        .args(["-std=c17", "-D_GNU_SOURCE", "-Wall", "-Werror", "-I"])
        .arg(root.join("pm/include"))
        .arg("-I")
        .arg(root.join("pm/src"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc} (Debian package gcc): {e}"));
    assert!(status.success(), "{cc} failed on {}", src.display());
    let layout = Command::new(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    assert!(layout.status.success(), "{} failed", exe.display());
    std::fs::write(out.join("pmstats_layout.rs"), layout.stdout).expect("write OUT_DIR");
}
