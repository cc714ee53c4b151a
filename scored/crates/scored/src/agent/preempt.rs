//! The agent's half of a gang-scheduling switch (network preemption).
//!
//! Phase 1, `drain`: every PM context of the outgoing jobs is asked to
//! quiesce through the control word of its statistics page and a SIGURG
//! (docs/pm/control.md); the agent waits, bounded, until each reports
//! `quiesced` in its state word.  Phase 2, `switch`: the outgoing jobs'
//! cgroups freeze, then the incoming jobs' control words go back to RUN,
//! their cgroups thaw and a SIGURG wakes their contexts.

use super::cgroup::JobCgroup;
use super::pmstats::{self, layout};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Offsets and values of the words PM and the agent share (docs/pm/stats.md),
/// generated from pm/src/stats.h.
use layout::{CONTROL_AT, CONTROL_QUIESCE, CONTROL_RUN, STATE_AT, STATE_CLOSED, STATE_QUIESCED};
const PAGE_MIN: usize = CONTROL_AT + 4;
/// How long a freeze may take before the agent reports it and goes on.
const FREEZE_WITHIN: Duration = Duration::from_secs(2);

/// A context's statistics page, mapped read-write (the agent is root).
struct Page {
    pid: i32,
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is only accessed through atomics.
unsafe impl Send for Page {}

impl Page {
    fn open(pid: i32, path: &Path) -> Option<Page> {
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::io::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .ok()?;
        let meta = f.metadata().ok()?;
        if !pmstats::owned_by_process(&meta, pid) {
            tracing::warn!(
                pid,
                path = %path.display(),
                "not a statistics page of that process (link, or another owner): left alone"
            );
            return None;
        }
        let len = meta.len() as usize;
        if len < PAGE_MIN {
            return None;
        }
        // SAFETY: a shared mapping of a whole regular file we hold open; it
        // stays valid after the descriptor closes, until munmap in Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let page = Page { pid, base, len };
        // Only pages PM finished writing (magic last) are real.
        // SAFETY: len >= PAGE_MIN > 8.
        let magic = unsafe { std::slice::from_raw_parts(base as *const u8, 8) };
        (magic == layout::MAGIC).then_some(page)
    }

    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is a 4-byte aligned offset inside the mapping; PM
        // accesses the same words with C11 atomics.
        unsafe { &*((self.base as *mut u8).add(at) as *const AtomicU32) }
    }

    fn state(&self) -> u32 {
        self.word(STATE_AT).load(Ordering::Acquire)
    }

    fn set_control(&self, v: u32) {
        self.word(CONTROL_AT).store(v, Ordering::Release);
    }

    fn poke(&self) {
        // SAFETY: kill(2) on a pid of our own job cgroup.
        unsafe {
            libc::kill(self.pid, libc::SIGURG);
        }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: unmapping what open() mapped.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

fn pages_of(cgroups: &[JobCgroup], stats_dir: &Path) -> Vec<Page> {
    let pids: HashSet<i32> = cgroups.iter().flat_map(|c| c.pids()).collect();
    pages_of_pids(&pids, stats_dir)
}

fn pages_of_pids(pids: &HashSet<i32>, stats_dir: &Path) -> Vec<Page> {
    pmstats::pages(stats_dir, pids)
        .into_iter()
        .filter_map(|(pid, path): (i32, PathBuf)| Page::open(pid, &path))
        .collect()
}

#[derive(Debug, Default, Clone, Copy)]
pub struct DrainReport {
    pub contexts: u32,
    /// Processes frozen without answering: those whose contexts did not
    /// quiesce in time, and those with no PM context (not PM programs:
    /// they cannot answer, so nobody waits for them).
    pub unanswered: u32,
    /// Of `unanswered`: processes with a PM context that did not quiesce.
    pub silent: u32,
    pub quiesce_ns: u64,
}

/// Phase 1: ask every PM context of `cgroups` to quiesce, wait until all
/// did or `timeout` passed.
pub async fn drain(cgroups: &[JobCgroup], stats_dir: &Path, timeout: Duration) -> DrainReport {
    let pids: HashSet<i32> = cgroups.iter().flat_map(|c| c.pids()).collect();
    let pages = pages_of_pids(&pids, stats_dir);
    let with_pm: HashSet<i32> = pages.iter().map(|p| p.pid).collect();
    let without_pm = pids.len() - with_pm.len();
    let start = Instant::now();
    for p in &pages {
        p.set_control(CONTROL_QUIESCE);
        p.poke();
    }
    let mut answered: Vec<Option<Duration>> = vec![None; pages.len()];
    loop {
        for (i, p) in pages.iter().enumerate() {
            let s = p.state();
            if answered[i].is_none() && (s == STATE_QUIESCED || s == STATE_CLOSED) {
                answered[i] = Some(start.elapsed());
            }
        }
        if answered.iter().all(Option::is_some) || start.elapsed() >= timeout {
            break;
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let silent: HashSet<i32> = pages
        .iter()
        .zip(&answered)
        .filter(|(_, a)| a.is_none())
        .map(|(p, _)| p.pid)
        .collect();
    if !silent.is_empty() {
        tracing::warn!(
            processes = silent.len(),
            "PM contexts did not quiesce within {} ms; freezing them anyway",
            timeout.as_millis()
        );
    }
    DrainReport {
        contexts: pages.len() as u32,
        unanswered: (silent.len() + without_pm) as u32,
        silent: silent.len() as u32,
        quiesce_ns: answered
            .iter()
            .flatten()
            .max()
            .map_or(0, |d| d.as_nanos() as u64),
    }
}

/// Phase 2: freeze `outgoing`, then resume `incoming`.
pub async fn switch(outgoing: &[JobCgroup], incoming: &[JobCgroup], stats_dir: &Path) {
    for c in outgoing {
        if let Err(e) = c.freeze(true) {
            tracing::error!("cannot freeze: {e}");
        }
    }
    let deadline = Instant::now() + FREEZE_WITHIN;
    for c in outgoing {
        while !c.is_frozen() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        if !c.is_frozen() {
            tracing::error!("a job cgroup did not freeze within {FREEZE_WITHIN:?}");
        }
    }
    // The control word goes back to RUN before the thaw, so that a context
    // waking in its hold loop sees it at once; SIGURG wakes one that sleeps.
    let pages = pages_of(incoming, stats_dir);
    for p in &pages {
        p.set_control(CONTROL_RUN);
    }
    for c in incoming {
        if let Err(e) = c.freeze(false) {
            tracing::error!("cannot thaw: {e}");
        }
    }
    for p in &pages {
        p.poke();
    }
}
