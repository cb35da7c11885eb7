//! A service that embeds a scheduler node and mounts the quartz-rs console,
//! JSON API and `/metrics` beside its own routes: typed jobs, state the
//! service's handlers and routes share, and the console under `/quartz`.
//!
//! ```text
//! cargo run --example web                    # sqlite://quartz-web.db, http://127.0.0.1:8090/quartz
//! QUARTZ_ADMIN_TOKEN=secret cargo run --example web -- 0.0.0.0:8090
//! ```
//!
//! With no token set it answers loopback callers only (and refuses a
//! non-loopback address); with `QUARTZ_ADMIN_TOKEN` (and `QUARTZ_READ_TOKEN`)
//! the console asks for a token and the API takes it as a bearer token.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quartz::prelude::*;
use quartz::web::{Access, Web};
use serde::{Deserialize, Serialize};

/// What the service's handlers and its own routes share (in a real service:
/// its database pool, its clients).
#[derive(Default)]
struct Greetings {
    sent: AtomicU64,
}

/// A typed job: its kind and its payload, named once.
#[derive(Serialize, Deserialize)]
struct Greet {
    name: String,
}

impl TypedJob for Greet {
    const KIND: &'static str = "greet";

    async fn run(self, ctx: JobContext) -> JobResult {
        let greetings = ctx.state::<Arc<Greetings>>()?;
        let n = greetings.sent.fetch_add(1, Ordering::Relaxed) + 1;
        println!(
            "hello, {} (fire {}, greeting {n}, {:?})",
            self.name,
            ctx.fire_id(),
            ctx.run_kind()
        );
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8090".to_owned())
        .parse()?;
    let greetings = Arc::new(Greetings::default());
    let node = SchedulerBuilder::new("web-example")
        .state(Arc::clone(&greetings))
        .job::<Greet>()
        .connect("sqlite://quartz-web.db")
        .await?;
    // Declared on every start: added once, then kept in step with this code.
    let greet = JobDefinition::of("greet-every-5s", &Greet { name: "world".into() })?
        .with_trigger(TriggerDefinition::every(Duration::from_secs(5)));
    node.admin().job_put(&greet).await?;

    // The service's own routes, and quartz-rs under /quartz.
    let access = Access::from_env();
    access.check_listen(addr)?;
    let quartz = Web::new(node.admin())
        .access(access)
        .metrics(quartz::web::install_prometheus()?)
        .mounted_at("/quartz");
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::get(move || {
                let sent = greetings.sent.load(Ordering::Relaxed);
                async move { format!("the service's own page: {sent} greetings sent; the scheduler is at /quartz\n") }
            }),
        )
        .merge(quartz);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("console: http://{addr}/quartz  (Ctrl-C to stop)");
    // The node stops with the server: both wait on the same signal.
    let stopping = node.clone();
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            stopping.shutdown().await;
        })
        .await?;
    node.shutdown().await;
    Ok(())
}
