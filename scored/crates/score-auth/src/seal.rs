//! The sealed envelope: what binds a MUNGE credential to one message of one
//! call (docs/scored/protocol.md has the byte layout).
//!
//! Every gRPC message between score's parts is sent as a [`Sealed`]: the
//! encoded message (`body`), the call's nonce (`call`, 16 random bytes the
//! client picks), the message's number in its direction of the call (`seq`:
//! 0, 1, 2, ...) and a MUNGE credential whose payload is [`digest`] of all of
//! them plus the direction and the method path.  The receiver ([`Opener`])
//! decodes the credential with its own munged (which refuses another key, an
//! expired or a replayed credential), checks who made it, recomputes the
//! digest over what it received and checks the sequence number, so that a
//! message cannot be altered, moved to another call or direction, dropped,
//! reordered or replayed without the receiver refusing it.
//!
//! This module is pure logic over a [`Notary`] (munged, or a fake one in the
//! unit tests); `transport` runs it on every gRPC message.

use crate::{AuthError, Credential, Munge};
use prost::Message;
use sha2::{Digest, Sha256};
use std::fmt;

pub use score_proto::v1::Sealed;

/// The first 16 bytes of every digest input: which protocol, which version.
pub const DOMAIN_TAG: &[u8; 16] = b"score.v1.sealed\0";
/// Length of a call's nonce.
pub const CALL_LEN: usize = 16;
/// Length of the digest a credential carries.
pub const DIGEST_LEN: usize = 32;

/// Which way a message travels in its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client (scrun, scorectl, an agent) to the server (the master).
    Request,
    /// From the server back to the client.
    Reply,
}

impl Direction {
    /// The byte that stands for the direction in the digest input.
    pub fn byte(self) -> u8 {
        match self {
            Direction::Request => 1,
            Direction::Reply => 2,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Direction::Request => "request",
            Direction::Reply => "reply",
        }
    }
}

/// SHA-256 over the digest input (protocol.md):
///
/// ```text
/// DOMAIN_TAG (16) | direction (1) | len(path) (u16 BE) | path
///   | call (16) | seq (u64 BE) | len(body) (u32 BE) | body
/// ```
pub fn digest(
    direction: Direction,
    path: &str,
    call: &[u8; CALL_LEN],
    seq: u64,
    body: &[u8],
) -> [u8; DIGEST_LEN] {
    let mut h = Sha256::new();
    h.update(DOMAIN_TAG);
    h.update([direction.byte()]);
    // gRPC method paths are short; a longer one is cut to its first 64 KiB
    // both when sealing and when opening, so it still binds.
    let path = &path.as_bytes()[..path.len().min(u16::MAX as usize)];
    h.update((path.len() as u16).to_be_bytes());
    h.update(path);
    h.update(call);
    h.update(seq.to_be_bytes());
    h.update((body.len().min(u32::MAX as usize) as u32).to_be_bytes());
    h.update(body);
    h.finalize().into()
}

/// Who makes and checks credentials: munged, or a stand-in in tests.
pub trait Notary {
    /// A new credential of the calling process carrying `payload`.
    fn sign(&self, payload: &[u8]) -> Result<String, AuthError>;
    /// Who made `credential` and its payload, if it is good (right key, not
    /// expired, never seen before).
    fn check(&self, credential: &str) -> Result<Credential, AuthError>;
}

impl Notary for Munge {
    fn sign(&self, payload: &[u8]) -> Result<String, AuthError> {
        self.encode(payload)
    }
    fn check(&self, credential: &str) -> Result<Credential, AuthError> {
        self.decode(credential)
    }
}

/// Which check a refused message failed; the label of the refusal metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Not an envelope at all, or one without a credential or a call nonce,
    /// or too large, or compressed.
    Unsealed,
    /// Out of order, or of another call: dropped, reordered, replayed or moved.
    Sequence,
    /// munged refused the credential: another key, expired, replayed, garbage.
    Credential,
    /// A good credential, but of the wrong uid (not the master's, or not the
    /// caller who opened the call).
    Signer,
    /// The credential does not sign what arrived: altered in transit.
    Digest,
}

impl Check {
    pub fn label(self) -> &'static str {
        match self {
            Check::Unsealed => "unsealed",
            Check::Sequence => "sequence",
            Check::Credential => "credential",
            Check::Signer => "signer",
            Check::Digest => "digest",
        }
    }
}

/// A message that was refused, and why (in words for a log and a Status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub check: Check,
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Refusal {}

impl Refusal {
    pub(crate) fn new(check: Check, reason: impl Into<String>) -> Self {
        Self {
            check,
            reason: reason.into(),
        }
    }

    /// UNAUTHENTICATED with the reason.
    pub fn status(&self) -> tonic::Status {
        tonic::Status::unauthenticated(self.reason.clone())
    }
}

/// Seals the messages of one direction of one call.
#[derive(Debug, Clone)]
pub struct Sealer {
    direction: Direction,
    path: String,
    call: [u8; CALL_LEN],
    next: u64,
}

impl Sealer {
    pub fn new(direction: Direction, path: impl Into<String>, call: [u8; CALL_LEN]) -> Self {
        Self {
            direction,
            path: path.into(),
            call,
            next: 0,
        }
    }

    /// The envelope of the next message, `body`, encoded.
    pub fn seal(&mut self, notary: &impl Notary, body: &[u8]) -> Result<Vec<u8>, AuthError> {
        let seq = self.next;
        let d = digest(self.direction, &self.path, &self.call, seq, body);
        let credential = notary.sign(&d)?;
        self.next += 1;
        Ok(Sealed {
            call: self.call.to_vec(),
            seq,
            credential,
            body: body.to_vec(),
        }
        .encode_to_vec())
    }
}

/// Whose credentials an [`Opener`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// Only this uid's (a client opening the master's replies: the master's
    /// configured uid).
    Uid(u32),
    /// Anybody's, but the same uid for every message of the call (the master
    /// opening a client's requests: the first message says who calls).
    Caller,
}

/// Who signed the messages of a call, as munged vouches for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

/// Opens (checks and unwraps) the messages of one direction of one call.
#[derive(Debug, Clone)]
pub struct Opener {
    direction: Direction,
    path: String,
    call: Option<[u8; CALL_LEN]>,
    signer: Signer,
    caller: Option<Caller>,
    next: u64,
}

impl Opener {
    /// `call`: the nonce the messages must carry; `None` for a server, which
    /// takes it from the first message (the client chose it).
    pub fn new(
        direction: Direction,
        path: impl Into<String>,
        call: Option<[u8; CALL_LEN]>,
        signer: Signer,
    ) -> Self {
        Self {
            direction,
            path: path.into(),
            call,
            signer,
            caller: None,
            next: 0,
        }
    }

    /// The call's nonce, once known.
    pub fn call(&self) -> Option<[u8; CALL_LEN]> {
        self.call
    }

    /// Who signed the messages opened so far (None before the first).
    pub fn caller(&self) -> Option<Caller> {
        self.caller
    }

    /// How many messages were opened.
    pub fn opened(&self) -> u64 {
        self.next
    }

    /// The body of the next message, if `frame` (one gRPC message as it
    /// arrived) is a good envelope for it.  Nothing changes on a refusal; the
    /// caller then abandons the call.
    pub fn open(&mut self, notary: &impl Notary, frame: &[u8]) -> Result<Vec<u8>, Refusal> {
        let what = self.direction.what();
        let sealed = Sealed::decode(frame).map_err(|e| {
            Refusal::new(
                Check::Unsealed,
                format!("the {what} is not a sealed message ({e}); every message must carry a MUNGE credential (docs/scored/protocol.md)"),
            )
        })?;
        if sealed.credential.is_empty() {
            return Err(Refusal::new(
                Check::Unsealed,
                format!("the {what} carries no MUNGE credential; every message must be sealed by munged with the cluster's key (docs/scored/protocol.md)"),
            ));
        }
        let call: [u8; CALL_LEN] = sealed.call.as_slice().try_into().map_err(|_| {
            Refusal::new(
                Check::Unsealed,
                format!(
                    "the {what}'s call nonce has {} bytes instead of {CALL_LEN}",
                    sealed.call.len()
                ),
            )
        })?;
        if let Some(expected) = self.call {
            if call != expected {
                return Err(Refusal::new(
                    Check::Sequence,
                    format!("the {what} belongs to another call (replayed or moved)"),
                ));
            }
        }
        if sealed.seq != self.next {
            return Err(Refusal::new(
                Check::Sequence,
                format!(
                    "{what} {} arrived where {what} {} was due (dropped, reordered or replayed)",
                    sealed.seq, self.next
                ),
            ));
        }
        let cred = notary.check(&sealed.credential).map_err(|e| {
            Refusal::new(Check::Credential, format!("MUNGE credential rejected: {e}"))
        })?;
        match (self.signer, self.caller) {
            (Signer::Uid(uid), _) if cred.uid != uid => {
                return Err(Refusal::new(
                    Check::Signer,
                    format!(
                        "the {what} is signed by uid {}, not by the master's uid {uid} \
                         ([master] uid): an impostor",
                        cred.uid
                    ),
                ));
            }
            (Signer::Caller, Some(c)) if c.uid != cred.uid => {
                return Err(Refusal::new(
                    Check::Signer,
                    format!(
                        "{what} {} is signed by uid {}, but the call was opened by uid {}",
                        sealed.seq, cred.uid, c.uid
                    ),
                ));
            }
            _ => {}
        }
        let d = digest(self.direction, &self.path, &call, sealed.seq, &sealed.body);
        if cred.payload.as_slice() != d.as_slice() {
            return Err(Refusal::new(
                Check::Digest,
                format!(
                    "{what} {} of {} does not match its credential: it was altered in transit",
                    sealed.seq, self.path
                ),
            ));
        }
        self.call = Some(call);
        if self.caller.is_none() {
            self.caller = Some(Caller {
                uid: cred.uid,
                gid: cred.gid,
            });
        }
        self.next += 1;
        Ok(sealed.body)
    }
}

/// A fresh call nonce from the kernel's generator.
pub fn new_call() -> [u8; CALL_LEN] {
    let mut call = [0u8; CALL_LEN];
    fill_random(&mut call);
    call
}

/// A secret of 64 random bits, never 0 (0 means "none" on the wire): a
/// job's PM key.
pub fn random_key() -> u64 {
    loop {
        let mut b = [0u8; 8];
        fill_random(&mut b);
        let key = u64::from_le_bytes(b);
        if key != 0 {
            return key;
        }
    }
}

/// `buf` filled from the kernel's generator (getrandom(2), which blocks
/// only until the pool is first seeded, at boot).
fn fill_random(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled rest of `buf`.
        let n = unsafe {
            libc::getrandom(
                buf[filled..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - filled,
                0,
            )
        };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            panic!("getrandom failed: {}", std::io::Error::last_os_error());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashSet;

    /// A munged stand-in: a credential is "FAKE:<uid>:<n>:<hex payload>";
    /// each is good once (a replay cache), and "key" tells its key.
    struct Fake {
        uid: u32,
        key: &'static str,
        issued: RefCell<u64>,
        seen: RefCell<HashSet<String>>,
    }

    fn fake(uid: u32) -> Fake {
        Fake {
            uid,
            key: "cluster",
            issued: RefCell::new(0),
            seen: RefCell::default(),
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn munge_err(code: i32, message: &str) -> AuthError {
        AuthError::Munge {
            op: "decode",
            code,
            message: message.into(),
        }
    }

    impl Notary for Fake {
        fn sign(&self, payload: &[u8]) -> Result<String, AuthError> {
            let mut n = self.issued.borrow_mut();
            *n += 1;
            Ok(format!(
                "FAKE:{}:{}:{}:{}",
                self.key,
                self.uid,
                n,
                hex(payload)
            ))
        }
        fn check(&self, cred: &str) -> Result<Credential, AuthError> {
            let p: Vec<&str> = cred.split(':').collect();
            if p.len() != 5 || p[0] != "FAKE" {
                return Err(munge_err(8, "Bad credential"));
            }
            if p[1] != self.key {
                return Err(munge_err(14, "Invalid credential"));
            }
            if !self.seen.borrow_mut().insert(cred.to_string()) {
                return Err(munge_err(17, "Replayed credential"));
            }
            Ok(Credential {
                uid: p[2].parse().unwrap(),
                gid: p[2].parse().unwrap(),
                payload: unhex(p[4]),
            })
        }
    }

    const PATH: &str = "/score.v1.Master/Run";
    const CALL: [u8; 16] = *b"0123456789abcdef";

    fn reseal(frame: &[u8], f: impl FnOnce(&mut Sealed)) -> Vec<u8> {
        let mut s = Sealed::decode(frame).unwrap();
        f(&mut s);
        s.encode_to_vec()
    }

    #[test]
    fn the_digest_input_has_the_documented_layout() {
        // protocol.md's example, byte by byte.
        let mut input = Vec::new();
        input.extend_from_slice(b"score.v1.sealed\0");
        input.push(1);
        input.extend_from_slice(&(PATH.len() as u16).to_be_bytes());
        input.extend_from_slice(PATH.as_bytes());
        input.extend_from_slice(&CALL);
        input.extend_from_slice(&7u64.to_be_bytes());
        input.extend_from_slice(&3u32.to_be_bytes());
        input.extend_from_slice(b"abc");
        let want: [u8; 32] = Sha256::digest(&input).into();
        assert_eq!(digest(Direction::Request, PATH, &CALL, 7, b"abc"), want);
        // Every field counts.
        let all = [
            digest(Direction::Reply, PATH, &CALL, 7, b"abc"),
            digest(
                Direction::Request,
                "/score.v1.Master/Cancel",
                &CALL,
                7,
                b"abc",
            ),
            digest(Direction::Request, PATH, b"0123456789abcdeX", 7, b"abc"),
            digest(Direction::Request, PATH, &CALL, 8, b"abc"),
            digest(Direction::Request, PATH, &CALL, 7, b"abd"),
            digest(Direction::Request, PATH, &CALL, 7, b""),
        ];
        for (i, d) in all.iter().enumerate() {
            assert_ne!(*d, want, "field {i} does not change the digest");
        }
        // A known answer, so that another implementation can check itself
        // (protocol.md quotes it).
        assert_eq!(
            hex(&digest(Direction::Request, PATH, &CALL, 7, b"abc")),
            "f8f4a0a271d3292caabcba23357859c56e6ba454cd3f43fa6b46dc2196aeeab9"
        );
    }

    #[test]
    fn a_sealed_stream_opens_in_order() {
        let (client, server) = (fake(1000), fake(0));
        let mut seal = Sealer::new(Direction::Request, PATH, CALL);
        let mut open = Opener::new(Direction::Request, PATH, None, Signer::Caller);
        for body in [&b"first"[..], b"", b"third"] {
            let f = seal.seal(&client, body).unwrap();
            assert_eq!(open.open(&server, &f).unwrap(), body);
        }
        assert_eq!(open.call(), Some(CALL));
        assert_eq!(
            open.caller(),
            Some(Caller {
                uid: 1000,
                gid: 1000
            })
        );
        assert_eq!(open.opened(), 3);
    }

    #[test]
    fn a_swapped_body_is_refused_and_changes_nothing() {
        let (client, server) = (fake(0), fake(0));
        let mut seal = Sealer::new(Direction::Request, PATH, CALL);
        let mut open = Opener::new(Direction::Request, PATH, None, Signer::Caller);
        let f = seal.seal(&client, b"cancel job 7").unwrap();
        let forged = reseal(&f, |s| s.body = b"cancel job 8".to_vec());
        let r = open.open(&server, &forged).unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");
        assert!(r.reason.contains("altered in transit"), "{r}");
        assert_eq!((open.opened(), open.caller()), (0, None));
        // The credential was spent on the forgery (munged's replay cache):
        // the genuine message cannot follow with it.
        let r = open.open(&server, &f).unwrap_err();
        assert_eq!(r.check, Check::Credential, "{r}");
        assert!(r.reason.contains("Replayed credential"), "{r}");
    }

    #[test]
    fn a_changed_sequence_or_call_or_direction_or_path_is_refused() {
        let (client, server) = (fake(0), fake(0));
        let mut seal = Sealer::new(Direction::Request, PATH, CALL);
        let f0 = seal.seal(&client, b"zero").unwrap();
        let f1 = seal.seal(&client, b"one").unwrap();

        // Reordered: the second message first.
        let mut open = Opener::new(Direction::Request, PATH, None, Signer::Caller);
        let r = open.open(&server, &f1).unwrap_err();
        assert_eq!(r.check, Check::Sequence, "{r}");
        assert!(
            r.reason
                .contains("request 1 arrived where request 0 was due"),
            "{r}"
        );
        // The seq rewritten to fit: the digest no longer matches.
        let r = open.open(&server, &reseal(&f1, |s| s.seq = 0)).unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");

        // Of another call, for a client that knows its call.
        let mut open = Opener::new(
            Direction::Request,
            PATH,
            Some(*b"XXXXXXXXXXXXXXXX"),
            Signer::Caller,
        );
        let r = open.open(&server, &f0).unwrap_err();
        assert_eq!(r.check, Check::Sequence, "{r}");
        assert!(r.reason.contains("another call"), "{r}");
        // The call rewritten to fit: digest.
        let moved = reseal(&f0, |s| s.call = b"XXXXXXXXXXXXXXXX".to_vec());
        let r = open.open(&server, &moved).unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");

        // A request presented as a reply, or to another method.
        let f = Sealer::new(Direction::Request, PATH, CALL)
            .seal(&client, b"x")
            .unwrap();
        let mut open = Opener::new(Direction::Reply, PATH, Some(CALL), Signer::Uid(0));
        assert_eq!(open.open(&server, &f).unwrap_err().check, Check::Digest);
        let f = Sealer::new(Direction::Request, PATH, CALL)
            .seal(&client, b"x")
            .unwrap();
        let mut open = Opener::new(
            Direction::Request,
            "/score.v1.Master/Cancel",
            None,
            Signer::Caller,
        );
        assert_eq!(open.open(&server, &f).unwrap_err().check, Check::Digest);
    }

    #[test]
    fn only_the_masters_uid_may_sign_replies() {
        let impostor = fake(65534);
        let agent = fake(0);
        let mut seal = Sealer::new(Direction::Reply, "/score.v1.Master/Attach", CALL);
        let f = seal.seal(&impostor, b"launch").unwrap();
        let mut open = Opener::new(
            Direction::Reply,
            "/score.v1.Master/Attach",
            Some(CALL),
            Signer::Uid(0),
        );
        let r = open.open(&agent, &f).unwrap_err();
        assert_eq!(r.check, Check::Signer, "{r}");
        assert_eq!(
            r.reason,
            "the reply is signed by uid 65534, not by the master's uid 0 ([master] uid): an impostor"
        );
        // Another key: munged's own refusal.
        let foreign = Fake {
            key: "other",
            ..fake(0)
        };
        let f = Sealer::new(Direction::Reply, "/score.v1.Master/Attach", CALL)
            .seal(&foreign, b"launch")
            .unwrap();
        let mut open = Opener::new(
            Direction::Reply,
            "/score.v1.Master/Attach",
            Some(CALL),
            Signer::Uid(0),
        );
        let r = open.open(&agent, &f).unwrap_err();
        assert_eq!(r.check, Check::Credential, "{r}");
        assert!(r.reason.starts_with("MUNGE credential rejected: "), "{r}");
        assert!(r.reason.contains("Invalid credential"), "{r}");
    }

    #[test]
    fn a_caller_cannot_change_identity_within_a_call() {
        let (alice, mallory, server) = (fake(1000), fake(1001), fake(0));
        let mut seal = Sealer::new(Direction::Request, PATH, CALL);
        let mut open = Opener::new(Direction::Request, PATH, None, Signer::Caller);
        open.open(&server, &seal.seal(&alice, b"submit").unwrap())
            .unwrap();
        let r = open
            .open(&server, &seal.seal(&mallory, b"cancel").unwrap())
            .unwrap_err();
        assert_eq!(r.check, Check::Signer, "{r}");
        assert!(
            r.reason
                .contains("signed by uid 1001, but the call was opened by uid 1000"),
            "{r}"
        );
    }

    #[test]
    fn unsealed_messages_are_refused() {
        let server = fake(0);
        let mut open = Opener::new(Direction::Request, PATH, None, Signer::Caller);
        // An empty message (a ListNodesRequest as plain protobuf).
        let r = open.open(&server, b"").unwrap_err();
        assert_eq!(r.check, Check::Unsealed);
        assert!(r.reason.contains("carries no MUNGE credential"), "{r}");
        // Not protobuf at all.
        let r = open.open(&server, &[0xff; 40]).unwrap_err();
        assert_eq!(r.check, Check::Unsealed);
        assert!(r.reason.contains("not a sealed message"), "{r}");
        // A credential but no call nonce.
        let s = Sealed {
            credential: "FAKE:cluster:0:1:00".into(),
            ..Default::default()
        };
        let r = open.open(&server, &s.encode_to_vec()).unwrap_err();
        assert_eq!(r.check, Check::Unsealed);
        assert!(r.reason.contains("0 bytes instead of 16"), "{r}");
    }

    #[test]
    fn call_nonces_differ() {
        let a = new_call();
        let b = new_call();
        assert_ne!(a, b);
    }
}
