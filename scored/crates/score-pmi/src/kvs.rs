//! A node's contribution to a barrier: the pairs its ranks put since the
//! last one.  The master concatenates the nodes' contributions in node
//! order, so the encoding is a plain sequence of records that concatenates:
//! for each pair, the key's length (u32, little-endian), the key, the
//! value's length (u32, little-endian), the value.

use thiserror::Error;

/// Why a fence's data is not a sequence of records.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BlobError {
    #[error("a record is cut short at byte {0}")]
    Truncated(usize),
    #[error("a key or value at byte {0} is not UTF-8")]
    NotUtf8(usize),
}

/// The records of `pairs`.
pub fn encode_contribution<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        for s in [k, v] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

fn take<'a>(data: &'a [u8], at: &mut usize) -> Result<&'a str, BlobError> {
    let start = *at;
    let len_bytes = data
        .get(start..start + 4)
        .ok_or(BlobError::Truncated(start))?;
    let len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
    let body = data
        .get(start + 4..start + 4 + len)
        .ok_or(BlobError::Truncated(start))?;
    *at = start + 4 + len;
    std::str::from_utf8(body).map_err(|_| BlobError::NotUtf8(start))
}

/// Every pair of every node's records, in order.
pub fn decode_contributions(data: &[u8]) -> Result<Vec<(String, String)>, BlobError> {
    let mut at = 0;
    let mut pairs = Vec::new();
    while at < data.len() {
        let k = take(data, &mut at)?;
        let v = take(data, &mut at)?;
        pairs.push((k.to_string(), v.to_string()));
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contributions_concatenate() {
        let mut all = encode_contribution([("bc-0", "abc"), ("bc-1", "")]);
        all.extend(encode_contribution([("bc-2", "x y")]));
        assert_eq!(
            decode_contributions(&all).unwrap(),
            [("bc-0", "abc"), ("bc-1", ""), ("bc-2", "x y")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert_eq!(decode_contributions(&[]).unwrap(), []);
    }

    #[test]
    fn a_damaged_blob_is_refused() {
        let all = encode_contribution([("key", "value")]);
        for cut in 1..all.len() {
            assert!(decode_contributions(&all[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = encode_contribution([("k", "v")]);
        bad[4] = 0xff;
        assert_eq!(decode_contributions(&bad), Err(BlobError::NotUtf8(0)));
    }
}
