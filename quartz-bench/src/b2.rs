//! B2: claim throughput against the database's own limit (see BENCHMARKS.md).
//!
//! On PostgreSQL (`QUARTZ_PG_URL`, default the local server), with 1, 2, 4 and
//! 8 claimers, each on its own connection, claiming fires of triggers due far
//! faster than they can be claimed: single claims (one compare-and-set plus one
//! ledger insert, one transaction each) and batched claims (100 per
//! transaction). The reference is pgbench on the same server in the same run: a
//! single-row `UPDATE` by primary key and a 100-row `UPDATE`, at the same number
//! of connections. Each claimer owns its own executes, so every claim wins; the
//! figure is ledger rows per second, counted in the database.
//!
//! ```sh
//! cargo run --release -p quartz-bench -- b2 [--seconds 5] [--clients 1,2,4,8]
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

use quartz_core::store::{Claim, ExecuteSpec, JobSpec, NodeRef, NodeRegistration, Store};
use quartz_core::trigger::{Schedule, Trigger, TriggerState};
use quartz_store::{SqlStore, StoreOptions};
use sqlx::{AnyConnection, AssertSqlSafe, Connection, Executor, Row};

const EXECUTES_PER_CLAIMER: usize = 50;
const BATCH: usize = 100;

/// B2's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds each figure is measured over.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Concurrent claimers: one figure per value.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    clients: Vec<usize>,
    /// A directory for the plot.
    #[arg(long)]
    plot: Option<String>,
}

/// Runs B2 with the options on the command line.
pub fn run(args: Args) {
    let Args { seconds, clients, plot } = args;
    let base = crate::pg_url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = "quartz_bench_b2";
    let url = rt.block_on(fresh_database(db));
    println!(
        "B2 on PostgreSQL ({}), {seconds} s per figure, 2 cores",
        redact_path(&base)
    );
    println!();
    println!(
        "| claimers | pgbench 1-row UPDATE tx/s | single claims/s | ratio | pgbench 100-row UPDATE rows/s | batched claims/s | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut series: Vec<crate::plot::Series> = ["pgbench 1-row UPDATE tx/s", "single claims/s", "batched claims/s"]
        .iter()
        .map(|l| crate::plot::Series {
            label: (*l).to_owned(),
            points: Vec::new(),
        })
        .collect();
    for &n in &clients {
        let pg_single = pgbench(&url, n, seconds, "UPDATE b2_ref SET v = v + 1 WHERE id = :id;");
        let pg_batch = pgbench(
            &url,
            n,
            seconds,
            "UPDATE b2_ref SET v = v + 1 WHERE id BETWEEN :id AND :id + 99;",
        ) * 100.0;
        let single = rt.block_on(claims(&url, n, seconds, false));
        let batched = rt.block_on(claims(&url, n, seconds, true));
        #[allow(clippy::cast_precision_loss)]
        let x = n as f64;
        series[0].points.push((x, pg_single));
        series[1].points.push((x, single));
        series[2].points.push((x, batched));
        println!(
            "| {n} | {pg_single:.0} | {single:.0} | {:.2} | {pg_batch:.0} | {batched:.0} | {:.2} |",
            single / pg_single,
            batched / pg_single
        );
    }
    println!();
    println!("ratio: claims per second over pgbench's single-row UPDATE tx/s (targets: single >= 0.5, batched > 1).");
    if let Some(dir) = plot {
        crate::plot::lines(
            &std::path::Path::new(&dir).join("b2-claims.svg"),
            "B2 on PostgreSQL: claims per second against claimers",
            "claimers (connections)",
            "per second",
            &series,
        );
    }
    rt.block_on(async {
        let mut admin = AnyConnection::connect(&base).await.unwrap();
        admin
            .execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")))
            .await
            .unwrap();
    });
}

fn redact_path(url: &str) -> String {
    url.rsplit('@').next().unwrap_or(url).to_owned()
}

/// A fresh database with pgbench's reference table: 100,000 rows.
async fn fresh_database(name: &str) -> String {
    let url = crate::fresh_url("postgres", name).await;
    let mut conn = AnyConnection::connect(&url).await.unwrap();
    conn.execute("CREATE TABLE b2_ref (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)")
        .await
        .unwrap();
    conn.execute("INSERT INTO b2_ref SELECT g, 0 FROM generate_series(1, 100000) g")
        .await
        .unwrap();
    conn.execute("VACUUM ANALYZE b2_ref").await.unwrap();
    url
}

/// pgbench's transactions per second for a one-statement script.
fn pgbench(url: &str, clients: usize, seconds: u64, statement: &str) -> f64 {
    let script = std::env::temp_dir().join(format!("quartz-b2-{}.sql", std::process::id()));
    std::fs::write(&script, format!("\\set id random(1, 99900)\n{statement}\n")).unwrap();
    let out = Command::new("pgbench")
        .args([
            "-n",
            "-c",
            &clients.to_string(),
            "-j",
            &clients.to_string(),
            "-T",
            &seconds.to_string(),
            "-f",
        ])
        .arg(&script)
        .arg(url)
        .output()
        .expect("pgbench (Debian package postgresql-client) on PATH");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("tps = ")
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or_else(|| {
            panic!(
                "pgbench output without tps: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// Claims per second with `n` claimers, counted as ledger rows.
async fn claims(url: &str, n: usize, seconds: u64, batched: bool) -> f64 {
    let options = StoreOptions {
        max_connections: 1,
        ..StoreOptions::default()
    };
    let setup = SqlStore::connect_with(url, &options).await.unwrap();
    setup
        .pool()
        .execute("TRUNCATE quartz_fire, quartz_execute, quartz_job, quartz_node")
        .await
        .unwrap();
    let start = setup.now().await.unwrap();
    let mut claimers = Vec::new();
    for c in 0..n {
        let store = SqlStore::connect_with(url, &options).await.unwrap().scoped("b2");
        let node = store
            .register_node(&NodeRegistration {
                node_id: format!("claimer-{c}"),
                host: "bench".into(),
                pid: std::process::id(),
                weight: 1,
                handlers: Vec::new(),
                dead_after: None,
                payload_schemas: Default::default(),
            })
            .await
            .unwrap();
        let node = NodeRef {
            node_id: node.node_id,
            incarnation: node.incarnation,
        };
        let mut rows = Vec::new();
        for e in 0..EXECUTES_PER_CLAIMER {
            // Due every millisecond since long ago: always behind.
            let trigger = Trigger::new(
                Schedule::fixed_rate_millis(1).unwrap(),
                start.checked_add_millis(-86_400_000).unwrap(),
            )
            .unwrap();
            store
                .create_job(
                    &JobSpec::new(format!("job-{c}-{e}"), "noop"),
                    &[ExecuteSpec::new(trigger.clone())],
                )
                .await
                .unwrap();
            let id = store.get_job(&format!("job-{c}-{e}")).await.unwrap().unwrap().executes[0].id;
            rows.push((id, trigger.clone(), TriggerState::initial(&trigger)));
        }
        claimers.push((store, node, rows));
    }
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for (store, node, mut rows) in claimers {
        tasks.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let mut i = 0;
            while Instant::now() < deadline {
                let take = if batched { BATCH } else { 1 };
                let mut claims = Vec::with_capacity(take);
                let mut advanced = Vec::with_capacity(take);
                for _ in 0..take {
                    let k = i % rows.len();
                    i += 1;
                    let (id, trigger, state) = &rows[k];
                    // Several fires of one execute in a batch chain on each other.
                    let before = advanced
                        .iter()
                        .rev()
                        .find(|(kk, _)| *kk == k)
                        .map_or(state.clone(), |(_, s): &(usize, TriggerState)| s.clone());
                    let fire = trigger
                        .fires_until(&before, quartz_core::Timestamp::from_millis(i64::MAX))
                        .next()
                        .unwrap();
                    claims.push(Claim::for_fire(*id, &fire, &node));
                    advanced.push((k, fire.after));
                }
                let won = if batched {
                    store.claim_batch(&claims).await.unwrap()
                } else {
                    vec![store.claim(&claims[0]).await.unwrap()]
                };
                assert!(
                    won.iter().all(Option::is_some),
                    "a claimer owns its executes: every claim wins"
                );
                for (k, after) in advanced {
                    rows[k].2 = after;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let count: i64 = setup
        .pool()
        .fetch_one("SELECT COUNT(*) FROM quartz_fire")
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    count as f64 / elapsed
}
