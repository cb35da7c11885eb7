//! Three scheduler nodes on one database, in one process: 20 jobs every
//! second, each fire run by exactly one node, then the ledger is checked.
//!
//! ```text
//! cargo run --example three_nodes                                   # SQLite file in a temp dir
//! cargo run --example three_nodes -- postgres://postgres@127.0.0.1/test
//! cargo run --example three_nodes -- mysql://root@127.0.0.1/test
//! ```
//!
//! On PostgreSQL or MySQL it uses its own scheduler name, so it can share a
//! database with other programs.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use quartz::prelude::*;
use quartz::store::ExecuteSpec;
use quartz::store::{FireQuery, FireState};
use quartz::trigger::Trigger;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scheduler = format!("three-nodes-{}", std::process::id());
    let url = std::env::args().nth(1).unwrap_or_else(|| {
        let dir = std::env::temp_dir().join(&scheduler);
        let _ = std::fs::create_dir_all(&dir);
        format!("sqlite://{}", dir.join("quartz.db").display())
    });
    let mut nodes = Vec::new();
    for i in 0..3 {
        let settings = Settings {
            node_id: Some(format!("node-{i}")),
            poll_interval: Duration::from_secs(1),
            ..Settings::default()
        };
        let node = SchedulerBuilder::new(scheduler.clone())
            .settings(settings)
            .handler("tick", |ctx: JobContext| {
                println!(
                    "{} ran {} for {}",
                    ctx.node_id(),
                    ctx.job_name(),
                    ctx.scheduled_fire_time()
                );
                Ok(())
            })
            .connect(&url)
            .await?;
        nodes.push(node);
    }
    let store = nodes[0].store().clone();
    let now = store.now().await?.as_millis();
    let start = Timestamp::from_millis((now / 1000 + 2) * 1000);
    let end = Timestamp::from_millis(start.as_millis() + 9_999);
    for i in 0..20 {
        let trigger = Trigger::cron("* * * * * ?", "UTC", start)?.with_end(end)?;
        nodes[0]
            .add_job(&JobDefinition::of_specs(
                &JobSpec::new(format!("tick-{i:02}"), "tick"),
                &[ExecuteSpec::new(trigger)],
            ))
            .await?;
    }
    println!("3 nodes, 20 jobs firing every second for 10 s, on {url}");
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(end.as_millis() - now).unwrap_or(0) + 2_000,
    ))
    .await;
    for node in nodes {
        node.shutdown().await;
    }

    let mut query = FireQuery::new();
    query.limit = 1_000;
    let fires = store.fires(&query).await?;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen = HashSet::new();
    for f in &fires {
        if f.state == FireState::Succeeded {
            *per_node
                .entry(f.owner.clone().map(|o| o.node_id).unwrap_or_default())
                .or_default() += 1;
        }
        assert!(seen.insert((f.execute_id, f.fire_time)), "a fire ran twice");
    }
    println!(
        "ledger: {} fires (expected 200), no duplicates; per node: {per_node:?}",
        fires.len()
    );
    Ok(())
}
