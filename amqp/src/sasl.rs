//! SASL mechanisms offered in `connection.start`: PLAIN and AMQPLAIN, and EXTERNAL (the
//! identity of a TLS client certificate) to clients that presented one.

use amq_protocol::types::AMQPValue;
use warren_delivery::field_table;

/// Mechanisms announced to clients, in order of preference.
pub const MECHANISMS: &str = "PLAIN AMQPLAIN";
/// The mechanism that logs in as the TLS client certificate's user.
pub const EXTERNAL: &str = "EXTERNAL";

/// The mechanisms to announce (EXTERNAL too when the client gave a certificate).
pub fn mechanisms(with_certificate: bool) -> String {
    if with_certificate {
        format!("{MECHANISMS} {EXTERNAL}")
    } else {
        MECHANISMS.to_string()
    }
}

/// A login decoded from a `connection.start-ok` response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

/// Why a start-ok response could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    /// A mechanism not in [`MECHANISMS`].
    #[error("unsupported authentication mechanism '{0}'")]
    UnsupportedMechanism(String),
    /// The response does not have the mechanism's shape.
    #[error("malformed {0} response")]
    Malformed(&'static str),
}

/// Decodes the response of `mechanism`.
pub fn decode(mechanism: &str, response: &[u8]) -> Result<Login, SaslError> {
    match mechanism {
        "PLAIN" => decode_plain(response),
        "AMQPLAIN" => decode_amqplain(response),
        other => Err(SaslError::UnsupportedMechanism(other.to_string())),
    }
}

/// PLAIN (RFC 4616): `authzid NUL authcid NUL password`.
fn decode_plain(response: &[u8]) -> Result<Login, SaslError> {
    let mut parts = response.split(|b| *b == 0);
    let (Some(_authzid), Some(user), Some(password), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(SaslError::Malformed("PLAIN"));
    };
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| SaslError::Malformed("PLAIN"));
    Ok(Login { username: text(user)?, password: text(password)? })
}

/// AMQPLAIN: a field table without its length prefix, holding LOGIN and PASSWORD.
fn decode_amqplain(response: &[u8]) -> Result<Login, SaslError> {
    let mut framed = (response.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(response);
    let table = field_table::decode(&framed).map_err(|_| SaslError::Malformed("AMQPLAIN"))?;
    let field = |name: &str| match table.inner().get(name) {
        Some(AMQPValue::LongString(s)) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        Some(AMQPValue::ShortString(s)) => Some(s.to_string()),
        _ => None,
    };
    match (field("LOGIN"), field("PASSWORD")) {
        (Some(username), Some(password)) => Ok(Login { username, password }),
        _ => Err(SaslError::Malformed("AMQPLAIN")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::{generation::gen_field_table, FieldTable, LongString};

    #[test]
    fn plain() {
        let login = decode("PLAIN", b"\0guest\0secret").expect("valid");
        assert_eq!(login, Login { username: "guest".into(), password: "secret".into() });
        assert_eq!(decode("PLAIN", b"guest"), Err(SaslError::Malformed("PLAIN")));
    }

    #[test]
    fn amqplain() {
        let mut table = FieldTable::default();
        table.insert("LOGIN".into(), AMQPValue::LongString(LongString::from("u")));
        table.insert("PASSWORD".into(), AMQPValue::LongString(LongString::from("p")));
        let encoded = gen_field_table(&table)(amq_protocol::frame::WriteContext::from(Vec::new()))
            .map(|c| c.write)
            .unwrap_or_default();
        let login = decode("AMQPLAIN", &encoded[4..]).expect("valid");
        assert_eq!(login, Login { username: "u".into(), password: "p".into() });
        assert!(matches!(decode("EXTERNAL", b""), Err(SaslError::UnsupportedMechanism(_))));
    }
}
