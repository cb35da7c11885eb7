//! Who may do what: tokens, roles, the loopback rule, and the caller of a
//! request.
//!
//! - With no token configured, the server answers only requests from
//!   loopback (as an admin), and [`Access::check_listen`] refuses a
//!   non-loopback listening address.
//! - `QUARTZ_ADMIN_TOKEN` reads and writes; `QUARTZ_READ_TOKEN` only reads.
//!   The API takes `Authorization: Bearer TOKEN`; the console logs in with
//!   the token into a session cookie ([`crate::sessions`]). No or a wrong
//!   token: 401; the read token on a change: 403.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;

use crate::error::ApiError;
use crate::sessions::Sessions;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Read and change.
    Admin,
    /// Read only.
    Read,
}

impl Role {
    /// `admin` or `read`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Read => "read",
        }
    }
}

/// The access settings: the tokens, if any.
#[derive(Clone, Default)]
pub struct Access {
    /// The SHA-256 digest of the read-and-write token: a candidate is
    /// hashed and the digests compared in constant time, so the time a
    /// comparison takes depends on neither token's length nor content.
    admin_token: Option<[u8; 32]>,
    /// The digest of the read-only token.
    read_token: Option<[u8; 32]>,
    /// The most refused tokens a client address may send per
    /// [`GUESS_WINDOW`](crate::sessions::GUESS_WINDOW); `None` is
    /// [`MAX_GUESSES`](crate::sessions::MAX_GUESSES).
    max_guesses: Option<u32>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("admin_token", &self.admin_token.map(|_| "set"))
            .field("read_token", &self.read_token.map(|_| "set"))
            .field("max_guesses", &self.max_guesses())
            .finish()
    }
}

/// A token's SHA-256 digest.
fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// The environment variable of the read-and-write token.
pub const ADMIN_TOKEN_ENV: &str = "QUARTZ_ADMIN_TOKEN";
/// The environment variable of the read-only token.
pub const READ_TOKEN_ENV: &str = "QUARTZ_READ_TOKEN";

/// Equal, in time that depends on the lengths only.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Access {
    /// The tokens given (an empty token counts as none).
    pub fn tokens(admin: Option<String>, read: Option<String>) -> Access {
        Access {
            admin_token: admin.filter(|t| !t.is_empty()).as_deref().map(digest),
            read_token: read.filter(|t| !t.is_empty()).as_deref().map(digest),
            max_guesses: None,
        }
    }

    /// The same access, with at most `max` refused tokens per client
    /// address per minute (default [`MAX_GUESSES`](crate::sessions::MAX_GUESSES)).
    #[must_use]
    pub fn with_max_guesses(mut self, max: u32) -> Access {
        self.max_guesses = Some(max);
        self
    }

    /// The most refused tokens a client address may send per minute.
    pub fn max_guesses(&self) -> u32 {
        self.max_guesses.unwrap_or(crate::sessions::MAX_GUESSES)
    }

    /// The tokens in [`ADMIN_TOKEN_ENV`] and [`READ_TOKEN_ENV`].
    pub fn from_env() -> Access {
        Access::tokens(std::env::var(ADMIN_TOKEN_ENV).ok(), std::env::var(READ_TOKEN_ENV).ok())
    }

    /// No token: loopback callers only.
    pub fn loopback_only() -> Access {
        Access::default()
    }

    /// Whether any token is configured.
    pub fn has_tokens(&self) -> bool {
        self.admin_token.is_some() || self.read_token.is_some()
    }

    /// Whether a server may listen on `addr`: without a token, only on a
    /// loopback address.
    ///
    /// # Errors
    ///
    /// Why not, for people.
    pub fn check_listen(&self, addr: SocketAddr) -> Result<(), String> {
        if self.has_tokens() || addr.ip().is_loopback() {
            Ok(())
        } else {
            Err(format!(
                "refusing to listen on {addr} with no token: set {ADMIN_TOKEN_ENV} (and {READ_TOKEN_ENV} for \
                 read-only access), or listen on a loopback address such as 127.0.0.1"
            ))
        }
    }

    /// The role a token grants.
    pub fn role_of(&self, token: &str) -> Option<Role> {
        let candidate = digest(token);
        let matches = |t: &Option<[u8; 32]>| t.as_ref().is_some_and(|t| same(t, &candidate));
        if matches(&self.admin_token) {
            Some(Role::Admin)
        } else if matches(&self.read_token) {
            Some(Role::Read)
        } else {
            None
        }
    }
}

/// Who made a request, and what they may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// What they may do.
    pub role: Role,
    /// How the change log names them: `http:admin`, `http:read` or
    /// `http:local` (loopback with no token configured); with a token and
    /// an [`ACTOR_HEADER`], the role and the name given
    /// (`http:admin:alice`).
    pub actor: String,
    /// The console session they came with, if any.
    pub session: Option<String>,
    /// Whether a session caller sent the session's CSRF token in the
    /// [`CSRF_HEADER`] header (a change by session needs it).
    pub csrf_ok: bool,
}

/// The header a console page's script sends its session's CSRF token in,
/// for a change through the API.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The header a caller with a token names itself in (a person, a script),
/// recorded in the change log beside the token's role: up to 64 letters,
/// digits and `. _ - @ +`.
pub const ACTOR_HEADER: &str = "x-quartz-actor";

/// The actor a bearer-token call is recorded as: its role's, with the name
/// in [`ACTOR_HEADER`] when one is given.
fn named_actor(parts: &Parts, role: Role) -> Result<String, ApiError> {
    let Some(value) = parts.headers.get(ACTOR_HEADER) else {
        return Ok(actor_of(role).to_owned());
    };
    let name = value.to_str().unwrap_or("").trim();
    let allowed = |c: char| c.is_ascii_alphanumeric() || ".-_@+".contains(c);
    if name.is_empty() || name.len() > 64 || !name.chars().all(allowed) {
        return Err(ApiError::invalid(
            "X-Quartz-Actor",
            "X-Quartz-Actor must be 1 to 64 letters, digits and . _ - @ +",
        ));
    }
    Ok(format!("{}:{name}", actor_of(role)))
}

impl Caller {
    /// A 403 unless the caller may change things.
    ///
    /// # Errors
    ///
    /// 403 for the read-only role.
    /// 403 too for a change by session cookie without the session's CSRF
    /// token in [`CSRF_HEADER`].
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.session.is_some() && !self.csrf_ok {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "csrf",
                format!("a change by session cookie needs the session's CSRF token in the {CSRF_HEADER} header"),
            ));
        }
        match self.role {
            Role::Admin => Ok(()),
            Role::Read => Err(ApiError::forbidden("the read-only token cannot change anything")),
        }
    }
}

/// What the caller extractor needs from the router's state.
pub trait AccessState {
    /// The access settings.
    fn access(&self) -> &Access;
    /// The console's sessions.
    fn sessions(&self) -> &Sessions;
}

/// The headers a proxy adds to a request it forwards.
const FORWARDING_HEADERS: [&str; 4] = ["forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip"];

/// How long the answer to a refused token waits once its address is past
/// its limit of refused tokens: a guesser tries a token a second at most
/// per connection.
pub const GUESS_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// The name of the console's session cookie.
pub const SESSION_COOKIE: &str = "quartz_session";

/// A cookie's value from a request's `Cookie` headers.
pub fn cookie<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Who the request is from, by its bearer token, its session cookie, or (with
/// no token configured) its loopback address.
pub fn caller_of(parts: &Parts, access: &Access, sessions: &Sessions) -> Result<Caller, ApiError> {
    if !access.has_tokens() {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        // A request a proxy forwarded comes from loopback whoever sent it:
        // behind a reverse proxy on this machine, loopback-only would make
        // every client an admin.
        if let Some(header) = FORWARDING_HEADERS.iter().find(|h| parts.headers.contains_key(**h)) {
            return Err(ApiError::forbidden(format!(
                "no token is configured, so only this machine may call, and this request was forwarded by a proxy \
                 ({header}); configure QUARTZ_ADMIN_TOKEN / QUARTZ_READ_TOKEN to serve behind one"
            )));
        }
        return match peer {
            Some(addr) if addr.ip().is_loopback() => Ok(Caller {
                role: Role::Admin,
                actor: "http:local".to_owned(),
                session: None,
                csrf_ok: true,
            }),
            Some(addr) => Err(ApiError::forbidden(format!(
                "no token is configured, so only loopback may call; {addr} is not loopback"
            ))),
            None => Err(ApiError::forbidden(
                "no token is configured and the caller's address is unknown (serve the router with \
                 into_make_service_with_connect_info::<SocketAddr>())",
            )),
        };
    }
    if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        // The scheme's name is case-insensitive (RFC 9110, section 11.1).
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.trim_start().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token)
            .ok_or_else(|| ApiError::unauthorized("Authorization must be `Bearer TOKEN`"))?;
        // The right token always passes: behind a proxy every client has
        // the proxy's address, and a guesser there must not lock the
        // admins out. A wrong one past the address's limit is slowed
        // (see `FromRequestParts for Caller`) and answered 429.
        let Some(role) = access.role_of(token.trim()) else {
            tracing::warn!(client = ?peer, "API call refused: the token is not recognised");
            if let Some(ip) = peer {
                if let Some(wait) = sessions.guess_wait(ip, access.max_guesses()) {
                    return Err(ApiError::too_many_guesses(wait));
                }
                sessions.guess_refused(ip);
            }
            return Err(ApiError::unauthorized("the token is not recognised"));
        };
        return Ok(Caller {
            role,
            actor: named_actor(parts, role)?,
            session: None,
            csrf_ok: true,
        });
    }
    if let Some(id) = cookie(parts, SESSION_COOKIE)
        && let Some((role, csrf)) = sessions.get(id)
    {
        let sent = parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        return Ok(Caller {
            role,
            actor: actor_of(role).to_owned(),
            session: Some(id.to_owned()),
            csrf_ok: same(sent.as_bytes(), csrf.as_bytes()),
        });
    }
    Err(ApiError::unauthorized(
        "a token is required: send Authorization: Bearer TOKEN",
    ))
}

pub(crate) fn actor_of(role: Role) -> &'static str {
    match role {
        Role::Admin => "http:admin",
        Role::Read => "http:read",
    }
}

impl<St: AccessState + Send + Sync> FromRequestParts<St> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &St) -> Result<Caller, ApiError> {
        let caller = caller_of(parts, state.access(), state.sessions());
        if caller
            .as_ref()
            .is_err_and(|e| e.status == axum::http::StatusCode::TOO_MANY_REQUESTS)
        {
            // A guesser past its limit waits for each answer.
            tokio::time::sleep(GUESS_DELAY).await;
        }
        caller
    }
}

/// Whether a `Host` header names this machine's loopback (`localhost`,
/// `127.0.0.1`, `[::1]`, with or without a port).
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.to_ascii_lowercase().ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Why a request is refused before any route sees it, if it is:
///
/// - a change (any method but `GET`, `HEAD` and `OPTIONS`) that a browser
///   sent on another site's behalf: `Sec-Fetch-Site` says `cross-site` or
///   `same-site`, or `Origin` is not this server's own;
/// - with no token configured, a `Host` that is not a loopback name, so that a
///   page whose domain was rebound to 127.0.0.1 cannot reach the server.
pub fn refusal(parts: &Parts, access: &Access) -> Option<ApiError> {
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !access.has_tokens() && !host.is_empty() && !loopback_host(host) {
        return Some(ApiError::forbidden(format!(
            "no token is configured, so only loopback names are answered; Host {host:?} is not one"
        )));
    }
    if matches!(parts.method.as_str(), "GET" | "HEAD" | "OPTIONS") {
        return None;
    }
    let site = parts.headers.get("sec-fetch-site").and_then(|h| h.to_str().ok());
    let origin = parts.headers.get(header::ORIGIN).and_then(|h| h.to_str().ok());
    let foreign_origin = origin.is_some_and(|o| {
        let authority = o.strip_prefix("http://").or_else(|| o.strip_prefix("https://"));
        !authority.is_some_and(|a| a.eq_ignore_ascii_case(host))
    });
    if matches!(site, Some("cross-site" | "same-site")) || foreign_origin {
        return Some(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "cross_origin",
            "a change sent from another site's page is refused",
        ));
    }
    None
}

/// The middleware applying [`refusal`] to every request.
pub async fn guard<St: AccessState + Clone + Send + Sync + 'static>(
    axum::extract::State(state): axum::extract::State<St>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (parts, body) = request.into_parts();
    if let Some(refused) = refusal(&parts, state.access()) {
        return refused.into_response();
    }
    next.run(axum::extract::Request::from_parts(parts, body)).await
}
