//! `quartz run`: a scheduler node with the built-in handlers, until SIGINT or
//! SIGTERM, then a graceful exit from the cluster.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use quartz_core::engine::{JobContext, JobResult, SchedulerBuilder, Settings, Strategy};
use quartz_store::SqlStore;

use crate::args::duration_arg;

/// The handlers `quartz run` has, which `quartz job add` accepts.
pub const BUILT_IN_HANDLERS: [&str; 4] = ["noop", "log", "sleep", "shell"];

/// Options of `quartz run`.
#[derive(clap::Args, Default)]
pub struct RunArgs {
    /// This node's id [default: host-pid-n].
    #[arg(long)]
    node_id: Option<String>,
    /// How often the node polls for due triggers [default: 5s].
    #[arg(long, value_parser = duration_arg)]
    poll_interval: Option<Duration>,
    /// How far ahead a poll looks [default: 5s].
    #[arg(long, value_parser = duration_arg)]
    window: Option<Duration>,
    /// How long before its time a fire is claimed [default: 1s].
    #[arg(long, value_parser = duration_arg)]
    claim_lead: Option<Duration>,
    /// Heartbeat interval [default: 2s].
    #[arg(long, value_parser = duration_arg)]
    heartbeat: Option<Duration>,
    /// A node silent this long is dead [default: 10s].
    #[arg(long, value_parser = duration_arg)]
    dead_after: Option<Duration>,
    /// A fire found later than this is misfired [default: 5s].
    #[arg(long, value_parser = duration_arg)]
    misfire_threshold: Option<Duration>,
    /// Pool threads kept [default: cores].
    #[arg(long)]
    pool_core: Option<usize>,
    /// Most pool threads [default: 4 x cores].
    #[arg(long)]
    pool_max: Option<usize>,
    /// Pool queue capacity [default: 256].
    #[arg(long)]
    pool_queue: Option<usize>,
    /// Which node tries each fire first; any node may claim it after a grace
    /// period, so correctness never depends on it.
    #[arg(long, value_enum, default_value_t = StrategyArg::FirstCome)]
    strategy: StrategyArg,
    /// This node's weight for --strategy weighted or least-loaded.
    #[arg(long, default_value_t = 1)]
    weight: u32,
}

/// `--strategy`.
#[derive(clap::ValueEnum, Clone, Copy, Default, Debug)]
pub enum StrategyArg {
    /// Every node tries at the fire time; the first claim wins.
    #[default]
    FirstCome,
    /// The live nodes share the triggers by a hash of their ids.
    IdHash,
    /// As id-hash, in proportion to each node's --weight.
    Weighted,
    /// As weighted, steering work away from busy nodes.
    LeastLoaded,
}

impl RunArgs {
    /// The library's settings with these options over its defaults.
    pub fn settings(&self) -> Settings {
        let mut settings = Settings {
            node_id: self.node_id.clone(),
            weight: self.weight,
            strategy: match self.strategy {
                StrategyArg::FirstCome => Strategy::FirstCome,
                StrategyArg::IdHash => Strategy::IdHash,
                StrategyArg::Weighted => Strategy::Weighted,
                StrategyArg::LeastLoaded => Strategy::LeastLoaded,
            },
            ..Settings::default()
        };
        if let Some(v) = self.poll_interval {
            settings.poll_interval = v;
        }
        if let Some(v) = self.window {
            settings.window = v;
        }
        if let Some(v) = self.claim_lead {
            settings.claim_lead = v;
        }
        if let Some(v) = self.heartbeat {
            settings.heartbeat_interval = v;
        }
        if let Some(v) = self.dead_after {
            settings.dead_after = v;
        }
        if let Some(v) = self.misfire_threshold {
            settings.misfire.threshold_ms = crate::args::millis(v);
        }
        if let Some(v) = self.pool_queue {
            settings.pool_queue = v;
        }
        if let Some(max) = self.pool_max {
            settings.pool_max = max;
            settings.pool_core = settings.pool_core.min(max);
        }
        if let Some(core) = self.pool_core {
            settings.pool_core = core;
        }
        settings
    }
}

/// A node builder with the built-in handlers.
pub fn builder(scheduler: &str, settings: Settings) -> SchedulerBuilder {
    SchedulerBuilder::new(scheduler)
        .settings(settings)
        .handler("noop", |_| Ok(()))
        .handler("log", log)
        .handler("sleep", sleep)
        .handler("shell", shell)
}

/// Runs a node until a signal asks it to stop.
pub async fn run(url: &str, scheduler: &str, args: &RunArgs) -> anyhow::Result<()> {
    // The store's errors name the URL, with any password hidden.
    let store = SqlStore::connect(url).await?;
    let node = builder(scheduler, args.settings()).start(store).await?;
    let me = node.node();
    println!(
        "quartz node {} (incarnation {}) running in scheduler {:?}; handlers: {}; Ctrl-C to stop",
        me.node_id,
        me.incarnation,
        node.scheduler(),
        BUILT_IN_HANDLERS.join(", ")
    );
    wait_for_signal().await?;
    let summary = node.shutdown().await;
    println!(
        "left the cluster: {} claimed fires given back, {} still running",
        summary.released, summary.still_running
    );
    Ok(())
}

/// `log`: logs the payload.
fn log(ctx: JobContext) -> JobResult {
    tracing::info!(
        job = ctx.job_name(),
        fire_id = ctx.fire_id(),
        attempt = ctx.attempt(),
        payload = ctx.payload_json(),
        "log"
    );
    Ok(())
}

/// `sleep`: waits the payload's milliseconds (`{"ms": N}` or a bare number,
/// default 1,000), stopping early when cancelled.
fn sleep(ctx: JobContext) -> JobResult {
    let ms = match ctx.payload::<serde_json::Value>() {
        Ok(serde_json::Value::Number(n)) => n.as_u64(),
        Ok(serde_json::Value::Object(map)) => map.get("ms").and_then(serde_json::Value::as_u64),
        _ => None,
    }
    .unwrap_or(1_000);
    let until = std::time::Instant::now() + Duration::from_millis(ms);
    while std::time::Instant::now() < until {
        if ctx.is_cancelled() {
            return Err("cancelled before the end of the sleep".into());
        }
        std::thread::sleep(Duration::from_millis(5).min(until.saturating_duration_since(std::time::Instant::now())));
    }
    Ok(())
}

/// How much of a shell job's output a failure keeps.
const OUTPUT_TAIL: usize = 2_000;

/// `shell`: runs `{"command": "...", "args": [...]}` (or a bare command
/// string) directly, with no shell interpreter between; a non-zero exit is a
/// failure carrying its status and the tail of its output. The process is
/// killed when the fire is cancelled (shutdown or timeout).
fn shell(ctx: JobContext) -> JobResult {
    let (command, args) = match ctx.payload::<serde_json::Value>()? {
        serde_json::Value::String(s) => (s, Vec::new()),
        serde_json::Value::Object(map) => {
            let Some(serde_json::Value::String(command)) = map.get("command") else {
                return Err("a shell job's payload needs a \"command\" string".into());
            };
            let args = match map.get("args") {
                None => Vec::new(),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|a| match a {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect(),
                Some(_) => return Err("a shell job's \"args\" is a list of strings".into()),
            };
            (command.clone(), args)
        }
        _ => return Err("a shell job's payload is {\"command\": ..., \"args\": [...]}".into()),
    };
    let mut child = Command::new(&command)
        .args(&args)
        .env("QUARTZ_JOB", ctx.job_name())
        .env("QUARTZ_FIRE_ID", ctx.fire_id().to_string())
        .env("QUARTZ_FIRE_TIME", ctx.scheduled_fire_time().as_millis().to_string())
        .env("QUARTZ_ATTEMPT", ctx.attempt().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
    // Both pipes drained as the process writes, keeping the tail of each.
    let output = Arc::new(Mutex::new(String::new()));
    let mut readers = Vec::new();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let output = Arc::clone(&output);
        readers.push(std::thread::spawn(move || {
            let mut pipe = pipe;
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut out = output.lock();
                out.push_str(&String::from_utf8_lossy(&buf[..n]));
                if out.len() > 2 * OUTPUT_TAIL {
                    let cut = out.len() - OUTPUT_TAIL;
                    let cut = (cut..out.len()).find(|i| out.is_char_boundary(*i)).unwrap_or(out.len());
                    out.drain(..cut);
                }
            }
        }));
    }
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if ctx.is_cancelled() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{command:?} killed: {}",
                ctx.cancellation().reason().map_or_else(String::new, |r| r.to_string())
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    for reader in readers {
        let _ = reader.join();
    }
    if status.success() {
        return Ok(());
    }
    let out = output.lock();
    let tail: String = {
        let start = out.len().saturating_sub(OUTPUT_TAIL);
        let start = (start..out.len())
            .find(|i| out.is_char_boundary(*i))
            .unwrap_or(out.len());
        out[start..].trim().to_owned()
    };
    Err(format!("{command:?} exited with {status}: {tail}").into())
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
