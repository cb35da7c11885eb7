//! B3, idle scale (BENCHMARKS.md): N stored triggers of which only a few are
//! due. Figures: the time of one poll (the due-executes query a node runs,
//! p50/p99 over many), the rows the database read per poll, and the RSS of a
//! node process polling that scheduler. The cost must follow the due triggers,
//! not N.
//!
//! ```text
//! cargo run --release -p quartz-bench -- b3 [--n 10000,100000] [--polls 200] [--backends postgres,mysql,sqlite,redis]
//! ```
//!
//! Rows read per poll: PostgreSQL's plan as executed, MariaDB's `Rows_read`,
//! and on Redis the hashes the poll's script read (`HGETALL` calls in the
//! server's command statistics). SQL backends are filled with multi-row
//! inserts; Redis with `create_job`, many at once, as a service would.

use std::time::{Duration, Instant};

use quartz_core::Timestamp;
use quartz_core::store::{ExecuteSpec, JobSpec};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_store::{AnyStore, SqlStore};
use sqlx::{AssertSqlSafe, Row};

use crate::os::{percentile, rss_kib};

/// Triggers due every second among the N.
const DUE: usize = 10;

/// B3's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Executes stored, N: one run per value.
    #[arg(long = "n", value_delimiter = ',', default_value = "10000,100000")]
    sizes: Vec<usize>,
    /// Polls measured per run.
    #[arg(long, default_value_t = 200)]
    polls: usize,
    /// Backends: postgres, mysql, sqlite, redis.
    #[arg(long, value_delimiter = ',', default_value = "postgres,mysql,sqlite,redis")]
    backends: Vec<String>,
}

/// Rows the server has read so far: MariaDB/MySQL's `Rows_read`, Redis's
/// `HGETALL` calls, server-wide (nothing else runs during the polls). Other
/// backends: none.
async fn rows_read(store: &AnyStore, backend: &str) -> Option<i64> {
    if backend == "redis" {
        return hashes_read().await;
    }
    let store = store.as_sql().filter(|_| backend == "mysql")?;
    let row = sqlx::query(
        "SELECT CAST(VARIABLE_VALUE AS SIGNED) FROM information_schema.GLOBAL_STATUS \
         WHERE VARIABLE_NAME = 'ROWS_READ'",
    )
    .fetch_one(store.pool())
    .await
    .ok()?;
    row.try_get::<i64, _>(0).ok()
}

/// Redis: the `HGETALL` calls the server has run (those of scripts included).
async fn hashes_read() -> Option<i64> {
    let client = redis::Client::open(crate::redis_url()).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .ok()?;
    let line = stats.lines().find(|l| l.starts_with("cmdstat_hgetall:"));
    // No line: no HGETALL yet.
    let Some(line) = line else { return Some(0) };
    line.split("calls=").nth(1)?.split(',').next()?.parse().ok()
}

/// PostgreSQL: the rows the poll's query reads, from its plan as executed
/// (rows out of each scan plus rows its filters removed).
async fn rows_read_pg(store: &SqlStore, scheduler: &str, before: i64) -> Option<i64> {
    let plan = sqlx::query(AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, FORMAT TEXT) SELECT id FROM quartz_execute WHERE scheduler = '{scheduler}' \
         AND state = 'waiting' AND next_fire_time < {before} ORDER BY next_fire_time, priority DESC LIMIT 5000"
    )))
    .fetch_all(store.pool())
    .await
    .ok()?;
    let mut read = 0;
    for row in plan {
        let line: String = row.try_get(0).ok()?;
        if line.contains("Scan") && line.contains("actual") {
            let rows = line.rsplit("rows=").next()?.split_whitespace().next()?;
            read += rows.parse::<i64>().ok()?;
        } else if let Some(removed) = line.split("Rows Removed by Filter: ").nth(1) {
            read += removed.trim().parse::<i64>().ok()?;
        }
    }
    Some(read)
}

/// Stores `n` idle triggers (once, a year ahead) and `DUE` that fire every
/// second.
async fn fill(store: &AnyStore, scheduler: &str, n: usize) {
    let now = store.now().await.unwrap();
    let far = now.as_millis() + 365 * 86_400_000;
    match store.as_sql() {
        Some(sql) => fill_sql(sql, scheduler, n, far).await,
        None => fill_by_api(store, n, far).await,
    }
    for i in 0..DUE {
        let trigger = Trigger::new(Schedule::fixed_rate_millis(1_000).unwrap(), now).unwrap();
        store
            .create_job(&JobSpec::new(format!("due-{i}"), "noop"), &[ExecuteSpec::new(trigger)])
            .await
            .unwrap();
    }
}

/// The idle triggers through `create_job`, 64 at a time.
async fn fill_by_api(store: &AnyStore, n: usize, far: i64) {
    let trigger = Trigger::new(Schedule::Once, Timestamp::from_millis(far)).unwrap();
    let mut next = 0;
    let mut running = tokio::task::JoinSet::new();
    while next < n || !running.is_empty() {
        while next < n && running.len() < 64 {
            let (store, trigger) = (store.clone(), trigger.clone());
            let name = format!("idle-{next:07}");
            running.spawn(async move {
                store
                    .create_job(&JobSpec::new(name, "noop"), &[ExecuteSpec::new(trigger)])
                    .await
                    .unwrap();
            });
            next += 1;
        }
        running.join_next().await.unwrap().unwrap();
    }
}

/// The idle triggers with plain multi-row inserts.
async fn fill_sql(store: &SqlStore, scheduler: &str, n: usize, far: i64) {
    let chunk = 1_000;
    for first in (0..n).step_by(chunk) {
        let last = (first + chunk).min(n);
        let jobs: Vec<String> = (first..last)
            .map(|i| format!("('{scheduler}', 'idle-{i:07}', 'noop', 'null', '', 0, 0)"))
            .collect();
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO quartz_job (scheduler, name, handler, payload, description, created_at, updated_at) VALUES {}",
            jobs.join(", ")
        )))
        .execute(store.pool())
        .await
        .unwrap();
    }
    // One execute per idle job, in one statement per chunk of jobs.
    let signature = quartz_core::store::TriggerColumns::from_trigger(
        &Trigger::new(Schedule::Once, Timestamp::from_millis(far)).unwrap(),
    )
    .signature();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO quartz_execute (job_id, scheduler, kind, start_time, state, next_fire_time, schedule_sig, updated_at) \
         SELECT id, scheduler, 'once', {far}, 'waiting', {far}, {signature}, 0 FROM quartz_job \
         WHERE scheduler = '{scheduler}' AND name LIKE 'idle-%'"
    )))
    .execute(store.pool())
    .await
    .unwrap();
}

/// Runs B3.
pub fn run(args: Args) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("| backend | N stored | due | poll p50 ms | poll p99 ms | rows read per poll | node RSS MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for backend in &args.backends {
        for &n in &args.sizes {
            rt.block_on(one(backend, n, args.polls));
        }
    }
}

async fn one(backend: &str, n: usize, polls: usize) {
    let url = crate::fresh_url(backend, &format!("quartz_bench_b3_{n}")).await;
    let scheduler = "b3";
    let store = AnyStore::connect(&url).await.unwrap().scoped(scheduler);
    fill(&store, scheduler, n).await;
    if let Some(sql) = store.as_sql().filter(|_| backend == "postgres") {
        sqlx::query("ANALYZE quartz_execute").execute(sql.pool()).await.unwrap();
    }
    let mut times = Vec::with_capacity(polls);
    let read0 = rows_read(&store, backend).await;
    let mut due = 0;
    for _ in 0..polls {
        let now = store.now().await.unwrap();
        let t = Instant::now();
        let batch = store
            .due_executes(now.saturating_add_millis(5_000), None, 5_000)
            .await
            .unwrap();
        times.push(i64::try_from(t.elapsed().as_micros()).unwrap_or(i64::MAX));
        due = batch.executes.len();
    }
    #[allow(clippy::cast_precision_loss)]
    let read = match (read0, rows_read(&store, backend).await) {
        (Some(a), Some(b)) => format!("{:.0}", (b - a) as f64 / polls as f64),
        _ if backend == "postgres" => {
            let before = store.now().await.unwrap().as_millis() + 5_000;
            rows_read_pg(store.as_sql().unwrap(), scheduler, before)
                .await
                .map_or_else(|| "n/a".to_owned(), |r| r.to_string())
        }
        _ => "n/a".to_owned(),
    };
    times.sort_unstable();
    // A node polling this scheduler once a second, for its memory.
    let mut node = crate::node::spawn(&url, scheduler, "b3-node", &["poll_ms=1000"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let rss = rss_kib(node.id());
    crate::node::stop(&mut node);
    #[allow(clippy::cast_precision_loss)]
    let ms = |us: i64| us as f64 / 1000.0;
    println!(
        "| {backend} | {n} | {due} | {:.2} | {:.2} | {read} | {:.1} |",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        rss as f64 / 1024.0
    );
}
