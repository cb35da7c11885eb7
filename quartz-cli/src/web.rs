//! `quartz serve`, and the web server beside `quartz run` and `quartz demo`:
//! the HTTP API, console and `/metrics` of `quartz-web`, with the Prometheus
//! recorder installed (a binary's choice; the library installs none).

use std::net::SocketAddr;

use anyhow::Context;
use quartz_core::admin::Admin;
use quartz_core::engine::NodeProbe;
use quartz_store::AnyStore;
use quartz_web::{Access, Web};

/// The default listening address: loopback, so that with no token nothing
/// outside the machine can call it.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Options of `quartz serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Where to listen. A non-loopback address needs QUARTZ_ADMIN_TOKEN or
    /// QUARTZ_READ_TOKEN.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
}

/// A listening socket the web server will serve, with its access settings:
/// bound (and the access checked) before a node registers, so that a
/// refused address leaves no node row behind.
pub struct Listener {
    listener: tokio::net::TcpListener,
    access: Access,
}

impl Listener {
    /// Checks that `addr` may be listened on with the environment's tokens
    /// and binds it (or a free port of the same address, with `fallback`,
    /// when that one is taken).
    ///
    /// # Errors
    ///
    /// A non-loopback address with no token; an address that cannot be bound.
    pub async fn bind(addr: SocketAddr, fallback: bool) -> anyhow::Result<Listener> {
        let access = Access::from_env();
        access.check_listen(addr).map_err(anyhow::Error::msg)?;
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => listener,
            Err(e) if fallback && e.kind() == std::io::ErrorKind::AddrInUse => {
                tokio::net::TcpListener::bind(SocketAddr::new(addr.ip(), 0)).await?
            }
            Err(e) => return Err(e).with_context(|| format!("cannot listen on {addr}")),
        };
        Ok(Listener { listener, access })
    }

    /// Serves the admin surface on the socket in the background, with the
    /// node it runs beside (for `/readyz`), if any; returns the address it
    /// listens on.
    ///
    /// # Errors
    ///
    /// The socket's address cannot be read.
    pub fn serve(self, admin: Admin, node: Option<NodeProbe>) -> anyhow::Result<SocketAddr> {
        let Listener { listener, access } = self;
        let bound = listener.local_addr()?;
        let mut web = Web::new(admin).access(access);
        if let Some(node) = node {
            web = web.node(node);
        }
        match crate::telemetry::PROMETHEUS.get() {
            Some(handle) => web = web.metrics(handle.clone()),
            None => tracing::warn!("no /metrics: no metrics recorder was installed"),
        }
        let router = web.router();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>()).await {
                tracing::error!(error = %e, "the web server stopped");
            }
        });
        Ok(bound)
    }
}

/// `quartz serve`: the web server alone, until SIGINT or SIGTERM.
pub async fn serve(url: &str, scheduler: &str, args: &ServeArgs) -> anyhow::Result<()> {
    let store = AnyStore::connect(url).await?;
    let bound = Listener::bind(args.listen, false)
        .await?
        .serve(Admin::new(store, scheduler), None)?;
    println!(
        "quartz web for scheduler {scheduler:?}: http://{bound}/ (API http://{bound}/api/v1/, metrics \
         http://{bound}/metrics); Ctrl-C to stop"
    );
    if !Access::from_env().has_tokens() {
        println!("no token set: answering loopback callers only (set QUARTZ_ADMIN_TOKEN / QUARTZ_READ_TOKEN)");
    }
    crate::run::wait_for_signal().await
}
