//! The scheduler node the workloads start as separate processes: this same
//! program, `quartz-bench node URL SCHEDULER NODE_ID [SETTING=VALUE ...]`,
//! with a `noop` handler and a `sleep` handler (payload: milliseconds), until
//! SIGTERM. With `QUARTZ_BENCH_STARTS=FILE` in its environment, the `noop`
//! handler notes when each fire's code began, on the machine's clock (the
//! nodes and the database share it here), and the node writes the notes to
//! FILE as it exits: one `fire_time_ms started_ms` line a fire. The ledger's
//! `started_at` is the start statement's time, or the fire time for a start
//! recorded ahead of it; these notes are what the handler saw.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use quartz_core::engine::{SchedulerBuilder, Settings, Strategy};
use quartz_store::AnyStore;

/// Starts a node process; `settings` are `name=value` pairs (`poll_ms`,
/// `window_ms`, `heartbeat_ms`, `dead_after_ms`, `misfire_ms`, `pool_queue`,
/// `pool_core`) and `strategy=first-come|id-hash|weighted|least-loaded`.
pub fn spawn(url: &str, scheduler: &str, node_id: &str, settings: &[&str]) -> Child {
    spawn_noting(url, scheduler, node_id, settings, None)
}

/// As [`spawn`], the node noting its handlers' start times in `starts` (see
/// the module docs).
pub fn spawn_noting(
    url: &str,
    scheduler: &str,
    node_id: &str,
    settings: &[&str],
    starts: Option<&std::path::Path>,
) -> Child {
    let exe = std::env::current_exe().expect("the bench program's own path");
    let mut command = Command::new(exe);
    if let Some(path) = starts {
        command.env("QUARTZ_BENCH_STARTS", path);
    }
    command
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
    let starts_file = std::env::var_os("QUARTZ_BENCH_STARTS");
    let starts: Arc<Mutex<Vec<(i64, i64)>>> = Arc::default();
    let noted = Arc::clone(&starts);
    let noting = starts_file.is_some();
    runtime.block_on(async move {
        let store = AnyStore::connect(url).await.expect("the database");
        let node = SchedulerBuilder::new(scheduler.clone())
            .settings(settings)
            .handler("noop", move |ctx| {
                if noting {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                    noted
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((ctx.scheduled_fire_time().as_millis(), now));
                }
                Ok(())
            })
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
    if let Some(path) = starts_file {
        let lines: String = starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(f, s)| format!("{f} {s}\n"))
            .collect();
        std::fs::write(&path, lines).expect("the start times' file");
    }
}

/// K nodes of a workload (`{scheduler}`'s nodes `{prefix}-node-{i}`), each
/// noting its handlers' start times in a file of the temporary directory:
/// the files, then the processes.
pub fn spawn_cluster_noting(
    url: &str,
    scheduler: &str,
    prefix: &str,
    k: usize,
    settings: &[&str],
) -> (Vec<std::path::PathBuf>, Vec<Child>) {
    let notes: Vec<std::path::PathBuf> = (0..k)
        .map(|i| std::env::temp_dir().join(format!("{scheduler}-starts-{i}.txt")))
        .collect();
    let nodes = notes
        .iter()
        .enumerate()
        .map(|(i, note)| spawn_noting(url, scheduler, &format!("{prefix}-node-{i}"), settings, Some(note)))
        .collect();
    (notes, nodes)
}

/// What every node of [`spawn_cluster_noting`] noted, as
/// [`noted_lateness`], sorted.
pub fn cluster_lateness(notes: &[std::path::PathBuf], range: (i64, i64)) -> Vec<i64> {
    let mut late: Vec<i64> = notes.iter().flat_map(|note| noted_lateness(note, range)).collect();
    late.sort_unstable();
    late
}

/// The start times a node noted ([`spawn_noting`]): how late each fire's
/// code began after its fire time, in ms, for the fire times in `range`;
/// the file is removed.
pub fn noted_lateness(path: &std::path::Path, range: (i64, i64)) -> Vec<i64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let _ = std::fs::remove_file(path);
    text.lines()
        .filter_map(|line| {
            let (fire, started) = line.split_once(' ')?;
            let (fire, started): (i64, i64) = (fire.parse().ok()?, started.parse().ok()?);
            (range.0..=range.1).contains(&fire).then_some(started - fire)
        })
        .collect()
}
