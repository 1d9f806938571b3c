//! Framing on inter-node connections: each frame is a 4-byte big-endian length and that many
//! bytes of postcard (a compact serde encoding). The limit is checked before a frame is
//! buffered, so a peer cannot make a node allocate more than one frame's worth.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// Largest frame on an authenticated connection, in bytes. Larger payloads (snapshots, big
/// message batches) are for the layer above to cut into chunks.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
/// Largest frame before the peer is authenticated, in bytes: handshake messages are small.
pub const MAX_HANDSHAKE_FRAME_BYTES: usize = 4 * 1024;

/// A TCP stream framed by length.
pub(crate) type FramedStream = Framed<TcpStream, LengthDelimitedCodec>;

/// A value that cannot be encoded or a frame that cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// serde refused the value.
    #[error("cannot encode a frame: {0}")]
    Encode(postcard::Error),
    /// The encoded value exceeds the frame limit.
    #[error("a frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Encoded length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The bytes are not a value of the expected type.
    #[error("undecodable frame of {len} bytes: {source}")]
    Decode {
        /// Frame length.
        len: usize,
        /// What postcard said.
        source: postcard::Error,
    },
}

/// `stream` framed with a limit of `max_frame_bytes` per frame.
pub(crate) fn framed(stream: TcpStream, max_frame_bytes: usize) -> FramedStream {
    Framed::new(stream, LengthDelimitedCodec::builder().max_frame_length(max_frame_bytes).new_codec())
}

/// `value` encoded as one frame of at most `max_frame_bytes`.
pub(crate) fn encode<T: Serialize>(value: &T, max_frame_bytes: usize) -> Result<Bytes, FrameError> {
    let bytes = postcard::to_stdvec(value).map_err(FrameError::Encode)?;
    if bytes.len() > max_frame_bytes {
        return Err(FrameError::TooLarge { len: bytes.len(), max: max_frame_bytes });
    }
    Ok(Bytes::from(bytes))
}

/// The value a frame holds; trailing bytes are ignored as postcard does.
pub(crate) fn decode<T: DeserializeOwned>(frame: &[u8]) -> Result<T, FrameError> {
    postcard::from_bytes(frame).map_err(|source| FrameError::Decode { len: frame.len(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_oversized_ones_are_refused() {
        let value = (7u64, "abc".to_string(), vec![1u8, 2, 3]);
        let bytes = encode(&value, 64).expect("fits");
        assert_eq!(decode::<(u64, String, Vec<u8>)>(&bytes).expect("decodes"), value);
        assert!(matches!(encode(&vec![0u8; 100], 64), Err(FrameError::TooLarge { .. })));
        assert!(matches!(decode::<(u64, String)>(&[0xff, 0xff]), Err(FrameError::Decode { .. })));
    }
}
