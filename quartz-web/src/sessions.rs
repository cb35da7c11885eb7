//! The console's login sessions: a random id in an HttpOnly, SameSite=Strict
//! cookie, mapped in memory to the role its token granted and a CSRF token
//! that every form must carry. Sessions live in the serving process (a
//! restart logs everyone out) and expire after [`SESSION_TTL`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::access::Role;

/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The most sessions kept; the oldest go first.
const MAX_SESSIONS: usize = 10_000;

#[derive(Debug, Clone)]
struct Session {
    role: Role,
    csrf: String,
    created: Instant,
}

/// The sessions of one server.
#[derive(Debug, Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

/// 32 random bytes, hex.
///
/// # Panics
///
/// When the operating system has no randomness to give, which leaves no safe
/// way to make a session.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// Opens a session for a role; returns its id and CSRF token.
    pub fn open(&self, role: Role) -> (String, String) {
        let id = random_token();
        let csrf = random_token();
        let mut by_id = self.by_id.lock();
        by_id.retain(|_, s| s.created.elapsed() < SESSION_TTL);
        if by_id.len() >= MAX_SESSIONS
            && let Some(oldest) = by_id.iter().min_by_key(|(_, s)| s.created).map(|(k, _)| k.clone())
        {
            by_id.remove(&oldest);
        }
        by_id.insert(
            id.clone(),
            Session {
                role,
                csrf: csrf.clone(),
                created: Instant::now(),
            },
        );
        (id, csrf)
    }

    /// The role of a live session.
    pub fn role(&self, id: &str) -> Option<Role> {
        self.live(id).map(|s| s.role)
    }

    /// The role and CSRF token of a live session.
    pub fn get(&self, id: &str) -> Option<(Role, String)> {
        self.live(id).map(|s| (s.role, s.csrf))
    }

    /// The CSRF token of a live session.
    pub fn csrf(&self, id: &str) -> Option<String> {
        self.live(id).map(|s| s.csrf)
    }

    fn live(&self, id: &str) -> Option<Session> {
        let by_id = self.by_id.lock();
        by_id.get(id).filter(|s| s.created.elapsed() < SESSION_TTL).cloned()
    }

    /// Ends a session.
    pub fn close(&self, id: &str) {
        self.by_id.lock().remove(id);
    }
}
