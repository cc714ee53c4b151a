//! Finding and reaching the scored master: `--master`, else $SCORE_MASTER,
//! else the configuration file's `client.master` (or `agent.master`), with a
//! sealed channel from score-auth: every request signed through MUNGE, every
//! reply accepted only when signed by the master's uid (`master.uid`).
//! Shared by scrun and scorectl.

use anyhow::{Context, Result};
use score_config::{Config, DEFAULT_MASTER_PORT};
use std::path::Path;

/// Where to connect and how to authenticate.
#[derive(Debug, Clone)]
pub struct Target {
    pub master: String,
    pub munge_socket: String,
    /// The uid the master runs as: replies signed by anybody else are refused.
    pub master_uid: u32,
}

/// `master`: `--master` or $SCORE_MASTER (clap reads the variable);
/// `config`: `--config`, else `Config::load` looks at $SCORE_CONFIG and
/// /etc/score/scored.toml.
pub fn resolve(master: Option<&str>, config: Option<&Path>) -> Result<Target> {
    let cfg = Config::load(config).context("cannot load the score configuration")?;
    let master = match master {
        Some(m) if !m.trim().is_empty() => m.trim().to_string(),
        _ => cfg.client_master(),
    };
    Ok(Target {
        master: normalize_master_url(&master),
        munge_socket: cfg.munge.socket,
        master_uid: cfg.master.uid,
    })
}

/// Accepts `head`, `head:7100`, `10.0.0.1`, `[::1]:7100` or a full URL:
/// adds `http://` and the default port where they are missing.
pub fn normalize_master_url(s: &str) -> String {
    let (scheme, rest) = match s.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => ("http", s),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let has_port = match authority.rfind(']') {
        Some(i) => authority[i..].contains(':'), // [v6]:port
        None => authority.contains(':'),
    };
    if has_port || authority.is_empty() {
        format!("{scheme}://{authority}{path}")
    } else {
        format!("{scheme}://{authority}:{DEFAULT_MASTER_PORT}{path}")
    }
}

/// Connects to the master; every message of every call is sealed both ways.
pub async fn connect(target: &Target) -> Result<score_auth::MasterClient> {
    let munge = score_auth::Munge::new(&target.munge_socket);
    let client = score_auth::connect(&target.master, munge, target.master_uid).await?;
    Ok(client)
}

/// A gRPC error for the user: the master writes its Status messages to be
/// read, so they are shown verbatim; transport failures name the master.
pub fn status_message(status: &tonic::Status, master: &str) -> String {
    use tonic::Code;
    let msg = status.message().trim();
    match status.code() {
        Code::Unavailable => {
            if msg.is_empty() {
                format!("the scored master at {master} is unavailable")
            } else {
                format!("the scored master at {master} is unavailable: {msg}")
            }
        }
        Code::Unimplemented if msg.is_empty() => {
            format!("the scored master at {master} does not implement this request (is it an older version?)")
        }
        _ if msg.is_empty() => format!(
            "{} (from the scored master at {master})",
            status.code().description()
        ),
        _ => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_urls_are_completed() {
        assert_eq!(normalize_master_url("head"), "http://head:7100");
        assert_eq!(normalize_master_url("head:7200"), "http://head:7200");
        assert_eq!(normalize_master_url("10.0.0.1"), "http://10.0.0.1:7100");
        assert_eq!(normalize_master_url("[::1]"), "http://[::1]:7100");
        assert_eq!(normalize_master_url("[::1]:9"), "http://[::1]:9");
        assert_eq!(normalize_master_url("http://h:1"), "http://h:1");
        assert_eq!(normalize_master_url("https://h"), "https://h:7100");
        assert_eq!(normalize_master_url("http://h/x"), "http://h:7100/x");
    }

    #[test]
    fn status_messages_are_verbatim() {
        let s = tonic::Status::not_found("job 12 does not exist");
        assert_eq!(status_message(&s, "http://h:1"), "job 12 does not exist");
        let s = tonic::Status::unavailable("tcp connect error");
        assert_eq!(
            status_message(&s, "http://h:1"),
            "the scored master at http://h:1 is unavailable: tcp connect error"
        );
    }
}
