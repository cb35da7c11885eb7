//! An embedded scheduler node: a tokio service with two handlers, on SQLite.
//!
//! ```text
//! cargo run --example embedded                       # sqlite://quartz.db, until Ctrl-C
//! cargo run --example embedded -- --seconds 20       # stop after 20 s
//! cargo run --example embedded -- postgres://postgres@127.0.0.1/test
//! ```
//!
//! It adds two jobs if they are not there yet (`hello` every 2 seconds, `report`
//! every 5 seconds, an async handler), prints each fire as it runs, and leaves
//! the cluster cleanly on Ctrl-C. Start it twice on the same database and the
//! two nodes share the fires: each still runs once.

use std::time::Duration;

use quartz::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut url = "sqlite://quartz.db".to_owned();
    let mut seconds = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => seconds = args.next().and_then(|s| s.parse::<u64>().ok()),
            other => other.clone_into(&mut url),
        }
    }

    let node = SchedulerBuilder::new("example")
        .handler("hello", |ctx: JobContext| {
            let late = lateness_ms(&ctx);
            println!(
                "[{}] hello: fire {} scheduled {} (started {late} ms after)",
                ctx.node_id(),
                ctx.fire_id(),
                ctx.scheduled_fire_time()
            );
            Ok(())
        })
        .async_handler("report", |ctx: JobContext| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let greeting: String = ctx.payload().unwrap_or_default();
            println!(
                "[{}] report ({greeting}): fire {} scheduled {}",
                ctx.node_id(),
                ctx.fire_id(),
                ctx.scheduled_fire_time()
            );
            Ok(())
        })
        .connect(&url)
        .await?;
    println!("node {} started on {url}; Ctrl-C to stop", node.node().node_id);

    let hello = JobDefinition::new("hello", "hello").with_trigger(TriggerDefinition::cron("0/2 * * * * ?", "UTC")?);
    let report = JobDefinition::new("report", "report")
        .with_payload("from the async handler")?
        .with_timeout(Duration::from_secs(10))
        .with_trigger(TriggerDefinition::cron("0/5 * * * * ?", "UTC")?);
    let admin = node.admin();
    // Declared on every start: added the first time, then kept in step.
    for job in [hello, report] {
        let (_, outcome) = admin.job_put(&job).await?;
        println!("job {:?}: {}", job.spec.name, outcome.as_str());
    }

    match seconds {
        Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
        None => tokio::signal::ctrl_c().await?,
    }
    let status = node.status();
    let summary = node.shutdown().await;
    println!(
        "stopped: {} fires ran here, {} claims lost to other nodes, {} given back",
        status.counters.succeeded, status.counters.lost, summary.released
    );
    Ok(())
}

fn lateness_ms(ctx: &JobContext) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
    now - ctx.scheduled_fire_time().as_millis()
}
