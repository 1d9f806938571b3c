//! Large answers written as the client reads them: a list of 100,000 queues, a Prometheus
//! exposition with a series per queue, a definitions export. Items become text a chunk at a
//! time, only when the client has taken the chunk before (hyper polls the body only when the
//! socket can take more), so a client that does not read holds one chunk and the socket's
//! buffers, not the whole answer.

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;
use std::convert::Infallible;

/// Bytes of text made before a chunk is handed to the socket.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// One part of a streamed JSON answer.
pub enum Piece {
    /// Text written as it is.
    Raw(String),
    /// A JSON array of items, each serialized when its turn comes.
    Items(Box<dyn Iterator<Item = Value> + Send>),
}

impl Piece {
    /// An array of `items`.
    pub fn items(items: impl Iterator<Item = Value> + Send + 'static) -> Self {
        Piece::Items(Box::new(items))
    }
}

/// A JSON array of `items`, streamed.
pub fn json_array(items: impl Iterator<Item = Value> + Send + 'static) -> Response {
    json(vec![Piece::items(items)])
}

/// A JSON document made of `pieces`, streamed.
pub fn json(pieces: Vec<Piece>) -> Response {
    let chunks = Chunks { pieces: pieces.into_iter(), current: None, first: true };
    let body = Body::from_stream(futures_util::stream::iter(chunks.map(Ok::<Bytes, Infallible>)));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Text made of `pieces` (each already text), streamed in chunks.
pub fn text(content_type: &'static str, pieces: impl Iterator<Item = String> + Send + 'static) -> Response {
    let chunks = TextChunks { pieces };
    let body = Body::from_stream(futures_util::stream::iter(chunks.map(Ok::<Bytes, Infallible>)));
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The chunks of a JSON document.
struct Chunks {
    pieces: std::vec::IntoIter<Piece>,
    /// The array being written, if any.
    current: Option<Box<dyn Iterator<Item = Value> + Send>>,
    /// Whether the array being written has had no item yet.
    first: bool,
}

impl Iterator for Chunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let mut out = Vec::with_capacity(CHUNK_BYTES + 1024);
        while out.len() < CHUNK_BYTES {
            if let Some(items) = &mut self.current {
                match items.next() {
                    Some(item) => {
                        if !std::mem::take(&mut self.first) {
                            out.push(b',');
                        }
                        // Writing a Value into a Vec cannot fail.
                        let _ = serde_json::to_writer(&mut out, &item);
                    }
                    None => {
                        out.push(b']');
                        self.current = None;
                    }
                }
                continue;
            }
            match self.pieces.next() {
                Some(Piece::Raw(text)) => out.extend_from_slice(text.as_bytes()),
                Some(Piece::Items(items)) => {
                    out.push(b'[');
                    self.current = Some(items);
                    self.first = true;
                }
                None => break,
            }
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

/// Text pieces gathered into chunks.
struct TextChunks<I> {
    pieces: I,
}

impl<I: Iterator<Item = String>> Iterator for TextChunks<I> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let mut out = String::new();
        while out.len() < CHUNK_BYTES {
            match self.pieces.next() {
                Some(piece) => out.push_str(&piece),
                None => break,
            }
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn whole(pieces: Vec<Piece>) -> (Value, usize) {
        let chunks: Vec<Bytes> = Chunks { pieces: pieces.into_iter(), current: None, first: true }.collect();
        let text: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
        (serde_json::from_slice(&text).expect("valid JSON"), chunks.len())
    }

    #[test]
    fn a_long_array_is_valid_json_in_several_chunks() {
        let items = (0..20_000).map(|i| json!({ "name": format!("q{i}"), "messages": i }));
        let (value, chunks) = whole(vec![Piece::items(items)]);
        assert_eq!(value.as_array().map(Vec::len), Some(20_000));
        assert!(chunks > 5, "{chunks} chunks");
        assert_eq!(whole(vec![Piece::items(std::iter::empty())]).0, json!([]));
    }

    #[test]
    fn an_object_with_arrays_between_raw_parts() {
        let pieces = vec![
            Piece::Raw("{\"a\":".into()),
            Piece::items([json!(1), json!(2)].into_iter()),
            Piece::Raw(",\"b\":".into()),
            Piece::items(std::iter::empty()),
            Piece::Raw("}".into()),
        ];
        assert_eq!(whole(pieces).0, json!({"a": [1, 2], "b": []}));
    }
}
