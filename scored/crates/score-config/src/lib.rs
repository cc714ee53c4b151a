//! The configuration file of score, `/etc/score/scored.toml` by default
//! (`SCORE_CONFIG` or `--config` choose another).  One file serves the master,
//! the agents and the clients; each reads its own section.  Every key has a
//! default, so an absent file or section is valid.  The reference is
//! `docs/scored/admin.md`.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_PATH: &str = "/etc/score/scored.toml";
pub const DEFAULT_MUNGE_SOCKET: &str = "/run/munge/munge.socket.2";
pub const DEFAULT_MASTER_PORT: u16 = 7100;
pub const DEFAULT_STDIO_BUFFER_KIB: u64 = 4096;
/// The smallest `stdio_buffer_kib`: two of the largest data messages (64 KiB).
pub const MIN_STDIO_BUFFER_KIB: u64 = 128;
pub const MAX_STDIO_BUFFER_KIB: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub master: MasterConfig,
    #[serde(default)]
    pub agent: AgentConfig,
    #[serde(default)]
    pub client: ClientConfig,
    #[serde(default)]
    pub munge: MungeConfig,
    /// Where the configuration came from (not a key of the file).
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MasterConfig {
    /// gRPC address the master listens on.
    pub listen: String,
    /// Prometheus /metrics address ("" disables it).
    pub metrics_listen: String,
    /// Agents send a heartbeat this often.
    #[serde(with = "duration_ms")]
    pub heartbeat_interval_ms: Duration,
    /// A node whose agent is silent this long is marked down and its jobs fail.
    #[serde(with = "duration_ms")]
    pub heartbeat_timeout_ms: Duration,
    /// Jobs of uid 0 are refused unless this is true.
    pub allow_root_jobs: bool,
    /// After a cancel, SIGTERM is followed by SIGKILL this much later.
    #[serde(with = "duration_ms")]
    pub kill_grace_ms: Duration,
    /// Nodes expected in the cluster; they show as down until they register.
    pub nodes: Vec<String>,
    /// Finished jobs kept for `scorectl jobs --all` and `show`.
    pub history: usize,
    /// Rows (time slots) of the gang-scheduling matrix; 1 turns time
    /// sharing off (jobs wait for free nodes).
    pub gang_slots: usize,
    /// The matrix switches to its next row this often.
    #[serde(with = "duration_ms")]
    pub quantum_ms: Duration,
    /// How a switch stops the outgoing job.
    pub preemption: Preemption,
    /// A process whose PM contexts have not quiesced after this long is
    /// frozen anyway (and counted).
    #[serde(with = "duration_ms")]
    pub quiesce_timeout_ms: Duration,
    /// The uid the master runs as.  Agents, scrun and scorectl accept only
    /// messages signed (through MUNGE) by this uid as the master's; the
    /// master refuses to start as another uid.
    pub uid: u32,
    /// KiB of each job's output, and separately of its stdin, the master
    /// holds at most (at least 128 KiB per node of the job).  Beyond it the
    /// agents stop reading the ranks' pipes (output) or scrun stops sending
    /// (stdin) until the other end has taken some.
    pub stdio_buffer_kib: u64,
    /// Where the master saves its jobs, queue, matrix and history (file
    /// `master.state`, replaced atomically at every change), and reads them
    /// back when it starts, so that a restarted master loses no job.  ""
    /// keeps the state in memory only.
    pub state_dir: String,
    /// After a restart, the master waits this long for the agents of the
    /// jobs it saved (a node not back by then has lost its jobs) and for
    /// their scruns (a job whose scrun is not back by then is cancelled).
    #[serde(with = "duration_ms")]
    pub reattach_timeout_ms: Duration,
}

/// `network`: the PM contexts of the outgoing job quiesce (nothing in
/// flight) before its cgroups freeze — network preemption.  `freeze`: the
/// cgroups freeze at once, packets in flight are left to retransmission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preemption {
    Network,
    Freeze,
}

impl Default for MasterConfig {
    fn default() -> Self {
        Self {
            listen: format!("0.0.0.0:{DEFAULT_MASTER_PORT}"),
            metrics_listen: "0.0.0.0:7101".into(),
            heartbeat_interval_ms: Duration::from_secs(2),
            heartbeat_timeout_ms: Duration::from_secs(10),
            allow_root_jobs: false,
            kill_grace_ms: Duration::from_secs(5),
            nodes: Vec::new(),
            history: 1000,
            gang_slots: 4,
            quantum_ms: Duration::from_millis(500),
            preemption: Preemption::Network,
            quiesce_timeout_ms: Duration::from_millis(1000),
            uid: 0,
            stdio_buffer_kib: DEFAULT_STDIO_BUFFER_KIB,
            state_dir: "/var/lib/scored".into(),
            reattach_timeout_ms: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// The master's gRPC address, e.g. "http://head:7100".
    pub master: String,
    /// This node's name; default: the host name.
    pub node_name: String,
    /// Processes a job may place on this node; 0: the number of CPUs.
    pub slots: u32,
    /// CPUs (OS numbers) the ranks are bound to, in order: a job's i-th
    /// rank on this node runs on `cpus[i % len]`.  Empty: no binding.  The
    /// role score_smp writes them from the node's topology, spreading ranks
    /// over NUMA domains first.
    pub cpus: Vec<u32>,
    /// Prometheus /metrics address ("" disables it).
    pub metrics_listen: String,
    /// The parent cgroup (v2) of the job cgroups; "": `score` under the
    /// cgroup2 mount found in /proc/mounts.
    pub cgroup_root: String,
    /// Runtime state: the PMIx server's rendezvous files, per-job directories.
    pub state_dir: String,
    /// Retry a lost connection to the master at most this often (the first
    /// retries come sooner: 50 ms, then twice as late each time).
    #[serde(with = "duration_ms")]
    pub reconnect_ms: Duration,
    /// An agent that lost its master keeps the node's jobs running this long
    /// while it tries to re-attach (a restarted master adopts them); then it
    /// kills them.
    #[serde(with = "duration_ms")]
    pub master_wait_ms: Duration,
    /// PM's device for a job's peers on other nodes, unless the job sets
    /// PM_NET_DEVICE: `udp`, or `eth`, for which the agent opens each
    /// rank's raw Ethernet sockets (packet sockets need CAP_NET_RAW) with a
    /// locked filter that shows the rank only its own PM frames.  A rank
    /// can send any frame on the NICs: only for networks whose users are
    /// trusted (docs/scored/admin.md).
    pub pm_net_device: PmNetDevice,
}

/// `agent.pm_net_device`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PmNetDevice {
    #[default]
    Udp,
    Eth,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            master: format!("http://127.0.0.1:{DEFAULT_MASTER_PORT}"),
            node_name: String::new(),
            slots: 0,
            cpus: Vec::new(),
            metrics_listen: "0.0.0.0:7102".into(),
            cgroup_root: String::new(),
            state_dir: "/run/score".into(),
            reconnect_ms: Duration::from_secs(1),
            master_wait_ms: Duration::from_secs(60),
            pm_net_device: PmNetDevice::Udp,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientConfig {
    /// The master scrun and scorectl talk to; default: the agent's `master`.
    pub master: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MungeConfig {
    /// munged's socket.
    pub socket: String,
}

impl Default for MungeConfig {
    fn default() -> Self {
        Self {
            socket: DEFAULT_MUNGE_SOCKET.into(),
        }
    }
}

impl Config {
    /// Loads `path`, or when it is None: `$SCORE_CONFIG`, else
    /// [`DEFAULT_PATH`] if it exists, else the defaults.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let env_path = std::env::var_os("SCORE_CONFIG").map(PathBuf::from);
        let (path, required) = match (path, env_path) {
            (Some(p), _) => (p.to_path_buf(), true),
            (None, Some(p)) => (p, true),
            (None, None) => (PathBuf::from(DEFAULT_PATH), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self::default())
            }
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        Self::parse(&text, &path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        cfg.path = Some(path.to_path_buf());
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: self.path.clone().unwrap_or_default(),
            message,
        };
        if self.master.heartbeat_timeout_ms <= self.master.heartbeat_interval_ms {
            return Err(invalid(format!(
                "master.heartbeat_timeout_ms ({} ms) must exceed master.heartbeat_interval_ms ({} ms)",
                self.master.heartbeat_timeout_ms.as_millis(),
                self.master.heartbeat_interval_ms.as_millis()
            )));
        }
        if self.master.gang_slots == 0 {
            return Err(invalid(
                "master.gang_slots must be at least 1 (1: no time sharing)".into(),
            ));
        }
        if self.master.quantum_ms < Duration::from_millis(10) {
            return Err(invalid(format!(
                "master.quantum_ms = {} is too short (at least 10 ms)",
                self.master.quantum_ms.as_millis()
            )));
        }
        let max_cpu = libc::CPU_SETSIZE as u32;
        if let Some(c) = self.agent.cpus.iter().find(|&&c| c >= max_cpu) {
            return Err(invalid(format!(
                "agent.cpus names CPU {c}; CPU numbers go up to {}",
                max_cpu - 1
            )));
        }
        if self.master.heartbeat_interval_ms.is_zero() {
            return Err(invalid("master.heartbeat_interval_ms must be > 0".into()));
        }
        if !(MIN_STDIO_BUFFER_KIB..=MAX_STDIO_BUFFER_KIB).contains(&self.master.stdio_buffer_kib) {
            return Err(invalid(format!(
                "master.stdio_buffer_kib = {} is out of range ({MIN_STDIO_BUFFER_KIB} .. {MAX_STDIO_BUFFER_KIB})",
                self.master.stdio_buffer_kib
            )));
        }
        Ok(())
    }

    /// The master address clients use: `client.master`, else `agent.master`.
    pub fn client_master(&self) -> String {
        if self.client.master.is_empty() {
            self.agent.master.clone()
        } else {
            self.client.master.clone()
        }
    }
}

/// Durations are written as integer milliseconds (`heartbeat_timeout_ms = 10000`).
mod duration_ms {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("", Path::new("x.toml")).unwrap();
        assert_eq!(c.master.heartbeat_timeout_ms, Duration::from_secs(10));
        assert_eq!(c.munge.socket, DEFAULT_MUNGE_SOCKET);
        assert_eq!(c.client_master(), "http://127.0.0.1:7100");
    }

    #[test]
    fn sections_override_defaults() {
        let c = Config::parse(
            "[agent]\nmaster = \"http://10.0.0.1:7100\"\nslots = 4\n[client]\nmaster = \"http://h:1\"\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(c.agent.slots, 4);
        assert_eq!(c.client_master(), "http://h:1");
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_file() {
        let e = Config::parse("[master]\nlisten_port = 3\n", Path::new("/etc/x.toml")).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("/etc/x.toml") && msg.contains("listen_port"),
            "{msg}"
        );
    }

    #[test]
    fn the_shipped_example_parses_and_states_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../packaging/systemd/scored.toml.example");
        let text = std::fs::read_to_string(&path).unwrap();
        let c = Config::parse(&text, &path).unwrap();
        let d = Config::default();
        assert_eq!(c.master.listen, d.master.listen);
        assert_eq!(c.master.heartbeat_timeout_ms, d.master.heartbeat_timeout_ms);
        assert_eq!(c.master.kill_grace_ms, d.master.kill_grace_ms);
        assert_eq!(c.agent.state_dir, d.agent.state_dir);
        assert_eq!(c.munge.socket, d.munge.socket);
        assert_eq!(c.master.gang_slots, d.master.gang_slots);
        assert_eq!(c.master.quantum_ms, d.master.quantum_ms);
        assert_eq!(c.master.preemption, d.master.preemption);
        assert_eq!(c.master.quiesce_timeout_ms, d.master.quiesce_timeout_ms);
        assert_eq!(c.master.uid, d.master.uid);
        assert_eq!(c.master.stdio_buffer_kib, d.master.stdio_buffer_kib);
        assert_eq!(c.agent.pm_net_device, d.agent.pm_net_device);
    }

    #[test]
    fn pm_net_devices_parse_and_others_are_refused() {
        let c = Config::parse("", Path::new("x")).unwrap();
        assert_eq!(c.agent.pm_net_device, PmNetDevice::Udp);
        let c = Config::parse("[agent]\npm_net_device = \"eth\"\n", Path::new("x")).unwrap();
        assert_eq!(c.agent.pm_net_device, PmNetDevice::Eth);
        let e = Config::parse("[agent]\npm_net_device = \"ib\"\n", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("ib"), "{e}");
    }

    #[test]
    fn the_stdio_buffer_is_at_least_two_messages() {
        let c = Config::parse("", Path::new("x")).unwrap();
        assert_eq!(c.master.stdio_buffer_kib, 4096);
        let c = Config::parse("[master]\nstdio_buffer_kib = 128\n", Path::new("x")).unwrap();
        assert_eq!(c.master.stdio_buffer_kib, 128);
        let e = Config::parse("[master]\nstdio_buffer_kib = 64\n", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("stdio_buffer_kib"), "{e}");
    }

    #[test]
    fn the_masters_uid_is_root_unless_set() {
        assert_eq!(Config::parse("", Path::new("x")).unwrap().master.uid, 0);
        let c = Config::parse("[master]\nuid = 997\n", Path::new("x")).unwrap();
        assert_eq!(c.master.uid, 997);
        let e = Config::parse("[master]\nuid = -1\n", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("uid"), "{e}");
    }

    #[test]
    fn preemption_modes_parse_and_others_are_refused() {
        let c = Config::parse("[master]\npreemption = \"freeze\"\n", Path::new("x")).unwrap();
        assert_eq!(c.master.preemption, Preemption::Freeze);
        let e = Config::parse("[master]\npreemption = \"pause\"\n", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("pause"), "{e}");
        let e = Config::parse("[master]\nquantum_ms = 1\n", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("too short"), "{e}");
    }

    #[test]
    fn timeout_must_exceed_interval() {
        let e = Config::parse(
            "[master]\nheartbeat_interval_ms = 5000\nheartbeat_timeout_ms = 1000\n",
            Path::new("x.toml"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("must exceed"), "{e}");
    }
}
