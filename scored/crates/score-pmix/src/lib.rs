//! A PMIx server for scored's per-node agent.
//!
//! PM programs (libpm bootstraps through a PMIx client) and Open MPI 4.1
//! programs (direct launch, no `mpirun`) start under the agent with no other
//! launcher: the agent registers each job with [`PmixServer::register_job`],
//! adds [`PmixServer::setup_fork`]'s variables to each child's environment,
//! and answers the [`ServerEvent`]s that libpmix raises, above all
//! [`ServerEvent::Fence`] (gather every node's blob through the master).
//!
//! libpmix allows one server per process; its upcalls run on libpmix's own
//! progress thread and reach the agent through a tokio unbounded channel.
//! See README.md for the threading and ownership model.

mod ffi;

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What Open MPI 4.1 needs to use a PMIx server that is not its own `mpirun`, nor
/// Slurm's or Flux's: its "orte" launch-environment check (schizo) claims every
/// process that has no ORTE daemon and sets `ess=singleton`, so each rank would
/// run alone. Without it, ess picks its PMIx module. Harmless for other programs,
/// and an `mpirun` started inside a job still works (its daemons pass their URI).
pub const OMPI_DIRECT_LAUNCH_ENV: &[(&str, &str)] = &[("OMPI_MCA_schizo", "^orte")];

/// libpmix's longest namespace (`PMIX_MAX_NSLEN`).
pub const MAX_NSPACE_LEN: usize = 255;

/// An error of libpmix (its status code and `PMIx_Error_string`) or of this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PmixError {
    /// A libpmix call failed.
    #[error("{op}: {text} (PMIx status {code})")]
    Pmix {
        op: &'static str,
        code: i32,
        text: String,
    },
    /// libpmix allows one server per process, and one is running.
    #[error("a PMIx server is already running in this process")]
    AlreadyRunning,
    /// The job layout cannot be registered as it is.
    #[error("invalid job layout: {0}")]
    InvalidJob(String),
    /// The namespace is registered already.
    #[error("namespace {0} is registered already")]
    AlreadyRegistered(String),
}

impl PmixError {
    /// The error of libpmix status `code` in operation `op`.
    pub fn from_status(op: &'static str, code: i32) -> PmixError {
        PmixError::Pmix {
            op,
            code,
            text: status_string(code),
        }
    }

    /// The PMIx status code that stands for this error (always negative).
    pub fn code(&self) -> i32 {
        match self {
            PmixError::Pmix { code, .. } if *code < 0 => *code,
            PmixError::Pmix { .. } => ffi::PMIX_ERROR,
            PmixError::AlreadyRunning => ffi::PMIX_ERR_INIT,
            PmixError::InvalidJob(_) => ffi::PMIX_ERR_BAD_PARAM,
            PmixError::AlreadyRegistered(_) => ffi::PMIX_EXISTS,
        }
    }

    /// PMIx_Error_string of the status code.
    pub fn text(&self) -> String {
        status_string(self.code())
    }
}

/// `PMIx_Error_string(code)`.
pub fn status_string(code: i32) -> String {
    // SAFETY: PMIx_Error_string returns a static NUL-terminated string for any code.
    let p = unsafe { ffi::shim_error_string(code) };
    if p.is_null() {
        return format!("PMIx status {code}");
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn check(op: &'static str, code: c_int) -> Result<(), PmixError> {
    if code == ffi::PMIX_SUCCESS {
        Ok(())
    } else {
        Err(PmixError::from_status(op, code))
    }
}

/// One job as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLayout {
    /// The PMIx namespace, e.g. "score.42".
    pub nspace: String,
    /// The job's user: its processes must connect with these credentials.
    pub uid: u32,
    pub gid: u32,
    /// Host names of all nodes of the job, in node order.
    pub nodes: Vec<String>,
    /// Processes per node; rank = node_index * ppn + local_rank.
    pub ppn: u32,
    /// This node's index in `nodes`.
    pub node_index: u32,
    /// A per-job directory the agent created (owned by the job's uid).
    pub tmpdir: PathBuf,
    /// PM's secret key for the job, given to its ranks as the job-level
    /// key "pm.jobkey"; 0 gives none (then PM's rank 0 draws one).
    pub pm_jobkey: u64,
}

impl JobLayout {
    /// Ranks in the whole job.
    pub fn size(&self) -> u32 {
        self.nodes.len() as u32 * self.ppn
    }

    /// The first rank on this node.
    pub fn first_local_rank(&self) -> u32 {
        self.node_index * self.ppn
    }

    /// The ranks on node `node`.
    pub fn node_ranks(&self, node: u32) -> std::ops::Range<u32> {
        node * self.ppn..(node + 1) * self.ppn
    }

    /// The ranks on this node.
    pub fn local_ranks(&self) -> std::ops::Range<u32> {
        self.node_ranks(self.node_index)
    }

    /// PMIX_LOCAL_PEERS of node `node`: its ranks, comma-separated ("2,3").
    pub fn node_peers(&self, node: u32) -> String {
        join(self.node_ranks(node), ",")
    }

    /// PMIX_LOCAL_PEERS of this node.
    pub fn local_peers(&self) -> String {
        self.node_peers(self.node_index)
    }

    /// PMIx_generate_regex's input: the host names, comma-separated.
    pub fn host_list(&self) -> String {
        self.nodes.join(",")
    }

    /// PMIx_generate_ppn's input: each node's ranks, nodes separated by ';' ("0,1;2,3").
    pub fn proc_map(&self) -> String {
        (0..self.nodes.len() as u32)
            .map(|n| self.node_peers(n))
            .collect::<Vec<_>>()
            .join(";")
    }

    /// Checks what libpmix and the rank arithmetic need.
    pub fn validate(&self) -> Result<(), PmixError> {
        let bad = |m: String| Err(PmixError::InvalidJob(m));
        if self.nspace.is_empty() || self.nspace.len() > MAX_NSPACE_LEN {
            return bad(format!(
                "namespace must have 1 to {MAX_NSPACE_LEN} bytes: {:?}",
                self.nspace
            ));
        }
        if self.nspace.contains('\0') {
            return bad("namespace contains NUL".into());
        }
        if self.nodes.is_empty() {
            return bad("no nodes".into());
        }
        for n in &self.nodes {
            if n.is_empty() || n.contains([',', ';', '\0']) {
                return bad(format!("bad host name {n:?}"));
            }
        }
        if self.node_index as usize >= self.nodes.len() {
            return bad(format!(
                "node_index {} but {} nodes",
                self.node_index,
                self.nodes.len()
            ));
        }
        // Local ranks are PMIx uint16 values.
        if self.ppn == 0 || self.ppn > u16::MAX as u32 {
            return bad(format!("ppn {} not in 1..=65535", self.ppn));
        }
        // Keep clear of PMIx's special ranks (wildcard, undefined, ...).
        match (self.nodes.len() as u64).checked_mul(self.ppn as u64) {
            Some(n) if n < 0x7fff_ffff => {}
            _ => return bad("too many ranks".into()),
        }
        if self.tmpdir.as_os_str().as_bytes().contains(&0) {
            return bad("tmpdir contains NUL".into());
        }
        Ok(())
    }
}

fn join(it: impl Iterator<Item = u32>, sep: &str) -> String {
    it.map(|r| r.to_string()).collect::<Vec<_>>().join(sep)
}

/// What libpmix asks of the agent. Arrives on the channel from [`PmixServer::init`].
#[derive(Debug)]
pub enum ServerEvent {
    /// All local ranks of `nspace` entered a fence. `data` is the local contribution blob
    /// libpmix gave the host. The agent gathers every node's blob (through the master),
    /// concatenates them in node order and calls complete.
    Fence {
        nspace: String,
        data: Vec<u8>,
        collect: bool,
        reply: FenceReply,
    },
    /// A rank called PMIx_Abort (MPI_Abort): the agent ends the job.
    Abort {
        nspace: String,
        rank: u32,
        status: i32,
        message: String,
    },
    /// A rank finished PMIx_Init's handshake.
    ClientConnected { nspace: String, rank: u32 },
    /// A rank called PMIx_Finalize, or its connection closed without one.
    ClientFinalized { nspace: String, rank: u32 },
}

/// A raw shim fence handle; libpmix's callback may be called from any thread.
struct RawFence(*mut c_void);
// SAFETY: the handle is a heap object of the shim, used by one thread at a time
// (always under SHARED's lock), and libpmix's modex callback thread-shifts.
unsafe impl Send for RawFence {}

struct FenceSlot {
    nspace: String,
    handle: Mutex<Option<RawFence>>,
}

/// The answer to one [`ServerEvent::Fence`]. Complete it exactly once; dropping it
/// unanswered completes it with an error, so that clients never hang.
pub struct FenceReply {
    slot: Arc<FenceSlot>,
}

impl fmt::Debug for FenceReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceReply")
            .field("nspace", &self.slot.nspace)
            .finish_non_exhaustive()
    }
}

impl FenceReply {
    /// Releases the fence: `Ok(data)` with every node's blob concatenated in node
    /// order, or an error that the clients' PMIx_Fence returns.
    pub fn complete(self, result: Result<Vec<u8>, PmixError>) {
        match result {
            Ok(data) => finish(&self.slot, ffi::PMIX_SUCCESS, &data),
            Err(e) => finish(&self.slot, e.code(), &[]),
        }
    }

    /// The namespace whose fence this answers.
    pub fn nspace(&self) -> &str {
        &self.slot.nspace
    }
}

impl Drop for FenceReply {
    fn drop(&mut self) {
        finish(&self.slot, ffi::PMIX_ERROR, &[]);
    }
}

/// State shared with the callback on libpmix's progress thread.
struct Shared {
    /// Fences may be accepted and completed (between init and finalize).
    alive: bool,
    tx: Option<UnboundedSender<ServerEvent>>,
    fences: Vec<Weak<FenceSlot>>,
}

static SHARED: Mutex<Shared> = Mutex::new(Shared {
    alive: false,
    tx: None,
    fences: Vec::new(),
});

/// One server per process: set from init's start to the end of finalize.
static RUNNING: AtomicBool = AtomicBool::new(false);

fn shared() -> MutexGuard<'static, Shared> {
    SHARED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Completes a fence once; every completion happens under SHARED's lock, so a
/// completion never races with the sweeps of deregister and finalize.
fn finish(slot: &FenceSlot, status: c_int, data: &[u8]) {
    let sh = shared();
    finish_locked(&sh, slot, status, data);
}

fn finish_locked(sh: &Shared, slot: &FenceSlot, status: c_int, data: &[u8]) {
    let handle = slot.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(RawFence(h)) = handle {
        if sh.alive {
            // SAFETY: h came from the shim and is consumed exactly once (taken above).
            unsafe { ffi::shim_fence_complete(h, status, data.as_ptr().cast(), data.len()) };
        }
    }
}

/// Completes with `status` every outstanding fence (of `nspace`, or all).
fn sweep_fences(sh: &mut Shared, nspace: Option<&str>, status: c_int) {
    let slots: Vec<Arc<FenceSlot>> = sh.fences.iter().filter_map(Weak::upgrade).collect();
    for slot in &slots {
        if nspace.is_none_or(|ns| ns == slot.nspace) {
            finish_locked(sh, slot, status, &[]);
        }
    }
    sh.fences.retain(|w| w.strong_count() > 0);
}

fn cstr_lossy(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the shim passes NUL-terminated strings valid during the call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The shim's event function, on libpmix's progress thread: never blocks, never panics
/// across the boundary (the channel is unbounded and the lock is short).
unsafe extern "C" fn on_event(ev: *const ffi::ShimEvent) -> c_int {
    let Some(ev) = (unsafe { ev.as_ref() }) else {
        return ffi::PMIX_ERR_BAD_PARAM;
    };
    let nspace = cstr_lossy(ev.nspace);
    let mut sh = shared();
    let event = match ev.kind {
        ffi::SHIM_EV_FENCE => {
            if !sh.alive || sh.tx.as_ref().is_none_or(|tx| tx.is_closed()) {
                return ffi::PMIX_ERR_INIT;
            }
            let data = if ev.data.is_null() || ev.ndata == 0 {
                Vec::new()
            } else {
                // SAFETY: libpmix's buffer of ndata bytes, valid during the upcall.
                unsafe { std::slice::from_raw_parts(ev.data.cast::<u8>(), ev.ndata) }.to_vec()
            };
            let slot = Arc::new(FenceSlot {
                nspace: nspace.clone(),
                handle: Mutex::new(Some(RawFence(ev.fence))),
            });
            sh.fences.retain(|w| w.strong_count() > 0);
            sh.fences.push(Arc::downgrade(&slot));
            ServerEvent::Fence {
                nspace,
                data,
                collect: ev.collect != 0,
                reply: FenceReply { slot },
            }
        }
        ffi::SHIM_EV_ABORT => ServerEvent::Abort {
            nspace,
            rank: ev.rank,
            status: ev.status,
            message: cstr_lossy(ev.message),
        },
        ffi::SHIM_EV_CONNECTED => ServerEvent::ClientConnected {
            nspace,
            rank: ev.rank,
        },
        ffi::SHIM_EV_FINALIZED => ServerEvent::ClientFinalized {
            nspace,
            rank: ev.rank,
        },
        _ => return ffi::PMIX_ERR_BAD_PARAM,
    };
    let Some(tx) = sh.tx.as_ref() else {
        return ffi::PMIX_ERR_INIT;
    };
    match tx.send(event) {
        Ok(()) => ffi::PMIX_SUCCESS,
        Err(e) => {
            // The receiver is gone. A refused fence must not be completed as well:
            // disarm the reply, and the shim frees the handle.
            if let ServerEvent::Fence { reply, .. } = e.0 {
                reply
                    .slot
                    .handle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                ffi::PMIX_ERR_INIT
            } else {
                ffi::PMIX_SUCCESS
            }
        }
    }
}

/// The process's PMIx server. Dropping it finalizes libpmix's server.
pub struct PmixServer {
    jobs: Mutex<HashSet<String>>,
}

impl fmt::Debug for PmixServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let jobs: Vec<String> = self.jobs().iter().cloned().collect();
        f.debug_struct("PmixServer").field("jobs", &jobs).finish()
    }
}

fn path_cstring(p: &Path) -> Result<CString, PmixError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| PmixError::InvalidJob(format!("path with NUL: {}", p.display())))
}

fn cstring(s: &str) -> Result<CString, PmixError> {
    CString::new(s).map_err(|_| PmixError::InvalidJob(format!("string with NUL: {s:?}")))
}

impl PmixServer {
    /// Starts libpmix's server with its rendezvous and connection files in `tmpdir`
    /// (which must exist; keep its path short, as the files' paths must fit a Unix
    /// socket address). Fails if a server is running in this process already.
    pub fn init(tmpdir: &Path) -> Result<(PmixServer, UnboundedReceiver<ServerEvent>), PmixError> {
        let dir = path_cstring(tmpdir)?;
        if RUNNING
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(PmixError::AlreadyRunning);
        }
        let (tx, rx) = unbounded_channel();
        {
            let mut sh = shared();
            sh.tx = Some(tx);
            sh.alive = true;
            sh.fences.clear();
        }
        // SAFETY: dir outlives the call; on_event matches ShimEventFn.
        let rc = unsafe { ffi::shim_init(dir.as_ptr(), on_event) };
        if rc != ffi::PMIX_SUCCESS {
            let mut sh = shared();
            sh.alive = false;
            sh.tx = None;
            drop(sh);
            RUNNING.store(false, Ordering::Release);
            return Err(PmixError::from_status("PMIx_server_init", rc));
        }
        Ok((
            PmixServer {
                jobs: Mutex::new(HashSet::new()),
            },
            rx,
        ))
    }

    fn jobs(&self) -> MutexGuard<'_, HashSet<String>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the job's namespace (with the whole job's information, all nodes) and
    /// this node's ranks as clients. Blocks until libpmix has done both: call it from
    /// a blocking context (tokio's `spawn_blocking`), never while handling an event
    /// inside libpmix's thread.
    pub fn register_job(&self, job: &JobLayout) -> Result<(), PmixError> {
        job.validate()?;
        let nspace = cstring(&job.nspace)?;
        let nodes: Vec<CString> = job
            .nodes
            .iter()
            .map(|n| cstring(n))
            .collect::<Result<_, _>>()?;
        let node_ptrs: Vec<*const c_char> = nodes.iter().map(|c| c.as_ptr()).collect();
        let peers: Vec<CString> = (0..job.nodes.len() as u32)
            .map(|n| cstring(&job.node_peers(n)))
            .collect::<Result<_, _>>()?;
        let peer_ptrs: Vec<*const c_char> = peers.iter().map(|c| c.as_ptr()).collect();
        let hosts = cstring(&job.host_list())?;
        let procs = cstring(&job.proc_map())?;
        let tmpdir = path_cstring(&job.tmpdir)?;

        // Hold the table for the whole call: one registration per namespace at a time.
        let mut jobs = self.jobs();
        if jobs.contains(&job.nspace) {
            return Err(PmixError::AlreadyRegistered(job.nspace.clone()));
        }
        let sj = ffi::ShimJob {
            nspace: nspace.as_ptr(),
            uid: job.uid,
            gid: job.gid,
            nodes: node_ptrs.as_ptr(),
            node_peers: peer_ptrs.as_ptr(),
            nnodes: job.nodes.len() as u32,
            ppn: job.ppn,
            node_index: job.node_index,
            hosts: hosts.as_ptr(),
            procs: procs.as_ptr(),
            tmpdir: tmpdir.as_ptr(),
            pm_jobkey: job.pm_jobkey,
        };
        // SAFETY: every pointer in sj points into locals alive until the call returns.
        check("PMIx_server_register_nspace", unsafe {
            ffi::shim_register_job(&sj)
        })?;
        jobs.insert(job.nspace.clone());
        Ok(())
    }

    /// The environment variables the child of rank `rank` needs (PMIX_NAMESPACE,
    /// PMIX_RANK, PMIX_SERVER_URI*, ...), to add to its environment. Also
    /// [`OMPI_DIRECT_LAUNCH_ENV`], without which Open MPI 4.1 ignores the server.
    pub fn setup_fork(&self, nspace: &str, rank: u32) -> Result<Vec<(String, String)>, PmixError> {
        let ns = cstring(nspace)?;
        let mut env: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: ns lives through the call; env receives a shim-owned array.
        let rc = unsafe { ffi::shim_setup_fork(ns.as_ptr(), rank, &mut env) };
        check("PMIx_server_setup_fork", rc)?;
        let mut out = Vec::new();
        if !env.is_null() {
            let mut p = env;
            // SAFETY: a NULL-terminated array of NUL-terminated strings.
            unsafe {
                while !(*p).is_null() {
                    let kv = CStr::from_ptr(*p).to_string_lossy();
                    if let Some((k, v)) = kv.split_once('=') {
                        out.push((k.to_owned(), v.to_owned()));
                    }
                    p = p.add(1);
                }
                ffi::shim_free_env(env);
            }
        }
        for (k, v) in OMPI_DIRECT_LAUNCH_ENV {
            out.push((k.to_string(), v.to_string()));
        }
        Ok(out)
    }

    /// Deregisters this node's clients and the namespace. Outstanding fences of the
    /// job complete with an error first. Idempotent; blocks like register_job.
    pub fn deregister_job(&self, nspace: &str) {
        let mut jobs = self.jobs();
        if !jobs.remove(nspace) {
            return;
        }
        sweep_fences(&mut shared(), Some(nspace), ffi::PMIX_ERROR);
        let Ok(ns) = CString::new(nspace) else {
            return;
        };
        // SAFETY: ns lives through the call.
        unsafe { ffi::shim_deregister_job(ns.as_ptr()) };
    }

    /// The namespaces registered now.
    pub fn registered_jobs(&self) -> Vec<String> {
        self.jobs().iter().cloned().collect()
    }
}

impl Drop for PmixServer {
    fn drop(&mut self) {
        let names: Vec<String> = self.jobs().iter().cloned().collect();
        for ns in names {
            self.deregister_job(&ns);
        }
        {
            // Answer every fence while libpmix's thread still runs, then refuse more.
            let mut sh = shared();
            sweep_fences(&mut sh, None, ffi::PMIX_ERROR);
            sh.alive = false;
        }
        // SAFETY: the one server of this process, initialized by init.
        unsafe { ffi::shim_finalize() };
        {
            let mut sh = shared();
            sh.tx = None;
            sh.fences.clear();
        }
        RUNNING.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(nodes: &[&str], ppn: u32, node_index: u32) -> JobLayout {
        JobLayout {
            nspace: "score.42".into(),
            uid: 1000,
            gid: 1000,
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            ppn,
            node_index,
            tmpdir: "/tmp/x".into(),
            pm_jobkey: 0,
        }
    }

    #[test]
    fn peers_and_maps() {
        let j = layout(&["n0", "n1", "n2"], 2, 1);
        assert_eq!(j.size(), 6);
        assert_eq!(j.local_peers(), "2,3");
        assert_eq!(j.node_peers(0), "0,1");
        assert_eq!(j.node_peers(2), "4,5");
        assert_eq!(j.local_ranks(), 2..4);
        assert_eq!(j.first_local_rank(), 2);
        assert_eq!(j.host_list(), "n0,n1,n2");
        assert_eq!(j.proc_map(), "0,1;2,3;4,5");
        assert!(j.validate().is_ok());
    }

    #[test]
    fn one_rank_one_node() {
        let j = layout(&["solo"], 1, 0);
        assert_eq!(j.local_peers(), "0");
        assert_eq!(j.proc_map(), "0");
        assert_eq!(j.host_list(), "solo");
    }

    /// Why `j` is refused (it must be, as an invalid job).
    fn refusal(j: &JobLayout) -> String {
        match j.validate() {
            Err(PmixError::InvalidJob(why)) => why,
            other => panic!("{j:?}: {other:?}"),
        }
    }

    #[test]
    fn validation() {
        assert_eq!(refusal(&layout(&[], 1, 0)), "no nodes");
        assert_eq!(refusal(&layout(&["a"], 0, 0)), "ppn 0 not in 1..=65535");
        assert_eq!(
            refusal(&layout(&["a"], 70000, 0)),
            "ppn 70000 not in 1..=65535"
        );
        assert_eq!(
            refusal(&layout(&["a", "b"], 1, 2)),
            "node_index 2 but 2 nodes"
        );
        assert_eq!(refusal(&layout(&["a,b"], 1, 0)), r#"bad host name "a,b""#);
        assert_eq!(refusal(&layout(&[""], 1, 0)), r#"bad host name """#);
        let many: Vec<String> = (0..40000).map(|i| format!("n{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(refusal(&layout(&many, 65535, 0)), "too many ranks");
        let mut j = layout(&["a"], 1, 0);
        j.nspace = "x".repeat(MAX_NSPACE_LEN + 1);
        assert!(
            refusal(&j).starts_with(&format!("namespace must have 1 to {MAX_NSPACE_LEN} bytes")),
            "{j:?}"
        );
        j.nspace = String::new();
        assert_eq!(
            refusal(&j),
            format!("namespace must have 1 to {MAX_NSPACE_LEN} bytes: \"\"")
        );
        j.nspace = "a\0b".into();
        assert_eq!(refusal(&j), "namespace contains NUL");
        j.nspace = "score.42".into();
        j.tmpdir = std::ffi::OsStr::from_bytes(b"/tmp/a\0b").into();
        assert_eq!(refusal(&j), "tmpdir contains NUL");
    }

    #[test]
    fn error_codes_and_text() {
        let e = PmixError::from_status("op", -27);
        assert_eq!(e.code(), -27);
        assert!(!e.text().is_empty());
        assert!(e.to_string().contains("op"));
        assert_eq!(
            PmixError::InvalidJob("x".into()).code(),
            ffi::PMIX_ERR_BAD_PARAM
        );
        assert_eq!(PmixError::from_status("op", 0).code(), ffi::PMIX_ERROR);
    }
}
