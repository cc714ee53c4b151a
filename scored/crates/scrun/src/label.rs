//! `--label`: every output line is prefixed with its rank (`3: text`), and a
//! line is written only once it is whole, so lines of different ranks never
//! mix.  Partial lines wait per (rank, stream); [`Labeller::finish`] writes
//! what is left when the job ends.

use std::collections::BTreeMap;

/// A line longer than this is written in pieces, each piece on a line of its own.
pub const MAX_LINE: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug)]
pub struct Labeller {
    width: usize,
    max_line: usize,
    partial: BTreeMap<(u32, Stream), Vec<u8>>,
}

impl Labeller {
    /// `ranks`: the job's number of ranks, so that labels line up (` 3: `
    /// when there are 10 or more ranks).
    pub fn new(ranks: u64) -> Self {
        Self::with_max_line(ranks, MAX_LINE)
    }

    pub fn with_max_line(ranks: u64, max_line: usize) -> Self {
        let width = ranks.saturating_sub(1).max(1).to_string().len();
        Self {
            width,
            max_line: max_line.max(1),
            partial: BTreeMap::new(),
        }
    }

    fn prefix(&self, rank: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("{rank:>w$}: ", w = self.width).as_bytes());
    }

    /// Takes a chunk of `rank`'s `stream`; returns the whole lines it
    /// completes, labelled, ready to write.
    pub fn feed(&mut self, rank: u32, stream: Stream, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = self.partial.remove(&(rank, stream)).unwrap_or_default();
        let mut rest = data;
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.prefix(rank, &mut out);
                    out.extend_from_slice(&buf);
                    out.extend_from_slice(&rest[..=i]);
                    buf.clear();
                    rest = &rest[i + 1..];
                }
                None => {
                    buf.extend_from_slice(rest);
                    rest = &[];
                }
            }
        }
        while buf.len() >= self.max_line {
            self.prefix(rank, &mut out);
            out.extend_from_slice(&buf[..self.max_line]);
            out.push(b'\n');
            buf.drain(..self.max_line);
        }
        if !buf.is_empty() {
            self.partial.insert((rank, stream), buf);
        }
        out
    }

    /// The unfinished lines left of `stream`, labelled and ended with a
    /// newline, in rank order.
    pub fn finish(&mut self, stream: Stream) -> Vec<u8> {
        let mut out = Vec::new();
        let keys: Vec<_> = self
            .partial
            .keys()
            .filter(|k| k.1 == stream)
            .copied()
            .collect();
        for key in keys {
            let buf = self.partial.remove(&key).unwrap_or_default();
            self.prefix(key.0, &mut out);
            out.extend_from_slice(&buf);
            out.push(b'\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Stream::*;

    fn s(v: Vec<u8>) -> String {
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn whole_lines_are_labelled() {
        let mut l = Labeller::new(4);
        assert_eq!(s(l.feed(0, Stdout, b"a\nb\n")), "0: a\n0: b\n");
        assert_eq!(s(l.feed(3, Stderr, b"x\n")), "3: x\n");
        assert_eq!(s(l.finish(Stdout)), "");
    }

    #[test]
    fn partial_lines_wait_per_rank_and_stream() {
        let mut l = Labeller::new(2);
        assert_eq!(s(l.feed(0, Stdout, b"hel")), "");
        assert_eq!(s(l.feed(1, Stdout, b"wor")), "");
        assert_eq!(s(l.feed(0, Stderr, b"err")), "");
        assert_eq!(s(l.feed(1, Stdout, b"ld\nnext")), "1: world\n");
        assert_eq!(s(l.feed(0, Stdout, b"lo\n")), "0: hello\n");
        assert_eq!(s(l.finish(Stdout)), "1: next\n");
        assert_eq!(s(l.finish(Stderr)), "0: err\n");
        assert_eq!(s(l.finish(Stderr)), "");
    }

    #[test]
    fn labels_line_up() {
        let mut l = Labeller::new(12);
        assert_eq!(s(l.feed(3, Stdout, b"x\n")), " 3: x\n");
        assert_eq!(s(l.feed(11, Stdout, b"y\n")), "11: y\n");
        let mut one = Labeller::new(1);
        assert_eq!(s(one.feed(0, Stdout, b"z\n")), "0: z\n");
    }

    #[test]
    fn empty_lines_and_chunks() {
        let mut l = Labeller::new(1);
        assert_eq!(s(l.feed(0, Stdout, b"")), "");
        assert_eq!(s(l.feed(0, Stdout, b"\n\n")), "0: \n0: \n");
    }

    #[test]
    fn overlong_lines_are_broken() {
        let mut l = Labeller::with_max_line(1, 4);
        assert_eq!(s(l.feed(0, Stdout, b"abcdefghij")), "0: abcd\n0: efgh\n");
        assert_eq!(s(l.feed(0, Stdout, b"k\n")), "0: ijk\n");
    }
}
