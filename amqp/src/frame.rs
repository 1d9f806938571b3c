//! AMQP 0-9-1 frames: splitting the read buffer into frames, and encoding frames to send.
//!
//! Frames are split on their 7-byte header by hand rather than by amq-protocol's parser so that
//! body frames stay slices of the read buffer (`Bytes`, no copy) and so that a declared size
//! larger than frame_max is refused before anything is buffered. Method and content-header
//! payloads are decoded with amq-protocol. The two methods sent once per message (deliver, and
//! a confirm's ack) are encoded here directly, because they are the hot path.

use amq_protocol::frame::{gen_frame, AMQPFrame, WriteContext};
use amq_protocol::protocol::AMQPClass;
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Frame type octets.
pub const FRAME_METHOD: u8 = 1;
/// Content header frame.
pub const FRAME_HEADER: u8 = 2;
/// Content body frame.
pub const FRAME_BODY: u8 = 3;
/// Heartbeat frame.
pub const FRAME_HEARTBEAT: u8 = 8;
/// The octet that ends every frame.
pub const FRAME_END: u8 = 0xCE;
/// Type, channel and size.
pub const FRAME_HEADER_BYTES: usize = 7;
/// Header plus end octet: what a frame costs beyond its payload.
pub const FRAME_OVERHEAD_BYTES: usize = FRAME_HEADER_BYTES + 1;
/// The smallest frame_max a peer may negotiate (the specification's frame-min-size).
pub const FRAME_MIN_SIZE_BYTES: u32 = 4096;
/// The AMQP 0-9-1 protocol header.
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";
/// Class id of `basic`, the only class with content.
pub const BASIC_CLASS_ID: u16 = 60;

/// One frame as read: its type, channel and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// The frame type octet.
    pub kind: u8,
    /// The channel number.
    pub channel: u16,
    /// The payload, a slice of the read buffer.
    pub payload: Bytes,
}

/// A frame that cannot be accepted: always a connection error (501 FRAME_ERROR).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The declared size is over the negotiated frame_max.
    #[error("frame size {size} exceeds frame_max {frame_max}")]
    TooLarge {
        /// Size of the whole frame as declared.
        size: usize,
        /// The negotiated limit.
        frame_max: u32,
    },
    /// The octet after the payload is not 0xCE.
    #[error("frame end octet is {0:#04x}, expected 0xce")]
    BadEnd(u8),
    /// An unknown frame type.
    #[error("unknown frame type {0}")]
    UnknownType(u8),
}

/// Takes the next whole frame off the front of `buf`, or `None` if it is not all there yet.
pub fn next_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<RawFrame>, FrameError> {
    if buf.len() < FRAME_HEADER_BYTES {
        return Ok(None);
    }
    let kind = buf[0];
    if !matches!(kind, FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT) {
        return Err(FrameError::UnknownType(kind));
    }
    let channel = u16::from_be_bytes([buf[1], buf[2]]);
    let payload_len = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]) as usize;
    let size = payload_len + FRAME_OVERHEAD_BYTES;
    if frame_max != 0 && size > frame_max as usize {
        return Err(FrameError::TooLarge { size, frame_max });
    }
    if buf.len() < size {
        buf.reserve(size - buf.len());
        return Ok(None);
    }
    let end = buf[size - 1];
    if end != FRAME_END {
        return Err(FrameError::BadEnd(end));
    }
    let mut frame = buf.split_to(size);
    frame.advance(FRAME_HEADER_BYTES);
    frame.truncate(payload_len);
    Ok(Some(RawFrame { kind, channel, payload: frame.freeze() }))
}

/// Appends a method frame (encoded by amq-protocol).
pub fn put_method(out: &mut BytesMut, channel: u16, method: AMQPClass) {
    let frame = AMQPFrame::Method(channel, method);
    let encoded = gen_frame(&frame)(WriteContext::from(Vec::with_capacity(64)));
    match encoded {
        Ok(ctx) => out.extend_from_slice(&ctx.write),
        // Encoding into a growable Vec cannot run out of room; a failure here is a bug.
        Err(error) => tracing::error!(?error, "cannot encode method frame"),
    }
}

fn put_frame_header(out: &mut BytesMut, kind: u8, channel: u16, payload_len: usize) {
    out.put_u8(kind);
    out.put_u16(channel);
    out.put_u32(payload_len as u32);
}

fn put_short_str(out: &mut BytesMut, s: &str) {
    out.put_u8(s.len() as u8);
    out.put_slice(s.as_bytes());
}

/// Appends `basic.deliver` (class 60, method 60).
pub fn put_deliver(
    out: &mut BytesMut,
    channel: u16,
    consumer_tag: &str,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
) {
    let payload_len = 4 + 1 + consumer_tag.len() + 8 + 1 + 1 + exchange.len() + 1 + routing_key.len();
    put_frame_header(out, FRAME_METHOD, channel, payload_len);
    out.put_u16(BASIC_CLASS_ID);
    out.put_u16(60);
    put_short_str(out, consumer_tag);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(redelivered));
    put_short_str(out, exchange);
    put_short_str(out, routing_key);
    out.put_u8(FRAME_END);
}

/// Method id of `basic.ack`.
const BASIC_ACK_METHOD_ID: u16 = 80;
/// Method id of `basic.nack`.
const BASIC_NACK_METHOD_ID: u16 = 120;

/// `basic.ack` and `basic.nack` (with requeue=false) share a layout: the delivery tag, then one
/// octet of flags whose bit 0 is `multiple`.
fn put_confirm(out: &mut BytesMut, channel: u16, method_id: u16, delivery_tag: u64, multiple: bool) {
    put_frame_header(out, FRAME_METHOD, channel, 4 + 8 + 1);
    out.put_u16(BASIC_CLASS_ID);
    out.put_u16(method_id);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(multiple));
    out.put_u8(FRAME_END);
}

/// Appends `basic.ack`, as sent for publisher confirms.
pub fn put_ack(out: &mut BytesMut, channel: u16, delivery_tag: u64, multiple: bool) {
    put_confirm(out, channel, BASIC_ACK_METHOD_ID, delivery_tag, multiple);
}

/// Appends `basic.nack` with requeue=false, as sent for publisher confirms.
pub fn put_nack(out: &mut BytesMut, channel: u16, delivery_tag: u64, multiple: bool) {
    put_confirm(out, channel, BASIC_NACK_METHOD_ID, delivery_tag, multiple);
}

/// Appends a content header frame carrying the raw property bytes, then the body split into
/// frames no larger than `frame_max`.
pub fn put_content(out: &mut BytesMut, channel: u16, properties: &[u8], body: &[u8], frame_max: u32) {
    put_content_header(out, channel, properties, body.len());
    for piece in body.chunks(body_frame_bytes(frame_max)) {
        put_body_frame_header(out, channel, piece.len());
        out.put_slice(piece);
        out.put_u8(FRAME_END);
    }
}

/// Appends a content header frame for a body of `body_len` bytes.
pub fn put_content_header(out: &mut BytesMut, channel: u16, properties: &[u8], body_len: usize) {
    put_frame_header(out, FRAME_HEADER, channel, 2 + 2 + 8 + properties.len());
    out.put_u16(BASIC_CLASS_ID);
    out.put_u16(0);
    out.put_u64(body_len as u64);
    out.put_slice(properties);
    out.put_u8(FRAME_END);
}

/// The largest body frame payload under `frame_max`.
pub fn body_frame_bytes(frame_max: u32) -> usize {
    (frame_max as usize).saturating_sub(FRAME_OVERHEAD_BYTES).max(1)
}

/// Appends the header of a body frame of `len` bytes (the body and [`FRAME_END`] follow).
pub fn put_body_frame_header(out: &mut BytesMut, channel: u16, len: usize) {
    put_frame_header(out, FRAME_BODY, channel, len);
}

/// Appends a heartbeat frame.
pub fn put_heartbeat(out: &mut BytesMut) {
    put_frame_header(out, FRAME_HEARTBEAT, 0, 0);
    out.put_u8(FRAME_END);
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::frame::parse_frame;
    use amq_protocol::protocol::basic;
    use proptest::prelude::*;

    #[test]
    fn hand_encoded_methods_parse_back() {
        let mut out = BytesMut::new();
        put_deliver(&mut out, 3, "ctag", 42, true, "ex", "rk");
        put_ack(&mut out, 3, 7, true);
        put_nack(&mut out, 3, 8, false);
        let (rest, frame) = parse_frame(&out[..]).expect("deliver parses");
        let expected = basic::Deliver {
            consumer_tag: "ctag".into(),
            delivery_tag: 42,
            redelivered: true,
            exchange: "ex".into(),
            routing_key: "rk".into(),
        };
        assert_eq!(frame, AMQPFrame::Method(3, AMQPClass::Basic(basic::AMQPMethod::Deliver(expected))));
        let (rest, frame) = parse_frame(rest).expect("ack parses");
        let ack = basic::Ack { delivery_tag: 7, multiple: true };
        assert_eq!(frame, AMQPFrame::Method(3, AMQPClass::Basic(basic::AMQPMethod::Ack(ack))));
        let (_, frame) = parse_frame(rest).expect("nack parses");
        let nack = basic::Nack { delivery_tag: 8, multiple: false, requeue: false };
        assert_eq!(frame, AMQPFrame::Method(3, AMQPClass::Basic(basic::AMQPMethod::Nack(nack))));
    }

    #[test]
    fn refuses_oversized_and_unterminated_frames() {
        let mut buf = BytesMut::from(&[FRAME_BODY, 0, 1, 0, 1, 0, 0][..]);
        assert_eq!(next_frame(&mut buf, 4096), Err(FrameError::TooLarge { size: 65544, frame_max: 4096 }));
        let mut buf = BytesMut::from(&[FRAME_BODY, 0, 1, 0, 0, 0, 1, b'x', 0][..]);
        assert_eq!(next_frame(&mut buf, 4096), Err(FrameError::BadEnd(0)));
        let mut buf = BytesMut::from(&[9, 0, 1, 0, 0, 0, 0, FRAME_END][..]);
        assert_eq!(next_frame(&mut buf, 4096), Err(FrameError::UnknownType(9)));
    }

    proptest! {
        /// Content split by put_content reassembles to the same body, read back in any chunking.
        #[test]
        fn content_round_trips(body in prop::collection::vec(any::<u8>(), 0..20_000), cut in 1usize..5000) {
            let mut out = BytesMut::new();
            put_content(&mut out, 1, &[0, 0], &body, 4096);
            let mut buf = BytesMut::new();
            let mut frames = Vec::new();
            for piece in out.chunks(cut) {
                buf.extend_from_slice(piece);
                while let Some(frame) = next_frame(&mut buf, 4096).expect("valid frames") {
                    frames.push(frame);
                }
            }
            prop_assert_eq!(frames[0].kind, FRAME_HEADER);
            let joined: Vec<u8> = frames[1..].iter().flat_map(|f| f.payload.to_vec()).collect();
            prop_assert_eq!(joined, body);
            prop_assert!(buf.is_empty());
        }
    }
}
