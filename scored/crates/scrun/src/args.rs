//! The pure parts of scrun's command line: SCore's `-nodes=` form, node
//! shapes (`4x2`), time limits and `--env` values.

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

/// Rewrites SCore's single-dash `-nodes=4x2` (and `-nodes 4x2`) into clap's
/// `--nodes=4x2`, but only among scrun's own options: everything from the
/// program name on belongs to the program and is passed through untouched,
/// so `scrun -nodes=2 ./prog -nodes=9` gives `-nodes=9` to `prog`.
/// `with_value` names scrun's options that take a value as a separate word
/// (`--nodes 4`): the word after them is not the program (main.rs reads
/// them off clap's own description of the command line).
pub fn preprocess_args<I>(args: I, with_value: &[String]) -> Vec<OsString>
where
    I: IntoIterator<Item = OsString>,
{
    let mut it = args.into_iter();
    let mut out: Vec<OsString> = it.next().into_iter().collect(); // argv[0]
    while let Some(arg) = it.next() {
        let Some(s) = arg.to_str() else {
            // Not UTF-8: not one of our options, so it is the program.
            out.push(arg);
            break;
        };
        if s == "--" || !s.starts_with('-') || s == "-" {
            out.push(arg);
            break;
        }
        if let Some(value) = s.strip_prefix("-nodes=") {
            out.push(format!("--nodes={value}").into());
        } else if s == "-nodes" {
            out.push("--nodes".into());
            out.extend(it.next());
        } else if with_value.iter().any(|o| o == s) {
            out.push(arg);
            out.extend(it.next());
        } else {
            out.push(arg);
        }
    }
    out.extend(it);
    out
}

/// `N` or `NxP`: N nodes, P processes on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeShape {
    pub nodes: u32,
    pub ppn: Option<u32>,
}

impl fmt::Display for NodeShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ppn {
            Some(p) => write!(f, "{}x{}", self.nodes, p),
            None => write!(f, "{}", self.nodes),
        }
    }
}

/// Parses `4` or `4x2` (clap value parser for `--nodes`).
pub fn parse_node_shape(s: &str) -> Result<NodeShape, String> {
    let usage = "expected N or NxP, e.g. 4 (4 nodes) or 4x2 (4 nodes, 2 processes each)";
    let (n, p) = match s.split_once(['x', 'X']) {
        Some((n, p)) => (n, Some(p)),
        None => (s, None),
    };
    let count = |what: &str, v: &str| -> Result<u32, String> {
        if v.is_empty() {
            return Err(format!("the {what} count is missing: {usage}"));
        }
        match v.parse::<u32>() {
            Ok(0) => Err(format!("the {what} count must be at least 1")),
            Ok(c) => Ok(c),
            Err(_) if v.bytes().all(|b| b.is_ascii_digit()) => {
                Err(format!("the {what} count is too large"))
            }
            Err(_) => Err(format!("not a node count: {usage}")),
        }
    };
    let nodes = count("node", n)?;
    let ppn = p.map(|p| count("process", p)).transpose()?;
    Ok(NodeShape { nodes, ppn })
}

/// Parses a process count for `--ppn`.
pub fn parse_ppn(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("the process count must be at least 1".into()),
        Ok(p) => Ok(p),
        Err(_) => Err("not a process count (a whole number, at least 1)".to_string()),
    }
}

/// Combines `--nodes` and `--ppn` into (nodes, ppn); both default to 1.
pub fn resolve_shape(shape: Option<NodeShape>, ppn: Option<u32>) -> Result<(u32, u32), String> {
    let nodes = shape.map_or(1, |s| s.nodes);
    match (shape.and_then(|s| s.ppn), ppn) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "--nodes {} asks for {a} processes per node but --ppn asks for {b}",
            shape.unwrap()
        )),
        (Some(a), _) => Ok((nodes, a)),
        (None, Some(b)) => Ok((nodes, b)),
        (None, None) => Ok((nodes, 1)),
    }
}

/// Parses a time limit the way Slurm's `--time` does, plus unit suffixes:
///
/// * `90` — minutes (as in Slurm); `0` means no limit
/// * `90s`, `500ms`, `5m`, `1h`, `2d` — a number with a unit
/// * `1:30` — minutes:seconds; `1:00:00` — hours:minutes:seconds
/// * `2-12`, `2-12:30`, `2-12:30:00` — days-hours[:minutes[:seconds]]
pub fn parse_time_limit(s: &str) -> Result<Duration, String> {
    let bad = || {
        "not a time limit: use minutes (90), a number with a unit \
         (90s, 5m, 1h, 2d), M:SS, H:MM:SS or D-HH:MM:SS"
            .to_string()
    };
    let t = s.trim();
    if t.is_empty() {
        return Err(bad());
    }
    let num = |v: &str| -> Result<u64, String> {
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        v.parse::<u64>().map_err(|_| bad())
    };
    let secs = |n: u64, unit: u64| n.checked_mul(unit).map(Duration::from_secs).ok_or_else(bad);

    // Unit suffixes.
    for (suffix, unit_ms) in [
        ("ms", 1u64),
        ("s", 1000),
        ("m", 60_000),
        ("h", 3_600_000),
        ("d", 86_400_000),
    ] {
        if let Some(n) = t.strip_suffix(suffix) {
            if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() {
                return num(n)?
                    .checked_mul(unit_ms)
                    .map(Duration::from_millis)
                    .ok_or_else(bad);
            }
        }
    }

    // days-rest
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, t),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let parts: Vec<u64> = parts.iter().map(|p| num(p)).collect::<Result<_, _>>()?;
    let total = match (days, parts.as_slice()) {
        (None, [m]) => secs(*m, 60)?,
        (None, [m, s]) => secs(*m, 60)? + secs(*s, 1)?,
        (None, [h, m, s]) | (Some(_), [h, m, s]) => secs(*h, 3600)? + secs(*m, 60)? + secs(*s, 1)?,
        (Some(_), [h]) => secs(*h, 3600)?,
        (Some(_), [h, m]) => secs(*h, 3600)? + secs(*m, 60)?,
        _ => return Err(bad()),
    };
    match days {
        Some(d) => secs(d, 86_400)?.checked_add(total).ok_or_else(bad),
        None => Ok(total),
    }
}

/// One `--env` argument: `NAME=VALUE`, or `NAME` to copy scrun's own value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvArg {
    pub name: String,
    pub value: Option<String>,
}

pub fn parse_env_arg(s: &str) -> Result<EnvArg, String> {
    let (name, value) = match s.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (s, None),
    };
    if name.is_empty() {
        return Err(format!(
            "'{s}': the variable name is empty; use NAME=VALUE or NAME"
        ));
    }
    if name.contains('\0') {
        return Err(format!("'{s}': a variable name cannot contain NUL"));
    }
    Ok(EnvArg {
        name: name.to_string(),
        value,
    })
}

/// How the job's MPI programs communicate (`--mpi`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MpiTransport {
    /// Over PM, through the libfabric provider pm (docs/mpi/guide.md).
    #[default]
    Pm,
    /// With the MPI library's own transports and settings.
    Own,
}

/// The environment that makes MPI traffic go over PM (docs/mpi/guide.md).
/// Open MPI: the cm PML with the ofi MTL restricted to the provider pm (the
/// environment overrides its system-wide parameter file, whose Debian
/// default excludes ofi).  MPICH (ch4): the ofi netmod, libfabric restricted
/// to pm, ranks of one node through it too (PM's shm), and one-sided MPI as
/// active messages (MPICH asks its libfabric's API, 2.5, which the provider
/// implements: no version variables).  Each MPI
/// ignores the other's variables.  Variables the user set win (they are
/// added only where absent: [`add_mpi_env`]).
pub fn mpi_env(transport: MpiTransport) -> &'static [(&'static str, &'static str)] {
    match transport {
        MpiTransport::Pm => &[
            ("OMPI_MCA_pml", "cm"),
            ("OMPI_MCA_mtl", "ofi"),
            ("OMPI_MCA_mtl_ofi_provider_include", "pm"),
            ("FI_PROVIDER", "pm"),
            ("MPIR_CVAR_CH4_NETMOD", "ofi"),
            ("MPIR_CVAR_NOLOCAL", "1"),
            ("MPIR_CVAR_CH4_OFI_ENABLE_RMA", "0"),
            ("MPIR_CVAR_CH4_OFI_ENABLE_ATOMICS", "0"),
        ],
        MpiTransport::Own => &[],
    }
}

/// Adds [`mpi_env`] to the job's environment `env` where absent.
/// `FI_PROVIDER` (which MPICH needs, having no other way to name a
/// provider) would also restrict Open MPI's libfabric: a job that names
/// Open MPI's provider itself does not get it, so that its choice works.
pub fn add_mpi_env(transport: MpiTransport, env: &mut std::collections::HashMap<String, String>) {
    let own_provider = env.contains_key("OMPI_MCA_mtl_ofi_provider_include");
    for (k, v) in mpi_env(transport) {
        if *k == "FI_PROVIDER" && own_provider {
            continue;
        }
        env.entry((*k).to_string())
            .or_insert_with(|| (*v).to_string());
    }
}

/// Resolves `--env NAME` against `lookup` (scrun's environment).
pub fn resolve_env_args(
    args: &[EnvArg],
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, String> {
    args.iter()
        .map(|a| match &a.value {
            Some(v) => Ok((a.name.clone(), v.clone())),
            None => lookup(&a.name).map(|v| (a.name.clone(), v)).ok_or_else(|| {
                format!(
                    "--env {0}: {0} is not set in scrun's environment (use --env {0}=VALUE)",
                    a.name
                )
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mpi_over_pm_is_the_default_and_own_adds_nothing() {
        assert_eq!(MpiTransport::default(), MpiTransport::Pm);
        let pm: std::collections::HashMap<_, _> =
            mpi_env(MpiTransport::Pm).iter().copied().collect();
        assert_eq!(pm.get("OMPI_MCA_pml"), Some(&"cm"));
        assert_eq!(pm.get("OMPI_MCA_mtl"), Some(&"ofi"));
        assert_eq!(pm.get("OMPI_MCA_mtl_ofi_provider_include"), Some(&"pm"));
        assert_eq!(pm.get("FI_PROVIDER"), Some(&"pm"));
        assert_eq!(pm.get("MPIR_CVAR_CH4_NETMOD"), Some(&"ofi"));
        assert!(mpi_env(MpiTransport::Own).is_empty());
    }

    #[test]
    fn the_users_variables_and_provider_choice_win() {
        let mut env = std::collections::HashMap::from([
            ("OMPI_MCA_pml".to_string(), "ob1".to_string()),
            (
                "OMPI_MCA_mtl_ofi_provider_include".to_string(),
                "tcp".to_string(),
            ),
        ]);
        add_mpi_env(MpiTransport::Pm, &mut env);
        assert_eq!(env["OMPI_MCA_pml"], "ob1");
        assert_eq!(env["OMPI_MCA_mtl_ofi_provider_include"], "tcp");
        assert!(!env.contains_key("FI_PROVIDER"), "{env:?}");
        assert_eq!(env["MPIR_CVAR_CH4_NETMOD"], "ofi");
        let mut env = std::collections::HashMap::new();
        add_mpi_env(MpiTransport::Pm, &mut env);
        assert_eq!(env["FI_PROVIDER"], "pm");
    }

    fn pre(args: &[&str]) -> Vec<String> {
        let with_value: Vec<String> = ["-N", "--nodes", "--name", "--time", "--mpi"]
            .map(String::from)
            .to_vec();
        preprocess_args(args.iter().map(OsString::from), &with_value)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn score_nodes_form_is_rewritten_before_the_program_only() {
        assert_eq!(
            pre(&["scrun", "-nodes=4x2", "./prog", "a", "-nodes=9"]),
            ["scrun", "--nodes=4x2", "./prog", "a", "-nodes=9"]
        );
        assert_eq!(
            pre(&["scrun", "-nodes", "4", "./prog"]),
            ["scrun", "--nodes", "4", "./prog"]
        );
        assert_eq!(
            pre(&["scrun", "-nodes=2", "./prog", "--nodes", "9"]),
            ["scrun", "--nodes=2", "./prog", "--nodes", "9"]
        );
    }

    #[test]
    fn option_values_are_not_taken_for_the_program() {
        assert_eq!(
            pre(&["scrun", "--name", "x", "-nodes=3", "prog", "-nodes=1"]),
            ["scrun", "--name", "x", "--nodes=3", "prog", "-nodes=1"]
        );
        assert_eq!(
            pre(&["scrun", "-v", "--time", "5m", "-nodes=2x1", "p"]),
            ["scrun", "-v", "--time", "5m", "--nodes=2x1", "p"]
        );
        // After "--" everything is the program's.
        assert_eq!(
            pre(&["scrun", "--", "-nodes=3"]),
            ["scrun", "--", "-nodes=3"]
        );
        assert_eq!(pre(&["scrun"]), ["scrun"]);
    }

    #[test]
    fn node_shapes() {
        assert_eq!(
            parse_node_shape("4x2").unwrap(),
            NodeShape {
                nodes: 4,
                ppn: Some(2)
            }
        );
        assert_eq!(
            parse_node_shape("4").unwrap(),
            NodeShape {
                nodes: 4,
                ppn: None
            }
        );
        assert_eq!(parse_node_shape("16X8").unwrap().ppn, Some(8));
    }

    #[test]
    fn invalid_node_shapes_say_why() {
        let e = parse_node_shape("0x2").unwrap_err();
        assert!(e.contains("node count must be at least 1"), "{e}");
        let e = parse_node_shape("4x").unwrap_err();
        assert!(e.contains("process count is missing"), "{e}");
        let e = parse_node_shape("4x0").unwrap_err();
        assert!(e.contains("process count must be at least 1"), "{e}");
        let e = parse_node_shape("abc").unwrap_err();
        assert!(e.contains("not a node count") && e.contains("4x2"), "{e}");
        let e = parse_node_shape("x2").unwrap_err();
        assert!(e.contains("node count is missing"), "{e}");
        let e = parse_node_shape("99999999999").unwrap_err();
        assert!(e.contains("too large"), "{e}");
        for bad in ["-4", "4x2x1"] {
            let e = parse_node_shape(bad).unwrap_err();
            assert!(e.contains("expected N or NxP"), "{bad}: {e}");
        }
    }

    #[test]
    fn shape_and_ppn_combine() {
        let s = |n, p| Some(NodeShape { nodes: n, ppn: p });
        assert_eq!(resolve_shape(None, None), Ok((1, 1)));
        assert_eq!(resolve_shape(s(4, None), None), Ok((4, 1)));
        assert_eq!(resolve_shape(s(4, None), Some(2)), Ok((4, 2)));
        assert_eq!(resolve_shape(s(4, Some(2)), None), Ok((4, 2)));
        assert_eq!(resolve_shape(s(4, Some(2)), Some(2)), Ok((4, 2)));
        let e = resolve_shape(s(4, Some(2)), Some(3)).unwrap_err();
        assert!(
            e.contains("--nodes 4x2") && e.contains("--ppn asks for 3"),
            "{e}"
        );
        assert_eq!(
            parse_ppn("0"),
            Err("the process count must be at least 1".into())
        );
        assert_eq!(parse_ppn("8"), Ok(8));
    }

    #[test]
    fn time_limits() {
        let d = Duration::from_secs;
        assert_eq!(parse_time_limit("90"), Ok(d(90 * 60)));
        assert_eq!(parse_time_limit("0"), Ok(d(0)));
        assert_eq!(parse_time_limit("90s"), Ok(d(90)));
        assert_eq!(parse_time_limit("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_time_limit("5m"), Ok(d(300)));
        assert_eq!(parse_time_limit("1h"), Ok(d(3600)));
        assert_eq!(parse_time_limit("2d"), Ok(d(2 * 86400)));
        assert_eq!(parse_time_limit("1:30"), Ok(d(90)));
        assert_eq!(parse_time_limit("1:00:00"), Ok(d(3600)));
        assert_eq!(parse_time_limit("1:02:03"), Ok(d(3723)));
        assert_eq!(parse_time_limit("2-12"), Ok(d(2 * 86400 + 12 * 3600)));
        assert_eq!(parse_time_limit("1-0:30"), Ok(d(86400 + 1800)));
        assert_eq!(parse_time_limit("1-00:00:10"), Ok(d(86410)));
    }

    #[test]
    fn invalid_time_limits() {
        for s in [
            "",
            "abc",
            "1:2:3:4",
            "-5",
            "5x",
            "1.5h",
            "m",
            ":30",
            "1:",
            "99999999999999999999d",
        ] {
            let e = parse_time_limit(s).unwrap_err();
            assert!(e.contains("not a time limit"), "{s}: {e}");
        }
    }

    #[test]
    fn env_args() {
        assert_eq!(
            parse_env_arg("A=b=c").unwrap(),
            EnvArg {
                name: "A".into(),
                value: Some("b=c".into())
            }
        );
        assert_eq!(parse_env_arg("A=").unwrap().value, Some(String::new()));
        assert_eq!(parse_env_arg("HOME").unwrap().value, None);
        let e = parse_env_arg("=x").unwrap_err();
        assert!(e.contains("the variable name is empty"), "{e}");

        let args = [
            parse_env_arg("X=1").unwrap(),
            parse_env_arg("HOME").unwrap(),
        ];
        let got = resolve_env_args(&args, |n| (n == "HOME").then(|| "/h".to_string())).unwrap();
        assert_eq!(
            got,
            [("X".into(), "1".into()), ("HOME".into(), "/h".into())]
        );
        let e = resolve_env_args(&[parse_env_arg("NOPE").unwrap()], |_| None).unwrap_err();
        assert!(e.contains("NOPE is not set"), "{e}");
    }
}
