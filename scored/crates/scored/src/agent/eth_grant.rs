//! Raw Ethernet for the ranks (`agent.pm_net_device = "eth"`).
//!
//! PM's eth device talks through packet sockets, which take CAP_NET_RAW to
//! open; a job's ranks run as its user, without it.  The agent, root,
//! opens them for each rank it starts: libpm's `pm_eth_grant` (pm.h) opens,
//! on each NIC PM will use in the rank, the UDP socket that holds the
//! rank's port and a packet socket whose filter passes only PM's frames
//! for that port, locked, so that the rank sees no other process's frames.
//! The rank inherits them (their numbers in `PM_ETH_GRANT`) and its eth
//! device takes them instead of opening its own.  What a rank sends
//! cannot be confined the same way: that is why it is the administrator's
//! choice (docs/scored/admin.md).
//!
//! libpm is loaded at run time, only when the option is on, so that the
//! agent does not need it otherwise: from `lib/` beside the agent's `bin/`
//! (a tree built by `make`), else by the dynamic linker's search (a
//! packaged install).

use std::ffi::{c_char, c_int, CStr, CString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;

use anyhow::{anyhow, Result};

const LIBPM: &str = "libpm.so.0";
/// Two per NIC; PM uses at most 8 NICs (pm/src/udp/nic.h).
const MAX_FDS: usize = 16;

type GrantFn = unsafe extern "C" fn(
    nics: *const c_char,
    conf: *const c_char,
    fds: *mut c_int,
    max_fds: c_int,
    env: *mut c_char,
    envlen: usize,
    err: *mut c_char,
    errlen: usize,
) -> c_int;

/// libpm's `pm_eth_grant`, loaded once for the agent's life.
pub struct EthGrants {
    grant: GrantFn,
    /// Where libpm came from, for the log.
    pub library: String,
}

/// One rank's sockets: the descriptors it inherits (closed here once it
/// started) and the value of its `PM_ETH_GRANT`.
pub struct Grant {
    pub fds: Vec<OwnedFd>,
    pub env: String,
}

impl EthGrants {
    /// Load libpm and find `pm_eth_grant`; an error says which libpm was
    /// tried and why it does not serve, or that this agent may not open
    /// packet sockets at all (no CAP_NET_RAW: a container, a unit that
    /// drops it), which would otherwise fail every launch.
    pub fn load() -> Result<Self> {
        // SAFETY: a plain socket(2); the descriptor is closed at once.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(anyhow!(
                "agent.pm_net_device = \"eth\": this agent cannot open packet sockets ({}); \
                 it needs CAP_NET_RAW",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: fd was just opened and is ours.
        unsafe { libc::close(fd) };
        let mut tried = Vec::new();
        for candidate in candidates() {
            let name = CString::new(candidate.clone()).expect("no NUL in a path");
            // SAFETY: a plain dlopen of a library by name; RTLD_NOW resolves
            // everything now, so a broken libpm fails here, not in a rank's
            // launch.  The handle is never closed: the agent keeps libpm.
            let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if handle.is_null() {
                tried.push(format!("{candidate}: {}", dlerror()));
                continue;
            }
            // SAFETY: dlsym on a handle dlopen returned, with a C string.
            let sym = unsafe { libc::dlsym(handle, c"pm_eth_grant".as_ptr()) };
            if sym.is_null() {
                tried.push(format!(
                    "{candidate}: no pm_eth_grant (a libpm before its PM_0.6 symbols)"
                ));
                continue;
            }
            // SAFETY: pm_eth_grant has exactly GrantFn's signature (pm.h).
            let grant = unsafe { std::mem::transmute::<*mut libc::c_void, GrantFn>(sym) };
            return Ok(Self {
                grant,
                library: candidate,
            });
        }
        Err(anyhow!(
            "agent.pm_net_device = \"eth\" needs libpm (package libpm0): {}",
            tried.join("; ")
        ))
    }

    /// Open the sockets of a rank whose environment has `nics` and `conf`
    /// as PM_UDP_NICS and PM_UDP_CONF (None: unset).
    pub fn grant(&self, nics: Option<&str>, conf: Option<&str>) -> Result<Grant, String> {
        let cstr = |s: Option<&str>| -> Result<Option<CString>, String> {
            s.filter(|s| !s.is_empty())
                .map(|s| CString::new(s).map_err(|_| format!("{s:?} holds a NUL byte")))
                .transpose()
        };
        let (nics, conf) = (cstr(nics)?, cstr(conf)?);
        let mut fds = [-1 as c_int; MAX_FDS];
        let mut env = [0 as c_char; 512];
        let mut err = [0 as c_char; 512];
        // SAFETY: every buffer is valid for the length passed; the strings
        // are NUL-terminated or null.
        let n = unsafe {
            (self.grant)(
                nics.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                conf.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                fds.as_mut_ptr(),
                MAX_FDS as c_int,
                env.as_mut_ptr(),
                env.len(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if n < 0 {
            // SAFETY: pm_eth_grant NUL-terminates err within its length.
            let why = unsafe { CStr::from_ptr(err.as_ptr()) };
            return Err(format!(
                "{} ({})",
                why.to_string_lossy(),
                std::io::Error::from_raw_os_error(-n)
            ));
        }
        let fds = fds[..n as usize]
            .iter()
            // SAFETY: pm_eth_grant opened these n descriptors for us.
            .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect();
        // SAFETY: NUL-terminated within its length on success.
        let env = unsafe { CStr::from_ptr(env.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(Grant { fds, env })
    }
}

/// libpm beside the agent's binary first, then the system's.
fn candidates() -> Vec<String> {
    let mut c = Vec::new();
    if let Some(lib) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("lib").join(LIBPM)))
        .filter(|p: &PathBuf| p.is_file())
    {
        c.push(lib.display().to_string());
    }
    c.push(LIBPM.to_string());
    c
}

fn dlerror() -> String {
    // SAFETY: dlerror returns a thread-local C string or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null: a C string that lives until the next dl call.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}
