//! Tests against a real munged, started for each test in a directory of its
//! own (key, socket, log, seed) and killed by PID when the test ends, even
//! when it panics.  Those tests are `#[ignore]`d for a plain `cargo test`;
//! `scripts/run-tests` runs them (`--include-ignored`), and without munged
//! they fail.

use score_auth::{code, verify, AuthError, Munge, MungeInterceptor, MUNGE_METADATA_KEY};
use tonic::service::Interceptor;

type Munged = score_auth::testing::TestMunged;

fn start() -> Munged {
    Munged::start("score-auth-test")
}

fn me() -> (u32, u32) {
    // SAFETY: getuid/getgid cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn roundtrip_gives_uid_gid_and_payload() {
    let d = start();
    let m = d.munge();
    assert_eq!(m.socket(), d.socket());
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
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn a_credential_is_good_once() {
    let d = start();
    let m = d.munge();
    let cred = m.encode(&[]).unwrap();
    m.decode(&cred).unwrap();
    let e = m.decode(&cred).unwrap_err();
    assert_eq!(e.code(), Some(code::CRED_REPLAYED), "{e}");
    assert!(e.to_string().contains("Replayed credential"), "{e}");
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn garbage_and_foreign_credentials_are_rejected() {
    let d = start();
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
    let other = start();
    let foreign = other.munge().encode(&[]).unwrap();
    let e = m.decode(&foreign).unwrap_err();
    assert!(matches!(e, AuthError::Munge { op: "decode", .. }), "{e:?}");
    assert_eq!(e.code(), Some(code::CRED_INVALID), "{e}");
    assert!(e.to_string().contains("Invalid credential"), "{e}");
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn two_daemons_with_one_key_trust_each_other() {
    let a = start();
    let b = Munged::start_with_key("score-auth-test", Some(&a));
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
    let e = m.decode("MUNGE:x:").unwrap_err();
    assert!(matches!(e, AuthError::Unreachable { .. }), "{e:?}");
    assert_eq!(e.code(), Some(code::SOCKET));
}

#[test]
#[ignore = "needs munged (Debian package munge); scripts/run-tests runs it"]
fn interceptor_and_verify() {
    let d = start();
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
