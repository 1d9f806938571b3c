//! AMQPS: the TLS handshake in front of an AMQP connection, and the user name a client
//! certificate gives for SASL EXTERNAL: the subject's distinguished name (RFC 4514, as RabbitMQ
//! writes it: `CN=alice,O=Example`) or its common name (`--ssl-cert-login-from common_name`).

use std::sync::Arc;
use tokio_rustls::rustls::ServerConfig;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Which part of a client certificate's subject is the user name (RabbitMQ's
/// `ssl_cert_login_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CertLoginFrom {
    /// The whole subject, RFC 4514 (RabbitMQ's default).
    #[default]
    DistinguishedName,
    /// The subject's common name.
    CommonName,
}

impl std::str::FromStr for CertLoginFrom {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "distinguished_name" => Ok(CertLoginFrom::DistinguishedName),
            "common_name" => Ok(CertLoginFrom::CommonName),
            other => Err(format!("'{other}' is not distinguished_name or common_name")),
        }
    }
}

/// What the AMQPS listener needs: the TLS settings, and how certificates name users.
#[derive(Clone)]
pub struct AmqpsSettings {
    /// The rustls server configuration (certificate, key, client verification).
    pub server_config: Arc<ServerConfig>,
    /// Where the user name of a client certificate comes from.
    pub login_from: CertLoginFrom,
}

impl std::fmt::Debug for AmqpsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpsSettings").field("login_from", &self.login_from).finish_non_exhaustive()
    }
}

/// The user name `certificate` (DER) gives, if it parses and has what `from` asks for.
pub fn certificate_login(certificate: &[u8], from: CertLoginFrom) -> Option<String> {
    let (_, parsed) = X509Certificate::from_der(certificate).ok()?;
    let subject = parsed.subject();
    match from {
        CertLoginFrom::CommonName => subject.iter_common_name().next()?.as_str().ok().map(str::to_string),
        CertLoginFrom::DistinguishedName => {
            let registry = x509_parser::objects::oid_registry();
            // RFC 4514 writes the most specific part first: the reverse of the certificate's order.
            let mut rdns: Vec<String> = subject
                .iter_rdn()
                .map(|rdn| {
                    let parts: Vec<String> = rdn
                        .iter()
                        .map(|attribute| {
                            let oid = attribute.attr_type();
                            let name = x509_parser::objects::oid2abbrev(oid, registry)
                                .map(str::to_string)
                                .unwrap_or_else(|_| oid.to_id_string());
                            let value = attribute.as_str().unwrap_or_default();
                            format!("{name}={}", escape_rfc4514(value))
                        })
                        .collect();
                    parts.join("+")
                })
                .collect();
            rdns.reverse();
            Some(rdns.join(","))
        }
    }
}

/// An attribute value with RFC 4514's special characters escaped.
fn escape_rfc4514(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let leading = i == 0 && (c == ' ' || c == '#');
        let trailing = i + 1 == value.chars().count() && c == ' ';
        if matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=') || leading || trailing {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Made with `openssl req -subj "/C=US/O=Example, Inc./OU=ops/CN=alice"`; openssl prints
    /// its subject, RFC 2253, as `CN=alice,OU=ops,O=Example\, Inc.,C=US`.
    const ALICE: &[u8] = include_bytes!("../testdata/alice-cert.der");

    #[test]
    fn the_login_is_the_subject_as_rfc_4514_writes_it_or_its_common_name() {
        let dn = certificate_login(ALICE, CertLoginFrom::DistinguishedName);
        assert_eq!(dn.as_deref(), Some("CN=alice,OU=ops,O=Example\\, Inc.,C=US"));
        assert_eq!(certificate_login(ALICE, CertLoginFrom::CommonName).as_deref(), Some("alice"));
        assert_eq!(certificate_login(b"not a certificate", CertLoginFrom::CommonName), None);
    }
}
