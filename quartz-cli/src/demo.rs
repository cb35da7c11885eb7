//! `quartz demo`: a newcomer's first look. A fresh SQLite file, a few demo
//! jobs, one node firing them, and every fire printed from the ledger as it
//! finishes, until Ctrl-C.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::cron::CronExpression;
use quartz_core::store::{ExecuteSpec, FireQuery, FireState, JobSpec};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_core::{Tz, engine::Settings};
use quartz_store::AnyStore;

use crate::args::show_instant;
use crate::run::builder;
use crate::shell::ShellPolicy;

/// Options of `quartz demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// The SQLite file the demo creates afresh (removed first if it exists).
    #[arg(long, default_value = "quartz-demo.db")]
    file: PathBuf,
    /// Stop after this many seconds [default: at Ctrl-C].
    #[arg(long)]
    seconds: Option<u64>,
    /// Where the web console listens (a free port is taken if this one is
    /// busy).
    #[arg(long, default_value = crate::web::DEFAULT_LISTEN)]
    listen: std::net::SocketAddr,
}

const SCHEDULER: &str = "demo";

/// The demo jobs: a cron every 2 s, a fixed delay, a shell command, a parent
/// and its child.
fn jobs(now: Timestamp) -> anyhow::Result<Vec<(JobSpec, Vec<ExecuteSpec>)>> {
    let start = Timestamp::from_millis((now.as_millis() / 1000 + 1) * 1000);
    let job = |name: &str, handler: &str, payload: &str, description: &str| {
        let mut spec = JobSpec::new(name, handler);
        spec.payload = payload.to_owned();
        spec.description = description.to_owned();
        spec
    };
    let every_2s = Trigger::new(Schedule::cron(CronExpression::parse("0/2 * * * * ?")?, Tz::UTC), start)?;
    let mut child = job("load", "log", r#""loaded""#, "runs after each success of extract");
    child.parent = Some("extract".to_owned());
    Ok(vec![
        (
            job("heartbeat", "log", r#""tick""#, "cron 0/2 * * * * ?"),
            vec![ExecuteSpec::new(every_2s)],
        ),
        (
            job(
                "slow-report",
                "sleep",
                r#"{"ms": 700}"#,
                "700 ms of work, 3 s after the last finished",
            ),
            vec![ExecuteSpec::new(Trigger::new(
                Schedule::fixed_delay_millis(3_000)?,
                start,
            )?)],
        ),
        (
            job(
                "shell-echo",
                "shell",
                r#"{"command": "echo", "args": ["hello from a shell job"]}"#,
                "a command every 5 s",
            ),
            vec![ExecuteSpec::new(Trigger::new(
                Schedule::fixed_rate_millis(5_000)?,
                start,
            )?)],
        ),
        (
            job("extract", "noop", "null", "every 4 s; its child load runs after it"),
            vec![ExecuteSpec::new(Trigger::new(
                Schedule::fixed_rate_millis(4_000)?,
                start,
            )?)],
        ),
        (child, vec![]),
    ])
}

/// Runs the demo.
pub async fn run(args: &DemoArgs) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let mut path = args.file.clone().into_os_string();
        path.push(suffix);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("cannot remove the old demo file {}: {e}", PathBuf::from(path).display()),
        }
    }
    let url = format!("sqlite://{}", args.file.display());
    let store = AnyStore::connect(&url).await?.scoped(SCHEDULER);
    let now = store.now().await?;
    let defined = jobs(now)?;
    println!("quartz demo: {} (scheduler {SCHEDULER:?})", args.file.display());
    for (spec, executes) in &defined {
        store.create_job(spec, executes).await?;
        println!("  job {:<12} {:<6} {}", spec.name, spec.handler, spec.description);
    }
    let settings = Settings {
        poll_interval: Duration::from_secs(1),
        ..Settings::default()
    };
    // The demo's one external program; a real node names its own with
    // `quartz run --allow-shell`.
    let shell = ShellPolicy::new(&["/usr/bin/echo".to_owned(), "/bin/echo".to_owned()], &[], None)?;
    let listener = crate::web::Listener::bind(args.listen, true).await?;
    let node = builder(SCHEDULER, settings, shell).start(store.clone()).await?;
    let bound = listener.serve(node.admin(), Some(node.probe()))?;
    println!(
        "node {} is running; fires appear as they finish. Ctrl-C to stop.\nweb console: http://{bound}/  \
         (API http://{bound}/api/v1/jobs, metrics http://{bound}/metrics)\n",
        node.node().node_id
    );
    println!(
        "{:<24}  {:<12} {:<10} {:>8} {:>8}  detail",
        "FIRE TIME", "JOB", "STATE", "LATE", "TOOK"
    );
    let names: HashMap<i64, String> = store
        .list_jobs()
        .await?
        .into_iter()
        .map(|j| (j.id, j.spec.name))
        .collect();
    let deadline = args
        .seconds
        .map(|s| tokio::time::Instant::now() + Duration::from_secs(s));
    let mut shown: HashSet<i64> = HashSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut ctrl_c => break,
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
        let mut query = FireQuery::new();
        query.limit = 200;
        let mut fires = store.fires(&query).await?;
        fires.reverse();
        for f in fires {
            if matches!(f.state, FireState::Claimed | FireState::Running) || !shown.insert(f.id) {
                continue;
            }
            let late = f.started_at.map_or_else(
                || "-".to_owned(),
                |s| format!("{} ms", s.as_millis() - f.fire_time.as_millis()),
            );
            let took = match (f.started_at, f.finished_at) {
                (Some(s), Some(e)) => format!("{} ms", e.as_millis() - s.as_millis()),
                _ => "-".to_owned(),
            };
            let job = names.get(&f.job_id).cloned().unwrap_or_default();
            let detail = if job == "load" {
                "chained after extract".to_owned()
            } else {
                f.error.unwrap_or_default()
            };
            println!(
                "{:<24}  {:<12} {:<10} {:>8} {:>8}  {detail}",
                show_instant(f.fire_time),
                job,
                f.state.as_str(),
                late,
                took
            );
        }
    }
    let summary = node.shutdown().await;
    println!(
        "\nstopped: {} fires shown, {} claimed fires given back. The ledger stays in {}: try\n  \
         quartz --database-url {url} --scheduler {SCHEDULER} history",
        shown.len(),
        summary.released,
        args.file.display()
    );
    Ok(())
}
