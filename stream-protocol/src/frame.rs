//! Cutting a connection's bytes into frames: a `uint32` size, then that many bytes.
//!
//! The size is checked before anything is buffered for it: a frame over the limit (the
//! negotiated `frame_max`, or [`HANDSHAKE_FRAME_MAX_BYTES`] before Tune) is refused as soon
//! as its four size bytes arrive, so a client cannot make the broker hold more than one
//! frame's worth of its bytes.

use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

/// The size field's own length.
pub const SIZE_BYTES: usize = 4;
/// The largest frame taken before the client tuned the connection: the handshake's frames
/// are small (RabbitMQ's clients send well under 4 KiB of peer properties).
pub const HANDSHAKE_FRAME_MAX_BYTES: u32 = 64 * 1024;
/// The smallest frame: a key and a version.
const MIN_FRAME_BYTES: u32 = 4;

/// A frame the connection refuses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// Over the limit.
    #[error("a frame of {size} bytes is over the limit of {max}")]
    TooLarge {
        /// The size announced.
        size: u32,
        /// The limit.
        max: u32,
    },
    /// Too short to hold a key and a version.
    #[error("a frame of {0} bytes has no key and version")]
    TooSmall(u32),
}

/// The next whole frame's content in `buffer` (taken out of it), or None until more bytes
/// come. `max_bytes` bounds the content and its size field together, as `frame_max` does.
pub fn next_frame(buffer: &mut BytesMut, max_bytes: u32) -> Result<Option<Bytes>, FrameError> {
    let Some(size_bytes) = buffer.get(..SIZE_BYTES) else { return Ok(None) };
    let size = u32::from_be_bytes([size_bytes[0], size_bytes[1], size_bytes[2], size_bytes[3]]);
    if max_bytes != 0 && size.saturating_add(SIZE_BYTES as u32) > max_bytes {
        return Err(FrameError::TooLarge { size, max: max_bytes });
    }
    if size < MIN_FRAME_BYTES {
        return Err(FrameError::TooSmall(size));
    }
    let whole = SIZE_BYTES + size as usize;
    if buffer.len() < whole {
        buffer.reserve(whole - buffer.len());
        return Ok(None);
    }
    buffer.advance(SIZE_BYTES);
    Ok(Some(buffer.split_to(size as usize).freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_whole_and_in_order() {
        let mut buffer = BytesMut::from(&[0, 0, 0, 4, 0, 0x17, 0, 1, 0, 0, 0, 5, 0, 0x09][..]);
        assert_eq!(next_frame(&mut buffer, 1024).unwrap().as_deref(), Some(&[0, 0x17, 0, 1][..]));
        assert_eq!(next_frame(&mut buffer, 1024).unwrap(), None, "the second is not all there");
        buffer.extend_from_slice(&[0, 1, 2]);
        assert_eq!(next_frame(&mut buffer, 1024).unwrap().as_deref(), Some(&[0, 0x09, 0, 1, 2][..]));
        assert!(buffer.is_empty());
    }

    #[test]
    fn a_frame_over_the_limit_is_refused_from_its_size() {
        let mut buffer = BytesMut::from(&[0x7f, 0xff, 0xff, 0xff][..]);
        assert_eq!(next_frame(&mut buffer, 1 << 20), Err(FrameError::TooLarge { size: 0x7fff_ffff, max: 1 << 20 }));
        assert!(buffer.capacity() < 1 << 20, "nothing reserved for it");
        let mut buffer = BytesMut::from(&[0, 0, 0, 1, 0][..]);
        assert_eq!(next_frame(&mut buffer, 0), Err(FrameError::TooSmall(1)));
    }
}
