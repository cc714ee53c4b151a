//! The adoption socket: another launcher's tasks join a job of this node.
//!
//! `srun --score-gang` (the SPANK plugin in slurm/spank/) submits an
//! adopted job (JobSpec.adopt) and, in every task just before its exec,
//! asks the node's agent over this Unix socket to take the task into the
//! job's cgroup.  From then on scored's matrix gang-schedules it like a
//! rank it started: network preemption through the task's PM contexts, then
//! the freezer.
//!
//! One request per connection, one line each way:
//!
//! ```text
//! adopt <job id> <pid>\n     ->  ok <PM statistics directory>\n
//!                            or  error <why>\n
//! ```
//!
//! Only root may ask (SO_PEERCRED): moving a process into a job's cgroup is
//! the launcher's privilege (slurmstepd runs the plugin as root).  The socket
//! is created mode 0600 in the agent's state directory.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout, Duration};

/// A request, parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub job: u64,
    pub pid: i32,
}

/// Handed to the agent's event loop, which owns the jobs.
pub struct Adoption {
    pub request: Request,
    pub reply: oneshot::Sender<Result<String, String>>,
}

/// A peer gets this long to send its line.
const READ_WITHIN: Duration = Duration::from_secs(5);
/// The longest line read.
const LINE_MAX: u64 = 128;

pub fn parse(line: &str) -> Result<Request, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["adopt", job, pid] => {
            let job = job
                .parse::<u64>()
                .ok()
                .filter(|&j| j > 0)
                .ok_or_else(|| format!("bad job id {job:?}"))?;
            let pid = pid
                .parse::<i32>()
                .ok()
                .filter(|&p| p > 1)
                .ok_or_else(|| format!("bad pid {pid:?}"))?;
            Ok(Request { job, pid })
        }
        _ => Err("expected: adopt <job> <pid>".into()),
    }
}

/// Bind the socket (replacing a stale one) and serve it until the agent ends.
pub fn serve(path: &Path, to_agent: mpsc::UnboundedSender<Adoption>) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let to_agent = to_agent.clone();
            tokio::spawn(async move {
                if let Err(e) = answer(stream, to_agent).await {
                    tracing::debug!("adoption request: {e}");
                }
            });
        }
    });
    Ok(())
}

async fn answer(
    stream: UnixStream,
    to_agent: mpsc::UnboundedSender<Adoption>,
) -> std::io::Result<()> {
    let uid = stream.peer_cred()?.uid();
    let (rd, mut wr) = stream.into_split();
    let result = if uid != 0 {
        Err(format!(
            "only root may hand processes to the agent (uid {uid})"
        ))
    } else {
        let mut line = String::new();
        let mut rd = BufReader::new(rd).take(LINE_MAX);
        match timeout(READ_WITHIN, rd.read_line(&mut line)).await {
            Err(_) => Err("no request within 5 s".into()),
            Ok(Err(e)) => Err(format!("cannot read the request: {e}")),
            Ok(Ok(_)) => match parse(&line) {
                Err(e) => Err(e),
                Ok(request) => {
                    let (reply, answer) = oneshot::channel();
                    if to_agent.send(Adoption { request, reply }).is_err() {
                        Err("the agent is stopping".into())
                    } else {
                        answer
                            .await
                            .unwrap_or_else(|_| Err("the agent is stopping".into()))
                    }
                }
            },
        }
    };
    let text = match result {
        Ok(dir) => format!("ok {dir}\n"),
        Err(why) => format!("error {}\n", why.replace('\n', " ")),
    };
    wr.write_all(text.as_bytes()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_say_why() {
        assert_eq!(parse("adopt 12 3456\n"), Ok(Request { job: 12, pid: 3456 }));
        assert!(parse("adopt 0 3456").unwrap_err().contains("bad job id"));
        assert!(parse("adopt 12 1").unwrap_err().contains("bad pid"));
        assert!(parse("adopt 12 -5").unwrap_err().contains("bad pid"));
        assert!(parse("adopt x 5").unwrap_err().contains("bad job id"));
        assert!(parse("kill 12 5").unwrap_err().contains("expected"));
        assert!(parse("").unwrap_err().contains("expected"));
    }
}
