//! Links libmunge (Debian package libmunge-dev; at run time libmunge2).

fn main() {
    println!("cargo:rustc-link-lib=munge");
    println!("cargo:rerun-if-changed=build.rs");
}
