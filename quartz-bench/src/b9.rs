//! B9, claims behind waiting fires (BENCHMARKS.md): what a claim costs while
//! W fires wait under overlap policies, on each backend. Triggers with
//! `buffer_all` whose jobs run long gather waiting (pending) fires; every
//! exclusive claim of such a trigger looks for the trigger's waiting fire,
//! and every claim of a pending fire for an older one of its trigger. Their
//! cost should follow what their own trigger has waiting, not W.
//!
//! ```text
//! cargo run --release -p quartz-bench -- b9 [--url URL] [--waiting 0,1000,10000] [--claims 200] [--history 0]
//! ```
//!
//! For each W: a fresh database; ten other triggers, each with its first
//! fire running and W/10 fires waiting behind it (claimed the way a node
//! claims them, a hundred to a batch); then one more trigger, with H fires
//! that ran and ended (`--history`), whose next fire runs, and `--claims` exclusive claims of its next fires, one at a
//! time, timed (each records a waiting fire); then its running fire ends and
//! a claim of its last waiting fire, which an older one holds back, is timed
//! as often. On PostgreSQL the tables are vacuumed and analysed after the
//! set-up, as autovacuum would have.

use std::time::{Duration, Instant};

use quartz_core::Timestamp;
use quartz_core::store::{Claim, ExecuteSpec, FireEnd, JobSpec, PendingClaim};
use quartz_core::trigger::{Fire, Overlap, Schedule, Trigger, TriggerState};
use quartz_store::AnyStore;

use crate::os::percentile;

/// B9's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database [default: QUARTZ_PG_URL or the local PostgreSQL].
    #[arg(long, default_value_t = crate::pg_url(), hide_default_value = true)]
    url: String,
    /// Fires waiting under other triggers, W: one run per value.
    #[arg(long, value_delimiter = ',', default_value = "0,1000,10000")]
    waiting: Vec<usize>,
    /// Claims timed per figure.
    #[arg(long, default_value_t = 200)]
    claims: usize,
    /// Fires of the measured trigger that ran and ended before, H: its
    /// history in the ledger.
    #[arg(long, default_value_t = 0)]
    history: usize,
}

/// Runs B9 with the options on the command line.
pub fn run(args: Args) {
    crate::block_on(async {
        let backend = args.url.split(':').next().unwrap_or("db").to_owned();
        println!(
            "| backend | W | H | claim behind a running fire: p50 / p99 ms | claim of a pending fire behind an older one: p50 / p99 ms |"
        );
        println!("|---|---:|---:|---|---|");
        for &w in &args.waiting {
            let (mut behind, mut pending) = one_run(&args, &backend, w).await;
            behind.sort_unstable();
            pending.sort_unstable();
            println!(
                "| {backend} | {w} | {} | {:.2} / {:.2} | {:.2} / {:.2} |",
                args.history,
                ms(percentile(&behind, 0.5)),
                ms(percentile(&behind, 0.99)),
                ms(percentile(&pending, 0.5)),
                ms(percentile(&pending, 0.99)),
            );
        }
    });
}

fn ms(micros: i64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let ms = micros as f64 / 1000.0;
    ms
}

/// A fresh database of the URL's backend.
async fn fresh(url: &str, backend: &str) -> String {
    match backend {
        "postgres" => crate::fresh_url("postgres", "quartz_bench_b9").await,
        "mysql" => crate::fresh_url("mysql", "quartz_bench_b9").await,
        "redis" => crate::fresh_url("redis", "quartz_bench_b9").await,
        "sqlite" => crate::fresh_url("sqlite", "quartz-bench-b9").await,
        _ => url.to_owned(),
    }
}

/// A `buffer_all` trigger every second from `start` and its first `n` fires.
async fn buffered(store: &AnyStore, name: &str, start: Timestamp, n: usize) -> (i64, Vec<Fire>) {
    let trigger = Trigger::new(Schedule::fixed_rate_millis(1000).unwrap(), start)
        .unwrap()
        .with_overlap(Some(Overlap::BufferAll));
    store
        .create_job(&JobSpec::new(name, "noop"), &[ExecuteSpec::new(trigger)])
        .await
        .unwrap();
    let execute = store.get_job(name).await.unwrap().unwrap().executes.remove(0);
    let until = start.checked_add_millis(1000 * i64::try_from(n).unwrap() + 1).unwrap();
    let fires = execute
        .trigger
        .fires_until(&TriggerState::initial(&execute.trigger), until)
        .take(n)
        .collect();
    (execute.id, fires)
}

/// Per-claim times in microseconds: exclusive claims behind a running fire,
/// and claims of a pending fire held back by an older one.
async fn one_run(args: &Args, backend: &str, w: usize) -> (Vec<i64>, Vec<i64>) {
    let url = fresh(&args.url, backend).await;
    let store = crate::connect(&url).await;
    let node = quartz_testkit::register_node(&store, "b9").await;
    let claim = |execute_id: i64, fire: &Fire| {
        let mut claim = Claim::for_fire(execute_id, fire, &node);
        claim.exclusive = true;
        claim.overlap = Some(Overlap::BufferAll);
        claim
    };
    // Fire times far enough in the past for every one to be due.
    let start = Timestamp::from_millis(store.now().await.unwrap().as_millis() - 86_400_000);
    for t in 0..10 {
        let (id, fires) = buffered(&store, &format!("other-{t}"), start, w / 10 + 1).await;
        for batch in fires.chunks(100) {
            let claims: Vec<Claim> = batch.iter().map(|f| claim(id, f)).collect();
            store.claim_batch(&claims).await.unwrap();
        }
    }
    let (id, fires) = buffered(&store, "measured", start, args.history + args.claims + 1).await;
    let (history, fires) = fires.split_at(args.history);
    for batch in history.chunks(100) {
        let claims: Vec<Claim> = batch.iter().map(|f| Claim::for_fire(id, f, &node)).collect();
        let won: Vec<i64> = store
            .claim_batch(&claims)
            .await
            .unwrap()
            .into_iter()
            .flatten()
            .collect();
        store.mark_running_all(&won, &node).await.unwrap();
        let ends: Vec<_> = won
            .iter()
            .map(|f| {
                (
                    *f,
                    FireEnd::Succeeded {
                        chain: false,
                        ran: None,
                    },
                )
            })
            .collect();
        store.end_fires(&node, &ends).await.unwrap();
    }
    let first = store
        .claim(&claim(id, &fires[0]))
        .await
        .unwrap()
        .expect("nothing runs yet");
    crate::tidy(&url).await;
    let mut behind = Vec::with_capacity(args.claims);
    for fire in &fires[1..] {
        let began = Instant::now();
        assert_eq!(store.claim(&claim(id, fire)).await.unwrap(), None, "it waits");
        behind.push(micros(began.elapsed()));
    }
    store.mark_running_all(&[first], &node).await.unwrap();
    store
        .end_fires(
            &node,
            &[(
                first,
                FireEnd::Succeeded {
                    chain: false,
                    ran: None,
                },
            )],
        )
        .await
        .unwrap();
    let mut query = quartz_core::store::FireQuery::new();
    query.execute_id = Some(id);
    query.limit = 1;
    let last = store.fires(&query).await.unwrap()[0].id;
    let mut pending = Vec::with_capacity(args.claims);
    for _ in 0..args.claims {
        let began = Instant::now();
        assert_eq!(
            store.pending_claim(last, &node, false).await.unwrap(),
            PendingClaim::Blocked,
            "an older fire of its trigger waits"
        );
        pending.push(micros(began.elapsed()));
    }
    (behind, pending)
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
