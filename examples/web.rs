//! A service that embeds a scheduler node and mounts the quartz-rs console,
//! JSON API and `/metrics` beside its own routes.
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
use std::time::Duration;

use quartz::prelude::*;
use quartz_web::{Access, Web};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8090".to_owned())
        .parse()?;
    let node = SchedulerBuilder::new("web-example")
        .handler("greet", |ctx: JobContext| {
            let name: String = ctx.payload()?;
            println!("hello, {name} (fire {})", ctx.fire_id());
            Ok(())
        })
        .connect("sqlite://quartz-web.db")
        .await?;
    let greet = JobDefinition::new("greet-every-5s", "greet")
        .with_payload("world")?
        .with_trigger(TriggerDefinition::every(Duration::from_secs(5)));
    node.admin().job_put(&greet).await?; // declared on every start

    // The service's own routes, and quartz-rs under /quartz.
    let access = Access::from_env();
    access.check_listen(addr)?;
    let quartz = Web::new(node.admin())
        .access(access)
        .metrics(quartz_web::install_prometheus()?)
        .mounted_at("/quartz");
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::get(|| async { "the service's own page; the scheduler is at /quartz" }),
        )
        .merge(quartz);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("console: http://{addr}/quartz  (Ctrl-C to stop)");
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    node.shutdown().await;
    Ok(())
}
