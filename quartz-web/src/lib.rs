//! The HTTP face of a quartz-rs cluster: a JSON API under `/api/v1/` with
//! its OpenAPI document, a web console for people, the probes (`/livez`,
//! `/readyz`, `/startupz`, `/healthz`) and `/metrics`, as one axum [`Router`](axum::Router) that a service mounts into
//! its own server (or `quartz serve` runs on its own).
//!
//! Every route goes through the admin surface ([`quartz_core::admin`]), so
//! the API, the console, the CLI and embedding code apply the same rules and
//! every change is recorded in the change log with who made it. Access is by
//! token (see [`access`]): with none configured, only loopback callers are
//! answered.
//!
//! A service mounts it in a few lines:
//!
//! ```no_run
//! # async fn service() -> Result<(), Box<dyn std::error::Error>> {
//! use std::net::SocketAddr;
//! use quartz_core::admin::Admin;
//! use quartz_store::SqlStore;
//! use quartz_web::{Access, Web};
//!
//! let store = SqlStore::connect("sqlite://quartz.db").await?;
//! let quartz = Web::new(Admin::new(store, "billing"))
//!     .access(Access::from_env()) // QUARTZ_ADMIN_TOKEN, QUARTZ_READ_TOKEN
//!     .metrics(quartz_web::install_prometheus()?)
//!     .router();
//! let app = axum::Router::new().nest("/quartz", quartz); // beside the service's own routes
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod access;
mod api;
mod console;
pub mod error;
pub mod health;
pub mod sessions;
mod versions;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use quartz_core::admin::Admin;
use quartz_core::engine::NodeProbe;

pub use access::{Access, Caller, Role};
pub use api::ApiDoc;
pub use error::ApiError;
use sessions::Sessions;

/// The largest request body the server reads: a job's payload may be 1 MiB
/// of JSON, and its definition wraps it.
pub const BODY_LIMIT: usize = 2 << 20;

/// The router's state: the admin surface and who may use it.
#[derive(Debug, Clone)]
pub struct AppState {
    admin: Admin,
    access: Arc<Access>,
    sessions: Arc<Sessions>,
    metrics: Option<PrometheusHandle>,
    node: Option<NodeProbe>,
}

impl access::AccessState for AppState {
    fn access(&self) -> &Access {
        &self.access
    }

    fn sessions(&self) -> &Sessions {
        &self.sessions
    }
}

type Router<S = AppState> = axum::Router<S>;

/// The HTTP API, console and metrics of one scheduler, to build a router
/// from. See the [crate docs](crate).
#[derive(Debug)]
pub struct Web {
    admin: Admin,
    access: Access,
    metrics: Option<PrometheusHandle>,
    node: Option<NodeProbe>,
}

impl Web {
    /// The web face of an admin surface, with the tokens of the environment
    /// ([`Access::from_env`]) and no `/metrics`.
    pub fn new(admin: Admin) -> Web {
        Web {
            admin,
            access: Access::from_env(),
            metrics: None,
            node: None,
        }
    }

    /// The node this server runs beside ([`Scheduler::probe`](quartz_core::engine::Scheduler::probe)):
    /// `/readyz` then also asks that it be a live member of its cluster
    /// (running, its membership lease held).
    pub fn node(mut self, probe: NodeProbe) -> Web {
        self.node = Some(probe);
        self
    }

    /// Who may call it.
    pub fn access(mut self, access: Access) -> Web {
        self.access = access;
        self
    }

    /// Serves `/metrics` from this Prometheus recorder (see
    /// [`install_prometheus`]).
    pub fn metrics(mut self, handle: PrometheusHandle) -> Web {
        self.metrics = Some(handle);
        self
    }

    /// The router: the console at `/`, `/api/v1/…`, the probes, `/metrics`.
    ///
    /// The probes need no token: `/livez` answers while the process serves
    /// (no database); `/startupz` once the server serves, which
    /// `quartz run` does once its node has started (connected, migrated,
    /// registered); `/readyz` when the database answers within
    /// [`health::READ_LIMIT`] and, beside a node ([`Web::node`]), the node
    /// is a live member; `/healthz` when the database answers. A failed
    /// probe is a 503 saying why.
    /// Serve it with
    /// `into_make_service_with_connect_info::<SocketAddr>()` so that, with no
    /// token, loopback callers can be told apart.
    pub fn router(self) -> axum::Router {
        let state = AppState {
            admin: self.admin,
            access: Arc::new(self.access),
            sessions: Arc::new(Sessions::default()),
            metrics: self.metrics,
            node: self.node,
        };
        Router::<AppState>::new()
            .merge(console::routes())
            .nest("/api/v1", api::routes())
            .route("/healthz", get(healthz))
            .route("/livez", get(livez))
            .route("/startupz", get(livez))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics_text))
            .fallback(not_found)
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                access::guard::<AppState>,
            ))
            .layer(axum::middleware::from_fn(error::uniform_errors))
            .layer(axum::middleware::from_fn(console::security_headers))
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .with_state(state)
    }
}

impl Web {
    /// The router mounted under `prefix` (`/quartz`), ready to merge into a
    /// service's own: the console at `/quartz`, the API at
    /// `/quartz/api/v1/…`, and `/quartz/` redirected to `/quartz` (which a
    /// plain `nest` leaves a 404).
    pub fn mounted_at(self, prefix: &str) -> axum::Router {
        let prefix = prefix.trim_end_matches('/');
        if prefix.is_empty() {
            return self.router();
        }
        let home = prefix.to_owned();
        axum::Router::new().nest(prefix, self.router()).route(
            &format!("{prefix}/"),
            axum::routing::any(move || async move { axum::response::Redirect::permanent(&home) }),
        )
    }
}

/// Installs the Prometheus recorder as the process's `metrics` recorder and
/// returns its handle, for [`Web::metrics`]. Binaries call this once; a
/// library never does (a process has one recorder, and it is the
/// application's choice).
///
/// # Errors
///
/// When a recorder is installed already.
pub fn install_prometheus() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    let upkeep = handle.clone();
    // Histograms are drained into their summaries by the upkeep.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
    }
    Ok(handle)
}

/// Whether the server and its database answer (a database that has not
/// answered within [`health::READ_LIMIT`] is down).
async fn healthz(State(state): State<AppState>) -> Response {
    match database_now(&state).await {
        Ok(now) => Json(serde_json::json!({"status": "ok", "database_now": now.as_millis()})).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The process serves: no database asked.
async fn livez() -> Response {
    Json(serde_json::json!({"status": "ok"})).into_response()
}

/// The database answers and, beside a node, the node is a live member.
async fn readyz(State(state): State<AppState>) -> Response {
    let now = match database_now(&state).await {
        Ok(now) => now,
        Err(e) => return e.into_response(),
    };
    let Some(probe) = &state.node else {
        return Json(serde_json::json!({"status": "ok", "database_now": now.as_millis()})).into_response();
    };
    let unready = |message: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", message);
    match probe.status() {
        None => unready("the node has stopped".to_owned()).into_response(),
        Some(status) => match status.live_member() {
            Ok(()) => Json(serde_json::json!({
                "status": "ok",
                "database_now": now.as_millis(),
                "node": status.node.node_id,
                "incarnation": status.node.incarnation,
            }))
            .into_response(),
            Err(why) => unready(why).into_response(),
        },
    }
}

/// The database's clock, or the 503 saying why there is none: an error, or
/// no answer within [`health::READ_LIMIT`].
async fn database_now(state: &AppState) -> Result<quartz_core::Timestamp, ApiError> {
    match tokio::time::timeout(health::READ_LIMIT, state.admin.now()).await {
        Ok(Ok(now)) => Ok(now),
        Ok(Err(e)) => Err(ApiError::from(e)),
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!(
                "the database did not answer within {} ms",
                health::READ_LIMIT.as_millis()
            ),
        )),
    }
}

/// The Prometheus text exposition of the process's metrics (read access).
async fn metrics_text(State(state): State<AppState>, _: Caller) -> Response {
    match &state.metrics {
        Some(handle) => {
            // The cluster's gauges, read now: they outlive the nodes.
            health::refresh(&state.admin).await;
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response()
        }
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server exports no metrics (Web::metrics was not given a recorder)",
        )
        .into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

/// Serves a router on `addr` until `shutdown` completes, refusing a
/// non-loopback address when no token is configured.
///
/// # Errors
///
/// The address refused, or the socket's errors.
pub async fn serve(
    router: axum::Router,
    addr: SocketAddr,
    access: &Access,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    access
        .check_listen(addr)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown)
        .await
}
