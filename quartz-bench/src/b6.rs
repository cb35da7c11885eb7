//! B6, outage and misfire recovery (BENCHMARKS.md): every node stopped for
//! longer than the misfire threshold, then started again. For each misfire
//! policy, a trigger firing every second: the fires that ran late, the fire
//! times recorded skipped, against what the policy says; and the time from the
//! restart until every trigger is back on its schedule.
//!
//! ```text
//! cargo run --release -p quartz-bench -- b6 [--url URL] [--outage 60]
//! ```

use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::cron::CronExpression;
use quartz_core::misfire::MisfirePolicy;
use quartz_core::store::prelude::*;
use quartz_core::store::{ExecuteSpec, JobSpec};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_store::SqlStore;
use sqlx::{AssertSqlSafe, Row};

use crate::node::{spawn, stop};

/// B6's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database [default: QUARTZ_PG_URL or the local PostgreSQL].
    #[arg(long, default_value_t = crate::pg_url(), hide_default_value = true)]
    url: String,
    /// Seconds the database is away.
    #[arg(long, default_value_t = 60)]
    outage: i64,
}

/// The policies measured, with the trigger kind each applies to and what it
/// promises for an outage of `n` missed times.
fn cases() -> Vec<(&'static str, MisfirePolicy, bool, &'static str)> {
    vec![
        (
            "cron",
            MisfirePolicy::FireNow,
            true,
            "1 late run; the missed times recorded skipped",
        ),
        (
            "cron",
            MisfirePolicy::DoNothing,
            true,
            "no late run; all missed times recorded skipped",
        ),
        (
            "cron",
            MisfirePolicy::IgnoreMisfires,
            true,
            "every missed time runs late",
        ),
        (
            "fixed rate",
            MisfirePolicy::RescheduleNowWithExistingCount,
            false,
            "1 late run, the grid restarts now",
        ),
        (
            "fixed rate",
            MisfirePolicy::RescheduleNextWithRemainingCount,
            false,
            "no late run; next grid time",
        ),
    ]
}

/// Runs B6 with the options on the command line.
pub fn run(args: Args) {
    crate::block_on(outage(args));
}

async fn outage(args: Args) {
    sqlx::any::install_default_drivers();
    let store = SqlStore::connect(&args.url).await.unwrap();
    let scheduler = format!("b6-{}", std::process::id());
    let jobs = store.scoped(&scheduler);
    let start_nodes = || -> Vec<_> {
        (0..3)
            .map(|i| spawn(&args.url, &scheduler, &format!("b6-node-{i}"), &["poll_ms=1000"]))
            .collect()
    };
    let mut nodes = start_nodes();
    let now = store.now().await.unwrap().as_millis();
    let start = Timestamp::from_millis((now / 1000 + 3) * 1000);
    let every_second = CronExpression::parse("* * * * * ?").unwrap();
    for (i, (_, policy, cron, _)) in cases().iter().enumerate() {
        let schedule = if *cron {
            Schedule::cron(every_second.clone(), quartz_core::Tz::UTC)
        } else {
            Schedule::fixed_rate_millis(1_000).unwrap()
        };
        let trigger = Trigger::new(schedule, start)
            .unwrap()
            .with_misfire_policy(*policy)
            .unwrap();
        jobs.create_job(
            &JobSpec::new(format!("policy-{i}"), "noop"),
            &[ExecuteSpec::new(trigger)],
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    for node in &mut nodes {
        stop(node);
    }
    let stopped = store.now().await.unwrap().as_millis();
    tokio::time::sleep(Duration::from_millis(u64::try_from(args.outage * 1000).unwrap_or(0))).await;
    let restarted = store.now().await.unwrap().as_millis();
    let mut nodes = start_nodes();
    // Back on schedule: every trigger has run a fire scheduled after the restart.
    let mut recovered_ms = None;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let back: i64 = sqlx::query(AssertSqlSafe(format!(
            "SELECT COUNT(DISTINCT execute_id) FROM quartz_fire WHERE scheduler = '{scheduler}' \
             AND state = 'succeeded' AND fire_time >= {restarted}"
        )))
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get(0);
        if back == i64::try_from(cases().len()).unwrap() {
            recovered_ms = Some(store.now().await.unwrap().as_millis() - restarted);
            break;
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for node in &mut nodes {
        stop(node);
    }
    println!(
        "| backend | trigger | policy | outage s | missed times | ran late | recorded skipped | policy says | back on schedule after restart ms |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---|---:|");
    let backend = args.url.split(':').next().unwrap_or("?");
    for (i, (kind, policy, _, says)) in cases().iter().enumerate() {
        // Fire times of the outage, and the late runs of them.
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT f.fire_time, f.state, f.started_at, f.fire_count FROM quartz_fire f JOIN quartz_job j \
             ON j.id = f.job_id WHERE f.scheduler = '{scheduler}' AND j.name = 'policy-{i}' \
             AND f.fire_time > {stopped} AND f.fire_time < {restarted}"
        )))
        .fetch_all(store.pool())
        .await
        .unwrap();
        let (mut ran, mut skipped) = (0_i64, 0_i64);
        for row in &rows {
            let state: String = row.get(1);
            match state.as_str() {
                "succeeded" | "failed" => ran += 1,
                "misfired" | "skipped" => skipped += row.get::<i64, _>(3),
                _ => {}
            }
        }
        // Fire-now and reschedule-now runs happen at the restart, on a time
        // off the old grid (a restarted grid stays off it: its first counts).
        let late_now: i64 = sqlx::query(AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM quartz_fire f JOIN quartz_job j ON j.id = f.job_id \
             WHERE f.scheduler = '{scheduler}' AND j.name = 'policy-{i}' AND f.state = 'succeeded' \
             AND f.fire_time >= {restarted} AND f.fire_time % 1000 <> 0"
        )))
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get(0);
        let missed = (restarted - stopped) / 1000;
        println!(
            "| {backend} | {kind} | {policy} | {} | ~{missed} | {} | {skipped} | {says} | {} |",
            args.outage,
            ran + late_now.min(1),
            recovered_ms.map_or_else(|| "not within 60 s".to_owned(), |ms| ms.to_string())
        );
    }
}
