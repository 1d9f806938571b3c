//! Sub-entry batches: many messages under one publishing id, optionally compressed, as the
//! clients send them to save bytes and confirms. Warren stores each message apart (its
//! offsets are per message), so a batch is opened here: decompressed within a bound, then
//! cut into its messages.

use bytes::{Buf, Bytes};
use flate2::read::GzDecoder;
use std::io::Read;
use thiserror::Error;

/// The most a batch may hold once decompressed: a small frame must not make the broker
/// inflate gigabytes.
pub const MAX_BATCH_UNCOMPRESSED_BYTES: usize = 16 << 20;
/// The codecs' numbers.
const NONE: u8 = 0;
const GZIP: u8 = 1;

/// A batch that cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    /// A codec Warren does not have (Snappy, LZ4 and Zstd are the clients' plug-ins).
    #[error("compression codec {0} is not supported (none and gzip are)")]
    UnsupportedCompression(u8),
    /// Larger than announced, or than the bound.
    #[error("the batch inflates beyond {0} bytes")]
    TooLarge(usize),
    /// Not what it says it is.
    #[error("the batch is malformed: {0}")]
    Malformed(&'static str),
}

/// The messages of a batch.
pub fn messages(compression: u8, records: u16, uncompressed_bytes: u32, data: Bytes) -> Result<Vec<Bytes>, BatchError> {
    let limit = (uncompressed_bytes as usize).min(MAX_BATCH_UNCOMPRESSED_BYTES);
    let mut data = match compression {
        NONE => data,
        GZIP => inflate(&data, limit)?,
        other => return Err(BatchError::UnsupportedCompression(other)),
    };
    let mut messages = Vec::with_capacity(usize::from(records).min(data.len() / 4));
    for _ in 0..records {
        if data.len() < 4 {
            return Err(BatchError::Malformed("a record's size is missing"));
        }
        let size = data.get_u32() as usize;
        if size > data.len() {
            return Err(BatchError::Malformed("a record is longer than the batch"));
        }
        messages.push(data.split_to(size));
    }
    Ok(messages)
}

fn inflate(data: &[u8], limit: usize) -> Result<Bytes, BatchError> {
    let mut out = Vec::with_capacity(limit.min(1 << 20));
    let mut decoder = GzDecoder::new(data).take(limit as u64 + 1);
    decoder.read_to_end(&mut out).map_err(|_| BatchError::Malformed("not gzip"))?;
    if out.len() > limit {
        return Err(BatchError::TooLarge(limit));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn batch(records: &[&[u8]]) -> Vec<u8> {
        let mut data = Vec::new();
        for record in records {
            data.extend_from_slice(&(record.len() as u32).to_be_bytes());
            data.extend_from_slice(record);
        }
        data
    }

    #[test]
    fn a_batch_is_cut_into_its_messages_compressed_or_not() {
        let plain = batch(&[b"one", b"two!"]);
        let got = messages(NONE, 2, plain.len() as u32, Bytes::from(plain.clone())).unwrap();
        assert_eq!(got, [Bytes::from_static(b"one"), Bytes::from_static(b"two!")]);
        let mut gzip = GzEncoder::new(Vec::new(), flate2::Compression::default());
        gzip.write_all(&plain).unwrap();
        let compressed = gzip.finish().unwrap();
        let got = messages(GZIP, 2, plain.len() as u32, Bytes::from(compressed)).unwrap();
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn a_batch_cannot_inflate_past_what_it_announced() {
        let big = vec![0u8; 100_000];
        let mut gzip = GzEncoder::new(Vec::new(), flate2::Compression::default());
        gzip.write_all(&big).unwrap();
        let bomb = Bytes::from(gzip.finish().unwrap());
        assert_eq!(messages(GZIP, 1, 1000, bomb), Err(BatchError::TooLarge(1000)));
        assert_eq!(messages(3, 1, 10, Bytes::new()), Err(BatchError::UnsupportedCompression(3)));
        let short = Bytes::from(batch(&[b"one"]));
        assert!(matches!(messages(NONE, 2, 7, short), Err(BatchError::Malformed(_))));
    }
}
