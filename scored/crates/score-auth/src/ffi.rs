//! Hand-written declarations of the parts of libmunge (`<munge.h>`, MUNGE
//! 0.5) that score uses.  The numbers are part of libmunge's stable ABI.

use std::ffi::{c_char, c_int, c_void};

/// `struct munge_ctx`, opaque.
#[repr(C)]
pub struct MungeCtx {
    _private: [u8; 0],
}

pub type MungeErr = c_int;

pub const EMUNGE_SUCCESS: MungeErr = 0;
pub const EMUNGE_SOCKET: MungeErr = 6;

/// `MUNGE_OPT_CIPHER_TYPE`: the credential's cipher (an `int`).
pub const MUNGE_OPT_CIPHER_TYPE: c_int = 0;
/// `MUNGE_OPT_SOCKET`: the path of munged's socket (a `char *`).
pub const MUNGE_OPT_SOCKET: c_int = 8;
/// `MUNGE_OPT_UID_RESTRICTION`: the only uid that may decode (a `uid_t`).
pub const MUNGE_OPT_UID_RESTRICTION: c_int = 9;
/// `MUNGE_CIPHER_NONE`: the payload travels in clear.
pub const MUNGE_CIPHER_NONE: c_int = 0;

extern "C" {
    pub fn munge_encode(
        cred: *mut *mut c_char,
        ctx: *mut MungeCtx,
        buf: *const c_void,
        len: c_int,
    ) -> MungeErr;
    pub fn munge_decode(
        cred: *const c_char,
        ctx: *mut MungeCtx,
        buf: *mut *mut c_void,
        len: *mut c_int,
        uid: *mut libc::uid_t,
        gid: *mut libc::gid_t,
    ) -> MungeErr;
    pub fn munge_strerror(e: MungeErr) -> *const c_char;
    pub fn munge_ctx_create() -> *mut MungeCtx;
    pub fn munge_ctx_destroy(ctx: *mut MungeCtx);
    pub fn munge_ctx_strerror(ctx: *mut MungeCtx) -> *const c_char;
    pub fn munge_ctx_set(ctx: *mut MungeCtx, opt: c_int, ...) -> MungeErr;
    pub fn munge_ctx_get(ctx: *mut MungeCtx, opt: c_int, ...) -> MungeErr;
}
