//! MUNGE authentication of score's gRPC calls, in both directions, as
//! slurmctld and slurmd authenticate each other.
//!
//! Every gRPC message between score's parts (scrun, scorectl, the agents and
//! the master), requests and replies, unary or streamed, travels sealed
//! ([`seal`]): wrapped in an envelope whose seal covers a SHA-256 digest of
//! the message, its call's nonce, its direction, its method and its
//! sequence number.  A call's first request is sealed by a MUNGE credential
//! that also carries the call's key, decodable by the master's uid alone
//! (`[master] uid`); every other message, both ways, by HMAC-SHA256 under
//! that key.  So the master learns the caller's uid and gid from munged (a
//! job runs as that user), and a client or an agent accepts only replies
//! that the master's uid could seal, so an impostor at the master's address
//! cannot make an agent act.  A message altered, replayed, reordered or moved
//! to another call is refused.  [`transport`] does this under tonic:
//! [`SealedChannel`] for clients, [`SealedServer`] for the master.
//!
//! libmunge is called through hand-written FFI declarations (see `ffi.rs`);
//! the calls talk to munged over its Unix socket and block for the duration
//! of one round trip (about 160 µs), once per call on each side, which is
//! why they are made directly, without `spawn_blocking`.

mod ffi;
pub mod frames;
pub mod seal;
#[doc(hidden)]
pub mod testing;
pub mod transport;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use seal::{Caller, Check, Refusal};
pub use transport::{caller, log_refusal, RefusalHook, SealedChannel, SealedServer};

/// MUNGE error numbers (`munge_err_t`) that callers may want to tell apart.
pub mod code {
    pub const SOCKET: i32 = 6;
    pub const BAD_CRED: i32 = 8;
    pub const CRED_INVALID: i32 = 14;
    pub const CRED_EXPIRED: i32 = 15;
    pub const CRED_REWOUND: i32 = 16;
    pub const CRED_REPLAYED: i32 = 17;
    pub const CRED_UNAUTHORIZED: i32 = 18;
}

/// The way to one munged: the path of its Unix socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Munge {
    socket: PathBuf,
}

/// What a valid credential says: who made it, and the payload it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub uid: u32,
    pub gid: u32,
    pub payload: Vec<u8>,
    /// The payload crossed the network encrypted (munged's cipher was not
    /// "none"): only holders of the cluster's key could read it.
    pub encrypted: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// munged is not running, or its socket is not where the configuration says.
    #[error("cannot reach munged at {}: {message}", socket.display())]
    Unreachable { socket: PathBuf, message: String },
    /// libmunge or munged refused: `op` is "encode" or "decode", `code` the
    /// `munge_err_t`, `message` munge's own text (`munge_strerror`, or the
    /// more detailed text of the context when there is one).
    #[error("MUNGE {op} failed: {message} (munge error {code})")]
    Munge {
        op: &'static str,
        code: i32,
        message: String,
    },
    /// The arguments cannot be handed to libmunge at all.
    #[error("{0}")]
    Invalid(String),
}

impl AuthError {
    /// The MUNGE error number, if munge reported one.
    pub fn code(&self) -> Option<i32> {
        match self {
            AuthError::Unreachable { .. } => Some(code::SOCKET),
            AuthError::Munge { code, .. } => Some(*code),
            AuthError::Invalid(_) => None,
        }
    }
}

/// A libmunge context with the socket set; destroyed on drop.
struct Ctx(*mut ffi::MungeCtx);

impl Ctx {
    fn new(munge: &Munge, op: &'static str) -> Result<Self, AuthError> {
        let socket = CString::new(munge.socket.as_os_str().as_bytes()).map_err(|_| {
            AuthError::Invalid(format!(
                "MUNGE socket path {} contains a NUL byte",
                munge.socket.display()
            ))
        })?;
        // SAFETY: plain constructor; NULL means out of memory.
        let ctx = unsafe { ffi::munge_ctx_create() };
        if ctx.is_null() {
            return Err(AuthError::Munge {
                op,
                code: 5,
                message: "cannot create a MUNGE context: out of memory".into(),
            });
        }
        let ctx = Ctx(ctx);
        // SAFETY: ctx is valid; MUNGE_OPT_SOCKET takes a `char *`, which
        // libmunge copies before returning.
        let rc = unsafe {
            ffi::munge_ctx_set(
                ctx.0,
                ffi::MUNGE_OPT_SOCKET,
                socket.as_ptr() as *const c_char,
            )
        };
        if rc != ffi::EMUNGE_SUCCESS {
            return Err(ctx.error(munge, op, rc));
        }
        Ok(ctx)
    }

    /// The error for `rc`, with the context's detailed text if it has one.
    fn error(&self, munge: &Munge, op: &'static str, rc: ffi::MungeErr) -> AuthError {
        // SAFETY: both return NULL or a NUL-terminated string owned by libmunge
        // (the context's lives as long as the context; strerror's is static).
        let text = unsafe {
            let detail = ffi::munge_ctx_strerror(self.0);
            let text = if detail.is_null() {
                ffi::munge_strerror(rc)
            } else {
                detail
            };
            if text.is_null() {
                format!("munge error {rc}")
            } else {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            }
        };
        if rc == ffi::EMUNGE_SOCKET {
            AuthError::Unreachable {
                socket: munge.socket.clone(),
                message: text,
            }
        } else {
            AuthError::Munge {
                op,
                code: rc,
                message: text,
            }
        }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: created by munge_ctx_create, destroyed once.
        unsafe { ffi::munge_ctx_destroy(self.0) }
    }
}

/// Memory libmunge allocated with malloc().
struct Malloced(*mut c_void);

impl Drop for Malloced {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: libmunge documents that the caller frees these with free().
            unsafe { libc::free(self.0) }
        }
    }
}

impl Munge {
    /// The munged listening on `socket` (score's default is
    /// `/run/munge/munge.socket.2`, munged's own default).
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A new credential for the calling process's uid and gid, carrying
    /// `payload` (which may be empty), that any process may decode.
    pub fn encode(&self, payload: &[u8]) -> Result<String, AuthError> {
        self.encode_restricted(payload, None)
    }

    /// A new credential whose payload only a process of uid `reader` may
    /// decode (munged enforces it: root is not exempt).
    pub fn encode_for(&self, payload: &[u8], reader: u32) -> Result<String, AuthError> {
        self.encode_restricted(payload, Some(reader))
    }

    fn encode_restricted(&self, payload: &[u8], reader: Option<u32>) -> Result<String, AuthError> {
        let len = c_int::try_from(payload.len()).map_err(|_| {
            AuthError::Invalid(format!(
                "a MUNGE payload of {} bytes is too large",
                payload.len()
            ))
        })?;
        let ctx = Ctx::new(self, "encode")?;
        if let Some(uid) = reader {
            // SAFETY: the option takes a uid_t by value.
            let rc = unsafe {
                ffi::munge_ctx_set(ctx.0, ffi::MUNGE_OPT_UID_RESTRICTION, uid as libc::uid_t)
            };
            if rc != ffi::EMUNGE_SUCCESS {
                return Err(ctx.error(self, "encode", rc));
            }
        }
        let mut cred: *mut c_char = std::ptr::null_mut();
        // SAFETY: payload is valid for len bytes; on success libmunge stores
        // a malloc()ed NUL-terminated string in cred.
        let rc =
            unsafe { ffi::munge_encode(&mut cred, ctx.0, payload.as_ptr() as *const c_void, len) };
        let cred = Malloced(cred as *mut c_void);
        if rc != ffi::EMUNGE_SUCCESS {
            return Err(ctx.error(self, "encode", rc));
        }
        if cred.0.is_null() {
            return Err(AuthError::Munge {
                op: "encode",
                code: 1,
                message: "munge_encode returned no credential".into(),
            });
        }
        // SAFETY: non-NULL, NUL-terminated, alive until `cred` drops.
        let text = unsafe { CStr::from_ptr(cred.0 as *const c_char) };
        Ok(text.to_string_lossy().into_owned())
    }

    /// Checks a credential: valid, made with the same key, not expired and
    /// never decoded by this munged before.  Surrounding white space is ignored.
    pub fn decode(&self, cred: &str) -> Result<Credential, AuthError> {
        let cred = CString::new(cred.trim())
            .map_err(|_| AuthError::Invalid("a MUNGE credential contains a NUL byte".into()))?;
        let ctx = Ctx::new(self, "decode")?;
        let mut buf: *mut c_void = std::ptr::null_mut();
        let mut len: c_int = 0;
        let mut uid: libc::uid_t = 0;
        let mut gid: libc::gid_t = 0;
        // SAFETY: all out-pointers are valid; libmunge may allocate buf even
        // when it reports an error (expired, rewound, replayed), so it is
        // always handed to Malloced.
        let rc = unsafe {
            ffi::munge_decode(cred.as_ptr(), ctx.0, &mut buf, &mut len, &mut uid, &mut gid)
        };
        let buf = Malloced(buf);
        if rc != ffi::EMUNGE_SUCCESS {
            return Err(ctx.error(self, "decode", rc));
        }
        let payload = if buf.0.is_null() || len <= 0 {
            Vec::new()
        } else {
            // SAFETY: libmunge allocated len bytes at buf.
            unsafe { std::slice::from_raw_parts(buf.0 as *const u8, len as usize) }.to_vec()
        };
        let mut cipher: c_int = ffi::MUNGE_CIPHER_NONE;
        // SAFETY: the option stores an int through the pointer.
        let rc = unsafe { ffi::munge_ctx_get(ctx.0, ffi::MUNGE_OPT_CIPHER_TYPE, &mut cipher) };
        if rc != ffi::EMUNGE_SUCCESS {
            return Err(ctx.error(self, "decode", rc));
        }
        Ok(Credential {
            uid,
            gid,
            payload,
            encrypted: cipher != ffi::MUNGE_CIPHER_NONE,
        })
    }
}

/// A client of the master whose every call is sealed, and whose every reply
/// must be signed by the master's uid.
pub type MasterClient = score_proto::v1::master_client::MasterClient<SealedChannel>;

/// Why `connect` failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The master could not be reached; the message names its address.
    #[error("cannot reach the scored master at {url}: {message}")]
    Master { url: String, message: String },
    /// This side's munged cannot make credentials (not running, wrong socket).
    #[error("{0}")]
    Munge(#[from] AuthError),
}

/// How long `connect` waits for the TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A sealed channel to the master at `master_url` ("http://host:7100"; a
/// bare "host:port" gets "http://"): every request is sealed through
/// `munge`, every reply must be signed by `master_uid`.  Once connected,
/// munged is asked for one credential, so that a missing munged is a clear
/// error here rather than a broken call later.
pub async fn connect_channel(
    master_url: &str,
    munge: Munge,
    master_uid: u32,
) -> Result<SealedChannel, ConnectError> {
    let url = if master_url.contains("://") {
        master_url.to_string()
    } else {
        format!("http://{master_url}")
    };
    let fail = |message: String| ConnectError::Master {
        url: url.clone(),
        message,
    };
    let endpoint = tonic::transport::Endpoint::from_shared(url.clone())
        .map_err(|e| fail(format!("invalid address: {}", error_chain(&e))))?
        .connect_timeout(CONNECT_TIMEOUT);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| fail(error_chain(&e)))?;
    munge.encode(&[])?;
    Ok(SealedChannel::new(channel, munge, master_uid))
}

/// A client of the master at `master_url`, sealed as [`connect_channel`] says.
pub async fn connect(
    master_url: &str,
    munge: Munge,
    master_uid: u32,
) -> Result<MasterClient, ConnectError> {
    let channel = connect_channel(master_url, munge, master_uid).await?;
    Ok(score_proto::v1::master_client::MasterClient::new(channel))
}

/// "transport error: tcp connect error: Connection refused (os error 111)":
/// tonic's own message says little, its sources say what happened.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}
