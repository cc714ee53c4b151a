//! Starting one rank: as the job's user, in the job's cgroup, in its working
//! directory, with its environment.
//!
//! Everything the child does between fork and exec is prepared before the
//! fork (C strings, the group list) so that the child only makes system
//! calls: after fork in a threaded process nothing else is safe.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Stdio;
use tokio::process::{Child, Command};

pub struct RankSpawn<'a> {
    pub argv: &'a [String],
    pub env: Vec<(String, String)>,
    pub cwd: &'a str,
    pub uid: u32,
    pub gid: u32,
    pub user: &'a str,
    pub cgroup_procs: &'a Path,
    pub stdin: bool,
    /// The CPU the rank is bound to (agent.cpus), if any.
    pub cpu: Option<u32>,
}

/// A CPU set of the one CPU `cpu`, for sched_setaffinity(2).
fn cpu_set_of(cpu: u32) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set,
    // and the config refuses CPU numbers beyond CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        set
    }
}

/// The supplementary groups of `user` (with `gid`), as initgroups(3) would set.
fn groups_of(user: &str, gid: u32) -> Vec<libc::gid_t> {
    let Ok(name) = CString::new(user) else {
        return vec![gid];
    };
    match nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid)) {
        Ok(g) => g.into_iter().map(|g| g.as_raw()).collect(),
        Err(_) => vec![gid],
    }
}

fn last_os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

pub fn spawn(r: &RankSpawn) -> std::io::Result<Child> {
    let mut cmd = Command::new(&r.argv[0]);
    cmd.args(&r.argv[1..])
        .env_clear()
        .envs(r.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(if r.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);

    let procs = CString::new(r.cgroup_procs.as_os_str().as_bytes())?;
    let cwd = CString::new(r.cwd)?;
    let groups = groups_of(r.user, r.gid);
    let (uid, gid) = (r.uid, r.gid);
    let agent = std::process::id() as libc::pid_t;
    let cpu_set = r.cpu.map(cpu_set_of);
    // SAFETY: the closure runs in the child between fork and exec; it only
    // makes async-signal-safe system calls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // Into the job's cgroup first, so that nothing it starts escapes.
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(last_os_error());
            }
            let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            libc::close(fd);
            if !ok {
                return Err(last_os_error());
            }
            // Own session: the terminal of whoever started the agent does
            // not reach the job.
            libc::setsid();
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
                return Err(last_os_error());
            }
            if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                return Err(last_os_error());
            }
            // The agent's death takes the rank along.  After the change of
            // credentials, which clears the death signal (prctl(2)); and if
            // the agent died before this line, the signal will never come.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(last_os_error());
            }
            if libc::getppid() != agent {
                libc::_exit(137);
            }
            // Only the errno crosses back to the parent: the caller names
            // the step in its message.
            if libc::chdir(cwd.as_ptr()) != 0 {
                return Err(last_os_error());
            }
            if let Some(set) = &cpu_set {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
                    return Err(last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}
