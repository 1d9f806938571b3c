//! Password hashes as RabbitMQ stores them, so that users exported from RabbitMQ log in to
//! Warren unchanged: base64 of a 4-byte random salt followed by the digest of salt and
//! password. New hashes use SHA-256 (`rabbit_password_hashing_sha256`, RabbitMQ's default);
//! SHA-512 and the legacy MD5 are read too.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use md5::Md5;
use rand::RngCore;
use sha2::{Digest, Sha256, Sha512};

/// Bytes of salt in front of the digest.
const SALT_BYTES: usize = 4;

/// How a password is hashed: RabbitMQ's `hashing_algorithm` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashingAlgorithm {
    /// `rabbit_password_hashing_sha256`, the default.
    Sha256,
    /// `rabbit_password_hashing_sha512`.
    Sha512,
    /// `rabbit_password_hashing_md5`, RabbitMQ's legacy hashing.
    Md5,
}

impl HashingAlgorithm {
    /// Every algorithm, with the name definitions carry.
    const NAMES: [(HashingAlgorithm, &'static str); 3] = [
        (HashingAlgorithm::Sha256, "rabbit_password_hashing_sha256"),
        (HashingAlgorithm::Sha512, "rabbit_password_hashing_sha512"),
        (HashingAlgorithm::Md5, "rabbit_password_hashing_md5"),
    ];

    /// Its name in definitions.
    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(algorithm, _)| *algorithm == self).map_or("", |(_, name)| name)
    }

    /// The algorithm called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::NAMES.iter().find(|(_, known)| *known == name).map(|(algorithm, _)| *algorithm)
    }

    fn digest(self, salt: &[u8], password: &str) -> Vec<u8> {
        fn run<D: Digest>(salt: &[u8], password: &str) -> Vec<u8> {
            let mut hasher = D::new();
            hasher.update(salt);
            hasher.update(password.as_bytes());
            hasher.finalize().to_vec()
        }
        match self {
            HashingAlgorithm::Sha256 => run::<Sha256>(salt, password),
            HashingAlgorithm::Sha512 => run::<Sha512>(salt, password),
            HashingAlgorithm::Md5 => run::<Md5>(salt, password),
        }
    }

    fn digest_bytes(self) -> usize {
        match self {
            HashingAlgorithm::Sha256 => 32,
            HashingAlgorithm::Sha512 => 64,
            HashingAlgorithm::Md5 => 16,
        }
    }
}

/// Why a stored hash cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordHashError {
    /// The algorithm is not one RabbitMQ has.
    #[error("unknown hashing_algorithm '{0}' (use rabbit_password_hashing_sha256, _sha512 or _md5)")]
    UnknownAlgorithm(String),
    /// The hash is not base64 of salt and digest.
    #[error("password_hash is not base64 of a 4-byte salt and a {algorithm} digest")]
    Malformed {
        /// The algorithm it was read for.
        algorithm: &'static str,
    },
}

/// A salted password hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordHash {
    algorithm: HashingAlgorithm,
    /// The salt followed by the digest.
    salted: Vec<u8>,
}

impl PasswordHash {
    /// The hash of `password` with a fresh random salt, in the default algorithm.
    pub fn of(password: &str) -> Self {
        let mut salt = [0u8; SALT_BYTES];
        rand::thread_rng().fill_bytes(&mut salt);
        Self::with_salt(HashingAlgorithm::Sha256, salt, password)
    }

    fn with_salt(algorithm: HashingAlgorithm, salt: [u8; SALT_BYTES], password: &str) -> Self {
        let mut salted = salt.to_vec();
        salted.extend_from_slice(&algorithm.digest(&salt, password));
        PasswordHash { algorithm, salted }
    }

    /// A hash as definitions carry it: `password_hash` (base64) hashed by `hashing_algorithm`.
    pub fn from_definition(hashing_algorithm: &str, password_hash: &str) -> Result<Self, PasswordHashError> {
        let algorithm = HashingAlgorithm::from_name(hashing_algorithm)
            .ok_or_else(|| PasswordHashError::UnknownAlgorithm(hashing_algorithm.to_string()))?;
        let malformed = PasswordHashError::Malformed { algorithm: algorithm.name() };
        let salted = STANDARD.decode(password_hash.trim()).map_err(|_| malformed.clone())?;
        if salted.len() != SALT_BYTES + algorithm.digest_bytes() {
            return Err(malformed);
        }
        Ok(PasswordHash { algorithm, salted })
    }

    /// The base64 text definitions carry.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(&self.salted)
    }

    /// Its algorithm.
    pub fn algorithm(&self) -> HashingAlgorithm {
        self.algorithm
    }

    /// Whether `password` is the one hashed. Compares in constant time, so that the time
    /// taken tells nothing of how much of a guess was right.
    pub fn verifies(&self, password: &str) -> bool {
        let (salt, digest) = self.salted.split_at(SALT_BYTES);
        let computed = self.algorithm.digest(salt, password);
        computed.len() == digest.len() && computed.iter().zip(digest).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA256: &str = "rabbit_password_hashing_sha256";

    #[test]
    fn rabbitmq_guides_worked_example() {
        let salt = [0x90, 0x8D, 0xC6, 0x0A];
        let hash = PasswordHash::with_salt(HashingAlgorithm::Sha256, salt, "test12");
        assert_eq!(hash.to_base64(), "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR");
    }

    #[test]
    fn hashes_made_by_rabbitmq_verify() {
        for text in
            ["27cx5+wEi8R8uwTeTr3hk5azuV3yYxxAtwPPhCyrbdsxVhqq", "TBybOvomyVw6BqBU/fHCEpVhDO7fLdQ4kxZDUpt6hagCxV8I"]
        {
            let hash = PasswordHash::from_definition(SHA256, text).expect("well-formed");
            assert!(hash.verifies("foobarbaz"));
            assert!(!hash.verifies("foobarba"));
        }
        let guest = PasswordHash::from_definition(SHA256, "BMfxN8drrYcIqXZMr+pWTpDT0nMcOagMduLX0bjr4jwud/pN").unwrap();
        assert!(guest.verifies("guest"));
    }

    #[test]
    fn sha512_and_md5_hashes_round_trip_through_definitions() {
        for algorithm in [HashingAlgorithm::Sha512, HashingAlgorithm::Md5] {
            let made = PasswordHash::with_salt(algorithm, [1, 2, 3, 4], "s3cret ü€");
            let read = PasswordHash::from_definition(algorithm.name(), &made.to_base64()).unwrap();
            assert!(read.verifies("s3cret ü€"));
            assert!(!read.verifies("s3cret"));
        }
    }

    #[test]
    fn malformed_hashes_and_unknown_algorithms_are_refused() {
        assert!(matches!(PasswordHash::from_definition("bcrypt", "x"), Err(PasswordHashError::UnknownAlgorithm(_))));
        assert!(matches!(
            PasswordHash::from_definition(SHA256, "not base64!"),
            Err(PasswordHashError::Malformed { .. })
        ));
        // A SHA-512-sized hash read as SHA-256.
        let long = PasswordHash::with_salt(HashingAlgorithm::Sha512, [0; 4], "x").to_base64();
        assert!(matches!(PasswordHash::from_definition(SHA256, &long), Err(PasswordHashError::Malformed { .. })));
    }

    #[test]
    fn fresh_hashes_are_salted() {
        let (a, b) = (PasswordHash::of("same"), PasswordHash::of("same"));
        assert!(a.verifies("same") && b.verifies("same"));
        assert_ne!(a.to_base64(), b.to_base64());
    }
}
