//! Text a client controls (names, mechanisms, whole method dumps), made safe to log and to send
//! back: control characters are escaped, so a client cannot forge log lines, and the length is
//! bounded, so a client cannot make the broker write megabytes of log per connection.

use std::fmt::Write;

/// The most of a client's text kept in an error: enough for any name (short strings are at
/// most 255 bytes) with context around it.
pub const MAX_TEXT_BYTES: usize = 512;

/// `text` with control characters escaped (`\n`, `\u{1b}`, ...) and cut at `max_bytes` on a
/// character boundary, saying how much was left out.
pub fn sanitize(text: &str, max_bytes: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_bytes) + 32);
    for (at, c) in text.char_indices() {
        if out.len() >= max_bytes {
            let _ = write!(out, "... ({} more bytes)", text.len() - at);
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_control_characters() {
        assert_eq!(sanitize("PLAIN\nERROR forged line\r\u{1b}[31m", 100), "PLAIN\\nERROR forged line\\r\\u{1b}[31m");
        assert_eq!(sanitize("é ok", 100), "é ok");
    }

    #[test]
    fn bounds_the_length_on_a_character_boundary() {
        let long = "é".repeat(100_000);
        let cut = sanitize(&long, 11);
        assert_eq!(cut, format!("{}... (199988 more bytes)", "é".repeat(6)));
        assert!(sanitize(&"x".repeat(1 << 20), MAX_TEXT_BYTES).len() < MAX_TEXT_BYTES + 32);
    }
}
