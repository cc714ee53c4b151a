//! Reading the PM statistics pages (docs/pm/stats.md) of the processes of
//! this node's jobs.  /dev/shm may be shared with other nodes (the virtual
//! cluster) or other launchers, so only pages whose pid is in one of our job
//! cgroups count.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The page's layout, generated from `pm/src/stats.h` by build.rs: all of
/// it, whether the agent reads every field or not.
#[allow(dead_code)]
pub mod layout {
    include!(concat!(env!("OUT_DIR"), "/pmstats_layout.rs"));
}
use layout::{COUNTERS, MAGIC};

/// Number of PM counters in a page.
pub const NCOUNTERS: usize = COUNTERS.len();

/// The counters a layer above PM (libpmdsm, ...) published in a context's
/// page with `pm_stats_layer()` (docs/pm/stats.md, the layer area).
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// 1 to 15 of `[a-z0-9_]`.
    pub name: String,
    /// (name, value) in page order; each name 1 to 31 of `[a-z0-9_]`,
    /// distinct.
    pub counters: Vec<(String, u64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PmContext {
    pub pid: i32,
    pub rank: i32,
    pub job_name: String,
    pub device: String,
    /// In the order of `layout::COUNTERS`.
    pub counters: [u64; NCOUNTERS],
    /// None without one, and in pages of version 2.
    pub layer: Option<Layer>,
}

impl PmContext {
    /// A counter by its name in `struct pm_stats`.
    pub fn counter(&self, name: &str) -> Option<u64> {
        COUNTERS
            .iter()
            .position(|(n, _)| *n == name)
            .map(|i| self.counters[i])
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn cstr_at(b: &[u8], at: usize, len: usize) -> String {
    let field = &b[at..at + len];
    let end = field.iter().position(|&c| c == 0).unwrap_or(len);
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A name of the layer area: 1 to `len - 1` of `[a-z0-9_]` followed by a
/// NUL, as `pm_stats_layer()` writes it; None for anything else (the page
/// is its owner's to write, and names become metric names).
fn name_at(b: &[u8], at: usize, len: usize) -> Option<String> {
    let field = &b[at..at + len];
    let end = field.iter().position(|&c| c == 0)?;
    let name = &field[..end];
    (!name.is_empty()
        && name
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_'))
    .then(|| String::from_utf8_lossy(name).into_owned())
}

/// The layer area of a page of version 3 (`page` is long enough).
fn parse_layer(page: &[u8]) -> Option<Layer> {
    let count = u32_at(page, layout::LAYER_COUNT_AT) as usize;
    if count == 0 || count > layout::LAYER_MAX {
        return None;
    }
    let name = name_at(page, layout::LAYER_NAME_AT, layout::LAYER_NAME_LEN)?;
    let mut counters: Vec<(String, u64)> = Vec::with_capacity(count);
    for i in 0..count {
        let at = layout::LAYER_NAMES_AT + i * layout::LAYER_COUNTER_NAME_LEN;
        let Some(counter) = name_at(page, at, layout::LAYER_COUNTER_NAME_LEN) else {
            continue;
        };
        if counters.iter().any(|(n, _)| *n == counter) {
            continue;
        }
        counters.push((counter, u64_at(page, layout::LAYER_VALUES_AT + 8 * i)));
    }
    Some(Layer { name, counters })
}

/// Parses one page; None if it is not a page of a version the agent reads
/// (`VERSION_MIN` to `VERSION`, of its version's size).  A page of version
/// 2 is version 3 without the layer area (docs/pm/stats.md).
pub fn parse(page: &[u8]) -> Option<PmContext> {
    if page.len() < layout::V2_PAGE_BYTES || &page[0..8] != MAGIC {
        return None;
    }
    let version = u32_at(page, layout::VERSION_AT);
    if !(layout::VERSION_MIN..=layout::VERSION).contains(&version)
        || (version >= 3 && page.len() < layout::PAGE_BYTES)
    {
        return None;
    }
    let mut counters = [0u64; NCOUNTERS];
    for (c, (_, at)) in counters.iter_mut().zip(COUNTERS) {
        *c = u64_at(page, *at);
    }
    Some(PmContext {
        pid: u32_at(page, layout::PID_AT) as i32,
        rank: u32_at(page, layout::RANK_AT) as i32,
        job_name: cstr_at(page, layout::JOB_AT, layout::JOB_LEN),
        device: cstr_at(page, layout::DEVICE_AT, layout::DEVICE_LEN),
        counters,
        layer: if version >= 3 {
            parse_layer(page)
        } else {
            None
        },
    })
}

/// A page the agent may trust for process `pid`: a regular file with one
/// link, owned by the user the process runs as.  /dev/shm is writable by
/// every user, so a name alone proves nothing: a user could plant a link
/// or a file of someone else's under a page's name (opened with O_NOFOLLOW
/// by the callers, so `meta` is the file itself).
pub fn owned_by_process(meta: &std::fs::Metadata, pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(proc_meta) = std::fs::metadata(format!("/proc/{pid}")) else {
        return false;
    };
    meta.file_type().is_file() && meta.nlink() == 1 && meta.uid() == proc_meta.uid()
}

/// Reads a page without following a link, if `pid` owns it.
fn read_page(path: &Path, pid: i32) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    if !owned_by_process(&f.metadata().ok()?, pid) {
        return None;
    }
    let mut buf = Vec::with_capacity(layout::PAGE_BYTES);
    f.by_ref()
        .take(2 * layout::PAGE_BYTES as u64)
        .read_to_end(&mut buf)
        .ok()?;
    Some(buf)
}

/// The statistics pages in `dir` (normally /dev/shm) of processes in
/// `pids`, with the pid each belongs to.
pub fn pages(dir: &Path, pids: &HashSet<i32>) -> Vec<(i32, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let rest = name.to_str()?.strip_prefix("pm-stats.")?;
            let pid = rest.split('.').next()?.parse::<i32>().ok()?;
            pids.contains(&pid).then(|| (pid, e.path()))
        })
        .collect()
}

/// Removes the pages that dead processes left in `dir`: a process killed
/// with its job cannot remove its own, and a page whose process is gone is
/// stale for every reader (docs/pm/stats.md; pminfo does the same).
/// Returns how many.
pub fn remove_dead(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.filter_map(|e| e.ok()) {
        if !e
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("pm-stats."))
        {
            continue;
        }
        let Some(ctx) = std::fs::read(e.path()).ok().as_deref().and_then(parse) else {
            continue;
        };
        // SAFETY: kill(pid, 0) only asks whether the process exists.
        let alive = unsafe { libc::kill(ctx.pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The contexts of processes in `pids`, read from `dir`.
pub fn scan(dir: &Path, pids: &HashSet<i32>) -> Vec<PmContext> {
    pages(dir, pids)
        .into_iter()
        .filter_map(|(pid, path)| read_page(&path, pid).as_deref().and_then(parse))
        .filter(|ctx| pids.contains(&ctx.pid))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A page of process `pid` (job score.42, device udp): msgs_sent =
    /// `sent`, refused_resends = 9, no layer.
    pub(crate) fn page(pid: i32, rank: i32, sent: u64) -> Vec<u8> {
        let mut p = vec![0u8; layout::PAGE_BYTES];
        p[0..8].copy_from_slice(MAGIC);
        p[8..12].copy_from_slice(&layout::VERSION.to_le_bytes());
        p[12..16].copy_from_slice(&(layout::PAGE_BYTES as u32).to_le_bytes());
        p[16..20].copy_from_slice(&pid.to_le_bytes());
        p[20..24].copy_from_slice(&rank.to_le_bytes());
        p[32..40].copy_from_slice(b"score.42");
        p[288..291].copy_from_slice(b"udp");
        let at = layout::COUNTERS_AT;
        p[at..at + 8].copy_from_slice(&sent.to_le_bytes());
        let last = COUNTERS[NCOUNTERS - 1].1;
        p[last..last + 8].copy_from_slice(&9u64.to_le_bytes());
        p
    }

    /// `page(pid, 3, 77)` with the layer area filled: `names` as they are
    /// written (forged ones too), value i = 100 + i.
    pub(crate) fn page_of_layer(pid: i32, layer: &[u8], names: &[&[u8]]) -> Vec<u8> {
        let mut p = page(pid, 3, 77);
        p[layout::LAYER_NAME_AT..layout::LAYER_NAME_AT + layer.len()].copy_from_slice(layer);
        let count = names.len() as u32;
        p[layout::LAYER_COUNT_AT..layout::LAYER_COUNT_AT + 4].copy_from_slice(&count.to_le_bytes());
        for (i, n) in names.iter().enumerate() {
            let at = layout::LAYER_NAMES_AT + i * layout::LAYER_COUNTER_NAME_LEN;
            p[at..at + n.len()].copy_from_slice(n);
            let at = layout::LAYER_VALUES_AT + 8 * i;
            p[at..at + 8].copy_from_slice(&(100 + i as u64).to_le_bytes());
        }
        p
    }

    fn page_with_layer(layer: &[u8], names: &[&[u8]]) -> Vec<u8> {
        page_of_layer(10, layer, names)
    }

    fn counters(layer: &Layer) -> Vec<(&str, u64)> {
        layer
            .counters
            .iter()
            .map(|(n, v)| (n.as_str(), *v))
            .collect()
    }

    #[test]
    fn parses_a_layer() {
        let c = parse(&page_with_layer(
            b"dsm",
            &[b"read_faults", b"fetch_bytes", b"fault_ns"],
        ))
        .unwrap();
        let layer = c.layer.expect("a layer");
        assert_eq!(layer.name, "dsm");
        assert_eq!(
            counters(&layer),
            [
                ("read_faults", 100),
                ("fetch_bytes", 101),
                ("fault_ns", 102)
            ]
        );
        // The most counters, the longest names.
        let long: Vec<Vec<u8>> = (0..layout::LAYER_MAX)
            .map(|i| format!("counter_{i:02}_abcdefghijklmnopqrst").into_bytes())
            .collect();
        assert_eq!(long[0].len(), layout::LAYER_COUNTER_NAME_LEN - 1);
        let names: Vec<&[u8]> = long.iter().map(|n| n.as_slice()).collect();
        let layer = parse(&page_with_layer(b"abcdefghijklmno", &names))
            .unwrap()
            .layer
            .unwrap();
        assert_eq!(layer.name.len(), layout::LAYER_NAME_LEN - 1);
        assert_eq!(layer.counters.len(), layout::LAYER_MAX);
        assert_eq!(layer.counters[31].1, 131);
        // None published: no layer.
        assert_eq!(parse(&page(1, 0, 0)).unwrap().layer, None);
    }

    /// The page is its owner's to write: what pm_stats_layer() would refuse
    /// is not read (names become metric names).
    #[test]
    fn forged_layer_names_are_skipped() {
        let c = parse(&page_with_layer(
            b"dsm",
            &[
                b"ok",
                b"Upper",
                b"new\nline",
                b"",
                b"dash-ed",
                b"ok",
                &[b'x'; 32],
                b"also_ok_1",
            ],
        ))
        .unwrap();
        assert_eq!(
            counters(&c.layer.unwrap()),
            [("ok", 100), ("also_ok_1", 107)]
        );
        for bad in [&b"DSM"[..], b"d sm", b"", &[b'd'; 16]] {
            assert_eq!(parse(&page_with_layer(bad, &[b"a"])).unwrap().layer, None);
        }
        let mut p = page_with_layer(b"dsm", &[b"a"]);
        let at = layout::LAYER_COUNT_AT;
        p[at..at + 4].copy_from_slice(&(layout::LAYER_MAX as u32 + 1).to_le_bytes());
        assert_eq!(parse(&p).unwrap().layer, None, "a count past the area");
    }

    #[test]
    fn reads_pages_of_version_2_without_a_layer() {
        let mut p = page_with_layer(b"dsm", &[b"a"]);
        p[8..12].copy_from_slice(&2u32.to_le_bytes());
        let c = parse(&p).expect("version 2 is read");
        assert_eq!((c.pid, c.counters[0], c.layer), (10, 77, None));
        let c = parse(&p[..layout::V2_PAGE_BYTES]).expect("of version 2's size");
        assert_eq!(c.counter("refused_resends"), Some(9));
        assert!(parse(&p[..layout::V2_PAGE_BYTES - 1]).is_none());
        // Version 3 needs its layer area.
        let p = page(1, 0, 0);
        assert!(parse(&p[..layout::V2_PAGE_BYTES]).is_none());
        assert!(parse(&p[..layout::PAGE_BYTES - 1]).is_none());
        assert!(parse(&p).is_some());
    }

    #[test]
    fn parses_a_page() {
        let c = parse(&page(10, 3, 77)).unwrap();
        assert_eq!((c.pid, c.rank, c.counters[0]), (10, 3, 77));
        assert_eq!(c.counter("msgs_sent"), Some(77));
        assert_eq!(c.counter("refused_resends"), Some(9));
        assert_eq!(c.counter("nonsense"), None);
        assert_eq!(c.job_name, "score.42");
        assert_eq!(c.device, "udp");
    }

    /// The generated layout is the one docs/pm/stats.md documents: a test
    /// that fails when the header and the documentation drift apart.
    #[test]
    fn generated_layout_matches_the_documented_one() {
        assert_eq!(MAGIC, b"PMSTATS1");
        assert_eq!(layout::VERSION, 3);
        assert_eq!(
            (layout::PID_AT, layout::JOB_AT, layout::DEVICE_AT),
            (16, 32, 288)
        );
        assert_eq!((layout::STATE_AT, layout::CONTROL_AT), (312, 316));
        assert_eq!(layout::COUNTERS_AT, 368);
        assert_eq!(NCOUNTERS, 22);
        for (i, (_, at)) in COUNTERS.iter().enumerate() {
            assert_eq!(*at, 368 + 8 * i, "counters are consecutive u64s");
        }
        assert_eq!(layout::NNICS_AT, 368 + 8 * NCOUNTERS);
        assert_eq!(COUNTERS[12].0, "retransmits");
        assert_eq!((layout::VERSION_MIN, layout::V2_PAGE_BYTES), (2, 1000));
        assert_eq!(layout::PAGE_BYTES, 2304);
        // The layer area.
        assert_eq!(layout::LAYER_AT, 1000);
        assert_eq!((layout::LAYER_NAME_AT, layout::LAYER_NAME_LEN), (1000, 16));
        assert_eq!(layout::LAYER_COUNT_AT, 1016);
        assert_eq!(
            (layout::LAYER_NAMES_AT, layout::LAYER_COUNTER_NAME_LEN),
            (1024, 32)
        );
        assert_eq!(layout::LAYER_VALUES_AT, 2048);
        assert_eq!(layout::LAYER_MAX, 32);
        assert_eq!(
            layout::LAYER_VALUES_AT + 8 * layout::LAYER_MAX,
            layout::PAGE_BYTES
        );
    }

    #[test]
    fn rejects_short_or_foreign_pages() {
        assert!(parse(&[0u8; 100]).is_none());
        let mut p = page(1, 0, 0);
        p[0] = b'X';
        assert!(parse(&p).is_none());
        let mut p = page(1, 0, 0);
        p[8] = layout::VERSION as u8 + 1;
        assert!(parse(&p).is_none());
        p[8] = 1;
        assert!(parse(&p).is_none(), "version 1 had other offsets");
        let mut p = page(1, 0, 0);
        p[8..12].copy_from_slice(&2u32.to_le_bytes());
        p[7] = b'2';
        assert!(parse(&p).is_none(), "a wrong magic in version 2 too");
    }

    #[test]
    fn pages_of_dead_processes_are_removed() {
        let dir = std::env::temp_dir().join(format!("score-pmstats-rm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id() as i32;
        // A pid far above pid_max: no such process.
        let dead = 0x3fff_fff0;
        std::fs::write(dir.join(format!("pm-stats.{dead}.0")), page(dead, 0, 1)).unwrap();
        std::fs::write(dir.join(format!("pm-stats.{me}.0")), page(me, 1, 1)).unwrap();
        std::fs::write(dir.join("pm-stats.x.0"), b"not a page").unwrap();
        assert_eq!(remove_dead(&dir), 1);
        assert!(!dir.join(format!("pm-stats.{dead}.0")).exists());
        assert!(dir.join(format!("pm-stats.{me}.0")).exists(), "alive: kept");
        assert!(dir.join("pm-stats.x.0").exists(), "not a page: kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scan_keeps_only_our_pids_and_follows_no_link() {
        let dir = std::env::temp_dir().join(format!("score-pmstats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id() as i32;
        std::fs::write(dir.join("pm-stats.1.0"), page(1, 0, 5)).unwrap();
        std::fs::write(dir.join(format!("pm-stats.{me}.0")), page(me, 1, 6)).unwrap();
        std::fs::write(dir.join("unrelated"), b"x").unwrap();
        // A link planted under a page's name, to a page-like file: not read.
        std::fs::write(dir.join("target"), page(me, 2, 7)).unwrap();
        std::os::unix::fs::symlink(dir.join("target"), dir.join(format!("pm-stats.{me}.1")))
            .unwrap();
        let found = scan(&dir, &HashSet::from([me]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].rank, found[0].counters[0]), (1, 6));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
