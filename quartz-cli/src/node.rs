//! `quartz node`: run a scheduler node with the built-in handlers until
//! SIGINT or SIGTERM, then leave the cluster gracefully.

use std::process::{Command, Stdio};
use std::time::Duration;

use quartz_core::engine::{JobContext, JobResult, SchedulerBuilder, Settings};
use quartz_store::SqlStore;

/// Options of `quartz node`.
#[derive(clap::Args)]
pub struct NodeArgs {
    /// The database: sqlite://FILE, postgres://…, mysql://…
    #[arg(long, env = "QUARTZ_URL", default_value = "sqlite://quartz.db")]
    url: String,
    /// The scheduler (cluster) name.
    #[arg(long, default_value = "default")]
    scheduler: String,
    /// This node's id (default: host-pid-n).
    #[arg(long)]
    node_id: Option<String>,
    /// Poll interval, ms [default: 5000].
    #[arg(long)]
    poll_ms: Option<u64>,
    /// Look-ahead window, ms [default: 5000].
    #[arg(long)]
    window_ms: Option<u64>,
    /// How long before its time a fire is claimed, ms [default: 1000].
    #[arg(long)]
    claim_lead_ms: Option<u64>,
    /// Heartbeat interval, ms [default: 2000].
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// A node silent this long is dead, ms [default: 10000].
    #[arg(long)]
    dead_after_ms: Option<u64>,
    /// Misfire threshold, ms [default: 5000].
    #[arg(long)]
    misfire_threshold_ms: Option<i64>,
    /// Most pool threads [default: 4 x cores].
    #[arg(long)]
    pool_max: Option<usize>,
    /// Pool queue capacity [default: 256].
    #[arg(long)]
    pool_queue: Option<usize>,
}

/// Runs a node until a signal asks it to stop.
pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    // Unset options keep the library's defaults.
    let mut settings = Settings {
        node_id: args.node_id,
        ..Settings::default()
    };
    let ms = Duration::from_millis;
    if let Some(v) = args.poll_ms {
        settings.poll_interval = ms(v);
    }
    if let Some(v) = args.window_ms {
        settings.window = ms(v);
    }
    if let Some(v) = args.claim_lead_ms {
        settings.claim_lead = ms(v);
    }
    if let Some(v) = args.heartbeat_ms {
        settings.heartbeat_interval = ms(v);
    }
    if let Some(v) = args.dead_after_ms {
        settings.dead_after = ms(v);
    }
    if let Some(v) = args.misfire_threshold_ms {
        settings.misfire.threshold_ms = v;
    }
    if let Some(v) = args.pool_queue {
        settings.pool_queue = v;
    }
    if let Some(max) = args.pool_max {
        settings.pool_max = max;
        settings.pool_core = settings.pool_core.min(max);
    }
    // The store's errors name the URL, with any password hidden.
    let store = SqlStore::connect(&args.url).await?;
    let node = SchedulerBuilder::new(args.scheduler)
        .settings(settings)
        .handler("noop", |_| Ok(()))
        .handler("sleep", sleep)
        .handler("shell", shell)
        .start(store)
        .await?;
    let me = node.node();
    println!(
        "quartz node {} (incarnation {}) running in cluster {:?}; handlers: noop, sleep, shell",
        me.node_id,
        me.incarnation,
        node.scheduler()
    );
    wait_for_signal().await?;
    let summary = node.shutdown().await;
    println!(
        "left the cluster: {} claimed fires given back, {} still running",
        summary.released, summary.still_running
    );
    Ok(())
}

/// `sleep`: waits the payload's number of milliseconds (default 1,000),
/// stopping early when cancelled.
fn sleep(ctx: JobContext) -> JobResult {
    let ms: u64 = ctx.payload().unwrap_or(1_000);
    let until = std::time::Instant::now() + Duration::from_millis(ms);
    while std::time::Instant::now() < until {
        if ctx.is_cancelled() {
            return Err("cancelled before the end of the sleep".into());
        }
        std::thread::sleep(Duration::from_millis(5).min(until - std::time::Instant::now()));
    }
    Ok(())
}

/// `shell`: runs the payload (a JSON string, or `{"command": "..."}`) with
/// `sh -c`; a non-zero exit is a failure carrying the end of its stderr. The
/// process is killed when the fire is cancelled.
fn shell(ctx: JobContext) -> JobResult {
    let command = match ctx.payload::<serde_json::Value>()? {
        serde_json::Value::String(s) => s,
        serde_json::Value::Object(map) => match map.get("command") {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => return Err("a shell job's payload needs a \"command\" string".into()),
        },
        _ => return Err("a shell job's payload is a command string or {\"command\": ...}".into()),
    };
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&command)
        .env("QUARTZ_JOB", ctx.job_name())
        .env("QUARTZ_FIRE_ID", ctx.fire_id().to_string())
        .env("QUARTZ_FIRE_TIME", ctx.scheduled_fire_time().as_millis().to_string())
        .env("QUARTZ_ATTEMPT", ctx.attempt().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    loop {
        if let Some(status) = child.try_wait()? {
            if status.success() {
                return Ok(());
            }
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                use std::io::Read as _;
                let _ = pipe.read_to_string(&mut stderr);
            }
            let tail: String = stderr
                .chars()
                .rev()
                .take(500)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(format!("`{command}` exited with {status}: {}", tail.trim()).into());
        }
        if ctx.is_cancelled() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "`{command}` killed: {}",
                ctx.cancellation().reason().map_or_else(String::new, |r| r.to_string())
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
