//! The master's state directory (`[master] state_dir`), in the manner of
//! slurmctld's StateSaveLocation: one file, `master.state`, replaced
//! atomically (written to a temporary file, fsynced, renamed, the directory
//! fsynced) every time the state changes, a few milliseconds later so that
//! a burst of changes is one write.  A master that starts reads it back and
//! adopts its jobs (`state::recovery`).
//!
//! The file is an 8-byte magic followed by the `SavedState` message
//! (`scored/proto/state.proto`).  The directory belongs to the master's uid
//! and is not open to others: job specs hold their users' environments.

use anyhow::{bail, Context};
use parking_lot::Mutex;
use prost::Message;
use score_proto::v1::SavedState;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

use super::state::{SaveNow, State};

const MAGIC: &[u8; 8] = b"SCOREST1";
const FILE: &str = "master.state";
/// Changes within this long of the first are saved together.
const COALESCE: Duration = Duration::from_millis(5);

pub struct Store {
    dir: PathBuf,
    /// Held while a save runs (the background saver and the master's
    /// synchronous ones write the same temporary file); it holds the
    /// highest `next_job` written, which no later save lowers: a snapshot
    /// taken before a reservation of job ids may land after it.
    written: Mutex<u64>,
}

impl Store {
    /// The state directory, created (mode 0700) if missing; refused if it
    /// is a symbolic link, not a directory, or not the master's own.
    pub fn open(dir: &str) -> anyhow::Result<Self> {
        let dir = PathBuf::from(dir);
        match fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(&dir).with_context(|| {
                    format!(
                        "cannot create the state directory {} (master.state_dir)",
                        dir.display()
                    )
                })?;
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
            }
            Err(e) => return Err(e).with_context(|| format!("master.state_dir {}", dir.display())),
            Ok(m) => {
                if !m.is_dir() {
                    bail!(
                        "master.state_dir {} is not a directory (a symbolic link is not followed)",
                        dir.display()
                    );
                }
                let me = nix::unistd::geteuid().as_raw();
                if m.uid() != me {
                    bail!(
                        "master.state_dir {} belongs to uid {}, not to the master (uid {me})",
                        dir.display(),
                        m.uid()
                    );
                }
                if m.mode() & 0o022 != 0 {
                    bail!(
                        "master.state_dir {} may be written by others (mode {:o}); chmod go-w it",
                        dir.display(),
                        m.mode() & 0o7777
                    );
                }
            }
        }
        Ok(Self {
            dir,
            written: Mutex::new(0),
        })
    }

    fn path(&self) -> PathBuf {
        self.dir.join(FILE)
    }

    /// The saved state, if there is one.  A file that cannot be read is an
    /// error: starting empty would lose every job it holds.
    pub fn load(&self) -> anyhow::Result<Option<SavedState>> {
        let path = self.path();
        let data = match fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        decode(&data).with_context(|| {
            format!(
                "{} is not a state file of this master (move it away to start without the saved jobs)",
                path.display()
            )
        })
        .map(Some)
    }

    /// Replaces the file with `state`: write, fsync, rename, fsync the
    /// directory.  A crash at any point leaves the old file or the new.
    /// The saved `next_job` never goes down.
    pub fn save(&self, mut state: SavedState) -> anyhow::Result<()> {
        let mut written = self.written.lock();
        state.next_job = state.next_job.max(*written);
        let tmp = self.dir.join(format!("{FILE}.tmp"));
        let _ = fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(&encode(&state))?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, self.path())
            .with_context(|| format!("cannot rename {} to {FILE}", tmp.display()))?;
        File::open(&self.dir)?.sync_all()?;
        *written = state.next_job;
        Ok(())
    }
}

impl SaveNow for Store {
    fn save_now(&self, state: SavedState) -> anyhow::Result<()> {
        self.save(state)
    }
}

fn encode(state: &SavedState) -> Vec<u8> {
    let mut v = Vec::with_capacity(MAGIC.len() + state.encoded_len());
    v.extend_from_slice(MAGIC);
    state.encode(&mut v).unwrap_or_default();
    v
}

fn decode(data: &[u8]) -> anyhow::Result<SavedState> {
    let Some(body) = data.strip_prefix(MAGIC.as_slice()) else {
        bail!(
            "it does not start with the magic {:?}",
            std::str::from_utf8(MAGIC).unwrap_or("")
        );
    };
    Ok(SavedState::decode(body)?)
}

/// Saves the state every time it changes (`saver` is notified), until the
/// master stops.  A failed save is logged and retried at the next change.
pub async fn keep_saved(store: Arc<Store>, state: Arc<Mutex<State>>, saver: Arc<Notify>) {
    // The metrics are shared handles: reporting a save takes no lock.
    let metrics = state.lock().metrics.clone();
    let mut failing = false;
    loop {
        saver.notified().await;
        tokio::time::sleep(COALESCE).await;
        let snapshot = state.lock().snapshot();
        let s = store.clone();
        let r = tokio::task::spawn_blocking(move || s.save(snapshot)).await;
        metrics.state_saved(matches!(r, Ok(Ok(()))));
        match r {
            Ok(Ok(())) if failing => {
                failing = false;
                tracing::info!("the state is saved again");
            }
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failing = true;
                tracing::error!("cannot save the state: {e:#}");
            }
            Err(e) => tracing::error!("the state saver failed: {e}"),
        }
    }
}

/// The state file's path, for messages.
pub fn describe(dir: &Path) -> String {
    dir.join(FILE).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use score_proto::v1::SavedJob;

    #[test]
    fn a_saved_state_reads_back_and_a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let store = Store::open(path.to_str().unwrap()).unwrap();
        assert!(store.load().unwrap().is_none());
        let state = SavedState {
            next_job: 42,
            jobs: vec![SavedJob::default()],
            ..Default::default()
        };
        store.save(state.clone()).unwrap();
        store.save(state.clone()).unwrap();
        assert_eq!(store.load().unwrap(), Some(state));
        let mode = fs::metadata(path.join(FILE)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        fs::write(path.join(FILE), b"not a state").unwrap();
        let e = store.load().unwrap_err();
        assert!(format!("{e:#}").contains("not a state file"), "{e:#}");
    }

    #[test]
    fn a_later_save_of_an_earlier_snapshot_keeps_the_next_job_id() {
        // The background saver's snapshot, taken before a reservation of
        // job ids, written after it: the file keeps the reservation.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s").to_str().unwrap()).unwrap();
        let at = |next_job, saved_ms| SavedState {
            next_job,
            saved_ms,
            ..Default::default()
        };
        store.save(at(1025, 1)).unwrap();
        store.save(at(7, 2)).unwrap();
        assert_eq!(store.load().unwrap(), Some(at(1025, 2)));
    }

    #[test]
    fn a_symbolic_link_is_not_a_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let e = Store::open(link.to_str().unwrap()).err().unwrap();
        assert!(e.to_string().contains("not a directory"), "{e}");
    }
}
