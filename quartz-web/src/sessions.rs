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
    /// Refused tokens by client address: the window's start and how many.
    guesses: Mutex<HashMap<std::net::IpAddr, (Instant, u32)>>,
}

/// The most refused tokens (a login or a bearer token) one client address
/// may send within [`GUESS_WINDOW`] by default
/// ([`Access::max_guesses`](crate::Access::max_guesses) sets another); past
/// that its token checks answer 429 until the window ends, so guessing runs
/// at a few tries a minute, not thousands a second.
pub const MAX_GUESSES: u32 = 10;
/// The window [`MAX_GUESSES`] counts within.
pub const GUESS_WINDOW: Duration = Duration::from_secs(60);
/// The most client addresses whose refusals are remembered; the oldest
/// windows go first.
const MAX_GUESSERS: usize = 10_000;

impl Sessions {
    /// How long `addr` must wait before a token of its is checked again, when
    /// it has used up its `max` refused tokens within [`GUESS_WINDOW`].
    pub fn guess_wait(&self, addr: std::net::IpAddr, max: u32) -> Option<Duration> {
        let guesses = self.guesses.lock();
        let (since, count) = guesses.get(&addr)?;
        let left = GUESS_WINDOW.checked_sub(since.elapsed())?;
        (*count >= max).then_some(left.max(Duration::from_secs(1)))
    }

    /// Counts a refused token from `addr`.
    pub fn guess_refused(&self, addr: std::net::IpAddr) {
        let mut guesses = self.guesses.lock();
        if guesses.len() >= MAX_GUESSERS && !guesses.contains_key(&addr) {
            guesses.retain(|_, (since, _)| since.elapsed() < GUESS_WINDOW);
            if guesses.len() >= MAX_GUESSERS
                && let Some(oldest) = guesses.iter().min_by_key(|(_, (since, _))| *since).map(|(a, _)| *a)
            {
                guesses.remove(&oldest);
            }
        }
        let entry = guesses.entry(addr).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= GUESS_WINDOW {
            *entry = (Instant::now(), 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
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
