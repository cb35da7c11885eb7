//! B1, the fire storm (BENCHMARKS.md): S triggers firing every second on K
//! node processes against one database, for D seconds. No figure comes from
//! the nodes' counters. Each node keeps its run log (see [`crate::node`]),
//! and the project's checker matches it against the triggers and the
//! ledger: the lateness of the handlers' real starts, the fire times lost
//! (no run and no misfire record), run twice, or found otherwise wrong
//! (started early or by a fenced node, or the ledger disagreeing with the
//! runs) come from it. The classes of the expected fire times (on time,
//! late by policy, misfired) and the ledger's own lateness, shown beside the
//! handlers' to compare, come from the ledger.
//!
//! ```text
//! cargo run --release -p quartz-bench -- b1 [--url URL] [--triggers 1000,2000] [--nodes 1,2,3] [--seconds 60] [--hog N] [--schedulers N] [--plot DIR] [--hold-xmin] [--set NAME=VALUE]
//! ```
//!
//! Every S in `--triggers` runs with every K in `--nodes` (the grid). `--hog N`
//! keeps N CPU-bound processes at nice 0 busy through each run, the service's
//! own work competing with the nodes. With `--plot`, the lateness
//! distribution of each run goes to `b1-lateness-BACKEND.svg` and, for a grid
//! of several S, p99 lateness against S to `b1-grid-BACKEND.svg`. Beside the
//! table, on stderr, each run's late seconds: by second of the run and by
//! the node that won the fires, how many started over 50 ms late and how
//! many were claimed after their time (see [`crate::late`]).
//!
//! The URL defaults to `QUARTZ_PG_URL` or the local PostgreSQL; a `redis://`
//! URL runs it on Redis, a `redis+cluster://` URL on a Redis Cluster (with
//! `--schedulers N`, the S triggers split over N schedulers, K nodes each,
//! their slots spread over the masters). Each run uses its own scheduler name, so runs do not
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
use quartz_store::AnyStore;

/// B1's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database (`postgres://`, `mysql://`, `sqlite://`, `redis://`)
    /// [default: QUARTZ_PG_URL or the local PostgreSQL].
    #[arg(long, default_value_t = crate::pg_url(), hide_default_value = true)]
    url: String,
    /// Triggers firing every second, S: one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    triggers: Vec<usize>,
    /// Node processes, K: one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    nodes: Vec<usize>,
    /// Seconds each run lasts.
    #[arg(long, default_value_t = 60)]
    seconds: i64,
    /// CPU-bound processes kept busy through each run.
    #[arg(long = "hog", default_value_t = 0)]
    hogs: usize,
    /// Schedulers the S triggers are split over, each run by K nodes of its
    /// own (on a Redis Cluster, each scheduler's keys are one slot).
    #[arg(long, default_value_t = 1)]
    schedulers: usize,
    /// A directory for the plots.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// Nodes claim each fire on its own, never a trigger's next fire along
    /// with its due one (`Settings::claim_runs` off; on by default).
    #[arg(long)]
    no_claim_runs: bool,
    /// PostgreSQL: keep a REPEATABLE READ transaction open through each run,
    /// its snapshot taken before the jobs are written (as a long report or
    /// a `pg_dump` does), so that vacuum can remove no row version the run
    /// leaves behind; the tables' dead row versions and sizes at the end go
    /// to stderr.
    #[arg(long)]
    hold_xmin: bool,
    /// A node setting changed from its default, `NAME=VALUE` (repeatable;
    /// the names of `quartz-bench node`: `claim_lead_ms=3000`, …), for
    /// experiments; the table's figures are then not the defaults'.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,
    /// B10: jobs registered beside the S (hourly to daily cron jobs),
    /// before the storm's jobs, and what they cost measured.
    #[arg(skip)]
    registered: Option<usize>,
}

impl Args {
    /// B10's run of B1: `s` triggers every second on `k` nodes for
    /// `seconds`, beside `registered` other jobs.
    pub(crate) fn registered(url: &str, s: usize, k: usize, seconds: i64, registered: usize) -> Args {
        Args {
            url: url.to_owned(),
            triggers: vec![s],
            nodes: vec![k],
            seconds,
            hogs: 0,
            schedulers: 1,
            plot: None,
            no_claim_runs: false,
            hold_xmin: false,
            settings: Vec::new(),
            registered: Some(registered.saturating_sub(s)),
        }
    }
}

/// Runs B1 with the options on the command line.
pub fn run(args: Args) {
    crate::block_on(storm(args));
}

async fn storm(args: Args) {
    let store = crate::connect(&args.url).await;
    let backend = args.url.split(':').next().unwrap_or("db").to_owned();
    println!(
        "| backend | S | K | D s | expected | ran on time | ran late by policy | misfired, not run | lost | run twice | other violations | handlers p50 / p99 / max ms | ledger p50 / p99 / max ms | node CPU s/1k fires | db CPU s/1k fires |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
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
            let t = run.tally;
            let per_k = |cpu: f64| cpu / ((t.on_time + t.late_by_policy).max(1) as f64 / 1000.0);
            let lateness = &run.handler_lateness;
            let s_label = if args.schedulers > 1 {
                format!("{s} ({} schedulers)", args.schedulers)
            } else {
                s.to_string()
            };
            println!(
                "| {backend} | {s_label} | {k} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} / {} / {} | {:.3} | {:.3} |",
                args.seconds,
                t.expected,
                t.on_time,
                t.late_by_policy,
                t.misfired,
                run.checked.lost,
                run.checked.run_twice,
                run.checked.other,
                percentile(lateness, 0.5),
                percentile(lateness, 0.99),
                lateness.last().copied().unwrap_or(0),
                percentile(&run.lateness, 0.5),
                percentile(&run.lateness, 0.99),
                run.lateness.last().copied().unwrap_or(0),
                per_k(run.node_cpu),
                per_k(run.db_cpu),
            );
            for example in &run.checked.examples {
                eprintln!("  {backend} S={s} K={k}: {example}");
            }
            if let Some(line) = unrecorded(&t) {
                eprintln!("  {backend} S={s} K={k}: {line}");
            }
            // Where the late fires were, beside the table (on stderr).
            for line in crate::late::lines(&run.late_seconds) {
                eprintln!("  {backend} S={s} K={k}: {line}");
            }
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
            "lateness (handler start - fire time), ms",
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
pub(crate) struct Run {
    pub(crate) tally: Tally,
    /// Of every fire run for its own time, sorted: the ledger's start.
    lateness: Vec<i64>,
    /// When the handlers' code began (the nodes' run logs), sorted.
    pub(crate) handler_lateness: Vec<i64>,
    /// What the run log checker found.
    pub(crate) checked: Checked,
    pub(crate) node_cpu: f64,
    pub(crate) db_cpu: f64,
    /// B10's figures, with jobs registered beside.
    pub(crate) registered: Option<crate::b10::Registered>,
    /// The seconds with late starts or late claims, by node.
    late_seconds: std::collections::BTreeMap<(i64, String), crate::late::LateSecond>,
}

/// One storm: the jobs first, then the nodes (and the CPU hogs), the storm,
/// the backlog worked through, then the ledger read.
pub(crate) async fn one_run(store: &AnyStore, args: &Args, s: usize, k: usize) -> Run {
    crate::tidy(&args.url).await;
    let server = crate::os::server_processes(&args.url);
    let n = args.schedulers.max(1);
    let schedulers: Vec<String> = (0..n)
        .map(|j| {
            let base = match args.registered {
                Some(n) => format!("b10-{n}-{s}-{k}-{}", std::process::id()),
                None => format!("b1-{s}-{k}-{}", std::process::id()),
            };
            if n > 1 { format!("{base}-{j}") } else { base }
        })
        .collect();
    let held = if args.hold_xmin {
        Some(crate::held::HeldSnapshot::take(&args.url).await)
    } else {
        None
    };
    let mut registered = match args.registered {
        Some(n) => Some(crate::b10::register(&args.url, store, &schedulers[0], n).await),
        None => None,
    };
    let (start, end) = storm_window(store, &schedulers[0], s, args.seconds).await;
    for (j, scheduler) in schedulers.iter().enumerate() {
        // S split as evenly as it goes.
        let share = s / n + usize::from(j < s % n);
        create_jobs(store, scheduler, share, (start, end)).await;
    }
    let mut hogs: Vec<Child> = (0..args.hogs)
        .map(|_| {
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("a CPU-bound process")
        })
        .collect();
    let mut logs = Vec::new();
    let mut nodes = Vec::new();
    let spawned = std::time::Instant::now();
    for scheduler in &schedulers {
        let mut settings: Vec<&str> = args.settings.iter().map(String::as_str).collect();
        if args.no_claim_runs {
            settings.push("claim_runs=0");
        }
        let (n, c) = crate::node::spawn_cluster_logging(&args.url, scheduler, "b1", k, &settings);
        logs.push(n);
        nodes.extend(c);
    }
    if let Some(registered) = &mut registered {
        registered.node_start = crate::b10::nodes_live(store, &schedulers[0], k, spawned).await;
    }
    let analyzing = crate::analyze_meanwhile(&args.url).await;
    // Measure CPU over the storm only.
    let wait_start = u64::try_from(start.as_millis() - store.now().await.unwrap().as_millis()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait_start)).await;
    let node_cpu0: f64 = nodes.iter().map(|c| cpu_seconds(c.id())).sum();
    let db_cpu0 = server_cpu(server);
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(args.seconds * 1000 + 3_000).unwrap(),
    ))
    .await;
    for scheduler in &schedulers {
        settle(store, scheduler).await;
    }
    if let Some(analyzing) = analyzing {
        analyzing.abort();
    }
    let node_cpu = nodes.iter().map(|c| cpu_seconds(c.id())).sum::<f64>() - node_cpu0;
    let db_cpu = server_cpu(server) - db_cpu0;
    if let Some(registered) = &mut registered {
        registered.sizes.1 = crate::b10::sizes(&args.url).await;
    }
    for c in nodes.iter_mut().chain(hogs.iter_mut()) {
        let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
    }
    for c in nodes.iter_mut().chain(hogs.iter_mut()) {
        let _ = c.wait();
    }
    let mut run = Run {
        tally: Tally::default(),
        lateness: Vec::new(),
        handler_lateness: Vec::new(),
        checked: Checked::default(),
        node_cpu,
        db_cpu,
        late_seconds: std::collections::BTreeMap::new(),
        registered,
    };
    // The ledger's statistics brought up to date before it is read (on a
    // server with autovacuum off they still describe an empty table, and
    // its pages by id were read through the fire-time index, each scanning
    // the whole run: minutes at S = 10,000).
    crate::tidy(&args.url).await;
    for (scheduler, dir) in schedulers.iter().zip(&logs) {
        let (report, late) =
            crate::node::check_runs(&*store.scoped(scheduler), dir, (start.as_millis(), end.as_millis())).await;
        run.checked.add(&report);
        run.handler_lateness.extend(late);
        let one = read_ledger(store, scheduler, (start, end)).await;
        run.tally.add(one.tally);
        run.lateness.extend(one.lateness);
        for (key, second) in &one.late_seconds {
            run.late_seconds.entry(key.clone()).or_default().add(second);
        }
    }
    run.lateness.sort_unstable();
    run.handler_lateness.sort_unstable();
    if let Some(held) = held {
        for line in held.release().await {
            eprintln!("  held xmin S={s} K={k}: {line}");
        }
    }
    run
}

/// The storm's first and last instants: a start a few seconds ahead, room
/// to create S jobs and start the nodes (read on the clock of the first
/// scheduler's store: on a Redis Cluster, its master's).
async fn storm_window(store: &AnyStore, scheduler: &str, s: usize, seconds: i64) -> (Timestamp, Timestamp) {
    let now = store.scoped(scheduler).now().await.unwrap().as_millis();
    let lead_ms = 12_000 + 5 * i64::try_from(s).unwrap_or(i64::MAX / 8);
    let start = Timestamp::from_millis((now + lead_ms) / 1000 * 1000);
    (start, start.saturating_add_millis(seconds * 1000 - 1))
}

/// Creates `s` jobs of a scheduler firing every second through the storm
/// (before the nodes start: creating them while the nodes poll is slower,
/// and a job created after the storm's start would be counted late from
/// its first fire).
async fn create_jobs(store: &AnyStore, scheduler: &str, s: usize, (start, end): (Timestamp, Timestamp)) {
    let store = store.scoped(scheduler);
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
}

/// An overloaded cluster lags: lets it work through its backlog (no trigger
/// due up to now, nothing claimed or running), for at most a minute, so that
/// a fire time without a row is a fire missed, not one not reached yet.
pub(crate) async fn settle(store: &AnyStore, scheduler: &str) {
    let store = store.scoped(scheduler);
    for _ in 0..600 {
        let now = store.now().await.unwrap();
        let due = store.due_executes(now, None, 1).await.unwrap().executes.len();
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
pub(crate) async fn ledger(store: &AnyStore, scheduler: &str) -> Vec<quartz_core::store::FireRecord> {
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
async fn read_ledger(store: &AnyStore, scheduler: &str, (start, end): (Timestamp, Timestamp)) -> Run {
    // The storm's triggers (B10 registers other jobs beside them).
    let ids = execute_ids(store, scheduler, "storm-").await;
    let rows: Vec<_> = ledger(store, scheduler)
        .await
        .into_iter()
        .filter(|r| ids.contains(&r.execute_id))
        .collect();
    // Every trigger's grid seconds in the run; a trigger with no row at all
    // is counted from the jobs the run created.
    let mut expected = std::collections::HashSet::new();
    for id in &ids {
        let mut t = start.as_millis();
        while t <= end.as_millis() {
            expected.insert((*id, t));
            t += 1_000;
        }
    }
    Run {
        tally: Tally::of(&expected, &rows, 1_000),
        lateness: lateness(&rows),
        handler_lateness: Vec::new(),
        checked: Checked::default(),
        node_cpu: 0.0,
        db_cpu: 0.0,
        late_seconds: crate::late::late_seconds(&rows, start),
        registered: None,
    }
}

/// How late each fire run for its own time started (`started_at -
/// fire_time`, database time), sorted.
pub(crate) fn lateness(rows: &[quartz_core::store::FireRecord]) -> Vec<i64> {
    let mut lateness: Vec<i64> = rows
        .iter()
        .filter(|r| r.state == FireState::Succeeded && r.attempt <= 1)
        .filter_map(|r| r.started_at.map(|s| s.as_millis() - r.fire_time.as_millis()))
        .collect();
    lateness.sort_unstable();
    lateness
}

/// The executes of the run's jobs whose names begin with `prefix`.
pub(crate) async fn execute_ids(store: &AnyStore, scheduler: &str, prefix: &str) -> std::collections::HashSet<i64> {
    let store = store.scoped(scheduler);
    let mut ids = std::collections::HashSet::new();
    for job in store.list_jobs().await.unwrap() {
        if !job.spec.name.starts_with(prefix) {
            continue;
        }
        if let Some(detail) = store.get_job(&job.spec.name).await.unwrap() {
            ids.extend(detail.executes.iter().map(|e| e.id));
        }
    }
    ids
}

mod tally;
#[cfg(test)]
mod tests;

pub(crate) use tally::{Checked, Tally};

/// The fire times of a run the ledger holds nothing of when it is read (no
/// run, no misfire record: still waiting, or lost), said beside the table:
/// its lost column is the run logs' checker's, and the classes the ledger
/// gives add up to the expected count only with these.
pub(crate) fn unrecorded(t: &Tally) -> Option<String> {
    (t.missing > 0).then(|| {
        format!(
            "{} of {} fire times expected have no ledger row when it is read (neither run nor recorded misfired)",
            t.missing, t.expected
        )
    })
}
