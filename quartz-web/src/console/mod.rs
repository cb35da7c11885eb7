//! The web console: server-rendered pages over the admin surface, for people.
//!
//! - Overview (nodes, fires per minute, outcomes, lateness chart), jobs (a
//!   table with search and pause, resume, fire now and delete, behind a
//!   confirmation page), a create and edit form with a live cron preview and
//!   errors beside the field at fault, a job's page (triggers, next fires,
//!   history, errors, changes), history with filters, nodes and the change
//!   log.
//! - Login: with tokens configured, `/login` takes a token and opens a
//!   session ([`crate::sessions`]) in an HttpOnly, SameSite=Strict cookie;
//!   with none, loopback callers get a session without logging in. Every form
//!   carries the session's CSRF token and is refused without it.
//! - Every value is escaped by maud; pages run no inline script, and the
//!   Content-Security-Policy allows only the console's own embedded assets.

mod actions;
mod backfill;
mod calendars;
mod enqueue;
mod form;
mod history;
mod html;
mod pages;

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, OriginalUri, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};
use quartz_core::admin::AdminError;

use crate::access::{self, Role, SESSION_COOKIE};
use crate::{AppState, Router};

/// The console's routes, at the router's root.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(pages::overview))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/jobs", get(pages::jobs))
        .route("/new", get(form::new_page).post(form::create))
        .route("/jobs/{name}", get(pages::job))
        .route("/jobs/{name}/edit", get(form::edit_page).post(form::edit))
        .route("/jobs/{name}/delete", get(pages::delete_page).post(actions::delete))
        .route("/jobs/{name}/pause", post(actions::pause))
        .route("/jobs/{name}/resume", post(actions::resume))
        .route("/jobs/{name}/trigger", post(actions::trigger))
        .route("/jobs/{name}/backfill", post(backfill::backfill))
        .route("/jobs/{name}/enqueue", post(enqueue::enqueue))
        .route("/fires/{id}/retry", post(actions::retry))
        .route("/scheduler/pause", post(actions::pause_all))
        .route("/scheduler/resume", post(actions::resume_all))
        .route("/fires", get(history::fires))
        .route("/nodes", get(pages::nodes))
        .route("/changes", get(pages::changes))
        .route("/calendars", get(calendars::list))
        .route("/new-calendar", get(calendars::new_page).post(calendars::create))
        .route("/calendars/{name}", get(calendars::show).post(calendars::replace))
        .route("/calendars/{name}/delete", post(calendars::delete))
        .route("/assets/console.css", get(css))
        .route("/assets/console.js", get(js))
}

/// Who is looking at a page, and what the page needs to know of them.
#[derive(Debug, Clone)]
pub(crate) struct Viewer {
    pub(crate) role: Role,
    pub(crate) actor: &'static str,
    /// The session's CSRF token, for the forms.
    pub(crate) csrf: String,
    /// Where the console is mounted (`""` at the root, `/quartz` nested).
    pub(crate) base: String,
    pub(crate) scheduler: String,
    /// Logged in with a token (and so can log out).
    pub(crate) logged_in: bool,
    session: String,
    /// A session opened by this request, to hand the browser.
    set_cookie: Option<String>,
}

impl Viewer {
    /// Whether this session may only read: its forms show, their buttons
    /// are disabled, and a line says why.
    pub(crate) fn read_only(&self) -> bool {
        self.role != Role::Admin
    }

    /// The query string of a redirect's notice (`?notice=saved&subject=NAME`),
    /// sealed for this session.
    pub(crate) fn notice_query(&self, code: &str, subject: &str) -> String {
        html::query(&[
            ("notice", code),
            ("subject", subject),
            ("seal", &self.notice_seal(code, subject)),
        ])
    }

    /// A notice's seal: a digest of the session's CSRF token (a secret of
    /// this session's) with the notice, so that only this server, for this
    /// session, makes a notice the console shows.
    pub(crate) fn notice_seal(&self, code: &str, subject: &str) -> String {
        use sha2::Digest as _;
        let digest = sha2::Sha256::new()
            .chain_update(self.csrf.as_bytes())
            .chain_update([0])
            .chain_update(code.as_bytes())
            .chain_update([0])
            .chain_update(subject.as_bytes())
            .finalize();
        digest[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A page's response, with the new session's cookie if one was opened.
    pub(crate) fn respond(&self, status: StatusCode, markup: Markup) -> Response {
        let mut response = (status, markup).into_response();
        if let Some(cookie) = &self.set_cookie
            && let Ok(value) = HeaderValue::from_str(cookie)
        {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
        response
    }

    /// A page with status 200.
    pub(crate) fn ok(&self, markup: Markup) -> Response {
        self.respond(StatusCode::OK, markup)
    }

    /// A 303 to a path under the console.
    pub(crate) fn redirect(&self, path: &str) -> Response {
        see_other(&format!("{}{path}", self.base))
    }

    /// The page of an admin error.
    pub(crate) fn failure(&self, e: &AdminError) -> Response {
        // A page, not an API: a stale form is a conflict to resolve.
        let status = match e {
            AdminError::Stale { .. } => StatusCode::CONFLICT,
            other => crate::error::status_of(other),
        };
        let (back, label) = match e {
            AdminError::CalendarNotFound { .. } | AdminError::InUse { .. } => ("/calendars", "Back to the calendars"),
            AdminError::Stale { kind: "calendar", .. } => ("/calendars", "Back to the calendars"),
            _ => ("/jobs", "Back to the jobs"),
        };
        let body = html! { p.error { (e.to_string()) } p { a href={ (self.base) (back) } { (label) } } };
        self.respond(
            status,
            html::page(self, html::Section::None, "Something went wrong", None, body),
        )
    }

    /// The refusal of a form without this session's CSRF token, or of a change by the
    /// read-only role.
    fn refuse_form(&self, fields: &Fields) -> Option<Response> {
        if !access::same(fields.get("csrf").as_bytes(), self.csrf.as_bytes()) {
            return Some(plain(
                StatusCode::FORBIDDEN,
                &self.base,
                "Form refused",
                "This form did not carry this session's CSRF token: it is stale (the server restarted or \
                 the session ended) or it came from another site. Reload the page and try again.",
            ));
        }
        if self.role != Role::Admin {
            return Some(plain(
                StatusCode::FORBIDDEN,
                &self.base,
                "Read only",
                "You are logged in with the read-only token, which cannot change anything.",
            ));
        }
        None
    }
}

/// Where the console is mounted: the original path less the path routed.
fn base_of(parts: &Parts) -> String {
    let full = parts
        .extensions
        .get::<OriginalUri>()
        .map_or(parts.uri.path(), |o| o.0.path());
    let own = parts.uri.path();
    let base = if own == "/" {
        full
    } else {
        full.strip_suffix(own).unwrap_or("")
    };
    base.trim_end_matches('/').to_owned()
}

fn session_cookie(base: &str, id: &str, max_age: Option<u32>) -> String {
    let path = if base.is_empty() { "/" } else { base };
    let age = max_age.map(|a| format!("; Max-Age={a}")).unwrap_or_default();
    format!("{SESSION_COOKIE}={id}; Path={path}; HttpOnly; SameSite=Strict{age}")
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Viewer, Response> {
        let base = base_of(parts);
        let scheduler = state.admin.scheduler().to_owned();
        let existing = access::cookie(parts, SESSION_COOKIE)
            .and_then(|id| state.sessions.get(id).map(|(role, csrf)| (id.to_owned(), role, csrf)));
        if !state.access.has_tokens() {
            // Loopback only: the caller check refuses any other peer.
            access::caller_of(parts, &state.access, &state.sessions)
                .map_err(|e| plain(e.status, &base, "Refused", &e.message))?;
            let (session, csrf, set_cookie) = match existing {
                Some((id, _, csrf)) => (id, csrf, None),
                None => {
                    let (id, csrf) = state.sessions.open(Role::Admin);
                    let cookie = session_cookie(&base, &id, None);
                    (id, csrf, Some(cookie))
                }
            };
            return Ok(Viewer {
                role: Role::Admin,
                actor: "http:local",
                csrf,
                base,
                scheduler,
                logged_in: false,
                session,
                set_cookie,
            });
        }
        match existing {
            Some((session, role, csrf)) => Ok(Viewer {
                role,
                actor: access::actor_of(role),
                csrf,
                base,
                scheduler,
                logged_in: true,
                session,
                set_cookie: None,
            }),
            None => {
                let here = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                let next = if parts.method == axum::http::Method::GET {
                    here
                } else {
                    "/"
                };
                Err(see_other(&format!("{base}/login{}", html::query(&[("next", next)]))))
            }
        }
    }
}

/// A form that changes something: who sent it and its fields, extracted
/// only when it carries this session's CSRF token and the session may
/// change things (the refusal page otherwise). Takes the body, so it is a
/// handler's last argument.
pub(crate) struct AdminForm {
    pub(crate) viewer: Viewer,
    pub(crate) fields: Fields,
}

impl FromRequest<AppState> for AdminForm {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<AdminForm, Response> {
        let (mut parts, body) = request.into_parts();
        let viewer = Viewer::from_request_parts(&mut parts, state).await?;
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields = Fields::parse(&body);
        match viewer.refuse_form(&fields) {
            Some(refused) => Err(refused),
            None => Ok(AdminForm { viewer, fields }),
        }
    }
}

/// A form's fields.
#[derive(Debug, Default)]
pub(crate) struct Fields(HashMap<String, String>);

impl Fields {
    /// The fields of an `application/x-www-form-urlencoded` body.
    pub(crate) fn parse(body: &[u8]) -> Fields {
        Fields(form_urlencoded::parse(body).into_owned().collect())
    }

    /// A field's value, `""` when absent.
    pub(crate) fn get(&self, name: &str) -> &str {
        self.0.get(name).map_or("", String::as_str)
    }

    /// A field's value, `None` when the body has no such field.
    pub(crate) fn opt(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A checkbox: present means on.
    pub(crate) fn on(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// The version of the job or calendar a form was filled from, when it
    /// carries one: a write made against it is refused if it changed since.
    pub(crate) fn version(&self) -> Option<i64> {
        self.opt("version").and_then(|v| v.trim().parse().ok())
    }
}

fn see_other(location: &str) -> Response {
    let location = if location.is_empty() { "/" } else { location };
    (StatusCode::SEE_OTHER, [(header::LOCATION, location.to_owned())]).into_response()
}

/// A page outside the frame (login, refusals).
fn plain(status: StatusCode, base: &str, title: &str, message: &str) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (html::head(base, title, false))
            body.plain {
                main.narrow {
                    h1 { (title) }
                    p.error { (message) }
                    p { a href=(html::at(base, "/")) { "Back to the console" } }
                }
            }
        }
    };
    (status, markup).into_response()
}

/// Where a login may send the browser: a path on this server, nothing else.
/// Browsers drop tabs and line breaks from a URL and read a backslash as a
/// slash, so `/\t/evil.com` would be `//evil.com`, another site: a path
/// with any control character, space or backslash is refused.
fn safe_next(next: &str) -> &str {
    if next.starts_with('/')
        && !next.starts_with("//")
        && !next.chars().any(|c| c == '\\' || c.is_control() || c.is_whitespace())
    {
        next
    } else {
        "/"
    }
}

fn login_form(base: &str, next: &str, error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (html::head(base, "Log in", false))
            body.plain {
                main.narrow {
                    h1 { "quartz" }
                    form.login method="post" action={ (base) "/login" } {
                        input type="hidden" name="next" value=(next);
                        label for="token" { "Token" }
                        input #token type="password" name="token" autocomplete="current-password" autofocus required;
                        @if let Some(error) = error { p.field-error { (error) } }
                        p.hint { "QUARTZ_ADMIN_TOKEN to read and change, QUARTZ_READ_TOKEN to read only." }
                        button type="submit" { "Log in" }
                    }
                }
            }
        }
    }
}

#[derive(Debug, serde::Deserialize)]
struct NextQuery {
    next: Option<String>,
}

/// Where the console is mounted, for pages that have no viewer.
#[derive(Debug)]
struct Base(String);

impl<St: Send + Sync> FromRequestParts<St> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &St) -> Result<Base, Self::Rejection> {
        Ok(Base(base_of(parts)))
    }
}

/// The client's address, when the server was given it (served with
/// `into_make_service_with_connect_info::<SocketAddr>()`).
#[derive(Debug)]
struct Peer(Option<std::net::IpAddr>);

impl<St: Send + Sync> FromRequestParts<St> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &St) -> Result<Peer, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}

async fn login_page(
    State(state): State<AppState>,
    Base(base): Base,
    axum::extract::Query(q): axum::extract::Query<NextQuery>,
) -> Response {
    if !state.access.has_tokens() {
        return see_other(&html::at(&base, "/"));
    }
    let next = safe_next(q.next.as_deref().unwrap_or("/"));
    login_form(&base, next, None).into_response()
}

async fn login(State(state): State<AppState>, Base(base): Base, Peer(peer): Peer, body: Bytes) -> Response {
    let fields = Fields::parse(&body);
    let next = safe_next(fields.get("next"));
    // The right token always logs in; a wrong one past the address's limit
    // is slowed and answered 429 (see `access::caller_of`).
    match state.access.role_of(fields.get("token").trim()) {
        Some(role) => {
            let (id, _) = state.sessions.open(role);
            let mut response = see_other(&html::at(&base, next));
            if let Ok(cookie) = HeaderValue::from_str(&session_cookie(&base, &id, None)) {
                response.headers_mut().append(header::SET_COOKIE, cookie);
            }
            tracing::info!(role = role.as_str(), client = ?peer, "console login");
            response
        }
        None => {
            if let Some(wait) = peer.and_then(|ip| state.sessions.guess_wait(ip, state.access.max_guesses())) {
                tracing::warn!(client = ?peer, "console login refused: too many refused tokens from this address");
                tokio::time::sleep(access::GUESS_DELAY).await;
                let message = format!(
                    "Too many tokens were refused from this address; try again in {} s.",
                    wait.as_secs().max(1)
                );
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(header::RETRY_AFTER, wait.as_secs().max(1).to_string())],
                    login_form(&base, next, Some(&message)),
                )
                    .into_response();
            }
            tracing::warn!(client = ?peer, "console login refused: the token is not recognised");
            if let Some(ip) = peer {
                state.sessions.guess_refused(ip);
            }
            (
                StatusCode::UNAUTHORIZED,
                login_form(&base, next, Some("That token is not recognised.")),
            )
                .into_response()
        }
    }
}

async fn logout(State(state): State<AppState>, viewer: Viewer, body: Bytes) -> Response {
    if !access::same(Fields::parse(&body).get("csrf").as_bytes(), viewer.csrf.as_bytes()) {
        return plain(
            StatusCode::FORBIDDEN,
            &viewer.base,
            "Form refused",
            "The CSRF token is missing.",
        );
    }
    state.sessions.close(&viewer.session);
    let mut response = see_other(&format!("{}/login", viewer.base));
    if let Ok(cookie) = HeaderValue::from_str(&session_cookie(&viewer.base, "", Some(0))) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// The headers every response carries: no framing, no sniffing, and only
/// the console's own scripts and styles.
pub(crate) async fn security_headers(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}
