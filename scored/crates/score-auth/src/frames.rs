//! gRPC's length-prefixed messages in an HTTP/2 body: one flag byte (1:
//! compressed), a u32 big-endian length, the message.  A body's data chunks
//! cut messages anywhere; [`FrameBuf`] gathers them back.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The header of a gRPC message.
pub const HEADER_LEN: usize = 5;

/// What a body held that is not a well-formed sequence of messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The length says more than the limit allows.
    TooLarge { len: usize, limit: usize },
    /// The flag says compressed (score never compresses).
    Compressed,
    /// The body ended inside a message.
    Truncated { have: usize },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { len, limit } => write!(
                f,
                "a message of {len} bytes exceeds the limit of {limit} bytes"
            ),
            FrameError::Compressed => f.write_str("a compressed message (score never compresses)"),
            FrameError::Truncated { have } => write!(
                f,
                "the stream ended inside a message ({have} bytes of it arrived)"
            ),
        }
    }
}

/// Bytes received so far, cut into whole messages.
#[derive(Debug, Default)]
pub struct FrameBuf {
    buf: BytesMut,
}

impl FrameBuf {
    pub fn push(&mut self, data: impl Buf) {
        self.buf.put(data);
    }

    /// The next whole message, if it has arrived.  A header that announces
    /// a message over `limit`, or a compressed one, is an error at once,
    /// before its bytes arrive.
    pub fn next(&mut self, limit: usize) -> Result<Option<Bytes>, FrameError> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let flag = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > limit {
            return Err(FrameError::TooLarge { len, limit });
        }
        if flag != 0 {
            return Err(FrameError::Compressed);
        }
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        self.buf.advance(HEADER_LEN);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// At the end of the body: an error if part of a message is left.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Truncated {
                have: self.buf.len(),
            })
        }
    }
}

/// `message` with its gRPC header (uncompressed).
pub fn frame(message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN + message.len());
    b.put_u8(0);
    b.put_u32(message.len() as u32);
    b.put_slice(message);
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_out_of_any_chunking() {
        let mut wire = Vec::new();
        for m in [&b"hello"[..], b"", b"world!"] {
            wire.extend_from_slice(&frame(m));
        }
        for chunk in 1..wire.len() {
            let mut fb = FrameBuf::default();
            let mut got = Vec::new();
            for c in wire.chunks(chunk) {
                fb.push(c);
                while let Some(m) = fb.next(100).unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(
                got,
                vec![&b"hello"[..], b"", b"world!"],
                "chunks of {chunk}"
            );
            fb.finish().unwrap();
        }
    }

    #[test]
    fn oversized_compressed_and_truncated_messages_are_errors() {
        let mut fb = FrameBuf::default();
        fb.push(&b"\x00\xff\xff\xff\xff"[..]);
        assert_eq!(
            fb.next(4 << 20),
            Err(FrameError::TooLarge {
                len: u32::MAX as usize,
                limit: 4 << 20
            })
        );
        let mut fb = FrameBuf::default();
        fb.push(&b"\x01\x00\x00\x00\x01x"[..]);
        assert_eq!(fb.next(100), Err(FrameError::Compressed));
        let mut fb = FrameBuf::default();
        fb.push(&b"\x00\x00\x00\x00\x09abc"[..]);
        assert_eq!(fb.next(100), Ok(None));
        assert_eq!(fb.finish(), Err(FrameError::Truncated { have: 8 }));
        let mut fb = FrameBuf::default();
        fb.push(&b"\x00\x00"[..]);
        assert_eq!(fb.next(100), Ok(None));
        assert!(fb.finish().is_err());
    }
}
