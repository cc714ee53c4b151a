//! Tests against a real munged, started for each test in a directory of its
//! own (key, socket, log, seed) and killed by PID when the test ends, even
//! when it panics.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use score_auth::{code, verify, AuthError, Munge, MungeInterceptor, MUNGE_METADATA_KEY};
use tonic::service::Interceptor;

const MUNGED: &str = "/usr/sbin/munged";

/// One munged in the foreground; SIGKILLed and reaped on drop, its
/// directory removed.
struct Munged {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl Munged {
    /// None (and a note on stderr) if munged is not installed.
    fn start() -> Option<Munged> {
        let dir = std::env::temp_dir().join(format!(
            "score-auth-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        Self::start_with_key(dir, None)
    }

    /// A munged in `dir` with the key of `other` (so that they trust each
    /// other's credentials), or a new key.
    fn start_with_key(dir: PathBuf, key_from: Option<&Munged>) -> Option<Munged> {
        if !Path::new(MUNGED).exists() {
            eprintln!("skipped: {MUNGED} is not installed (Debian package munge)");
            return None;
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // munged refuses a socket directory that others cannot search.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = dir.join("munge.key");
        match key_from {
            Some(other) => {
                std::fs::copy(other.dir.join("munge.key"), &key).unwrap();
            }
            None => {
                std::fs::write(&key, random_key()).unwrap();
            }
        }
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let socket = dir.join("munge.socket");
        let child = Command::new(MUNGED)
            .arg("--foreground")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
            .arg(format!("--log-file={}", dir.join("munged.log").display()))
            .arg(format!("--seed-file={}", dir.join("munged.seed").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start munged");
        let mut m = Munged { child, dir, socket };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !m.socket.exists() {
            if let Some(status) = m.child.try_wait().unwrap() {
                panic!("munged exited with {status}: {}", m.log());
            }
            assert!(
                Instant::now() < deadline,
                "munged did not create its socket: {}",
                m.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(m)
    }

    fn munge(&self) -> Munge {
        Munge::new(&self.socket)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("munged.log")).unwrap_or_default()
    }
}

/// 1024 bytes from the kernel's generator (getrandom through /dev/urandom).
fn random_key() -> Vec<u8> {
    use std::io::Read;
    let mut key = vec![0u8; 1024];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut key)
        .unwrap();
    key
}

impl Drop for Munged {
    fn drop(&mut self) {
        // By PID: the Child handle signals exactly the process it started.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn me() -> (u32, u32) {
    // SAFETY: getuid/getgid cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

#[test]
fn roundtrip_gives_uid_gid_and_payload() {
    let Some(d) = Munged::start() else { return };
    let m = d.munge();
    assert_eq!(m.socket(), d.socket.as_path());
    let cred = m.encode(b"job 42").unwrap();
    assert!(cred.starts_with("MUNGE:"), "{cred}");
    let c = m.decode(&cred).unwrap();
    assert_eq!((c.uid, c.gid), me());
    assert_eq!(c.payload, b"job 42");

    let empty = m.encode(&[]).unwrap();
    let c = m.decode(&format!("{empty}\n")).unwrap();
    assert!(c.payload.is_empty());
}

#[test]
fn a_credential_is_good_once() {
    let Some(d) = Munged::start() else { return };
    let m = d.munge();
    let cred = m.encode(&[]).unwrap();
    m.decode(&cred).unwrap();
    let e = m.decode(&cred).unwrap_err();
    assert_eq!(e.code(), Some(code::CRED_REPLAYED), "{e}");
    assert!(e.to_string().contains("Replayed credential"), "{e}");
}

#[test]
fn garbage_and_foreign_credentials_are_rejected() {
    let Some(d) = Munged::start() else { return };
    let m = d.munge();
    for bad in ["", "hello", "MUNGE:AAAAAAAAAAAAAAAA:"] {
        let e = m.decode(bad).unwrap_err();
        assert!(
            matches!(e, AuthError::Munge { op: "decode", .. }),
            "{bad:?}: {e:?}"
        );
    }
    assert!(matches!(m.decode("a\0b"), Err(AuthError::Invalid(_))));

    // A credential made with another key.
    let Some(other) = Munged::start() else { return };
    let foreign = other.munge().encode(&[]).unwrap();
    let e = m.decode(&foreign).unwrap_err();
    assert!(matches!(e, AuthError::Munge { op: "decode", .. }), "{e:?}");
}

#[test]
fn two_daemons_with_one_key_trust_each_other() {
    let Some(a) = Munged::start() else { return };
    let dir = a.dir.with_extension("b");
    let Some(b) = Munged::start_with_key(dir, Some(&a)) else {
        return;
    };
    let cred = a.munge().encode(b"x").unwrap();
    assert_eq!(b.munge().decode(&cred).unwrap().payload, b"x");
}

#[test]
fn missing_munged_is_a_clear_error() {
    let m = Munge::new("/nonexistent/score-test/munge.socket");
    let e = m.encode(&[]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, AuthError::Unreachable { .. }), "{e:?}");
    assert!(
        msg.starts_with("cannot reach munged at /nonexistent/score-test/munge.socket: "),
        "{msg}"
    );
    assert_eq!(e.code(), Some(code::SOCKET));
    assert!(m.decode("MUNGE:x:").is_err());
}

#[test]
fn interceptor_and_verify() {
    let Some(d) = Munged::start() else { return };
    let m = d.munge();
    let mut icpt = MungeInterceptor::new(m.clone());
    let req = icpt.call(tonic::Request::new(())).unwrap();
    assert!(req.metadata().get(MUNGE_METADATA_KEY).is_some());
    let caller = verify(&m, &req).unwrap();
    assert_eq!((caller.uid, caller.gid), me());
    // The same request again is a replay.
    let st = verify(&m, &req).unwrap_err();
    assert_eq!(st.code(), tonic::Code::Unauthenticated);
    assert!(
        st.message().starts_with("MUNGE credential rejected: "),
        "{}",
        st.message()
    );
    // A second call through the interceptor gets a fresh credential.
    let req2 = icpt.call(tonic::Request::new(())).unwrap();
    verify(&m, &req2).unwrap();

    let st = verify(&m, &tonic::Request::new(5u8)).unwrap_err();
    assert_eq!(st.code(), tonic::Code::Unauthenticated);
    assert!(
        st.message()
            .starts_with("request carries no MUNGE credential (x-score-munge); "),
        "{}",
        st.message()
    );

    let mut junk = tonic::Request::new(());
    junk.metadata_mut()
        .insert(MUNGE_METADATA_KEY, "MUNGE:junk:".parse().unwrap());
    let st = verify(&m, &junk).unwrap_err();
    assert!(
        st.message().starts_with("MUNGE credential rejected: "),
        "{}",
        st.message()
    );
}

#[test]
fn interceptor_without_munged_fails_the_call() {
    let mut icpt = MungeInterceptor::new(Munge::new("/nonexistent/munge.socket"));
    let st = icpt.call(tonic::Request::new(())).unwrap_err();
    assert_eq!(st.code(), tonic::Code::Unauthenticated);
    assert!(
        st.message()
            .contains("cannot reach munged at /nonexistent/munge.socket"),
        "{}",
        st.message()
    );
}

#[tokio::test]
async fn connect_error_names_the_master() {
    // Port 1 on loopback: nothing listens there.
    let e = score_auth::connect("http://127.0.0.1:1", Munge::new("/nonexistent"))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("cannot reach the scored master at http://127.0.0.1:1: "),
        "{msg}"
    );
    assert!(msg.to_lowercase().contains("refused"), "{msg}");

    let e = score_auth::connect("not a url", Munge::new("/nonexistent"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not a url"), "{e}");
}
