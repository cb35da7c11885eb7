//! B7, retention under load: S one-second triggers on K nodes for M minutes
//! with the ledger's retention set short, sampling every 2 s the ledger's
//! size and what a poll costs, then auditing what is kept.
//!
//! ```text
//! cargo run --release -p quartz-bench -- b7 [--url URL] [--triggers 1000] [--nodes 2] [--minutes 20] [--keep 60]
//! ```
//!
//! The nodes run on default settings but for the retention (`--keep` seconds
//! for every finished fire instead of a day and a week, which a run of
//! minutes would never reach; the purge turn stays at its default, a minute)
//! and a pool queue of 10,000 as in B1. The audit is `quartz audit` over the kept range (the
//! `quartz` binary beside this one, built by `cargo build --release -p
//! quartz-cli`).

use std::time::{Duration, Instant};

use quartz_core::store::{ExecuteSpec, JobSpec, Store};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_store::{SqlStore, StoreOptions};
use sqlx::Row;

use crate::os::percentile;

/// The scheduler name of the run.
const SCHEDULER: &str = "b7";

/// B7's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database [default: QUARTZ_PG_URL or the local PostgreSQL].
    #[arg(long, default_value_t = crate::pg_url(), hide_default_value = true)]
    url: String,
    /// Triggers firing every second.
    #[arg(long, default_value_t = 1_000)]
    triggers: usize,
    /// Node processes.
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// Minutes the run lasts.
    #[arg(long, default_value_t = 20)]
    minutes: u64,
    /// Seconds succeeded fires are kept.
    #[arg(long = "keep", default_value_t = 60)]
    keep_s: u64,
}

/// Runs B7 with the options on the command line.
pub fn run(args: Args) {
    crate::block_on(retention(args));
}

/// Microseconds as milliseconds with one decimal.
fn ms(us: i64) -> String {
    format!("{}.{}", us / 1_000, (us % 1_000) / 100)
}

async fn ledger_rows(store: &SqlStore) -> i64 {
    sqlx::query("SELECT COUNT(*) FROM quartz_fire")
        .fetch_one(store.pool())
        .await
        .unwrap()
        .try_get::<i64, _>(0)
        .unwrap()
}

async fn retention(args: Args) {
    let backend = args
        .url
        .split(':')
        .next()
        .unwrap_or("postgres")
        .replace("postgresql", "postgres");
    let url = crate::fresh_url(&backend, "quartz_b7").await;
    let store = SqlStore::connect_with(
        &url,
        &StoreOptions {
            max_connections: 2,
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    let scoped = store.scoped(SCHEDULER);
    let now = store.now().await.unwrap();
    let start = now.saturating_add_millis(5_000);
    for i in 0..args.triggers {
        let every = Trigger::new(Schedule::fixed_rate_millis(1_000).unwrap(), start).unwrap();
        scoped
            .create_job(&JobSpec::new(format!("b7-{i}"), "noop"), &[ExecuteSpec::new(every)])
            .await
            .unwrap();
    }
    let keep_ms = (args.keep_s * 1_000).to_string();
    let settings = [
        format!("keep_succeeded_ms={keep_ms}"),
        format!("keep_failed_ms={keep_ms}"),
    ];
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let mut nodes: Vec<_> = (0..args.nodes)
        .map(|k| crate::node::spawn(&url, SCHEDULER, &format!("b7-node-{k}"), &settings))
        .collect();
    println!(
        "B7 on {backend}: {} one-second triggers, {} nodes, {} min, retention {} s, purge turn every minute",
        args.triggers, args.nodes, args.minutes, args.keep_s
    );
    println!("| minute | ledger rows (max) | ledger rows (last) | poll p50 ms | poll p99 ms |");
    println!("|---:|---:|---:|---:|---:|");
    let began = Instant::now();
    let mut minute = Vec::new();
    let mut rows_max = 0;
    let mut rows_last = 0;
    let mut all_polls = Vec::new();
    while began.elapsed() < Duration::from_secs(args.minutes * 60) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        rows_last = ledger_rows(&store).await;
        rows_max = rows_max.max(rows_last);
        // A poll as a node makes it: the due executes of the next 5 s.
        let at = Instant::now();
        let horizon = store.now().await.unwrap().saturating_add_millis(5_000);
        let batch = scoped.due_executes(horizon, None, 5_000).await.unwrap();
        assert!(!batch.executes.is_empty());
        minute.push(i64::try_from(at.elapsed().as_micros()).unwrap_or(i64::MAX));
        if minute.len() == 30 {
            minute.sort_unstable();
            println!(
                "| {} | {rows_max} | {rows_last} | {} | {} |",
                began.elapsed().as_secs() / 60,
                ms(percentile(&minute, 0.5)),
                ms(percentile(&minute, 0.99))
            );
            all_polls.append(&mut minute);
            rows_max = 0;
        }
    }
    for node in &mut nodes {
        crate::node::stop(node);
    }
    let horizon = scoped.purge_horizon().await.unwrap();
    println!(
        "ledger rows at the end: {rows_last}; purge horizon {horizon:?}; fires run in all: about {}",
        args.triggers as u64 * args.minutes * 60
    );
    all_polls.sort_unstable();
    println!(
        "poll over the run: p50 {} ms, p99 {} ms",
        ms(percentile(&all_polls, 0.5)),
        ms(percentile(&all_polls, 0.99))
    );
    let quartz = std::env::current_exe().unwrap().with_file_name("quartz");
    if quartz.exists() {
        let out = std::process::Command::new(&quartz)
            .args([
                "--database-url",
                &url,
                "--scheduler",
                SCHEDULER,
                "audit",
                "--since",
                "0",
            ])
            .output()
            .unwrap();
        println!(
            "quartz audit (exit {}): {}",
            out.status,
            String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default()
        );
    } else {
        println!(
            "no quartz binary at {}: cargo build --release -p quartz-cli, then quartz audit --since 0",
            quartz.display()
        );
    }
}
