//! One cgroup (v2) per job per node: the agent puts every process of a job in
//! it, so that signalling, freezing and killing reach the whole job, children
//! of children included, and nothing survives the job.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup2 file system is mounted (looked in /proc/mounts); score needs cgroup v2")]
    NoCgroup2,
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The directory under which the agent creates its job cgroups.
#[derive(Debug, Clone)]
pub struct CgroupRoot {
    path: PathBuf,
}

/// The mount point of the cgroup2 file system, from /proc/mounts.  On hybrid
/// systems it is /sys/fs/cgroup/unified, on unified ones /sys/fs/cgroup.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir))
    })
}

impl CgroupRoot {
    /// `configured` is agent.cgroup_root; empty means `score` under the
    /// cgroup2 mount.  The directory is created if missing.
    pub fn open(configured: &str) -> Result<Self, CgroupError> {
        let path = if configured.is_empty() {
            cgroup2_mount().ok_or(CgroupError::NoCgroup2)?.join("score")
        } else {
            PathBuf::from(configured)
        };
        std::fs::create_dir_all(&path).map_err(io_err(&path))?;
        Ok(Self { path })
    }

    pub fn job(&self, job: u64) -> JobCgroup {
        JobCgroup {
            path: self.path.join(format!("job-{job}")),
        }
    }

    /// Job cgroups left by an earlier agent on this node.
    pub fn leftover_jobs(&self) -> Vec<u64> {
        let Ok(dir) = std::fs::read_dir(&self.path) else {
            return Vec::new();
        };
        let mut v: Vec<u64> = dir
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("job-")?.parse().ok())
            .collect();
        v.sort_unstable();
        v
    }
}

#[derive(Debug, Clone)]
pub struct JobCgroup {
    path: PathBuf,
}

impl JobCgroup {
    pub fn create(&self) -> Result<(), CgroupError> {
        match std::fs::create_dir(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(io_err(&self.path)(e)),
        }
    }

    /// `cgroup.procs` of this cgroup, for a child to write itself into
    /// between fork and exec.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// Move process `pid` (all its threads) into this cgroup.
    pub fn add(&self, pid: i32) -> Result<(), CgroupError> {
        let procs = self.procs_file();
        std::fs::write(&procs, pid.to_string()).map_err(io_err(&procs))
    }

    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.procs_file())
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Send `signal` to every process of the job.
    pub fn signal(&self, signal: i32) {
        if signal == libc::SIGKILL {
            self.kill();
            return;
        }
        for pid in self.pids() {
            // SAFETY: kill(2) with a pid read from our own job cgroup.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// SIGKILL every process, atomically, through cgroup.kill (Linux 5.14);
    /// older kernels get a kill per listed process.
    pub fn kill(&self) {
        if std::fs::write(self.path.join("cgroup.kill"), "1").is_err() {
            for pid in self.pids() {
                // SAFETY: as above.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }

    /// Freeze (true) or thaw (false) every process of the job.  Freezing
    /// completes asynchronously: see [`JobCgroup::is_frozen`].
    pub fn freeze(&self, frozen: bool) -> Result<(), CgroupError> {
        let f = self.path.join("cgroup.freeze");
        std::fs::write(&f, if frozen { "1" } else { "0" }).map_err(io_err(&f))
    }

    /// True once every process of a freezing cgroup is frozen (the
    /// `frozen` key of cgroup.events).
    pub fn is_frozen(&self) -> bool {
        std::fs::read_to_string(self.path.join("cgroup.events"))
            .map(|ev| ev.lines().any(|l| l.trim() == "frozen 1"))
            .unwrap_or(false)
    }

    /// True when no process is left (the `populated` key of cgroup.events).
    pub fn is_empty(&self) -> bool {
        match std::fs::read_to_string(self.path.join("cgroup.events")) {
            Ok(ev) => ev.lines().any(|l| l.trim() == "populated 0"),
            Err(_) => true,
        }
    }

    /// Kill everything, wait (bounded) until the cgroup is empty, remove it.
    /// Returns false if processes were still there at the deadline.
    pub async fn destroy(&self, within: Duration) -> bool {
        if !self.exists() {
            return true;
        }
        let deadline = Instant::now() + within;
        loop {
            self.kill();
            if self.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                tracing::error!(cgroup = %self.path.display(), "processes survive SIGKILL");
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        match std::fs::remove_dir(&self.path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => true,
            Err(e) => {
                tracing::error!(cgroup = %self.path.display(), "cannot remove: {e}");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_cgroup2_mount_on_linux() {
        // Every kernel the project supports mounts cgroup2 somewhere.
        let m = cgroup2_mount().expect("cgroup2 mounted");
        assert!(m.join("cgroup.procs").exists(), "{}", m.display());
    }

    #[test]
    fn leftover_jobs_are_parsed_from_directory_names() {
        let dir = std::env::temp_dir().join(format!("score-cg-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("job-7")).unwrap();
        std::fs::create_dir_all(dir.join("job-12")).unwrap();
        std::fs::create_dir_all(dir.join("other")).unwrap();
        let root = CgroupRoot { path: dir.clone() };
        assert_eq!(root.leftover_jobs(), vec![7, 12]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
