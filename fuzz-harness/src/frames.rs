//! The frame splitter: bytes as they arrive from a socket, cut into frames.

use bytes::BytesMut;
use warren_amqp::frame::next_frame;

/// The largest frame the fuzzed splitter accepts (the broker's default `frame_max`).
const FRAME_MAX_BYTES: u32 = 131_072;

/// Splits `data` into frames until it runs out or is refused.
pub fn run(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = next_frame(&mut buf, FRAME_MAX_BYTES) {
        assert!(frame.payload.len() <= FRAME_MAX_BYTES as usize, "a frame larger than frame_max was accepted");
    }
}
