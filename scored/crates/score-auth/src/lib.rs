//! MUNGE authentication of score's gRPC calls, as Slurm does it.
//!
//! Every request a client (scrun, scorectl, an agent) sends carries a fresh
//! MUNGE credential in the metadata key [`score_proto::MUNGE_METADATA_KEY`]
//! (`x-score-munge`), added by [`MungeInterceptor`].  The server decodes it
//! with its own munged ([`verify`]) and learns the caller's uid and gid, which
//! munged vouches for: a job then runs as the user who submitted it.
//!
//! munged remembers every credential it has decoded until it expires (its
//! replay cache), so a credential is good for one request at one server; the
//! interceptor therefore makes a new one for every call.
//!
//! libmunge is called through hand-written FFI declarations (see `ffi.rs`);
//! the calls talk to munged over its Unix socket and block for the duration
//! of one round trip (tens of microseconds), which is why they are made
//! directly, without `spawn_blocking`.

mod ffi;
#[doc(hidden)]
pub mod testing;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

pub use score_proto::MUNGE_METADATA_KEY;

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
    /// `payload` (which may be empty).
    pub fn encode(&self, payload: &[u8]) -> Result<String, AuthError> {
        let len = c_int::try_from(payload.len()).map_err(|_| {
            AuthError::Invalid(format!(
                "a MUNGE payload of {} bytes is too large",
                payload.len()
            ))
        })?;
        let ctx = Ctx::new(self, "encode")?;
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
        Ok(Credential { uid, gid, payload })
    }
}

/// Client side: puts a fresh credential (empty payload) into the metadata
/// key `x-score-munge` of every request.
#[derive(Debug, Clone)]
pub struct MungeInterceptor {
    munge: Munge,
}

impl MungeInterceptor {
    pub fn new(munge: Munge) -> Self {
        Self { munge }
    }

    pub fn munge(&self) -> &Munge {
        &self.munge
    }
}

impl tonic::service::Interceptor for MungeInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let cred = self
            .munge
            .encode(&[])
            .map_err(|e| Status::unauthenticated(e.to_string()))?;
        let value = MetadataValue::try_from(cred).map_err(|_| {
            Status::unauthenticated("munged returned a credential that is not valid ASCII metadata")
        })?;
        request.metadata_mut().insert(MUNGE_METADATA_KEY, value);
        Ok(request)
    }
}

/// Who made a request, as munged vouches for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

/// Server side: the caller of `req`, from its MUNGE credential.
///
/// Every failure is `Status::unauthenticated` with a message that says why.
pub fn verify<T>(munge: &Munge, req: &Request<T>) -> Result<Caller, Status> {
    let value = req.metadata().get(MUNGE_METADATA_KEY).ok_or_else(|| {
        Status::unauthenticated(format!(
            "request carries no MUNGE credential ({MUNGE_METADATA_KEY}); \
             clients must send one made by munged with the cluster's key"
        ))
    })?;
    let cred = value.to_str().map_err(|_| {
        Status::unauthenticated("MUNGE credential rejected: the metadata value is not ASCII")
    })?;
    let cred = munge
        .decode(cred)
        .map_err(|e| Status::unauthenticated(format!("MUNGE credential rejected: {e}")))?;
    Ok(Caller {
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// A client of the master whose every call carries a MUNGE credential.
pub type MasterClient = score_proto::v1::master_client::MasterClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, MungeInterceptor>,
>;

/// The master could not be reached; the message names its address.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach the scored master at {url}: {message}")]
pub struct ConnectError {
    pub url: String,
    pub message: String,
}

/// How long `connect` waits for the TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to the master at `master_url` ("http://host:7100"; a bare
/// "host:port" gets "http://").  Every call on the client authenticates
/// through `munge`.
pub async fn connect(master_url: &str, munge: Munge) -> Result<MasterClient, ConnectError> {
    let url = if master_url.contains("://") {
        master_url.to_string()
    } else {
        format!("http://{master_url}")
    };
    let fail = |message: String| ConnectError {
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
    Ok(
        score_proto::v1::master_client::MasterClient::with_interceptor(
            channel,
            MungeInterceptor::new(munge),
        ),
    )
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
