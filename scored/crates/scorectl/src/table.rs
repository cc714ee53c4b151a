//! Human output: aligned tables (like squeue and sinfo), durations and
//! dates.

use crate::json::{job_finished, job_state, node_state};
use score_proto::v1::{JobInfo, MatrixReply, NodeInfo, RankExit};
use std::fmt::Write as _;

/// Columns separated by two spaces, each as wide as its widest cell; the
/// last column is not padded.  Columns named in `right` are right-aligned.
pub fn render(header: &[&str], right: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, cell) in cells.enumerate() {
            let last = i + 1 == header.len();
            let pad = width[i].saturating_sub(cell.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if right.contains(&header[i]) {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                if !last {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

pub fn nodes_table(nodes: &[NodeInfo]) -> String {
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let jobs: Vec<String> = n.jobs.iter().map(u64::to_string).collect();
            vec![
                n.name.clone(),
                node_state(n.state).to_string(),
                n.slots.to_string(),
                or_dash(&jobs.join(",")),
                n.reason.clone(),
            ]
        })
        .collect();
    render(
        &["NODE", "STATE", "SLOTS", "JOBS", "REASON"],
        &["SLOTS"],
        &rows,
    )
}

/// NxP as asked for.
pub fn shape(j: &JobInfo) -> String {
    match &j.spec {
        Some(s) => format!("{}x{}", s.nodes, s.ppn),
        None => "-".into(),
    }
}

/// The time the job has run: until now, or until it ended.
pub fn elapsed_ms(j: &JobInfo, now_ms: u64) -> u64 {
    if j.start_time_ms == 0 {
        return 0;
    }
    let end = if j.end_time_ms != 0 {
        j.end_time_ms
    } else if job_finished(j.state) {
        j.start_time_ms
    } else {
        now_ms
    };
    end.saturating_sub(j.start_time_ms)
}

pub fn jobs_table(jobs: &[JobInfo], now_ms: u64) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.to_string(),
                or_dash(&j.name),
                or_dash(&j.user),
                if j.frozen && !job_finished(j.state) {
                    "frozen".to_string()
                } else {
                    job_state(j.state).to_string()
                },
                shape(j),
                duration(elapsed_ms(j, now_ms)),
                or_dash(&j.nodes.join(",")),
                j.reason.clone(),
            ]
        })
        .collect();
    render(
        &[
            "JOBID", "NAME", "USER", "STATE", "NODES", "ELAPSED", "NODELIST", "REASON",
        ],
        &["JOBID", "ELAPSED"],
        &rows,
    )
}

/// The gang-scheduling matrix: one line per time slot, one column per node,
/// the active slot marked, then the switch statistics.
pub fn matrix_table(m: &MatrixReply) -> String {
    let mut header: Vec<&str> = vec!["SLOT"];
    header.extend(m.nodes.iter().map(String::as_str));
    let rows: Vec<Vec<String>> = m
        .rows
        .iter()
        .map(|r| {
            let mark = if r.slot == m.current { "*" } else { " " };
            let mut row = vec![format!("{mark}{}", r.slot)];
            row.extend(r.cells.iter().map(|c| {
                if c.job == 0 {
                    "-".to_string()
                } else {
                    c.job.to_string()
                }
            }));
            row
        })
        .collect();
    let st = m.stats.unwrap_or_default();
    let running: Vec<String> = m.running.iter().map(u64::to_string).collect();
    let ms = |s: f64| format!("{:.1} ms", s * 1e3);
    let mut out = format!(
        "time sharing: quantum {} ms, {} preemption; * marks the active slot\n",
        m.quantum_ms, m.preemption
    );
    if rows.is_empty() {
        out.push_str("(no job placed)\n");
    } else {
        out.push_str(&render(&header, &header, &rows));
    }
    out.push_str(&format!("running now: {}\n", or_dash(&running.join(","))));
    out.push_str(&format!(
        "switches: {}; last {}, median {}, p99 {}; quiesce median {}; frozen without answering: {} ({} with PM)\n",
        st.switches,
        ms(st.last_s),
        ms(st.median_s),
        ms(st.p99_s),
        ms(st.quiesce_median_s),
        st.unanswered,
        st.silent
    ));
    out
}

/// `M:SS`, `H:MM:SS` or `D-HH:MM:SS`, as squeue prints times.
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// Local time `YYYY-MM-DDTHH:MM:SS` (as Slurm prints it); "-" for 0.
pub fn date(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let t = (ms / 1000) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`; an all-zero tm is valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return format!("@{}", ms / 1000);
    }
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

fn describe_exit(e: &RankExit) -> String {
    if e.signal != 0 {
        format!(
            "rank {} on {}: killed by signal {}",
            e.rank, e.node, e.signal
        )
    } else {
        format!("rank {} on {}: exit {}", e.rank, e.node, e.code)
    }
}

/// `scorectl show JOB`: one `key: value` line per field.
pub fn show_job(j: &JobInfo, now_ms: u64) -> String {
    let mut kv: Vec<(&str, String)> = vec![
        ("job", j.id.to_string()),
        ("name", or_dash(&j.name)),
        (
            "user",
            format!("{} (uid {}, gid {})", or_dash(&j.user), j.uid, j.gid),
        ),
        ("state", job_state(j.state).to_string()),
    ];
    if !j.reason.is_empty() {
        kv.push(("reason", j.reason.clone()));
    }
    let spec = j.spec.clone().unwrap_or_default();
    let count = |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    kv.push((
        "nodes",
        format!(
            "{} ({}, {} each)",
            shape(j),
            count(spec.nodes, "node", "nodes"),
            count(spec.ppn, "process", "processes")
        ),
    ));
    kv.push(("allocation", or_dash(&j.nodes.join(","))));
    kv.push(("command", shell_words(&spec.argv)));
    kv.push(("directory", or_dash(&spec.cwd)));
    kv.push((
        "time limit",
        if spec.time_limit_ms == 0 {
            "none".into()
        } else {
            duration(spec.time_limit_ms)
        },
    ));
    kv.push(("submitted", date(j.submit_time_ms)));
    kv.push(("started", date(j.start_time_ms)));
    kv.push(("ended", date(j.end_time_ms)));
    kv.push(("elapsed", duration(elapsed_ms(j, now_ms))));
    if job_finished(j.state) {
        kv.push(("exit status", j.exit_status.to_string()));
    }
    for e in &j.exits {
        kv.push(("exit", describe_exit(e)));
    }
    // One width whatever lines there are: "exit status:" is the longest key.
    let mut out = String::new();
    for (k, v) in kv {
        let _ = writeln!(out, "{:<12} {v}", format!("{k}:"));
    }
    out
}

/// argv as one would type it: words with spaces or quotes are quoted.
pub fn shell_words(argv: &[String]) -> String {
    if argv.is_empty() {
        return "-".into();
    }
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use score_proto::v1::{JobSpec, JobState, NodeState};

    #[test]
    fn tables_align() {
        let t = render(
            &["A", "LONGER", "N", "LAST"],
            &["N"],
            &[
                vec!["x".into(), "y".into(), "10".into(), "".into()],
                vec!["wide".into(), "".into(), "2".into(), "z z".into()],
            ],
        );
        assert_eq!(
            t,
            "A     LONGER   N  LAST\nx     y       10\nwide           2  z z\n"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(duration(0), "0:00");
        assert_eq!(duration(61_999), "1:01");
        assert_eq!(duration(3_600_000), "1:00:00");
        assert_eq!(duration(90_061_000), "1-01:01:01");
    }

    #[test]
    fn nodes_and_jobs_tables() {
        let n = |name: &str, st: NodeState, jobs: Vec<u64>, reason: &str| NodeInfo {
            name: name.into(),
            state: st as i32,
            slots: 4,
            jobs,
            reason: reason.into(),
            ..Default::default()
        };
        let t = nodes_table(&[
            n("n1", NodeState::Up, vec![12, 13], ""),
            n("n10", NodeState::Drained, vec![], "bad disk"),
        ]);
        assert_eq!(
            t,
            "NODE  STATE    SLOTS  JOBS   REASON\n\
             n1    up           4  12,13\n\
             n10   drained      4  -      bad disk\n"
        );
        let j = JobInfo {
            id: 12,
            name: "prog".into(),
            user: "alice".into(),
            state: JobState::Running as i32,
            spec: Some(JobSpec {
                nodes: 2,
                ppn: 4,
                ..Default::default()
            }),
            nodes: vec!["n1".into(), "n2".into()],
            start_time_ms: 1_000,
            ..Default::default()
        };
        let p = JobInfo {
            id: 13,
            state: JobState::Pending as i32,
            reason: "waiting for 4 nodes".into(),
            spec: Some(JobSpec {
                nodes: 4,
                ppn: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            jobs_table(&[j, p], 62_000),
            "JOBID  NAME  USER   STATE    NODES  ELAPSED  NODELIST  REASON\n   \
             12  prog  alice  running  2x4       1:01  n1,n2\n   \
             13  -     -      pending  4x1       0:00  -         waiting for 4 nodes\n"
        );
    }

    #[test]
    fn finished_jobs_stop_their_clock() {
        let mut j = JobInfo {
            state: JobState::Completed as i32,
            start_time_ms: 1_000,
            end_time_ms: 11_000,
            ..Default::default()
        };
        assert_eq!(elapsed_ms(&j, 99_000), 10_000);
        j.end_time_ms = 0;
        assert_eq!(elapsed_ms(&j, 99_000), 0);
        j.state = JobState::Running as i32;
        assert_eq!(elapsed_ms(&j, 99_000), 98_000);
        j.start_time_ms = 0;
        assert_eq!(elapsed_ms(&j, 99_000), 0);
    }

    #[test]
    fn show_job_lines() {
        let j = JobInfo {
            id: 7,
            user: "bob".into(),
            uid: 1001,
            gid: 1001,
            state: JobState::Failed as i32,
            reason: "rank 1 on n2 killed by signal 9".into(),
            exit_status: 137,
            spec: Some(JobSpec {
                nodes: 2,
                ppn: 1,
                argv: vec!["./a.out".into(), "two words".into()],
                ..Default::default()
            }),
            exits: vec![RankExit {
                rank: 1,
                node: "n2".into(),
                code: 0,
                signal: 9,
            }],
            ..Default::default()
        };
        let s = show_job(&j, 0);
        assert!(s.starts_with("job:         7\n"), "{s}");
        assert!(
            s.contains("\nuser:        bob (uid 1001, gid 1001)\n"),
            "{s}"
        );
        assert!(s.contains("\ncommand:     ./a.out 'two words'\n"), "{s}");
        assert!(s.contains("\ntime limit:  none\n"), "{s}");
        assert!(s.contains("\nexit status: 137\n"), "{s}");
        assert!(
            s.contains("\nexit:        rank 1 on n2: killed by signal 9\n"),
            "{s}"
        );
    }

    #[test]
    fn words_are_quoted_when_needed() {
        let w = |v: &[&str]| shell_words(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(w(&["a", "b c", "", "it's"]), "a 'b c' '' 'it'\\''s'");
    }
}
