//! How a Raft entry is stored in a record: its serde form in postcard, with the record's
//! `flags` byte naming that encoding so that another can be introduced later.
//!
//! Why postcard (1.x): a compact, non-self-describing binary format with a stable,
//! documented wire format and an active maintainer (bincode 1 is frozen, and bincode's
//! later releases are no longer maintained). Integers are varints, so log ids cost a few
//! bytes, and `serialize_bytes` (what `bytes::Bytes` and `serde_bytes` use) is written as a
//! varint length followed by the raw bytes: a message body is stored verbatim, and
//! deserializing it is one copy, or none with a borrowed `&[u8]` (see [`decode_payload`]).
//! A plain `Vec<u8>` produces the same bytes (postcard writes a `u8` as one byte) but
//! decodes element by element, so entry types should carry bodies as `Bytes`.

use serde::{Deserialize, Serialize};

use crate::raft::error::RaftLogError;

/// The record `flags` value of an entry encoded with postcard 1.x, format version 1.
pub const ENTRY_FORMAT_POSTCARD: u8 = 1;

/// Appends the encoding of `value` to `buf`.
pub(crate) fn encode_into<T: Serialize>(value: &T, buf: Vec<u8>) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_extend(value, buf)
}

/// Decodes a whole value from `bytes`; trailing bytes are an error.
pub(crate) fn decode_exact<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, String> {
    match postcard::take_from_bytes(bytes) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(format!("{} trailing bytes", rest.len())),
        Err(e) => Err(e.to_string()),
    }
}

/// Decodes the payload of the record at `index` (as returned by
/// [`RaftLog::entry_payload`](crate::raft::RaftLog::entry_payload)) into `T`, which may
/// borrow from it: a view of the entry whose body is a `&[u8]` into the payload, turned
/// into a `Bytes` without a copy with `payload.slice_ref(body)`. `T` must have the same
/// serde shape as the type config's entry (`openraft::Entry<C>`).
pub fn decode_payload<'de, T: Deserialize<'de>>(index: u64, payload: &'de [u8]) -> Result<T, RaftLogError> {
    decode_exact(payload).map_err(|reason| RaftLogError::Decode { index, reason })
}
