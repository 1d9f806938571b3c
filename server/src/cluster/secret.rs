//! The cluster's shared secret (as Erlang's cookie): read from a file, never logged, never
//! sent; the handshake proves knowledge of it with HMAC-SHA256.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::path::{Path, PathBuf};

/// Fewest bytes a secret may have (after trailing whitespace is trimmed).
pub const MIN_SECRET_BYTES: usize = 16;
/// Most bytes read from the secret file; a longer file is refused.
pub const MAX_SECRET_BYTES: usize = 4096;

/// Length of an HMAC-SHA256 proof.
pub const PROOF_BYTES: usize = 32;

/// The shared secret. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Vec<u8>);

/// A secret file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file cannot be read.
    #[error("cannot read the cluster secret file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds too few or too many bytes.
    #[error(
        "the cluster secret file {path} holds {len} bytes; it must hold {MIN_SECRET_BYTES} to \
         {MAX_SECRET_BYTES} (for example: head -c 32 /dev/urandom | base64 > {path})"
    )]
    Length {
        /// The file.
        path: PathBuf,
        /// Its length after trimming.
        len: usize,
    },
}

impl ClusterSecret {
    /// A secret from bytes (tests, and callers that hold the secret already).
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Self {
        ClusterSecret(bytes.into())
    }

    /// Reads the secret from `path`, trailing whitespace (a final newline) trimmed. Logs a
    /// warning if the file is readable or writable by users other than its owner.
    pub fn read(path: &Path) -> Result<Self, SecretError> {
        let read_error = |source| SecretError::Read { path: path.into(), source };
        let metadata = std::fs::metadata(path).map_err(read_error)?;
        if metadata.len() > MAX_SECRET_BYTES as u64 {
            let len = usize::try_from(metadata.len()).unwrap_or(usize::MAX);
            return Err(SecretError::Length { path: path.into(), len });
        }
        let mut bytes = std::fs::read(path).map_err(read_error)?;
        while bytes.last().is_some_and(u8::is_ascii_whitespace) {
            bytes.pop();
        }
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&bytes.len()) {
            return Err(SecretError::Length { path: path.into(), len: bytes.len() });
        }
        warn_if_shared(path, &metadata);
        Ok(ClusterSecret(bytes))
    }

    /// HMAC-SHA256 of `message` under the secret.
    pub(crate) fn prove(&self, message: &[u8]) -> [u8; PROOF_BYTES] {
        self.mac(message).finalize().into_bytes().into()
    }

    /// Whether `proof` is the HMAC of `message` under the secret (compared in constant time).
    pub(crate) fn verify(&self, message: &[u8], proof: &[u8]) -> bool {
        self.mac(message).verify_slice(proof).is_ok()
    }

    fn mac(&self, message: &[u8]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this never fails.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        mac.update(message);
        mac
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.0.len())
    }
}

/// Permission bits that let users other than the owner read or write a file.
const GROUP_OR_OTHER_MODE_BITS: u32 = 0o077;

fn warn_if_shared(path: &Path, metadata: &std::fs::Metadata) {
    use std::os::unix::fs::PermissionsExt;
    let mode = metadata.permissions().mode();
    if mode & GROUP_OR_OTHER_MODE_BITS != 0 {
        tracing::warn!(
            path = %path.display(),
            mode = format_args!("{:o}", mode & 0o777),
            "the cluster secret file is accessible to other users; chmod 600 it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_verify_only_under_the_same_secret_and_message() {
        let a = ClusterSecret::from_bytes(b"0123456789abcdef".to_vec());
        let b = ClusterSecret::from_bytes(b"0123456789abcdeF".to_vec());
        let proof = a.prove(b"transcript");
        assert!(a.verify(b"transcript", &proof));
        assert!(!b.verify(b"transcript", &proof));
        assert!(!a.verify(b"transcripT", &proof));
        assert!(!a.verify(b"transcript", &proof[..31]));
        assert_eq!(format!("{a:?}"), "ClusterSecret(16 bytes)");
    }

    #[test]
    fn files_are_trimmed_and_short_ones_refused() {
        let dir = std::env::temp_dir().join(format!("warren-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let good = dir.join("good");
        std::fs::write(&good, "0123456789abcdef\n").expect("write");
        assert_eq!(ClusterSecret::read(&good).expect("valid"), ClusterSecret::from_bytes(b"0123456789abcdef".to_vec()));
        let short = dir.join("short");
        std::fs::write(&short, "secret\n").expect("write");
        let err = ClusterSecret::read(&short).expect_err("too short");
        assert!(err.to_string().contains("holds 6 bytes"), "{err}");
        assert!(ClusterSecret::read(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
