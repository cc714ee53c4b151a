//! One PMI-1 line: `cmd=NAME key=value key=value ...`.

use thiserror::Error;

/// A parsed request: its command and its attributes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub cmd: String,
    pub attrs: Vec<(String, Option<String>)>,
}

impl Request {
    /// The value of attribute `key`, if given with one.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// Why a line is not a PMI-1 request.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    #[error("a request starts with cmd= (PMI-1; PMI-2 and PMIx are not spoken here)")]
    NoCmd,
    #[error("a key holds letters, digits, '_', '-' and '/' only (byte {0})")]
    BadKey(usize),
    #[error("key {0} has '=' and no value")]
    NoValue(String),
    #[error("the request is not UTF-8")]
    NotUtf8,
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'/')
}

/// Parses one line (without or with its `\n`), as MPICH's own parser does:
/// tokens separated by spaces, a value runs to the next unescaped space.
pub fn parse(line: &[u8]) -> Result<Request, ParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    if !line.starts_with(b"cmd=") {
        return Err(ParseError::NoCmd);
    }
    let mut cmd = None;
    let mut attrs = Vec::new();
    let mut i = 0;
    while i < line.len() {
        if line[i] == b' ' {
            i += 1;
            continue;
        }
        let start = i;
        while i < line.len() && is_key_byte(line[i]) {
            i += 1;
        }
        if i == start || (i < line.len() && line[i] != b'=' && line[i] != b' ') {
            return Err(ParseError::BadKey(i));
        }
        let key = String::from_utf8(line[start..i].to_vec()).map_err(|_| ParseError::NotUtf8)?;
        let mut value = None;
        if i < line.len() && line[i] == b'=' {
            i += 1;
            let mut v = Vec::new();
            while i < line.len() && line[i] != b' ' {
                if line[i] == b'\\' && i + 1 < line.len() {
                    i += 1;
                }
                v.push(line[i]);
                i += 1;
            }
            if v.is_empty() {
                return Err(ParseError::NoValue(key));
            }
            value = Some(String::from_utf8(v).map_err(|_| ParseError::NotUtf8)?);
        }
        if key == "cmd" && cmd.is_none() {
            cmd = value;
        } else {
            attrs.push((key, value));
        }
    }
    let cmd = cmd.ok_or(ParseError::NoCmd)?;
    Ok(Request { cmd, attrs })
}

/// `v` as a value on the wire: spaces and backslashes escaped (MPICH's
/// client unescapes them), newlines, which end a line, as spaces.
pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            ' ' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            '\n' => s.push_str("\\ "),
            _ => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_its_command_and_attributes_in_order() {
        let r = parse(b"cmd=put kvsname=score.7 key=bc-0 value=a\\ b=c\n").unwrap();
        assert_eq!(r.cmd, "put");
        assert_eq!(r.get("kvsname"), Some("score.7"));
        assert_eq!(r.get("key"), Some("bc-0"));
        assert_eq!(r.get("value"), Some("a b=c"));
        let r = parse(b"cmd=barrier_in").unwrap();
        assert_eq!((r.cmd.as_str(), r.attrs.len()), ("barrier_in", 0));
    }

    #[test]
    fn malformed_lines_are_refused_with_a_reason() {
        assert_eq!(parse(b"init pmi_version=1"), Err(ParseError::NoCmd));
        assert_eq!(
            parse(b"000032cmd=init;pmi_version=2;"),
            Err(ParseError::NoCmd)
        );
        assert!(matches!(
            parse(b"cmd=put ke!y=1"),
            Err(ParseError::BadKey(_))
        ));
        assert_eq!(
            parse(b"cmd=put key= value=1"),
            Err(ParseError::NoValue("key".into()))
        );
        assert_eq!(parse(b"cmd=put value=\xff"), Err(ParseError::NotUtf8));
    }

    #[test]
    fn escaping_round_trips_through_the_parser() {
        let v = "a b\\c";
        let line = format!("cmd=get_result value={}", escape(v));
        assert_eq!(parse(line.as_bytes()).unwrap().get("value"), Some(v));
    }
}
