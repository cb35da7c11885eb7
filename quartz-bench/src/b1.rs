//! B1, the fire storm (BENCHMARKS.md): S triggers firing every second on K
//! `quartz run` processes against one database, for D seconds. Every figure
//! comes from the fire ledger, not from the nodes' counters.
//!
//! ```text
//! cargo run --release -p quartz-bench -- b1 [--url URL] [--triggers 1000,2000] [--nodes 1,2,3] [--seconds 60] [--hog N] [--plot DIR]
//! ```
//!
//! Every S in `--triggers` runs with every K in `--nodes` (the grid). `--hog N`
//! keeps N CPU-bound processes at nice 0 busy through each run, the service's
//! own work competing with the nodes. With `--plot`, the lateness
//! distribution of each run goes to `b1-lateness-BACKEND.svg` and, for a grid
//! of several S, p99 lateness against S to `b1-grid-BACKEND.svg`.
//!
//! The URL defaults to `QUARTZ_PG_URL` or the local PostgreSQL; a `redis://`
//! URL runs it on Redis. Each run uses its own scheduler name, so runs do not
//! see each other's rows. CPU seconds are read from /proc: the node processes,
//! and every process of the database server (`postgres`,
//! `mariadbd`/`mysqld`, `redis-server`) over the run.

use std::process::{Child, Command};

use crate::os::{cpu_seconds, percentile, server_cpu};
use std::time::Duration;

use quartz_core::cron::CronExpression;
use quartz_core::store::{ExecuteSpec, FireQuery, FireState, JobSpec};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_core::{Timestamp, Tz};
use quartz_store::{AnyStore, StoreOptions};

struct Args {
    url: String,
    triggers: Vec<usize>,
    nodes: Vec<usize>,
    seconds: i64,
    hogs: usize,
    plot: Option<std::path::PathBuf>,
}

fn args() -> Args {
    let mut out = Args {
        url: crate::pg_url(),
        triggers: vec![1_000],
        nodes: vec![1, 2, 3],
        seconds: 60,
        hogs: 0,
        plot: None,
    };
    let mut it = std::env::args().skip(2);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--url" => out.url = it.next().unwrap(),
            "--triggers" => out.triggers = it.next().unwrap().split(',').map(|n| n.parse().unwrap()).collect(),
            "--hog" => out.hogs = it.next().unwrap().parse().unwrap(),
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
    let store = AnyStore::connect_with(
        &args.url,
        &StoreOptions {
            max_connections: 4,
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    let backend = args.url.split(':').next().unwrap_or("db").to_owned();
    println!(
        "| backend | S | K | D s | expected | observed | duplicates | misfired (recorded) | missed | p50 ms | p99 ms | max ms | node CPU s/1k fires | db CPU s/1k fires |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut curves = Vec::new();
    let mut p99_by_k: Vec<crate::plot::Series> = args
        .nodes
        .iter()
        .map(|k| crate::plot::Series {
            label: format!("K = {k}"),
            points: Vec::new(),
        })
        .collect();
    for &s in &args.triggers {
        for (i, &k) in args.nodes.iter().enumerate() {
            let run = one_run(&store, &args, s, k).await;
            #[allow(clippy::cast_precision_loss)]
            let per_k = |cpu: f64| cpu / (run.observed.max(1) as f64 / 1000.0);
            let lateness = &run.lateness;
            println!(
                "| {backend} | {s} | {k} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3} | {:.3} |",
                args.seconds,
                run.expected,
                run.observed,
                run.duplicates,
                run.misfired,
                run.missed,
                percentile(lateness, 0.5),
                percentile(lateness, 0.99),
                lateness.last().copied().unwrap_or(0),
                per_k(run.node_cpu),
                per_k(run.db_cpu),
            );
            // The lateness distribution: the share of fires started within x ms.
            #[allow(clippy::cast_precision_loss)]
            let cdf: Vec<(f64, f64)> = (0..=100)
                .map(|q| {
                    let p = f64::from(q) / 100.0;
                    (percentile(lateness, p) as f64, p * 100.0)
                })
                .collect();
            curves.push(crate::plot::Series {
                label: if args.triggers.len() > 1 {
                    format!("S = {s}, K = {k}")
                } else {
                    format!("K = {k}")
                },
                points: cdf,
            });
            #[allow(clippy::cast_precision_loss)]
            p99_by_k[i]
                .points
                .push((s as f64, percentile(lateness, 0.99).max(1) as f64));
        }
    }
    if let Some(dir) = &args.plot {
        let load = if args.hogs > 0 {
            format!(", {} CPU-bound processes beside", args.hogs)
        } else {
            String::new()
        };
        let sizes: Vec<String> = args.triggers.iter().map(ToString::to_string).collect();
        crate::plot::lines(
            &dir.join(format!("b1-lateness-{backend}.svg")),
            &format!(
                "B1 on {backend}: S = {} triggers every second, {} s{load}",
                sizes.join(", "),
                args.seconds
            ),
            "lateness (started_at - fire_time), ms",
            "fires started within it, %",
            &curves,
        );
        if args.triggers.len() > 1 {
            crate::plot::log_y(
                &dir.join(format!("b1-grid-{backend}.svg")),
                &format!("B1 on {backend}: p99 lateness against S, {} s{load}", args.seconds),
                "S, triggers firing every second",
                "p99 lateness, ms (log)",
                &p99_by_k,
            );
        }
    }
}

/// What one run of S triggers on K nodes measured.
struct Run {
    expected: i64,
    observed: usize,
    duplicates: usize,
    misfired: i64,
    missed: i64,
    /// Of every run fire, sorted.
    lateness: Vec<i64>,
    node_cpu: f64,
    db_cpu: f64,
}

/// One storm: the jobs first, then the nodes (and the CPU hogs), the storm,
/// the backlog worked through, then the ledger read.
async fn one_run(store: &AnyStore, args: &Args, s: usize, k: usize) -> Run {
    let server: &[&str] = if args.url.starts_with("postgres") {
        &["postgres"]
    } else if args.url.starts_with("sqlite") {
        &[]
    } else if args.url.starts_with("redis") {
        &["redis-server"]
    } else {
        &["mariadbd", "mysqld"]
    };
    let scheduler = format!("b1-{s}-{k}-{}", std::process::id());
    let (start, end) = create_jobs(store, &scheduler, s, args.seconds).await;
    let mut hogs: Vec<Child> = (0..args.hogs)
        .map(|_| {
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("a CPU-bound process")
        })
        .collect();
    let mut nodes: Vec<Child> = (0..k)
        .map(|i| crate::node::spawn(&args.url, &scheduler, &format!("b1-node-{i}"), &[]))
        .collect();
    // Measure CPU over the storm only.
    let wait_start = u64::try_from(start.as_millis() - store.now().await.unwrap().as_millis()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait_start)).await;
    let node_cpu0: f64 = nodes.iter().map(|c| cpu_seconds(c.id())).sum();
    let db_cpu0 = server_cpu(server);
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(args.seconds * 1000 + 3_000).unwrap(),
    ))
    .await;
    settle(store, &scheduler).await;
    let node_cpu = nodes.iter().map(|c| cpu_seconds(c.id())).sum::<f64>() - node_cpu0;
    let db_cpu = server_cpu(server) - db_cpu0;
    for c in nodes.iter_mut().chain(hogs.iter_mut()) {
        let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
    }
    for c in nodes.iter_mut().chain(hogs.iter_mut()) {
        let _ = c.wait();
    }
    let mut run = read_ledger(
        store,
        &scheduler,
        (start, end),
        i64::try_from(s).unwrap() * args.seconds,
    )
    .await;
    run.node_cpu = node_cpu;
    run.db_cpu = db_cpu;
    run
}

/// Creates S jobs firing every second from a start a few seconds ahead (room
/// to create them and start the nodes) for `seconds`; returns the storm's
/// first and last instants.
async fn create_jobs(store: &AnyStore, scheduler: &str, s: usize, seconds: i64) -> (Timestamp, Timestamp) {
    let store = store.scoped(scheduler);
    // The jobs first, then the nodes: creating them while the nodes poll is
    // slower, and a job created after the storm's start would be counted
    // late from its first fire.
    let now = store.now().await.unwrap().as_millis();
    let lead_ms = 12_000 + 3 * i64::try_from(s).unwrap_or(i64::MAX / 8);
    let start = Timestamp::from_millis((now + lead_ms) / 1000 * 1000);
    let end = start.saturating_add_millis(seconds * 1000 - 1);
    let cron = CronExpression::parse("* * * * * ?").unwrap();
    for i in 0..s {
        let trigger = Trigger::new(Schedule::cron(cron.clone(), Tz::UTC), start)
            .unwrap()
            .with_end(end)
            .unwrap();
        store
            .create_job(
                &JobSpec::new(format!("storm-{i:05}"), "noop"),
                &[ExecuteSpec::new(trigger)],
            )
            .await
            .unwrap();
    }
    let left = start.as_millis() - store.now().await.unwrap().as_millis();
    assert!(
        left > 3_000,
        "creating {s} jobs took until {left} ms before the storm: the nodes would start late"
    );
    (start, end)
}

/// An overloaded cluster lags: lets it work through its backlog (no trigger
/// due up to now, nothing claimed or running), for at most a minute, so that
/// a fire time without a row is a fire missed, not one not reached yet.
async fn settle(store: &AnyStore, scheduler: &str) {
    let store = store.scoped(scheduler);
    for _ in 0..600 {
        let now = store.now().await.unwrap();
        let due = store.due_executes(now, 1).await.unwrap().executes.len();
        let mut open = 0;
        for state in [FireState::Claimed, FireState::Running] {
            let query = FireQuery {
                state: Some(state),
                limit: 1,
                ..FireQuery::new()
            };
            open += store.fires(&query).await.unwrap().len();
        }
        if due + open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every ledger row of the scheduler, a page at a time.
async fn ledger(store: &AnyStore, scheduler: &str) -> Vec<quartz_core::store::FireRecord> {
    let store = store.scoped(scheduler);
    let mut out = Vec::new();
    let mut query = FireQuery {
        limit: 10_000,
        ..FireQuery::new()
    };
    loop {
        let page = store.fires(&query).await.unwrap();
        let Some(last) = page.last() else { return out };
        query.before_id = Some(last.id);
        out.extend(page);
    }
}

/// The run's figures from the ledger (CPU left at zero).
async fn read_ledger(store: &AnyStore, scheduler: &str, (start, end): (Timestamp, Timestamp), expected: i64) -> Run {
    let rows = ledger(store, scheduler).await;
    let mut runs: std::collections::HashMap<(i64, i64), usize> = std::collections::HashMap::new();
    let mut lateness = Vec::new();
    // Every fire time with a ledger row: run, or recorded misfired or
    // skipped (a range of fire_count seconds).
    let mut recorded: std::collections::HashSet<(i64, i64)> = std::collections::HashSet::new();
    let mut misfired = 0_i64;
    for row in &rows {
        let state = row.state;
        let key = (row.execute_id, row.fire_time.as_millis());
        if matches!(state, FireState::Misfired | FireState::Skipped) {
            let count = i64::try_from(row.fire_count).unwrap_or(i64::MAX);
            misfired += count;
            for i in 0..count {
                let t = key.1 + i * 1_000;
                if (start.as_millis()..=end.as_millis()).contains(&t) {
                    recorded.insert((key.0, t));
                }
            }
        } else if key.1 % 1_000 == 0 && (start.as_millis()..=end.as_millis()).contains(&key.1) {
            // On the cron's grid (a fire-now policy's late run is not).
            recorded.insert(key);
        }
        if state != FireState::Succeeded {
            continue;
        }
        *runs.entry(key).or_default() += 1;
        if let Some(s) = row.started_at {
            lateness.push(s.as_millis() - key.1);
        }
    }
    lateness.sort_unstable();
    Run {
        expected,
        observed: runs.values().sum(),
        duplicates: runs.values().map(|n| n - 1).sum(),
        misfired,
        missed: expected - i64::try_from(recorded.len()).unwrap(),
        lateness,
        node_cpu: 0.0,
        db_cpu: 0.0,
    }
}
