//! Starting one rank: as the job's user, in the job's cgroup, in its working
//! directory, with its environment.
//!
//! The rank is made with clone3(2) and CLONE_INTO_CGROUP, so it is born in
//! the job's cgroup.  Moving a process there after fork (a write to
//! cgroup.procs) takes the cgroup hierarchy's thread-group lock for writing,
//! which waits for an RCU grace period: measured here, 0.1 to 5 ms per
//! rank, most of a launch's tail.  Where the kernel refuses the flag (the
//! cgroup is not on cgroup v2, or a kernel before 5.7) the child moves
//! itself, as before.
//!
//! Everything the child does between clone and exec is prepared before the
//! clone (C strings, the argument and environment arrays, the candidates
//! of a PATH search, the group list) so that the child only makes system
//! calls: after a fork of a threaded process nothing else is safe, and
//! after a raw clone3 glibc's own state is the parent's (its thread list,
//! its locks), so the child calls no glibc function that looks at it.  An
//! error of the child before exec comes back as its errno through a pipe
//! that exec closes, as std's Command does.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

pub struct RankSpawn<'a> {
    pub argv: &'a [String],
    pub env: Vec<(String, String)>,
    pub cwd: &'a str,
    pub uid: u32,
    pub gid: u32,
    pub user: &'a str,
    /// The job's cgroup directory.
    pub cgroup: &'a Path,
    pub stdin: bool,
    /// The CPU the rank is bound to (agent.cpus), if any.
    pub cpu: Option<u32>,
    /// Descriptors of the agent the rank keeps open, under their numbers
    /// (PMI's socket, `PMI_FD`; PM's raw Ethernet sockets, `PM_ETH_GRANT`).
    pub inherit_fds: Vec<RawFd>,
}

/// A started rank: its pid, its pipes, and a pidfd to wait on.  Dropped
/// before [`RankProcess::wait`] returned (a watcher aborted with its job, a
/// launch that failed half way), it is still reaped, by a task of its own
/// once it ends: the agent leaves no zombies.
pub struct RankProcess {
    pid: u32,
    /// None once reaped.
    pidfd: Option<AsyncFd<OwnedFd>>,
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    /// Made in the cgroup by clone3 (else the child moved itself).
    pub born_in_cgroup: bool,
}

impl RankProcess {
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Wait for the rank to end and reap it (once).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = match &self.pidfd {
            Some(fd) => wait_on(fd).await?,
            None => return Err(io::Error::from_raw_os_error(libc::ECHILD)),
        };
        self.pidfd = None;
        Ok(status)
    }
}

async fn wait_on(pidfd: &AsyncFd<OwnedFd>) -> io::Result<ExitStatus> {
    loop {
        let mut ready = pidfd.readable().await?;
        match reap(pidfd.get_ref().as_raw_fd(), libc::WNOHANG)? {
            Some(status) => return Ok(status),
            None => ready.clear_ready(),
        }
    }
}

impl Drop for RankProcess {
    fn drop(&mut self) {
        let Some(fd) = self.pidfd.take() else {
            return;
        };
        if matches!(
            reap(fd.get_ref().as_raw_fd(), libc::WNOHANG),
            Ok(Some(_)) | Err(_)
        ) {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = wait_on(&fd).await;
            });
        }
    }
}

/// waitid(P_PIDFD): the child's status, None while it runs (with WNOHANG).
fn reap(pidfd: RawFd, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    const P_PIDFD: libc::idtype_t = 3;
    // SAFETY: siginfo_t is plain data; waitid fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: pidfd is a pidfd we own; info is valid for writing.
        let r = unsafe {
            libc::waitid(
                P_PIDFD,
                pidfd as libc::id_t,
                &mut info,
                libc::WEXITED | flags,
            )
        };
        if r == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    // SAFETY: waitid filled a SIGCHLD siginfo (or left it zeroed: no child yet).
    let (pid, code, status) = unsafe { (info.si_pid(), info.si_code, info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    // Back into the wait status that ExitStatus decodes.
    let raw = match code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status, // CLD_KILLED
    };
    Ok(Some(ExitStatus::from_raw(raw)))
}

/// clone3's arguments (linux/sched.h, CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

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

fn cstring(s: impl AsRef<OsStr>) -> io::Result<CString> {
    CString::new(s.as_ref().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The files exec tries for `program`: itself when it names a path, else
/// every directory of the rank's PATH (execvp(3)'s default without one).
fn candidates(program: &str, env: &[(String, String)]) -> io::Result<Vec<CString>> {
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.contains('/') {
        return Ok(vec![cstring(program)?]);
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    path.split(':')
        .map(|dir| cstring(Path::new(if dir.is_empty() { "." } else { dir }).join(program)))
        .collect()
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just made them and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn open_cloexec(path: &CString, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: path is a valid C string.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open just made it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What the child needs, all made before the clone.
struct ChildPlan {
    candidates: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    /// The cgroup.procs file to write, when the child was not born in the
    /// cgroup.
    procs: CString,
    groups: Vec<libc::gid_t>,
    uid: u32,
    gid: u32,
    agent: libc::pid_t,
    cpu_set: Option<libc::cpu_set_t>,
    stdio: [RawFd; 3],
    report: RawFd,
    /// Kept across exec (RankSpawn::inherit_fds).
    inherit: Vec<RawFd>,
}

/// The child, between clone and exec: system calls only.  Never returns.
///
/// # Safety
/// Runs in the child of a clone of a threaded process: it must not
/// allocate, lock, or touch anything but `plan`.
unsafe fn child(plan: &ChildPlan, born_in_cgroup: bool) -> ! {
    let fail = |step: libc::c_int| -> ! {
        let errno = *libc::__errno_location();
        let word = if errno != 0 { errno } else { step };
        libc::write(plan.report, (&word as *const libc::c_int).cast(), 4);
        libc::_exit(127)
    };
    // Into the job's cgroup first, so that nothing it starts escapes.
    if !born_in_cgroup {
        let fd = libc::open(plan.procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
            fail(libc::EIO);
        }
        libc::close(fd);
    }
    for (to, &from) in plan.stdio.iter().enumerate() {
        if libc::dup2(from, to as libc::c_int) < 0 {
            fail(libc::EBADF);
        }
    }
    // Only this child's table: without CLONE_FILES it is a copy.
    for &fd in &plan.inherit {
        if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
            fail(libc::EBADF);
        }
    }
    // What exec keeps: the signal mask, and ignored signals (the Rust
    // runtime ignores SIGPIPE).
    let mut none: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut none);
    libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    // Own session: the terminal of whoever started the agent does not
    // reach the job.
    libc::setsid();
    // The system calls, not glibc's wrappers: those change the credentials
    // of every thread glibc knows of, signalling each under a lock, and
    // after a raw clone glibc still believes in the agent's threads (its
    // fork() would have reset that), and another thread may have held the
    // lock at the clone.  Here there is one thread.
    if libc::syscall(libc::SYS_setgroups, plan.groups.len(), plan.groups.as_ptr()) != 0
        || libc::syscall(libc::SYS_setgid, plan.gid) != 0
        || libc::syscall(libc::SYS_setuid, plan.uid) != 0
    {
        fail(libc::EPERM);
    }
    // The agent's death takes the rank along.  After the change of
    // credentials, which clears the death signal (prctl(2)); and if the
    // agent died before this line, the signal will never come.
    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
        fail(libc::EINVAL);
    }
    if libc::getppid() != plan.agent {
        libc::_exit(137);
    }
    if libc::chdir(plan.cwd.as_ptr()) != 0 {
        fail(libc::ENOENT);
    }
    if let Some(set) = &plan.cpu_set {
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
            fail(libc::EINVAL);
        }
    }
    // execvp's rule: the first error that is not "not here" is the one.
    let mut first = 0;
    for file in &plan.candidates {
        libc::execve(file.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr());
        let e = *libc::__errno_location();
        if first == 0 && e != libc::ENOENT && e != libc::ENOTDIR {
            first = e;
        }
    }
    *libc::__errno_location() = if first != 0 { first } else { libc::ENOENT };
    fail(libc::ENOENT)
}

/// clone3 as fork, with a pidfd and, when `cgroup` is given, born in it:
/// the pid in the parent (0 in the child), or the errno.
fn clone3(pidfd: &mut RawFd, cgroup: Option<RawFd>) -> io::Result<libc::pid_t> {
    let mut args = CloneArgs {
        flags: libc::CLONE_PIDFD as u64,
        pidfd: pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd as u64;
    }
    // SAFETY: args is a valid clone_args of its size; without CLONE_VM the
    // child gets a copy of the address space, as with fork.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as libc::pid_t)
}

pub fn spawn(r: &RankSpawn) -> io::Result<RankProcess> {
    let program = r.argv.first().map_or("", String::as_str);
    let args: Vec<CString> = r.argv.iter().map(cstring).collect::<io::Result<_>>()?;
    let envs: Vec<CString> = r
        .env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}")))
        .collect::<io::Result<_>>()?;
    let null_terminated = |v: &[CString]| {
        let mut p: Vec<_> = v.iter().map(|s| s.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    let cgroup_dir = open_cloexec(&cstring(r.cgroup)?, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let (out_r, out_w) = pipe_cloexec()?;
    let (err_r, err_w) = pipe_cloexec()?;
    let (in_r, in_w) = if r.stdin {
        let (a, b) = pipe_cloexec()?;
        (a, Some(b))
    } else {
        (open_cloexec(&cstring("/dev/null")?, libc::O_RDONLY)?, None)
    };
    let (report_r, report_w) = pipe_cloexec()?;
    let plan = ChildPlan {
        candidates: candidates(program, &r.env)?,
        argv: null_terminated(&args),
        envp: null_terminated(&envs),
        cwd: cstring(r.cwd)?,
        procs: cstring(r.cgroup.join("cgroup.procs"))?,
        groups: groups_of(r.user, r.gid),
        uid: r.uid,
        gid: r.gid,
        agent: std::process::id() as libc::pid_t,
        cpu_set: r.cpu.map(cpu_set_of),
        stdio: [in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()],
        report: report_w.as_raw_fd(),
        inherit: r.inherit_fds.clone(),
    };

    let mut pidfd: RawFd = -1;
    let (pid, born_in_cgroup) = match clone3(&mut pidfd, Some(cgroup_dir.as_raw_fd())) {
        Ok(pid) => (pid, true),
        // Not a cgroup v2 directory, or a kernel without the flag.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EINVAL | libc::EBADF | libc::E2BIG | libc::EOPNOTSUPP)
            ) =>
        {
            (clone3(&mut pidfd, None)?, false)
        }
        Err(e) => return Err(e),
    };
    if pid == 0 {
        // SAFETY: we are the child; `child` only makes system calls on
        // what `plan` prepared.
        unsafe { child(&plan, born_in_cgroup) }
    }
    // SAFETY: clone3 stored a pidfd that we now own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop((in_r, out_w, err_w, report_w, cgroup_dir));

    // Exec closes the report pipe: end of file, or the child's errno.
    let mut word = [0u8; 4];
    let n = loop {
        // SAFETY: word has room for 4 bytes.
        let n = unsafe { libc::read(report_r.as_raw_fd(), word.as_mut_ptr().cast(), 4) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n == 4 {
        let _ = reap(pidfd.as_raw_fd(), 0); // it _exit()ed: reap it
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(word)));
    }
    // SAFETY: the OwnedFd keeps the pidfd open, the same one, until the
    // AsyncFd drops it.
    let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }?;
    Ok(RankProcess {
        pid: pid as u32,
        pidfd: Some(pidfd),
        stdin: in_w.map(pipe::Sender::from_owned_fd).transpose()?,
        stdout: Some(pipe::Receiver::from_owned_fd(out_r)?),
        stderr: Some(pipe::Receiver::from_owned_fd(err_r)?),
        born_in_cgroup,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Vec<(String, String)> {
        vec![("PATH".into(), "/nonexistent::/usr/bin:/bin".into())]
    }

    #[test]
    fn a_bare_name_is_searched_in_the_ranks_path() {
        let c = candidates("true", &env()).unwrap();
        let c: Vec<_> = c.iter().map(|s| s.to_str().unwrap()).collect();
        assert_eq!(
            c,
            ["/nonexistent/true", "./true", "/usr/bin/true", "/bin/true"]
        );
    }

    #[test]
    fn a_path_is_tried_alone() {
        let c = candidates("./a.out", &env()).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].to_str().unwrap(), "./a.out");
        assert!(candidates("", &env()).is_err());
    }

    fn spawn_in(dir: &Path, argv: &[&str]) -> io::Result<RankProcess> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        // SAFETY: plain getters.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
        spawn(&RankSpawn {
            argv: &argv,
            env: env(),
            cwd: "/",
            uid,
            gid,
            user: &user,
            cgroup: dir,
            stdin: false,
            cpu: None,
            inherit_fds: Vec::new(),
        })
    }

    /// A directory that is not a cgroup: CLONE_INTO_CGROUP is refused, and
    /// the child writes its "0" to the cgroup.procs file there instead.
    #[tokio::test]
    async fn outside_cgroup_v2_the_child_moves_itself() {
        let dir = std::env::temp_dir().join(format!("score-spawn-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        let mut p = spawn_in(&dir, &["sh", "-c", "echo out; echo err >&2; exit 3"]).unwrap();
        assert!(!p.born_in_cgroup);
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(p.stdout.as_mut().unwrap(), &mut out)
            .await
            .unwrap();
        let status = p.wait().await.unwrap();
        assert_eq!(out, "out\n");
        assert_eq!(status.code(), Some(3));
        assert_eq!(
            std::fs::read_to_string(dir.join("cgroup.procs")).unwrap(),
            "0"
        );
        let killed = spawn_in(&dir, &["sh", "-c", "kill -9 $$"])
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert_eq!(killed.signal(), Some(libc::SIGKILL));
        // Dropped while it runs: reaped when it ends, no zombie left.
        let pid = spawn_in(&dir, &["sleep", "0.2"]).unwrap().id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // SAFETY: kill with signal 0 only asks whether the pid exists.
        while unsafe { libc::kill(pid, 0) } == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "pid {pid} was never reaped"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// In a cgroup v2 directory the rank is born there: it is in the
    /// cgroup from its first instruction, and nobody wrote cgroup.procs.
    #[tokio::test]
    async fn on_cgroup_v2_the_rank_is_born_in_the_jobs_cgroup() {
        let mount = crate::agent::cgroup::cgroup2_mount()
            .expect("no cgroup2 file system in /proc/mounts: the agent needs one");
        let name = format!("score-spawn-test-{}", std::process::id());
        let dir = mount.join(&name);
        std::fs::create_dir(&dir).unwrap();
        let mut p = spawn_in(&dir, &["cat", "/proc/self/cgroup"]).unwrap();
        assert!(p.born_in_cgroup);
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(p.stdout.as_mut().unwrap(), &mut out)
            .await
            .unwrap();
        assert_eq!(p.wait().await.unwrap().code(), Some(0));
        std::fs::remove_dir(&dir).unwrap();
        let v2 = out
            .lines()
            .find(|l| l.starts_with("0::"))
            .unwrap_or_default();
        assert!(
            v2.ends_with(&format!("/{name}")),
            "the rank's cgroups: {out}"
        );
    }

    #[tokio::test]
    async fn a_program_that_cannot_run_says_why() {
        let dir = std::env::temp_dir().join(format!("score-spawn-test2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        let e = spawn_in(&dir, &["no-such-program-here"]).err().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        // Not executable: exec's own error, not "not found".
        let data = dir.join("data");
        std::fs::write(&data, "not a program").unwrap();
        let e = spawn_in(&dir, &[data.to_str().unwrap()]).err().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
