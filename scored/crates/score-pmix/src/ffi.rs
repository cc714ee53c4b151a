//! The C shim's interface (csrc/pmix_shim.h), one to one.

use std::os::raw::{c_char, c_int, c_void};

pub const PMIX_SUCCESS: c_int = 0;
pub const PMIX_ERROR: c_int = -1;
pub const PMIX_ERR_BAD_PARAM: c_int = -27;
pub const PMIX_ERR_INIT: c_int = -31;
pub const PMIX_EXISTS: c_int = -11;

pub const SHIM_EV_FENCE: c_int = 1;
pub const SHIM_EV_ABORT: c_int = 2;
pub const SHIM_EV_CONNECTED: c_int = 3;
pub const SHIM_EV_FINALIZED: c_int = 4;

#[repr(C)]
pub struct ShimEvent {
    pub kind: c_int,
    pub nspace: *const c_char,
    pub rank: u32,
    pub status: c_int,
    pub message: *const c_char,
    pub data: *const c_char,
    pub ndata: usize,
    pub collect: c_int,
    pub fence: *mut c_void,
}

#[repr(C)]
pub struct ShimJob {
    pub nspace: *const c_char,
    pub uid: u32,
    pub gid: u32,
    pub nodes: *const *const c_char,
    pub node_peers: *const *const c_char,
    pub nnodes: u32,
    pub ppn: u32,
    pub node_index: u32,
    pub hosts: *const c_char,
    pub procs: *const c_char,
    pub tmpdir: *const c_char,
    pub pm_jobkey: u64,
}

pub type ShimEventFn = unsafe extern "C" fn(ev: *const ShimEvent) -> c_int;

extern "C" {
    pub fn shim_init(tmpdir: *const c_char, f: ShimEventFn) -> c_int;
    pub fn shim_finalize() -> c_int;
    pub fn shim_register_job(job: *const ShimJob) -> c_int;
    pub fn shim_deregister_job(nspace: *const c_char) -> c_int;
    pub fn shim_setup_fork(nspace: *const c_char, rank: u32, env: *mut *mut *mut c_char) -> c_int;
    pub fn shim_free_env(env: *mut *mut c_char);
    pub fn shim_fence_complete(
        fence: *mut c_void,
        status: c_int,
        data: *const c_char,
        ndata: usize,
    );
    pub fn shim_error_string(status: c_int) -> *const c_char;
}
