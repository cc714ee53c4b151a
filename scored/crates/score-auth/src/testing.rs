//! Test support: a private munged for one test, in a directory of its own
//! (key, socket, pid, log, seed), SIGKILLed by PID and reaped on drop, even
//! when the test panics.  Used by the tests of score-auth, scrun and
//! scorectl; not for production code.
//!
//! Those tests carry `#[ignore = "needs munged ..."]`: a plain `cargo test`
//! reports them as ignored, and `scripts/run-tests` runs them with
//! `--include-ignored`, where a missing munged fails them (never a silent
//! pass).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::{Munge, SealedServer};
use score_proto::v1::master_server::{Master, MasterServer};

pub const MUNGED: &str = "/usr/sbin/munged";

pub struct TestMunged {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl TestMunged {
    /// A munged with a new key, in a fresh directory named after `prefix`.
    /// Panics if munged is not installed or does not start.
    pub fn start(prefix: &str) -> TestMunged {
        Self::start_with_key(prefix, None)
    }

    /// A munged with the key of `other` (the two trust each other's
    /// credentials), or a new key.
    pub fn start_with_key(prefix: &str, other: Option<&TestMunged>) -> TestMunged {
        assert!(
            Path::new(MUNGED).is_file(),
            "{MUNGED} is not installed: this test needs the Debian package munge \
             (scripts/install-deps.sh installs it)"
        );
        let dir = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // munged refuses a socket directory that others cannot search.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = dir.join("munge.key");
        match other {
            Some(o) => {
                std::fs::copy(o.dir.join("munge.key"), &key).unwrap();
            }
            None => std::fs::write(&key, random_key()).unwrap(),
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
        let mut m = TestMunged { child, dir, socket };
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
        m
    }

    pub fn munge(&self) -> Munge {
        Munge::new(&self.socket)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Serves `master`, sealed as the real master is ([`SealedServer`]), on
    /// a free port of 127.0.0.1 (in the current tokio runtime) and writes,
    /// beside this munged, a client configuration that points at both and
    /// names this process's uid as the master's; returns its path.
    pub async fn serve_master<M: Master>(&self, master: M) -> PathBuf {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(SealedServer::new(MasterServer::new(master), self.munge()))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let config = self.dir.join("scored.toml");
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        std::fs::write(
            &config,
            format!(
                "[master]\nuid = {uid}\n[client]\nmaster = \"http://{addr}\"\n[munge]\nsocket = \"{}\"\n",
                self.socket.display()
            ),
        )
        .unwrap();
        config
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("munged.log")).unwrap_or_default()
    }
}

/// 1024 bytes from the kernel's generator.
fn random_key() -> Vec<u8> {
    use std::io::Read;
    let mut key = vec![0u8; 1024];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut key)
        .unwrap();
    key
}

impl Drop for TestMunged {
    fn drop(&mut self) {
        // By PID: the Child handle signals exactly the process it started.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
