//! B10, many registered schedules (BENCHMARKS.md): N jobs registered, M of
//! them firing every second and the rest hourly to daily cron jobs spread
//! over 30 IANA zones (a few on calendars), on K `quartz-bench node`
//! processes with default settings, the jobs added the way a user adds them
//! (the admin surface's `job_add`). B1's columns for the M every-second
//! jobs, and what the registered count costs: the time to register them, a
//! node's start (spawned to registered live), a first jobs page and a
//! searched one as the API and the console read them, and the tables' and
//! indexes' sizes at the start and the end (PostgreSQL).
//!
//! ```text
//! cargo run --release -p quartz-bench -- b10 [--url URL] [--registered 10000,100000] [--every-second 1000] [--nodes 3] [--seconds 60]
//! ```

use std::time::{Duration, Instant};

use quartz_core::admin::{Admin, JobDefinition, JobFilter, TriggerDefinition};
use quartz_core::calendar::{CalendarDefinition, CalendarType};
use quartz_store::AnyStore;

use crate::os::percentile;

/// B10's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database [default: QUARTZ_PG_URL or the local PostgreSQL].
    #[arg(long, default_value_t = crate::pg_url(), hide_default_value = true)]
    url: String,
    /// Jobs registered in all, N (the every-second ones among them): one
    /// run per value.
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    registered: Vec<usize>,
    /// Of them, jobs firing every second, M.
    #[arg(long, default_value_t = 1000)]
    every_second: usize,
    /// Node processes, K.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Seconds each run lasts.
    #[arg(long, default_value_t = 60)]
    seconds: i64,
}

/// Thirty IANA zones the cron jobs are spread over.
const ZONES: [&str; 30] = [
    "UTC",
    "Europe/London",
    "Europe/Paris",
    "Europe/Berlin",
    "Europe/Moscow",
    "Europe/Istanbul",
    "Africa/Cairo",
    "Africa/Johannesburg",
    "Africa/Lagos",
    "Asia/Dubai",
    "Asia/Karachi",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Dhaka",
    "Asia/Bangkok",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Asia/Seoul",
    "Australia/Adelaide",
    "Australia/Sydney",
    "Pacific/Auckland",
    "Pacific/Honolulu",
    "America/Anchorage",
    "America/Los_Angeles",
    "America/Denver",
    "America/Chicago",
    "America/New_York",
    "America/Halifax",
    "America/Sao_Paulo",
    "America/St_Johns",
];

/// What B10 measures beside B1's columns.
#[derive(Debug, Default)]
pub(crate) struct Registered {
    /// How long registering them took.
    pub(crate) took: Duration,
    /// From the nodes' spawn to each registered live, the slowest.
    pub(crate) node_start: Option<Duration>,
    /// A first jobs page and a searched one, median of five, ms.
    pub(crate) pages_ms: (u128, u128),
    /// The tables' and indexes' sizes after registering, and at the end.
    pub(crate) sizes: (String, String),
}

/// Runs B10 with the options on the command line.
pub fn run(args: Args) {
    crate::block_on(runs(args));
}

async fn runs(args: Args) {
    let backend = args.url.split(':').next().unwrap_or("db").to_owned();
    println!(
        "| backend | N registered | M every second | K | D s | ran on time | misfired | lost | run twice | other | handlers p50 / p99 / max ms | node CPU s/1k fires | db CPU s/1k fires | registered in s | node start s | jobs page / searched ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &n in &args.registered {
        let b1 = crate::b1::Args::registered(&args.url, args.every_second, args.nodes, args.seconds, n);
        let store = crate::connect(&args.url).await;
        let run = crate::b1::one_run(&store, &b1, args.every_second, args.nodes).await;
        let t = run.tally;
        #[allow(clippy::cast_precision_loss)]
        let per_k = |cpu: f64| cpu / ((t.on_time + t.late_by_policy).max(1) as f64 / 1000.0);
        let late = &run.handler_lateness;
        let extra = run.registered.unwrap_or_default();
        println!(
            "| {backend} | {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {:.3} | {:.3} | {:.1} | {} | {} / {} |",
            args.every_second,
            args.nodes,
            args.seconds,
            t.on_time,
            t.misfired,
            run.checked.lost,
            run.checked.run_twice,
            run.checked.other,
            percentile(late, 0.5),
            percentile(late, 0.99),
            late.last().copied().unwrap_or(0),
            per_k(run.node_cpu),
            per_k(run.db_cpu),
            extra.took.as_secs_f64(),
            extra
                .node_start
                .map_or_else(|| "—".to_owned(), |d| format!("{:.1}", d.as_secs_f64())),
            extra.pages_ms.0,
            extra.pages_ms.1,
        );
        eprintln!("  {backend} N={n}: sizes after registering: {}", extra.sizes.0);
        eprintln!("  {backend} N={n}: sizes at the end: {}", extra.sizes.1);
        for example in &run.checked.examples {
            eprintln!("  {backend} N={n}: {example}");
        }
        if let Some(line) = crate::b1::unrecorded(&t) {
            eprintln!("  {backend} N={n}: {line}");
        }
    }
}

/// Registers `count` jobs of `scheduler` the way a user adds them, hourly
/// to daily cron jobs over [`ZONES`], one in a hundred on a calendar, eight
/// at a time; then measures the pages and the sizes.
pub(crate) async fn register(url: &str, store: &AnyStore, scheduler: &str, count: usize) -> Registered {
    let admin = Admin::new(store.scoped(scheduler), scheduler);
    let weekends = CalendarDefinition {
        kind: CalendarType::Weekly,
        days: vec!["sat".to_owned(), "sun".to_owned()],
        range: None,
        invert: false,
        cron: None,
        time_zone: None,
        base: None,
        description: String::new(),
    };
    admin.calendar_put("weekends", &weekends, None).await.unwrap();
    let began = Instant::now();
    let workers = 8;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let admin = admin.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(workers) {
                admin.job_add(&registered_job(i)).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let took = began.elapsed();
    crate::tidy(url).await;
    let mut first = Vec::new();
    let mut searched = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        admin.jobs(&JobFilter::default()).await.unwrap();
        first.push(t.elapsed().as_millis());
        let t = Instant::now();
        let filter = JobFilter {
            search: Some("daily-00042".to_owned()),
            ..JobFilter::default()
        };
        admin.jobs(&filter).await.unwrap();
        searched.push(t.elapsed().as_millis());
    }
    first.sort_unstable();
    searched.sort_unstable();
    Registered {
        took,
        node_start: None,
        pages_ms: (first[2], searched[2]),
        sizes: (sizes(url).await, String::new()),
    }
}

/// The `i`th registered job: hourly (a third) or daily at a minute and an
/// hour of its own, in one of [`ZONES`].
fn registered_job(i: usize) -> JobDefinition {
    let zone = ZONES[i % ZONES.len()];
    let (minute, hour) = (i % 60, (i / 60) % 24);
    let (name, cron) = if i.is_multiple_of(3) {
        (format!("hourly-{i:07}"), format!("0 {minute} * * * ?"))
    } else {
        (format!("daily-{i:07}"), format!("0 {minute} {hour} * * ?"))
    };
    let mut trigger = TriggerDefinition::cron(&cron, zone).unwrap();
    if i % 100 == 7 {
        trigger = trigger.calendar("weekends");
    }
    JobDefinition::new(name, "noop").with_trigger(trigger)
}

/// Waits until `k` nodes of `scheduler` are registered live: how long it
/// took from `spawned`.
pub(crate) async fn nodes_live(store: &AnyStore, scheduler: &str, k: usize, spawned: Instant) -> Option<Duration> {
    let store = store.scoped(scheduler);
    let deadline = spawned + Duration::from_secs(120);
    while Instant::now() < deadline {
        let live = store
            .list_nodes()
            .await
            .map(|nodes| {
                nodes
                    .iter()
                    .filter(|n| n.state == quartz_core::store::NodeState::Live)
                    .count()
            })
            .unwrap_or(0);
        if live >= k {
            return Some(spawned.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The quartz tables' sizes with their indexes (PostgreSQL; `—` elsewhere).
pub(crate) async fn sizes(url: &str) -> String {
    use sqlx::{Connection as _, Row as _};
    if !url.starts_with("postgres") {
        return "—".to_owned();
    }
    let Ok(mut conn) = sqlx::AnyConnection::connect(url).await else {
        return "—".to_owned();
    };
    let rows = sqlx::query(
        "SELECT relname::text, (pg_table_size(oid) / 1024)::bigint, (pg_indexes_size(oid) / 1024)::bigint \
         FROM pg_class WHERE relname IN ('quartz_job', 'quartz_execute', 'quartz_fire') ORDER BY relname",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap_or_default();
    let _ = conn.close().await;
    rows.iter()
        .filter_map(|r| {
            Some(format!(
                "{} {} kB + indexes {} kB",
                r.try_get::<String, _>(0).ok()?,
                r.try_get::<i64, _>(1).ok()?,
                r.try_get::<i64, _>(2).ok()?
            ))
        })
        .collect::<Vec<_>>()
        .join(", ")
}
