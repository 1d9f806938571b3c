//! One write's worth of outgoing frames, sent with a single vectored write.
//!
//! Frame headers, methods and small bodies are encoded into one buffer; a large body is not
//! copied: the batch refers to the message's own bytes (the read buffer it arrived in, or the
//! log read it came from) and `writev` gathers everything in order. Copying 1 KiB bodies into
//! the write buffer was the broker's largest single cost when delivering them.

use crate::frame::{self, FRAME_END};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::io::IoSlice;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Bodies (or body frames) up to this size are copied: below it an extra I/O vector entry
/// costs more than the copy.
const INLINE_BODY_BYTES: usize = 512;
/// I/O vector entries per `writev` (Linux allows 1024).
const MAX_IO_SLICES: usize = 512;

/// Frames gathered for one write.
#[derive(Debug, Default)]
pub struct WriteBatch {
    /// What was encoded since the last referenced body.
    head: BytesMut,
    /// Finished parts, in order: encoded runs and referenced bodies.
    parts: Vec<Bytes>,
    parts_bytes: usize,
}

impl WriteBatch {
    /// The buffer to encode frames into; they follow everything already in the batch.
    pub fn buf(&mut self) -> &mut BytesMut {
        &mut self.head
    }

    /// Bytes in the batch.
    pub fn len(&self) -> usize {
        self.parts_bytes + self.head.len()
    }

    /// Bytes the encoding buffer holds allocated.
    pub fn capacity(&self) -> usize {
        self.head.capacity()
    }

    /// Appends bytes by reference.
    pub fn push(&mut self, bytes: Bytes) {
        if bytes.len() <= INLINE_BODY_BYTES {
            self.head.put_slice(&bytes);
            return;
        }
        self.cut();
        self.parts_bytes += bytes.len();
        self.parts.push(bytes);
    }

    /// Appends a content header and the body frames of `body`, splitting it at
    /// `frame_max`; large pieces are referenced, not copied.
    pub fn put_content(&mut self, channel: u16, properties: &[u8], body: &Bytes, frame_max: u32) {
        frame::put_content_header(&mut self.head, channel, properties, body.len());
        let chunk = frame::body_frame_bytes(frame_max);
        let mut at = 0;
        while at < body.len() {
            let end = (at + chunk).min(body.len());
            frame::put_body_frame_header(&mut self.head, channel, end - at);
            self.push(body.slice(at..end));
            self.head.put_u8(FRAME_END);
            at = end;
        }
    }

    /// Ends the current encoded run, so that a referenced part can follow it.
    fn cut(&mut self) {
        if !self.head.is_empty() {
            let run = self.head.split().freeze();
            self.parts_bytes += run.len();
            self.parts.push(run);
        }
    }

    /// Writes the whole batch and empties it (the encoding buffer keeps its memory).
    pub async fn write_to<W: AsyncWrite + Unpin>(&mut self, socket: &mut W) -> std::io::Result<()> {
        self.cut();
        let mut first = 0;
        while first < self.parts.len() {
            let slices: Vec<IoSlice<'_>> =
                self.parts[first..].iter().take(MAX_IO_SLICES).map(|part| IoSlice::new(part)).collect();
            let mut written = socket.write_vectored(&slices).await?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            while written > 0 {
                let part = &mut self.parts[first];
                if written >= part.len() {
                    written -= part.len();
                    first += 1;
                } else {
                    part.advance(written);
                    written = 0;
                }
            }
        }
        self.parts.clear();
        self.parts_bytes = 0;
        Ok(())
    }

    /// Releases the encoding buffer's memory (an idle connection keeps little).
    pub fn shrink(&mut self) {
        self.head = BytesMut::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that accepts at most `step` bytes per call, to exercise partial writes.
    struct Trickle {
        out: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.out.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn writes_exactly_what_copying_would() {
        let bodies: Vec<Bytes> = [0usize, 10, 512, 513, 5000, 20_000]
            .iter()
            .map(|&n| Bytes::from((0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>()))
            .collect();
        for step in [1, 7, 4096, usize::MAX] {
            let (mut batch, mut copied) = (WriteBatch::default(), BytesMut::new());
            for (i, body) in bodies.iter().enumerate() {
                frame::put_heartbeat(batch.buf());
                frame::put_heartbeat(&mut copied);
                batch.put_content(i as u16, &[0, 0], body, 4096);
                frame::put_content(&mut copied, i as u16, &[0, 0], body, 4096);
                batch.push(Bytes::from(vec![9u8; 600]));
                copied.put_slice(&[9u8; 600]);
            }
            assert_eq!(batch.len(), copied.len());
            let mut socket = Trickle { out: Vec::new(), step };
            batch.write_to(&mut socket).await.expect("writes");
            assert_eq!(socket.out, copied.to_vec(), "step {step}");
            assert_eq!(batch.len(), 0);
        }
    }
}
