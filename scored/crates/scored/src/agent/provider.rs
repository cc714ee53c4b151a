//! Where the ranks' libfabric finds the provider `pm` (MPI over PM,
//! docs/mpi/guide.md).
//!
//! A packaged install puts `libpm-fi.so` in libfabric's default directory
//! and nothing needs saying.  A tree installed elsewhere (`make` into
//! `build/`, or /opt) has it in `lib/libfabric/` beside the agent's `bin/`:
//! then the agent gives every rank `FI_PROVIDER_PATH` naming that directory,
//! unless the job sets it itself.  libfabric's built-in providers are not
//! affected by the variable, so it is harmless for jobs that do not use pm.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const PROVIDER_FILE: &str = "libpm-fi.so";

/// The directory holding the provider beside the binary at `exe`, if any.
pub fn provider_dir_of(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?.parent()?.join("lib").join("libfabric");
    dir.join(PROVIDER_FILE).is_file().then_some(dir)
}

/// [`provider_dir_of`] the running agent, looked up once.
pub fn provider_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        std::env::current_exe()
            .ok()
            .and_then(|exe| provider_dir_of(&exe))
    })
    .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_is_found_only_beside_the_binary() {
        let root = std::env::temp_dir().join(format!("score-provider-{}", std::process::id()));
        let exe = root.join("bin").join("scored");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        assert_eq!(provider_dir_of(&exe), None);
        let lib = root.join("lib").join("libfabric");
        std::fs::create_dir_all(&lib).unwrap();
        assert_eq!(
            provider_dir_of(&exe),
            None,
            "an empty directory is not a provider"
        );
        std::fs::write(lib.join(PROVIDER_FILE), b"").unwrap();
        assert_eq!(provider_dir_of(&exe), Some(lib));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
