//! B8, the midnight burst (BENCHMARKS.md): N jobs whose cron fires at the
//! same second, the most common real shape of load (every daily job at
//! midnight; here `0 * * * * ?`, from one minute on), on K `quartz-bench
//! node` processes with default settings, the jobs added the way a user adds
//! them. For that second's fires: what became of each by the ledger, and,
//! from the nodes' run logs checked by the project's checker, the handlers'
//! real starts and the fire times lost, run twice or otherwise wrong (see
//! [`crate::b1`]).
//!
//! ```text
//! cargo run --release -p quartz-bench -- b8 [--url URL] [--jobs 1000,10000] [--nodes 1,3] [--lead 20]
//! ```
//!
//! The jobs are added first, then the nodes start (a poll window and more
//! before the second, so they know the burst ahead); lateness is when each
//! job's handler began after that second, by its node's run log, beside the
//! ledger's `started_at`. Node CPU is from their start to the burst handled.

use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::admin::{Admin, JobDefinition, TriggerDefinition};
use quartz_store::AnyStore;

use crate::b1::{Checked, Tally, lateness, ledger, settle};
use crate::os::{cpu_seconds, percentile, server_cpu, server_processes};

/// B8's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database [default: QUARTZ_PG_URL or the local PostgreSQL].
    #[arg(long, default_value_t = crate::pg_url(), hide_default_value = true)]
    url: String,
    /// Jobs whose cron fires at the burst's second, N: one run per value.
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    jobs: Vec<usize>,
    /// Node processes, K: one run per value.
    #[arg(long, value_delimiter = ',', default_value = "3")]
    nodes: Vec<usize>,
    /// Seconds from the last job added to the burst, at least (the burst is
    /// the next minute after).
    #[arg(long, default_value_t = 20)]
    lead: i64,
}

/// Runs B8 with the options on the command line.
pub fn run(args: Args) {
    crate::block_on(bursts(args));
}

async fn bursts(args: Args) {
    let store = crate::connect(&args.url).await;
    let backend = args.url.split(':').next().unwrap_or("db").to_owned();
    println!(
        "| backend | N | K | ran on time | ran late by policy | misfired, not run | lost | run twice | other violations | handlers p50 / p99 / max ms | ledger p50 / p99 / max ms | node CPU s | db CPU s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &n in &args.jobs {
        for &k in &args.nodes {
            let (tally, checked, (lateness, handler), node_cpu, db_cpu) = one_burst(&store, &args, n, k).await;
            println!(
                "| {backend} | {n} | {k} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} / {} / {} | {node_cpu:.2} | {db_cpu:.2} |",
                tally.on_time,
                tally.late_by_policy,
                tally.misfired,
                checked.lost,
                checked.run_twice,
                checked.other,
                percentile(&handler, 0.5),
                percentile(&handler, 0.99),
                handler.last().copied().unwrap_or(0),
                percentile(&lateness, 0.5),
                percentile(&lateness, 0.99),
                lateness.last().copied().unwrap_or(0),
            );
            for example in &checked.examples {
                eprintln!("  {backend} N={n} K={k}: {example}");
            }
        }
    }
}

/// One burst: the jobs, the nodes, the second, the ledger; the lateness of
/// the ledger's starts and of the handlers' (the nodes' notes), sorted.
async fn one_burst(
    store: &AnyStore,
    args: &Args,
    n: usize,
    k: usize,
) -> (Tally, Checked, (Vec<i64>, Vec<i64>), f64, f64) {
    crate::tidy(&args.url).await;
    let scheduler = format!("b8-{n}-{k}-{}", std::process::id());
    let at = create_jobs(store, &scheduler, n, args.lead).await;
    let (logs, mut nodes) = crate::node::spawn_cluster_logging(&args.url, &scheduler, "b8", k, &[]);
    let server = server_processes(&args.url);
    let node_cpu0: f64 = nodes.iter().map(|c| cpu_seconds(c.id())).sum();
    let db_cpu0 = server_cpu(server);
    let until_after = at.as_millis() + 5_000 - store.now().await.unwrap().as_millis();
    tokio::time::sleep(Duration::from_millis(u64::try_from(until_after).unwrap_or(0))).await;
    settle(store, &scheduler).await;
    let node_cpu = nodes.iter().map(|c| cpu_seconds(c.id())).sum::<f64>() - node_cpu0;
    let db_cpu = server_cpu(server) - db_cpu0;
    for node in &mut nodes {
        crate::node::stop(node);
    }
    let rows = ledger(store, &scheduler).await;
    let expected = crate::b1::execute_ids(store, &scheduler, "")
        .await
        .into_iter()
        .map(|id| (id, at.as_millis()))
        .collect();
    let (report, handler) =
        crate::node::check_runs(&*store.scoped(&scheduler), &logs, (at.as_millis(), at.as_millis())).await;
    let mut checked = Checked::default();
    checked.add(&report);
    (
        Tally::of(&expected, &rows, 1_000),
        checked,
        (lateness(&rows), handler),
        node_cpu,
        db_cpu,
    )
}

/// Creates N jobs whose cron (`0 * * * * ?`) fires at the start of every
/// minute, from a minute at least `lead` seconds after they all exist, the
/// way a user adds them (the admin surface's `job_add`, every field checked
/// and the change logged); returns that minute.
async fn create_jobs(store: &AnyStore, scheduler: &str, n: usize, lead: i64) -> Timestamp {
    let admin = Admin::new(store.scoped(scheduler), scheduler).acting_as("b8");
    let now = store.now().await.unwrap().as_millis();
    // Adding a job takes a few milliseconds: the minute is set past that.
    let adding_ms = 8 * i64::try_from(n).unwrap_or(i64::MAX / 16);
    let at = Timestamp::from_millis((now + adding_ms + lead * 1_000) / 60_000 * 60_000 + 60_000);
    let trigger = TriggerDefinition::cron("0 * * * * ?", "UTC").unwrap().starting(at);
    let adding = std::time::Instant::now();
    for i in 0..n {
        let job = JobDefinition::new(format!("burst-{i:05}"), "noop").with_trigger(trigger.clone());
        admin.job_add(&job).await.unwrap();
    }
    let took = adding.elapsed();
    println!(
        "note: adding the {n} jobs one by one took {:.1} s ({:.2} ms a job)",
        took.as_secs_f64(),
        took.as_secs_f64() * 1_000.0 / n.max(1) as f64
    );
    let left = at.as_millis() - store.now().await.unwrap().as_millis();
    assert!(
        left > lead * 1_000 / 2,
        "adding {n} jobs took until {left} ms before the burst: raise --lead"
    );
    at
}
