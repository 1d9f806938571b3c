//! TLS for the AMQPS and HTTPS listeners: the certificate, key and CA files read (PEM) and
//! checked at startup, with errors that name the file, and the rustls configuration made from
//! them (ring; TLS 1.2 and 1.3). A CA file turns on client-certificate verification:
//! certificates are then checked against it, and required with `--ssl-fail-if-no-peer-cert`.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
pub use warren_amqp::tls::CertLoginFrom;

/// The TLS settings (RabbitMQ's `ssl_options`).
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// The server's certificate chain, PEM (`--ssl-cert-file`).
    pub cert_file: Option<PathBuf>,
    /// Its private key, PEM: PKCS#8, PKCS#1 or SEC1 (`--ssl-key-file`).
    pub key_file: Option<PathBuf>,
    /// CA certificates that client certificates are checked against (`--ssl-ca-file`).
    pub ca_file: Option<PathBuf>,
    /// Refuse clients without a certificate (`--ssl-fail-if-no-peer-cert`; needs the CA file).
    pub fail_if_no_peer_cert: bool,
    /// Where a client certificate's user name comes from (`--ssl-cert-login-from`).
    pub login_from: CertLoginFrom,
}

/// Why the TLS configuration cannot be made; each names the file to fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A TLS listener is on but a file it needs is not given.
    #[error("{listener} needs --ssl-cert-file and --ssl-key-file")]
    Missing {
        /// The listener's flag.
        listener: &'static str,
    },
    /// A file cannot be read.
    #[error("cannot read {flag} {}: {source}", path.display())]
    Read {
        /// The flag that names it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds nothing usable.
    #[error("{flag} {}: {what}", path.display())]
    Invalid {
        /// The flag that names it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// `--ssl-fail-if-no-peer-cert` without a CA to check certificates against.
    #[error("--ssl-fail-if-no-peer-cert needs --ssl-ca-file")]
    NoCaForPeerCert,
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { flag, path: path.to_path_buf(), source })
}

fn invalid(flag: &'static str, path: &Path, what: impl std::fmt::Display) -> TlsError {
    TlsError::Invalid { flag, path: path.to_path_buf(), what: what.to_string() }
}

fn certificates(flag: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(flag, path)?;
    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(flag, path, format!("not PEM certificates: {e}")))?;
    if certificates.is_empty() {
        return Err(invalid(flag, path, "holds no PEM certificate"));
    }
    Ok(certificates)
}

impl TlsSettings {
    /// The rustls configuration for `listener` (its flag, for errors), offering `alpn`.
    pub fn server_config(&self, listener: &'static str, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsError> {
        let (Some(cert_file), Some(key_file)) = (&self.cert_file, &self.key_file) else {
            return Err(TlsError::Missing { listener });
        };
        let chain = certificates("--ssl-cert-file", cert_file)?;
        let key_pem = read("--ssl-key-file", key_file)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| invalid("--ssl-key-file", key_file, format!("no PEM private key: {e}")))?;
        let provider: Arc<CryptoProvider> = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("--ssl-cert-file", cert_file, e))?;
        let builder = match &self.ca_file {
            Some(ca_file) => {
                let mut roots = RootCertStore::empty();
                for certificate in certificates("--ssl-ca-file", ca_file)? {
                    roots.add(certificate).map_err(|e| invalid("--ssl-ca-file", ca_file, e))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if self.fail_if_no_peer_cert { verifier } else { verifier.allow_unauthenticated() };
                builder.with_client_cert_verifier(verifier.build().map_err(|e| invalid("--ssl-ca-file", ca_file, e))?)
            }
            None if self.fail_if_no_peer_cert => return Err(TlsError::NoCaForPeerCert),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| {
            invalid(
                "--ssl-key-file",
                key_file,
                format!("does not go with --ssl-cert-file {}: {e}", cert_file.display()),
            )
        })?;
        config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
        Ok(Arc::new(config))
    }
}
