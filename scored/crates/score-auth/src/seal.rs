//! The sealed envelope: what binds a message to one place in one call, and
//! the call to who made it (docs/scored/protocol.md has the byte layout).
//!
//! Every gRPC message between score's parts is sent as a [`Sealed`]: the
//! encoded message (`body`), the call's nonce (`call`, 16 random bytes the
//! client picks), the message's number in its direction of the call (`seq`:
//! 0, 1, 2, ...) and a seal over [`digest`] of all of them plus the
//! direction and the method path.
//!
//! The client also draws a secret for the call, its *call key*.  Request 0
//! is sealed by a MUNGE credential whose payload is the digest and the call
//! key, which only the master's uid may decode (munged enforces the uid
//! restriction, and the credential is encrypted with the cluster's key).
//! Every later message, both ways, is sealed by HMAC-SHA256 of its digest
//! under the call key.  So the master learns from munged who calls, the
//! client knows that only the master's uid could read the key and so seal
//! the replies, and one munged round trip on each side serves a whole call
//! (an agent's Attach stream lasts as long as the agent).
//!
//! The receiver ([`Opener`]) recomputes the digest over what it received and
//! checks the sequence number, so that a message cannot be altered, moved to
//! another call or direction, dropped, reordered or replayed without the
//! receiver refusing it; munged refuses a credential of another key, an
//! expired or a replayed one.
//!
//! This module is pure logic over a [`Notary`] (munged, or a fake one in the
//! unit tests); `transport` runs it on every gRPC message.

use crate::{AuthError, Credential, Munge};
use hmac::{Hmac, Mac};
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
    /// A new credential of the calling process carrying `payload`, which
    /// only a process of uid `reader` may decode.
    fn sign_for(&self, payload: &[u8], reader: u32) -> Result<String, AuthError>;
    /// Who made `credential` and its payload, if it is good (right key, not
    /// expired, never seen before, meant for this process's uid).
    fn check(&self, credential: &str) -> Result<Credential, AuthError>;
}

impl Notary for Munge {
    fn sign_for(&self, payload: &[u8], reader: u32) -> Result<String, AuthError> {
        self.encode_for(payload, reader)
    }
    fn check(&self, credential: &str) -> Result<Credential, AuthError> {
        self.decode(credential)
    }
}

/// Length of a call key.
pub const KEY_LEN: usize = 32;
/// Length of a message's MAC.
pub const MAC_LEN: usize = 32;

/// The secret of one call, drawn by the client, known to it and the master.
#[derive(Clone, PartialEq, Eq)]
pub struct CallKey([u8; KEY_LEN]);

impl CallKey {
    /// A fresh key from the kernel's generator.
    pub fn random() -> Self {
        let mut k = [0u8; KEY_LEN];
        fill_random(&mut k);
        Self(k)
    }

    /// The key whose bytes these are (what request 0's credential carries).
    pub fn from_bytes(key: [u8; KEY_LEN]) -> Self {
        Self(key)
    }

    /// HMAC-SHA256 of `digest` under this key.
    pub fn mac(&self, digest: &[u8; DIGEST_LEN]) -> [u8; MAC_LEN] {
        let mut m = self.hmac();
        m.update(digest);
        m.finalize().into_bytes().into()
    }

    /// Whether `mac` is the MAC of `digest` (compared in constant time).
    pub fn verify(&self, digest: &[u8; DIGEST_LEN], mac: &[u8]) -> bool {
        let mut m = self.hmac();
        m.update(digest);
        m.verify_slice(mac).is_ok()
    }

    fn hmac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length")
    }
}

impl fmt::Debug for CallKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallKey(..)")
    }
}

/// Which check a refused message failed; the label of the refusal metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Not an envelope at all, or one without the seal its place calls for
    /// (a credential on request 0, a MAC on every other message), or
    /// without a call nonce, or too large, or compressed.
    Unsealed,
    /// Out of order, or of another call: dropped, reordered, replayed or moved.
    Sequence,
    /// munged refused the credential (another key, expired, replayed, meant
    /// for another uid, garbage), or it does not carry a digest and a call
    /// key, or carries them unencrypted.
    Credential,
    /// The seal does not match what arrived: altered in transit, or (a
    /// MAC) sealed by someone who does not hold the call key.
    Digest,
}

impl Check {
    pub fn label(self) -> &'static str {
        match self {
            Check::Unsealed => "unsealed",
            Check::Sequence => "sequence",
            Check::Credential => "credential",
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
    key: CallKey,
    /// For a client's requests: the master's uid, the only reader of
    /// request 0's credential.
    master_uid: Option<u32>,
    next: u64,
}

impl Sealer {
    /// A client's requests: request 0 under a MUNGE credential that carries
    /// the call key to `master_uid` alone, every later one under the key.
    pub fn requests(
        path: impl Into<String>,
        call: [u8; CALL_LEN],
        key: CallKey,
        master_uid: u32,
    ) -> Self {
        Self {
            direction: Direction::Request,
            path: path.into(),
            call,
            key,
            master_uid: Some(master_uid),
            next: 0,
        }
    }

    /// The server's replies, every one under the call key.
    pub fn replies(path: impl Into<String>, call: [u8; CALL_LEN], key: CallKey) -> Self {
        Self {
            direction: Direction::Reply,
            path: path.into(),
            call,
            key,
            master_uid: None,
            next: 0,
        }
    }

    /// The envelope of the next message, `body`, encoded.  Only request 0
    /// asks munged (`notary`) for anything.
    pub fn seal(&mut self, notary: &impl Notary, body: &[u8]) -> Result<Vec<u8>, AuthError> {
        let seq = self.next;
        let d = digest(self.direction, &self.path, &self.call, seq, body);
        let (credential, mac) = match self.master_uid {
            Some(master) if seq == 0 => {
                let mut payload = [0u8; DIGEST_LEN + KEY_LEN];
                payload[..DIGEST_LEN].copy_from_slice(&d);
                payload[DIGEST_LEN..].copy_from_slice(&self.key.0);
                (notary.sign_for(&payload, master)?, Vec::new())
            }
            _ => (String::new(), self.key.mac(&d).to_vec()),
        };
        self.next += 1;
        Ok(Sealed {
            call: self.call.to_vec(),
            seq,
            credential,
            body: body.to_vec(),
            mac,
        }
        .encode_to_vec())
    }
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
    /// None until request 0 brings it (a server).
    key: Option<CallKey>,
    caller: Option<Caller>,
    next: u64,
}

impl Opener {
    /// A server's view of a client's requests: request 0 says who calls,
    /// with which nonce and key.
    pub fn requests(path: impl Into<String>) -> Self {
        Self {
            direction: Direction::Request,
            path: path.into(),
            call: None,
            key: None,
            caller: None,
            next: 0,
        }
    }

    /// A client's view of the master's replies to its call.
    pub fn replies(path: impl Into<String>, call: [u8; CALL_LEN], key: CallKey) -> Self {
        Self {
            direction: Direction::Reply,
            path: path.into(),
            call: Some(call),
            key: Some(key),
            caller: None,
            next: 0,
        }
    }

    /// The call's nonce, once known.
    pub fn call(&self) -> Option<[u8; CALL_LEN]> {
        self.call
    }

    /// The call's key, once known (a server: after request 0).
    pub fn key(&self) -> Option<&CallKey> {
        self.key.as_ref()
    }

    /// Who made request 0 (a server, once it is open).
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
                format!("the {what} is not a sealed message ({e}); every message must be sealed (docs/scored/protocol.md)"),
            )
        })?;
        let first = self.key.is_none();
        if first && sealed.credential.is_empty() {
            return Err(Refusal::new(
                Check::Unsealed,
                format!("the {what} carries no MUNGE credential; the first request of a call must be sealed by munged with the cluster's key (docs/scored/protocol.md)"),
            ));
        }
        if !first && sealed.mac.is_empty() {
            return Err(Refusal::new(
                Check::Unsealed,
                format!("the {what} carries no MAC; every message but a call's first request is sealed with the call's key (docs/scored/protocol.md)"),
            ));
        }
        if !sealed.credential.is_empty() && !sealed.mac.is_empty() {
            return Err(Refusal::new(
                Check::Unsealed,
                format!(
                    "the {what} carries both a MUNGE credential and a MAC: a message has one seal"
                ),
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
        let d = digest(self.direction, &self.path, &call, sealed.seq, &sealed.body);
        match &self.key {
            Some(key) => {
                if !key.verify(&d, &sealed.mac) {
                    return Err(Refusal::new(
                        Check::Digest,
                        format!(
                            "{what} {} of {} does not match its MAC: it was altered in transit, \
                             or sealed by someone who cannot read the call's key (only the \
                             master's uid can, [master] uid): an impostor",
                            sealed.seq, self.path
                        ),
                    ));
                }
            }
            None => {
                let cred = notary.check(&sealed.credential).map_err(|e| {
                    Refusal::new(Check::Credential, format!("MUNGE credential rejected: {e}"))
                })?;
                if cred.payload.len() != DIGEST_LEN + KEY_LEN {
                    return Err(Refusal::new(
                        Check::Credential,
                        format!(
                            "the {what}'s MUNGE credential carries {} bytes where a digest and \
                             a call key ({}) belong",
                            cred.payload.len(),
                            DIGEST_LEN + KEY_LEN
                        ),
                    ));
                }
                if !cred.encrypted {
                    return Err(Refusal::new(
                        Check::Credential,
                        format!(
                            "the {what}'s MUNGE credential is not encrypted (munged's cipher is \
                             none), so its call key crossed the network in clear: run munged \
                             with a cipher (docs/scored/admin.md#security)"
                        ),
                    ));
                }
                if cred.payload[..DIGEST_LEN] != d {
                    return Err(Refusal::new(
                        Check::Digest,
                        format!(
                            "{what} {} of {} does not match its credential: it was altered in transit",
                            sealed.seq, self.path
                        ),
                    ));
                }
                let mut key = [0u8; KEY_LEN];
                key.copy_from_slice(&cred.payload[DIGEST_LEN..]);
                self.key = Some(CallKey::from_bytes(key));
                self.caller = Some(Caller {
                    uid: cred.uid,
                    gid: cred.gid,
                });
            }
        }
        self.call = Some(call);
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

    /// A munged stand-in: a credential is
    /// "FAKE:<key>:<uid>:<reader>:<n>:<cipher>:<hex payload>"; each is good
    /// once (a replay cache), only for its reader, and "key" tells its key.
    struct Fake {
        uid: u32,
        key: &'static str,
        encrypt: bool,
        issued: RefCell<u64>,
        seen: RefCell<HashSet<String>>,
    }

    fn fake(uid: u32) -> Fake {
        Fake {
            uid,
            key: "cluster",
            encrypt: true,
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
        fn sign_for(&self, payload: &[u8], reader: u32) -> Result<String, AuthError> {
            let mut n = self.issued.borrow_mut();
            *n += 1;
            Ok(format!(
                "FAKE:{}:{}:{}:{}:{}:{}",
                self.key,
                self.uid,
                reader,
                n,
                if self.encrypt { "aes128" } else { "none" },
                hex(payload)
            ))
        }
        fn check(&self, cred: &str) -> Result<Credential, AuthError> {
            let p: Vec<&str> = cred.split(':').collect();
            if p.len() != 7 || p[0] != "FAKE" {
                return Err(munge_err(8, "Bad credential"));
            }
            if p[1] != self.key {
                return Err(munge_err(14, "Invalid credential"));
            }
            if p[3].parse::<u32>().unwrap() != self.uid {
                return Err(munge_err(18, "Unauthorized credential"));
            }
            if !self.seen.borrow_mut().insert(cred.to_string()) {
                return Err(munge_err(17, "Replayed credential"));
            }
            Ok(Credential {
                uid: p[2].parse().unwrap(),
                gid: p[2].parse().unwrap(),
                payload: unhex(p[6]),
                encrypted: p[5] != "none",
            })
        }
    }

    const PATH: &str = "/score.v1.Master/Run";
    const CALL: [u8; 16] = *b"0123456789abcdef";

    fn key(b: u8) -> CallKey {
        CallKey([b; KEY_LEN])
    }

    fn reseal(frame: &[u8], f: impl FnOnce(&mut Sealed)) -> Vec<u8> {
        let mut s = Sealed::decode(frame).unwrap();
        f(&mut s);
        s.encode_to_vec()
    }

    /// A server that opened request 0 of `seal`'s call (sealed by `client`).
    fn opened(seal: &mut Sealer, client: &Fake, server: &Fake) -> Opener {
        let mut open = Opener::requests(PATH);
        open.open(server, &seal.seal(client, b"zero").unwrap())
            .unwrap();
        open
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
        // Known answers, so that another implementation can check itself
        // (protocol.md quotes them): the digest, and its MAC under the key
        // of 32 bytes 0x01.
        let d = digest(Direction::Request, PATH, &CALL, 7, b"abc");
        assert_eq!(
            hex(&d),
            "f8f4a0a271d3292caabcba23357859c56e6ba454cd3f43fa6b46dc2196aeeab9"
        );
        assert_eq!(hex(&key(1).mac(&d)), MAC_KNOWN_ANSWER);
        assert!(key(1).verify(&d, &key(1).mac(&d)));
        assert!(!key(2).verify(&d, &key(1).mac(&d)));
        assert!(!key(1).verify(&d, &key(1).mac(&d)[..31]));
    }

    /// HMAC-SHA256 under 32 bytes 0x01 of the known digest above, as
    /// protocol.md quotes it (computed independently by Python's hmac).
    const MAC_KNOWN_ANSWER: &str =
        "545b86cd28accaa984ff96d368ace7e37a723b596fde902f0801bd322330acdc";

    #[test]
    fn a_sealed_call_opens_in_order_both_ways_with_one_credential() {
        let (client, server) = (fake(1000), fake(0));
        let mut seal = Sealer::requests(PATH, CALL, key(7), 0);
        let mut open = Opener::requests(PATH);
        for body in [&b"first"[..], b"", b"third"] {
            let f = seal.seal(&client, body).unwrap();
            assert_eq!(open.open(&server, &f).unwrap(), body);
        }
        assert_eq!(open.call(), Some(CALL));
        assert_eq!(open.key(), Some(&key(7)));
        assert_eq!(
            open.caller(),
            Some(Caller {
                uid: 1000,
                gid: 1000
            })
        );
        assert_eq!(open.opened(), 3);
        // The replies, sealed with the key the server learnt.
        let mut reply = Sealer::replies(PATH, CALL, open.key().unwrap().clone());
        let mut back = Opener::replies(PATH, CALL, key(7));
        for body in [&b"accepted"[..], b"running", b""] {
            let f = reply.seal(&server, body).unwrap();
            assert_eq!(back.open(&client, &f).unwrap(), body);
        }
        // One munged round trip on each side for the whole call.
        assert_eq!(*client.issued.borrow(), 1);
        assert_eq!(*server.issued.borrow(), 0);
        assert_eq!(server.seen.borrow().len(), 1);
    }

    #[test]
    fn a_swapped_body_is_refused_and_changes_nothing() {
        let (client, server) = (fake(0), fake(0));
        let mut seal = Sealer::requests(PATH, CALL, key(7), 0);
        let mut open = Opener::requests(PATH);
        let f = seal.seal(&client, b"cancel job 7").unwrap();
        let forged = reseal(&f, |s| s.body = b"cancel job 8".to_vec());
        let r = open.open(&server, &forged).unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");
        assert_eq!(
            r.reason,
            "request 0 of /score.v1.Master/Run does not match its credential: it was altered in transit"
        );
        assert_eq!((open.opened(), open.caller(), open.key()), (0, None, None));
        // The credential was spent on the forgery (munged's replay cache):
        // the genuine message cannot follow with it.
        let r = open.open(&server, &f).unwrap_err();
        assert_eq!(r.check, Check::Credential, "{r}");
        assert!(r.reason.contains("Replayed credential"), "{r}");

        // A later message, under the key.
        let mut seal = Sealer::requests(PATH, CALL, key(7), 0);
        let mut open = opened(&mut seal, &client, &server);
        let f = seal.seal(&client, b"cancel job 7").unwrap();
        let forged = reseal(&f, |s| s.body = b"cancel job 8".to_vec());
        let r = open.open(&server, &forged).unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");
        assert!(
            r.reason
                .starts_with("request 1 of /score.v1.Master/Run does not match its MAC: it was altered in transit"),
            "{r}"
        );
        assert_eq!(open.opened(), 1);
        assert_eq!(open.open(&server, &f).unwrap(), b"cancel job 7");
    }

    #[test]
    fn a_changed_sequence_or_call_or_direction_or_path_is_refused() {
        let (client, server) = (fake(0), fake(0));
        let mut seal = Sealer::requests(PATH, CALL, key(7), 0);
        let mut open = opened(&mut seal, &client, &server);
        let f1 = seal.seal(&client, b"one").unwrap();
        let f2 = seal.seal(&client, b"two").unwrap();

        // Reordered: the third message second.
        let r = open.open(&server, &f2).unwrap_err();
        assert_eq!(r.check, Check::Sequence, "{r}");
        assert!(
            r.reason
                .contains("request 2 arrived where request 1 was due"),
            "{r}"
        );
        // The seq rewritten to fit: the MAC no longer matches.
        let r = open.open(&server, &reseal(&f2, |s| s.seq = 1)).unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");
        // Replayed: the first again.
        open.open(&server, &f1).unwrap();
        let r = open.open(&server, &f1).unwrap_err();
        assert_eq!(r.check, Check::Sequence, "{r}");

        // Of another call, for a client that knows its call.
        let f = Sealer::replies(PATH, CALL, key(7))
            .seal(&server, b"x")
            .unwrap();
        let mut back = Opener::replies(PATH, *b"XXXXXXXXXXXXXXXX", key(7));
        let r = back.open(&client, &f).unwrap_err();
        assert_eq!(r.check, Check::Sequence, "{r}");
        assert!(r.reason.contains("another call"), "{r}");
        // The call rewritten to fit: MAC.
        let moved = reseal(&f, |s| s.call = b"XXXXXXXXXXXXXXXX".to_vec());
        let r = back.open(&client, &moved).unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");

        // A request presented as a reply, or to another method.
        let mut seal = Sealer::requests(PATH, CALL, key(7), 0);
        seal.seal(&client, b"0").unwrap();
        let f = seal.seal(&client, b"x").unwrap();
        let mut back = Opener::replies(PATH, CALL, key(7));
        let r = back.open(&client, &reseal(&f, |s| s.seq = 0)).unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");
        let f = Sealer::requests(PATH, CALL, key(7), 0)
            .seal(&client, b"x")
            .unwrap();
        let mut open = Opener::requests("/score.v1.Master/Cancel");
        assert_eq!(open.open(&server, &f).unwrap_err().check, Check::Digest);
    }

    #[test]
    fn only_the_masters_uid_can_read_the_call_key_and_seal_replies() {
        let agent = fake(0);
        let impostor = fake(65534);
        let mut seal = Sealer::requests("/score.v1.Master/Attach", CALL, key(7), 0);
        let register = seal.seal(&agent, b"register").unwrap();
        // The impostor has the cluster's key but not the master's uid:
        // munged will not give it the payload.
        let mut open = Opener::requests("/score.v1.Master/Attach");
        let r = open.open(&impostor, &register).unwrap_err();
        assert_eq!(r.check, Check::Credential, "{r}");
        assert!(r.reason.contains("Unauthorized credential"), "{r}");
        // So it can only guess the key; the agent refuses what it seals.
        let f = Sealer::replies("/score.v1.Master/Attach", CALL, key(8))
            .seal(&impostor, b"launch")
            .unwrap();
        let mut back = Opener::replies("/score.v1.Master/Attach", CALL, key(7));
        let r = back.open(&agent, &f).unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");
        assert_eq!(
            r.reason,
            "reply 0 of /score.v1.Master/Attach does not match its MAC: it was altered in \
             transit, or sealed by someone who cannot read the call's key (only the master's \
             uid can, [master] uid): an impostor"
        );
        // A reply sealed with a credential, as the old protocol did: no MAC.
        let f = Sealed {
            call: CALL.to_vec(),
            seq: 0,
            credential: impostor.sign_for(b"x", 0).unwrap(),
            body: b"launch".to_vec(),
            mac: Vec::new(),
        }
        .encode_to_vec();
        let r = back.open(&agent, &f).unwrap_err();
        assert_eq!(r.check, Check::Unsealed, "{r}");
        assert!(r.reason.starts_with("the reply carries no MAC"), "{r}");
        // Another key: munged's own refusal.
        let foreign = Fake {
            key: "other",
            ..fake(0)
        };
        let f = Sealer::requests(PATH, CALL, key(7), 0)
            .seal(&foreign, b"submit")
            .unwrap();
        let r = Opener::requests(PATH).open(&agent, &f).unwrap_err();
        assert_eq!(r.check, Check::Credential, "{r}");
        assert!(r.reason.starts_with("MUNGE credential rejected: "), "{r}");
        assert!(r.reason.contains("Invalid credential"), "{r}");
    }

    #[test]
    fn a_call_key_in_clear_or_a_credential_without_one_is_refused() {
        let server = fake(0);
        let clear = Fake {
            encrypt: false,
            ..fake(1000)
        };
        let f = Sealer::requests(PATH, CALL, key(7), 0)
            .seal(&clear, b"submit")
            .unwrap();
        let mut open = Opener::requests(PATH);
        let r = open.open(&server, &f).unwrap_err();
        assert_eq!(r.check, Check::Credential, "{r}");
        assert!(
            r.reason.contains("not encrypted (munged's cipher is none)"),
            "{r}"
        );
        assert_eq!((open.opened(), open.key()), (0, None));
        // A credential over the digest alone (the old protocol).
        let d = digest(Direction::Request, PATH, &CALL, 0, b"submit");
        let f = Sealed {
            call: CALL.to_vec(),
            seq: 0,
            credential: fake(1000).sign_for(&d, 0).unwrap(),
            body: b"submit".to_vec(),
            mac: Vec::new(),
        }
        .encode_to_vec();
        let r = open.open(&server, &f).unwrap_err();
        assert_eq!(r.check, Check::Credential, "{r}");
        assert!(
            r.reason
                .contains("carries 32 bytes where a digest and a call key (64) belong"),
            "{r}"
        );
    }

    #[test]
    fn nobody_else_can_speak_within_a_call() {
        let (alice, mallory, server) = (fake(1000), fake(1001), fake(0));
        let mut seal = Sealer::requests(PATH, CALL, key(7), 0);
        let mut open = opened(&mut seal, &alice, &server);
        // Mallory knows the call's nonce (it crosses in clear) but not its
        // key: neither her own key nor her own credential gets in.
        let mut hers = Sealer::requests(PATH, CALL, key(9), 0);
        hers.seal(&mallory, b"zero").unwrap();
        let r = open
            .open(&server, &hers.seal(&mallory, b"cancel").unwrap())
            .unwrap_err();
        assert_eq!(r.check, Check::Digest, "{r}");
        let d = digest(Direction::Request, PATH, &CALL, 1, b"cancel");
        let mut payload = d.to_vec();
        payload.extend_from_slice(&[9; KEY_LEN]);
        let f = Sealed {
            call: CALL.to_vec(),
            seq: 1,
            credential: mallory.sign_for(&payload, 0).unwrap(),
            body: b"cancel".to_vec(),
            mac: Vec::new(),
        }
        .encode_to_vec();
        let r = open.open(&server, &f).unwrap_err();
        assert_eq!(r.check, Check::Unsealed, "{r}");
        assert!(r.reason.starts_with("the request carries no MAC"), "{r}");
        assert_eq!(open.caller().map(|c| c.uid), Some(1000));
        assert_eq!(open.opened(), 1);
    }

    #[test]
    fn unsealed_messages_are_refused() {
        let server = fake(0);
        let mut open = Opener::requests(PATH);
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
            credential: fake(0).sign_for(b"", 0).unwrap(),
            ..Default::default()
        };
        let r = open.open(&server, &s.encode_to_vec()).unwrap_err();
        assert_eq!(r.check, Check::Unsealed);
        assert!(r.reason.contains("0 bytes instead of 16"), "{r}");
        // Both seals at once.
        let s = Sealed {
            call: CALL.to_vec(),
            credential: fake(0).sign_for(b"", 0).unwrap(),
            mac: vec![0; MAC_LEN],
            ..Default::default()
        };
        let r = open.open(&server, &s.encode_to_vec()).unwrap_err();
        assert_eq!(r.check, Check::Unsealed);
        assert!(
            r.reason.contains("both a MUNGE credential and a MAC"),
            "{r}"
        );
        // A reply without any seal.
        let s = Sealed {
            call: CALL.to_vec(),
            body: b"x".to_vec(),
            ..Default::default()
        };
        let r = Opener::replies(PATH, CALL, key(7))
            .open(&server, &s.encode_to_vec())
            .unwrap_err();
        assert_eq!(r.check, Check::Unsealed);
        assert!(r.reason.contains("the reply carries no MAC"), "{r}");
    }

    #[test]
    fn call_nonces_and_keys_differ_and_keys_do_not_print() {
        assert_ne!(new_call(), new_call());
        assert_ne!(CallKey::random(), CallKey::random());
        assert_eq!(format!("{:?}", key(7)), "CallKey(..)");
    }
}
