//! B1, the fire storm (BENCHMARKS.md): S triggers firing every second on K
//! `quartz run` processes against one database, for D seconds. Every figure
//! comes from the fire ledger, not from the nodes' counters.
//!
//! ```text
//! cargo run --release -p quartz-bench -- b1 [--url URL] [--triggers 1000] [--nodes 1,2,3] [--seconds 60]
//! ```
//!
//! The URL defaults to `QUARTZ_PG_URL` or the local PostgreSQL. Each run uses
//! its own scheduler name, so runs do not see each other's rows. CPU seconds
//! are read from /proc: the node processes, and every process of the database
//! server (`postgres`, `mariadbd`/`mysqld`) over the run.

use std::process::{Child, Command};

use crate::os::{cpu_seconds, percentile, server_cpu};
use std::time::{Duration, Instant};

use quartz_core::cron::CronExpression;
use quartz_core::store::{ExecuteSpec, JobSpec, Store};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_core::{Timestamp, Tz};
use quartz_store::{SqlStore, StoreOptions};
use sqlx::Row;

struct Args {
    url: String,
    triggers: usize,
    nodes: Vec<usize>,
    seconds: i64,
    plot: Option<std::path::PathBuf>,
}

fn args() -> Args {
    let mut out = Args {
        url: crate::pg_url(),
        triggers: 1_000,
        nodes: vec![1, 2, 3],
        seconds: 60,
        plot: None,
    };
    let mut it = std::env::args().skip(2);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--url" => out.url = it.next().unwrap(),
            "--triggers" => out.triggers = it.next().unwrap().parse().unwrap(),
            "--nodes" => out.nodes = it.next().unwrap().split(',').map(|n| n.parse().unwrap()).collect(),
            "--seconds" => out.seconds = it.next().unwrap().parse().unwrap(),
            "--plot" => out.plot = it.next().map(std::path::PathBuf::from),
            _ => {} // cargo bench passes --bench
        }
    }
    out
}

/// Runs B1 with the options on the command line.
pub fn run() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(storm());
}

async fn storm() {
    let args = args();
    sqlx::any::install_default_drivers();
    let store = SqlStore::connect_with(
        &args.url,
        &StoreOptions {
            max_connections: 4,
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    let server: &[&str] = if args.url.starts_with("postgres") {
        &["postgres"]
    } else if args.url.starts_with("sqlite") {
        &[]
    } else {
        &["mariadbd", "mysqld"]
    };
    println!(
        "| backend | S | K | D s | expected | observed | duplicates | misfired (recorded) | missed | p50 ms | p99 ms | max ms | node CPU s/1k fires | db CPU s/1k fires |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut curves = Vec::new();
    for &k in &args.nodes {
        let scheduler = format!("b1-{}-{k}-{}", args.triggers, std::process::id());
        // The jobs first, then the nodes: creating them while the nodes
        // poll is slower, and a job created after the storm's start would be
        // counted late from its first fire.
        let now = store.now().await.unwrap().as_millis();
        // Room to create the jobs (a few ms each) and start the nodes.
        let lead_ms = 12_000 + 3 * i64::try_from(args.triggers).unwrap_or(i64::MAX / 8);
        let start = Timestamp::from_millis((now + lead_ms) / 1000 * 1000);
        let end = start.saturating_add_millis(args.seconds * 1000 - 1);
        let cron = CronExpression::parse("* * * * * ?").unwrap();
        for i in 0..args.triggers {
            let trigger = Trigger::new(Schedule::cron(cron.clone(), Tz::UTC), start)
                .unwrap()
                .with_end(end)
                .unwrap();
            store
                .create_job(
                    &scheduler,
                    &JobSpec::new(format!("storm-{i:05}"), "noop"),
                    &[ExecuteSpec::new(trigger)],
                )
                .await
                .unwrap();
        }
        let left = start.as_millis() - store.now().await.unwrap().as_millis();
        assert!(
            left > 3_000,
            "creating {} jobs took until {left} ms before the storm: the nodes would start late",
            args.triggers
        );
        let mut nodes: Vec<Child> = (0..k)
            .map(|i| crate::node::spawn(&args.url, &scheduler, &format!("b1-node-{i}"), &[]))
            .collect();
        // Measure CPU over the storm only.
        let wait_start = u64::try_from(start.as_millis() - store.now().await.unwrap().as_millis()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait_start)).await;
        let node_cpu0: f64 = nodes.iter().map(|c| cpu_seconds(c.id())).sum();
        let db_cpu0 = server_cpu(server);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(args.seconds * 1000 + 3_000).unwrap(),
        ))
        .await;
        // An overloaded cluster lags: let it work through its backlog (every
        // trigger past its end, nothing claimed or running), for at most a
        // minute, so that a fire time without a row is a fire missed, not one
        // not reached yet.
        for _ in 0..600 {
            let open: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT (SELECT COUNT(*) FROM quartz_execute WHERE scheduler = '{scheduler}' \
                 AND state NOT IN ('complete', 'error')) + (SELECT COUNT(*) FROM quartz_fire \
                 WHERE scheduler = '{scheduler}' AND state IN ('claimed', 'running'))"
            )))
            .fetch_one(store.pool())
            .await
            .unwrap()
            .get(0);
            if open == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let node_cpu = nodes.iter().map(|c| cpu_seconds(c.id())).sum::<f64>() - node_cpu0;
        let db_cpu = server_cpu(server) - db_cpu0;
        let _elapsed = t0.elapsed();
        for c in &mut nodes {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        }
        for c in &mut nodes {
            let _ = c.wait();
        }
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT execute_id, fire_time, state, started_at, fire_count FROM quartz_fire WHERE scheduler = '{scheduler}'"
        )))
        .fetch_all(store.pool())
        .await
        .unwrap();
        let expected = i64::try_from(args.triggers).unwrap() * args.seconds;
        let mut runs: std::collections::HashMap<(i64, i64), usize> = std::collections::HashMap::new();
        let mut lateness = Vec::new();
        // Every fire time with a ledger row: run, or recorded misfired or
        // skipped (a range of fire_count seconds).
        let mut recorded: std::collections::HashSet<(i64, i64)> = std::collections::HashSet::new();
        let mut misfired = 0_i64;
        for row in &rows {
            let state: String = row.get(2);
            let key = (row.get::<i64, _>(0), row.get::<i64, _>(1));
            if state == "misfired" || state == "skipped" {
                let count: i64 = row.get(4);
                misfired += count;
                for i in 0..count {
                    let t = key.1 + i * 1_000;
                    if (start.as_millis()..=end.as_millis()).contains(&t) {
                        recorded.insert((key.0, t));
                    }
                }
            } else if key.1 % 1_000 == 0 {
                // On the cron's grid (a fire-now policy's late run is not).
                recorded.insert(key);
            }
            if state != "succeeded" {
                continue;
            }
            *runs.entry(key).or_default() += 1;
            let started: Option<i64> = row.get(3);
            if let Some(s) = started {
                lateness.push(s - key.1);
            }
        }
        lateness.sort_unstable();
        // The lateness distribution: the share of fires started within x ms.
        #[allow(clippy::cast_precision_loss)]
        let cdf: Vec<(f64, f64)> = (0..=100)
            .map(|q| {
                let p = f64::from(q) / 100.0;
                (percentile(&lateness, p) as f64, p * 100.0)
            })
            .collect();
        curves.push(crate::plot::Series {
            label: format!("K = {k}"),
            points: cdf,
        });
        let observed: usize = runs.values().sum();
        let duplicates: usize = runs.values().map(|n| n - 1).sum();
        let missed = expected - i64::try_from(recorded.len()).unwrap();
        #[allow(clippy::cast_precision_loss)]
        let per_k = |cpu: f64| cpu / (observed.max(1) as f64 / 1000.0);
        let backend = args.url.split(':').next().unwrap_or("?");
        println!(
            "| {backend} | {} | {k} | {} | {expected} | {observed} | {duplicates} | {misfired} | {missed} | {} | {} | {} | {:.3} | {:.3} |",
            args.triggers,
            args.seconds,
            percentile(&lateness, 0.5),
            percentile(&lateness, 0.99),
            lateness.last().copied().unwrap_or(0),
            per_k(node_cpu),
            per_k(db_cpu),
        );
    }
    if let Some(dir) = &args.plot {
        let backend = args.url.split(':').next().unwrap_or("db");
        crate::plot::lines(
            &dir.join(format!("b1-lateness-{backend}.svg")),
            &format!(
                "B1 on {backend}: S = {} triggers every second, {} s",
                args.triggers, args.seconds
            ),
            "lateness (started_at - fire_time), ms",
            "fires started within it, %",
            &curves,
        );
    }
}
