//! B5, failover (BENCHMARKS.md): K = 3 node processes, S triggers every
//! second; one node is killed with SIGKILL, another frozen with SIGSTOP past
//! `dead_after` and resumed. From the nodes' run logs, checked by the
//! project's checker against the triggers and the ledger: fire times lost
//! and run twice, starts by a node after its incarnation was retired (all
//! must be 0), and attempts that ran beside the one before (a recovery's
//! re-run while the frozen node's handler still ran). From the ledger: the
//! longest a fire due after each fault waited for its first attempt to
//! start (how long until the lost node's work ran elsewhere), and apart the
//! longest wait of a fire run again by recovery (a job that requests it,
//! running on the lost node: it waits `dead_after` by design), and fires
//! abandoned (only jobs without recovery).
//!
//! ```text
//! cargo run --release -p quartz-bench -- b5 [--url URL] [--triggers 1000] [--seconds 40] [--no-claim-runs]
//! ```

use std::collections::HashMap;
use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::store::prelude::*;
use quartz_core::store::{ExecuteSpec, JobSpec};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_store::SqlStore;
use sqlx::{AssertSqlSafe, Row};

use quartz_core::runlog::RunViolationKind;

use crate::node::{check_runs, signal, spawn_cluster_logging, stop};

/// B5's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database [default: QUARTZ_PG_URL or the local PostgreSQL].
    #[arg(long, default_value_t = crate::pg_url(), hide_default_value = true)]
    url: String,
    /// Triggers firing every second.
    #[arg(long, default_value_t = 1_000)]
    triggers: usize,
    /// Seconds the run lasts.
    #[arg(long, default_value_t = 40)]
    seconds: i64,
    /// Nodes claim each fire on its own (`Settings::claim_runs` off; on by
    /// default).
    #[arg(long)]
    no_claim_runs: bool,
}

/// Database time, as the ledger has it.
async fn now(store: &SqlStore) -> i64 {
    store.now().await.unwrap().as_millis()
}

async fn sleep_until(store: &SqlStore, at: i64) {
    let wait = at - now(store).await;
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
    }
}

/// Runs B5 with the options on the command line.
pub fn run(args: Args) {
    crate::block_on(failover(args));
}

async fn failover(args: Args) {
    sqlx::any::install_default_drivers();
    let store = SqlStore::connect(&args.url).await.unwrap();
    let scheduler = format!("b5-{}", std::process::id());
    let jobs = store.scoped(&scheduler);
    let dead_after_ms: i64 = 10_000;
    // Each node its share of the triggers (id hash), so that no node is
    // overloaded before the faults; the survivors take the lost share over.
    let mut settings = vec!["pool_queue=10000", "pool_core=8", "strategy=id-hash"];
    if args.no_claim_runs {
        settings.push("claim_runs=0");
    }
    // The jobs first, then the nodes (as in B1): jobs created while the
    // nodes poll are slower to create, and one created after its first fire
    // time would be counted misfired.
    let lead_ms = 12_000 + 3 * i64::try_from(args.triggers).unwrap_or(i64::MAX / 8);
    let start = (now(&store).await + lead_ms) / 1000 * 1000;
    let end = start + args.seconds * 1000 - 1;
    for i in 0..args.triggers {
        let trigger = Trigger::new(
            Schedule::fixed_rate_millis(1_000).unwrap(),
            Timestamp::from_millis(start),
        )
        .unwrap()
        .with_end(Timestamp::from_millis(end))
        .unwrap();
        // Half the jobs run 10 ms, so some are running when a node dies;
        // half of those request recovery.
        let mut job = if i % 2 == 0 {
            JobSpec::new(format!("fo-{i:05}"), "noop")
        } else {
            let mut job = JobSpec::new(format!("fo-{i:05}"), "sleep");
            job.payload = "10".to_owned();
            job
        };
        job.requests_recovery = i % 4 == 1;
        jobs.create_job(&job, &[ExecuteSpec::new(trigger)]).await.unwrap();
    }
    let left = start - now(&store).await;
    assert!(
        left > 3_000,
        "creating {} jobs took until {left} ms before the first fire: the nodes would start late",
        args.triggers
    );
    let (logs, mut nodes) = spawn_cluster_logging(&args.url, &scheduler, "b5", 3, &settings);
    // SIGKILL one node a third of the way in.
    let kill_at = start + args.seconds * 1000 / 3 + 300;
    sleep_until(&store, kill_at).await;
    signal(&nodes[0], "KILL");
    let killed = now(&store).await;
    // Freeze another past dead_after, two thirds of the way in, then resume.
    let freeze_at = start + args.seconds * 1000 * 2 / 3 + 300;
    sleep_until(&store, freeze_at).await;
    let frozen_incarnation: i64 = sqlx::query(AssertSqlSafe(format!(
        "SELECT incarnation FROM quartz_node WHERE scheduler = '{scheduler}' AND node_id = 'b5-node-1'"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap()
    .get(0);
    signal(&nodes[1], "STOP");
    let frozen = now(&store).await;
    tokio::time::sleep(Duration::from_millis(u64::try_from(dead_after_ms + 4_000).unwrap())).await;
    signal(&nodes[1], "CONT");
    sleep_until(&store, end + dead_after_ms + 5_000).await;
    for node in &mut nodes {
        stop(node);
    }

    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT f.execute_id, f.fire_time, f.attempt, f.state, f.started_at, f.node_id, f.incarnation, \
         j.requests_recovery, f.fire_count FROM quartz_fire f JOIN quartz_job j ON j.id = f.job_id \
         WHERE f.scheduler = '{scheduler}'"
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    let expected = i64::try_from(args.triggers).unwrap() * args.seconds;
    let mut ran: HashMap<(i64, i64), usize> = HashMap::new();
    let mut seen: HashMap<(i64, i64), ()> = HashMap::new();
    let (mut abandoned, mut abandoned_wrongly, mut stale_starts, mut misfired) = (0, 0, 0, 0_i64);
    let (mut worst_after_kill, mut worst_after_freeze, mut worst_rerun) = (0_i64, 0_i64, 0_i64);
    for row in &rows {
        let key = (row.get::<i64, _>(0), row.get::<i64, _>(1));
        let state: String = row.get(3);
        let started: Option<i64> = row.get(4);
        let node: Option<String> = row.get(5);
        let incarnation: i64 = row.get(6);
        let recovery: i64 = row.get(7);
        seen.insert(key, ());
        if state == "succeeded" {
            *ran.entry(key).or_default() += 1;
        }
        if state == "misfired" || state == "skipped" {
            // A recorded range stands for fire_count fire times, one second apart.
            let count: i64 = row.get(8);
            misfired += count;
            for i in 1..count {
                seen.insert((key.0, key.1 + i * 1_000), ());
            }
        }
        if state == "abandoned" {
            abandoned += 1;
            if recovery != 0 {
                abandoned_wrongly += 1;
            }
        }
        if let Some(s) = started {
            let late = s - key.1;
            let attempt: i64 = row.get(2);
            if attempt > 1 {
                worst_rerun = worst_rerun.max(late);
            } else {
                if (killed..killed + dead_after_ms + 3_000).contains(&key.1) {
                    worst_after_kill = worst_after_kill.max(late);
                }
                if (frozen..frozen + dead_after_ms + 3_000).contains(&key.1) {
                    worst_after_freeze = worst_after_freeze.max(late);
                }
            }
            // Started by the frozen node under the incarnation it had lost,
            // after it was declared dead.
            if node.as_deref() == Some("b5-node-1")
                && incarnation == frozen_incarnation
                && s > frozen + dead_after_ms + 2_000
            {
                stale_starts += 1;
            }
        }
    }
    let duplicates: usize = ran.values().map(|n| n.saturating_sub(1)).sum();
    let missed = expected - i64::try_from(seen.len()).unwrap();
    let (report, _) = check_runs(&*jobs, &logs, (start, end)).await;
    let count = |kinds: &[RunViolationKind]| report.violations.iter().filter(|v| kinds.contains(&v.kind)).count();
    let lost = count(&[RunViolationKind::Lost, RunViolationKind::Unsettled]);
    let twice = count(&[RunViolationKind::RunTwice]);
    let fenced = count(&[RunViolationKind::FencedStart]);
    let other = report.violations.len() - lost - twice - fenced;
    for v in report.violations.iter().take(10) {
        eprintln!(
            "  run log: {} {} at {}: {}",
            v.kind.as_str(),
            v.job,
            v.fire_time,
            v.detail
        );
    }
    let backend = args.url.split(':').next().unwrap_or("?");
    println!(
        "| backend | S | D s | expected | lost | run twice | started by a fenced node | other violations | attempts beside the one before | fire times recorded misfired or skipped | abandoned | abandoned though recovery requested | ledger: missed, duplicates, stale starts | worst wait after SIGKILL ms | worst wait after SIGSTOP ms | worst wait of a recovery re-run ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|");
    println!(
        "| {backend} | {} | {} | {expected} | {lost} | {twice} | {fenced} | {other} | {} | {misfired} | {abandoned} | {abandoned_wrongly} | {missed}, {duplicates}, {stale_starts} | {worst_after_kill} | {worst_after_freeze} | {worst_rerun} |",
        args.triggers, args.seconds, report.overlapping_attempts
    );
}
