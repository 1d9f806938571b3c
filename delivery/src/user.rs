//! Users and their credentials.
//!
//! Passwords are kept as RabbitMQ keeps them (`rabbit_password_hashing_sha256`): a random
//! 4-byte salt followed by SHA-256 of salt and password, never the password itself.

use parking_lot::RwLock;
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

const SALT_BYTES: usize = 4;

/// The user every fresh broker has, as in RabbitMQ.
pub const DEFAULT_USER: &str = "guest";
/// The default user's password.
pub const DEFAULT_PASSWORD: &str = "guest";

/// One user.
#[derive(Debug, Clone)]
pub struct User {
    /// The login name.
    pub name: String,
    /// Salt followed by the salted SHA-256 hash.
    password_hash: Vec<u8>,
    /// Whether the user may only connect from loopback (the default user's restriction).
    pub loopback_only: bool,
    /// Its tags, as RabbitMQ's (`administrator`, `monitoring`, `management`, ...): what the
    /// management API lets it do.
    pub tags: Vec<String>,
}

impl User {
    /// Its password hash as RabbitMQ's definitions carry it (`rabbit_password_hashing_sha256`:
    /// base64 of the salt and the hash).
    pub fn password_hash_base64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&self.password_hash)
    }
}

/// The name RabbitMQ gives the hashing of [`User::password_hash_base64`].
pub const HASHING_ALGORITHM: &str = "rabbit_password_hashing_sha256";
/// The tag of a user who may do everything.
pub const ADMINISTRATOR_TAG: &str = "administrator";

/// Why a login was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Unknown user or wrong password (deliberately not told apart).
    #[error("username or password not allowed")]
    BadCredentials,
    /// The user may only connect from loopback.
    #[error("user '{0}' can only connect via localhost")]
    LoopbackOnly(String),
}

/// The users the broker knows.
#[derive(Debug, Default)]
pub struct UserStore {
    users: RwLock<HashMap<String, User>>,
}

fn hash_with_salt(salt: &[u8], password: &str) -> Vec<u8> {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(password.as_bytes());
    let mut out = salt.to_vec();
    out.extend_from_slice(&hasher.finalize());
    out
}

impl UserStore {
    /// A store holding only guest/guest, limited to loopback connections.
    pub fn with_default_user() -> Self {
        let store = UserStore::default();
        store.add_user(DEFAULT_USER, DEFAULT_PASSWORD, true);
        if let Some(guest) = store.users.write().get_mut(DEFAULT_USER) {
            guest.tags = vec![ADMINISTRATOR_TAG.to_string()];
        }
        store
    }

    /// Adds or replaces a user.
    pub fn add_user(&self, name: &str, password: &str, loopback_only: bool) {
        let mut salt = [0u8; SALT_BYTES];
        rand::thread_rng().fill_bytes(&mut salt);
        let password_hash = hash_with_salt(&salt, password);
        let user = User { name: name.to_string(), password_hash, loopback_only, tags: Vec::new() };
        self.users.write().insert(name.to_string(), user);
    }

    /// Every user, by name.
    pub fn all(&self) -> Vec<User> {
        let mut users: Vec<User> = self.users.read().values().cloned().collect();
        users.sort_by(|a, b| a.name.cmp(&b.name));
        users
    }

    /// The user called `name`.
    pub fn get(&self, name: &str) -> Option<User> {
        self.users.read().get(name).cloned()
    }

    /// Checks a login from a peer (`from_loopback` tells where it connects from).
    pub fn authenticate(&self, name: &str, password: &str, from_loopback: bool) -> Result<User, AuthError> {
        let users = self.users.read();
        let user = users.get(name).ok_or(AuthError::BadCredentials)?;
        let salt = &user.password_hash[..SALT_BYTES.min(user.password_hash.len())];
        if hash_with_salt(salt, password) != user.password_hash {
            return Err(AuthError::BadCredentials);
        }
        if user.loopback_only && !from_loopback {
            return Err(AuthError::LoopbackOnly(name.to_string()));
        }
        Ok(user.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_only_from_loopback_and_only_with_its_password() {
        let store = UserStore::with_default_user();
        assert!(store.authenticate("guest", "guest", true).is_ok());
        assert_eq!(store.authenticate("guest", "nope", true).err(), Some(AuthError::BadCredentials));
        assert_eq!(store.authenticate("nobody", "guest", true).err(), Some(AuthError::BadCredentials));
        assert_eq!(store.authenticate("guest", "guest", false).err(), Some(AuthError::LoopbackOnly("guest".into())));
    }
}
