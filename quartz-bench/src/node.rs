//! The scheduler node the workloads start as separate processes: this same
//! program, `quartz-bench node URL SCHEDULER NODE_ID [SETTING=VALUE ...]`,
//! with a `noop` handler and a `sleep` handler (payload: milliseconds), until
//! SIGTERM. With `run_log=DIR` the node keeps its run log there
//! (`Settings::run_log`): a line for every handler start and end, on the
//! node's estimate of database time, written apart from the database. The
//! workloads count from those logs with the project's checker
//! ([`check_runs`]): the handlers' real starts, fire times lost or run
//! twice; the ledger's figures are compared with them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::runlog::{CheckParams, RunCheck, RunEvent, check, read_dir};

use quartz_core::engine::{SchedulerBuilder, Settings, Strategy};
use quartz_store::AnyStore;

/// Starts a node process; `settings` are `name=value` pairs (`poll_ms`,
/// `window_ms`, `heartbeat_ms`, `dead_after_ms`, `misfire_ms`, `pool_queue`,
/// `pool_core`), `strategy=first-come|id-hash|weighted|least-loaded` and
/// `run_log=DIR`.
pub fn spawn(url: &str, scheduler: &str, node_id: &str, settings: &[&str]) -> Child {
    let exe = std::env::current_exe().expect("the bench program's own path");
    Command::new(exe)
        .args(["node", url, scheduler, node_id])
        .args(settings)
        .env(
            "RUST_LOG",
            std::env::var("QUARTZ_BENCH_NODE_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("a node process")
}

/// Sends SIGTERM (a graceful exit) and waits.
pub fn stop(child: &mut Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// Sends a signal (`KILL`, `STOP`, `CONT`).
pub fn signal(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status();
}

/// The `node` subcommand.
pub fn run(args: &[String]) {
    // Warnings (and more with QUARTZ_BENCH_NODE_LOG) on stderr.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let [url, scheduler, node_id, rest @ ..] = args else {
        eprintln!("usage: quartz-bench node URL SCHEDULER NODE_ID [name=value ...]");
        std::process::exit(2);
    };
    let mut settings = Settings {
        node_id: Some(node_id.clone()),
        ..Settings::default()
    };
    for pair in rest {
        let (name, value) = pair.split_once('=').expect("name=value");
        if name == "run_log" {
            settings.run_log = Some(value.into());
            continue;
        }
        if name == "strategy" {
            settings.strategy = match value {
                "first-come" => Strategy::FirstCome,
                "id-hash" => Strategy::IdHash,
                "weighted" => Strategy::Weighted,
                "least-loaded" => Strategy::LeastLoaded,
                other => panic!("unknown strategy {other}"),
            };
            continue;
        }
        let n: u64 = value.parse().expect("a number");
        let ms = Duration::from_millis(n);
        match name {
            "poll_ms" => settings.poll_interval = ms,
            "window_ms" => settings.window = ms,
            "heartbeat_ms" => settings.heartbeat_interval = ms,
            "dead_after_ms" => settings.dead_after = ms,
            "misfire_ms" => settings.misfire.threshold = ms,
            "keep_succeeded_ms" => settings.retention.succeeded = ms,
            "keep_failed_ms" => settings.retention.failed = ms,
            "purge_every_ms" => settings.retention.every = ms,
            "claim_runs" => settings.claim_runs = n != 0,
            "claim_lead_ms" => settings.claim_lead = ms,
            "pool_queue" => settings.pool_queue = usize::try_from(n).unwrap_or(usize::MAX),
            "pool_core" => {
                settings.pool_core = usize::try_from(n).unwrap_or(1);
                settings.pool_max = settings.pool_max.max(settings.pool_core);
            }
            other => panic!("unknown setting {other}"),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let store = AnyStore::connect(url).await.expect("the database");
        let node = SchedulerBuilder::new(scheduler.clone())
            .settings(settings)
            .handler("noop", |_| Ok(()))
            .handler("sleep", |ctx| {
                let ms: u64 = ctx.payload().unwrap_or(100);
                let until = std::time::Instant::now() + Duration::from_millis(ms);
                while std::time::Instant::now() < until && !ctx.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(())
            })
            .start(store)
            .await
            .expect("a node");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
        term.recv().await;
        node.shutdown().await;
    });
}

/// K nodes of a workload (`{scheduler}`'s nodes `{prefix}-node-{i}`), each
/// keeping its run log in one fresh directory: the directory, then the
/// processes.
pub fn spawn_cluster_logging(
    url: &str,
    scheduler: &str,
    prefix: &str,
    k: usize,
    settings: &[&str],
) -> (PathBuf, Vec<Child>) {
    let dir = std::env::temp_dir().join(format!("{scheduler}-runs"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the run log directory");
    let log = format!("run_log={}", dir.display());
    let mut all: Vec<&str> = settings.to_vec();
    all.push(&log);
    let nodes = (0..k)
        .map(|i| spawn(url, scheduler, &format!("{prefix}-node-{i}"), &all))
        .collect();
    (dir, nodes)
}

/// What the nodes' run logs in `dir` show of the fire times in `[from, to]`
/// of the scheduler `store` is scoped to, checked by the project's checker against its triggers and
/// ledger (the default misfire threshold), and the handlers' lateness: each
/// trigger's own first attempt, sorted. The directory is removed, unless
/// `QUARTZ_BENCH_KEEP_RUN_LOGS` is set (to study a run's starts second by
/// second afterwards).
pub async fn check_runs(
    store: &dyn quartz_core::store::Store,
    dir: &Path,
    (from, to): (i64, i64),
) -> (RunCheck, Vec<i64>) {
    let files = read_dir(dir).expect("the run logs");
    if std::env::var_os("QUARTZ_BENCH_KEEP_RUN_LOGS").is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
    let mut late: Vec<i64> = files
        .iter()
        .flat_map(|f| &f.events)
        .filter_map(|e| match e {
            RunEvent::Start(s) if s.attempt == 1 && s.kind == "scheduled" && (from..=to).contains(&s.fire_time) => {
                Some(s.db_ms - s.fire_time)
            }
            _ => None,
        })
        .collect();
    late.sort_unstable();
    let params = CheckParams {
        since: Timestamp::from_millis(from),
        until: Timestamp::from_millis(to + 1),
        ..CheckParams::last_hour(Timestamp::from_millis(to))
    };
    let report = check(store, &files, &params).await.expect("the run log check");
    (report, late)
}
