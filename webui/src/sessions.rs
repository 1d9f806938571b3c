//! The UI's login sessions, kept in memory: a random token in an `HttpOnly`, `SameSite=Strict`
//! cookie, valid for [`SESSION_TTL`] from its last use; a restart logs everyone out. Each
//! session remembers the revision of its user's access it was opened under: once the user's
//! password, tags or permissions change, or the user is deleted, the session is over (see
//! `authentication`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use parking_lot::Mutex;
use rand::RngCore;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a session lives after its last use.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 60 * 60);
/// Sessions kept at most; the oldest go first when more log in.
const MAX_SESSIONS: usize = 10_000;
/// Sessions one user keeps at most; its oldest goes first, so that one user logging in again
/// and again cannot push everyone else's sessions out.
const MAX_SESSIONS_PER_USER: usize = 64;
/// Random bytes in a session token.
const TOKEN_BYTES: usize = 32;

/// One session.
#[derive(Debug, Clone)]
struct Session {
    user: String,
    revision: u64,
    used: Instant,
}

/// The sessions, by token.
#[derive(Debug, Default)]
pub struct Sessions {
    by_token: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// A new session for `user`, whose access is at `revision`; its token.
    pub fn open(&self, user: &str, revision: u64) -> String {
        let mut bytes = [0u8; TOKEN_BYTES];
        rand::thread_rng().fill_bytes(&mut bytes);
        let token = URL_SAFE_NO_PAD.encode(bytes);
        let mut sessions = self.by_token.lock();
        let now = Instant::now();
        sessions.retain(|_, session| now.duration_since(session.used) < SESSION_TTL);
        let users = sessions.values().filter(|session| session.user == user).count();
        if users >= MAX_SESSIONS_PER_USER || sessions.len() >= MAX_SESSIONS {
            let own = users >= MAX_SESSIONS_PER_USER;
            let candidates = sessions.iter().filter(|(_, session)| !own || session.user == user);
            let oldest = candidates.min_by_key(|(_, session)| session.used).map(|(token, _)| token.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(token.clone(), Session { user: user.to_string(), revision, used: now });
        token
    }

    /// The user of session `token` and the revision it was opened under, if it is live (its
    /// life starts again).
    pub fn find(&self, token: &str) -> Option<(String, u64)> {
        let mut sessions = self.by_token.lock();
        let session = sessions.get_mut(token)?;
        if session.used.elapsed() >= SESSION_TTL {
            sessions.remove(token);
            return None;
        }
        session.used = Instant::now();
        Some((session.user.clone(), session.revision))
    }

    /// Ends session `token`.
    pub fn close(&self, token: &str) {
        self.by_token.lock().remove(token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_know_their_user_until_closed() {
        let sessions = Sessions::default();
        let token = sessions.open("guest", 7);
        assert_eq!(sessions.find(&token), Some(("guest".to_string(), 7)));
        assert_eq!(sessions.find("forged"), None);
        sessions.close(&token);
        assert_eq!(sessions.find(&token), None);
    }

    #[test]
    fn a_user_logging_in_again_and_again_pushes_out_only_its_own_sessions() {
        let sessions = Sessions::default();
        let admin = sessions.open("admin", 1);
        let first = sessions.open("flooder", 1);
        for _ in 0..MAX_SESSIONS_PER_USER {
            sessions.open("flooder", 1);
        }
        assert!(sessions.find(&admin).is_some(), "another user's session stays");
        assert_eq!(sessions.find(&first), None, "the flooder's oldest went");
    }
}
