//! `quartz run`: a scheduler node with the built-in handlers, until SIGINT or
//! SIGTERM, then a graceful exit from the cluster.

use std::path::PathBuf;
use std::time::Duration;

use quartz_core::engine::{JobContext, JobResult, SchedulerBuilder, Settings, Strategy};
use quartz_store::AnyStore;

use crate::args::duration_arg;
use crate::shell::ShellPolicy;

/// The handlers every `quartz run` node has; `shell` joins them when the node
/// is started with `--allow-shell`.
pub const BUILT_IN_HANDLERS: [&str; 3] = ["noop", "log", "sleep"];

/// Options of `quartz run`.
#[derive(clap::Args, Default)]
pub struct RunArgs {
    /// Also serve the HTTP API, web console and /metrics here (for example
    /// 127.0.0.1:8080; a non-loopback address needs QUARTZ_ADMIN_TOKEN or
    /// QUARTZ_READ_TOKEN).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
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
    /// Claim each fire on its own, a claim lead ahead, never a trigger's
    /// next fire along with its due one (claim runs, on by default: half the
    /// execute writes of a trigger every second on PostgreSQL and
    /// MySQL/MariaDB, with such fires claimed a claim lead and a fire ahead).
    #[arg(long)]
    no_claim_runs: bool,
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
    /// Pool queue capacity [default: 4096]. The node claims no more fires
    /// than the pool's threads and queue hold.
    #[arg(long)]
    pool_queue: Option<usize>,
    /// Which node tries each fire first; any node may claim it after a grace
    /// period, so correctness never depends on it.
    #[arg(long, value_enum, default_value_t = StrategyArg::Weighted)]
    strategy: StrategyArg,
    /// This node's weight for --strategy weighted or least-loaded.
    #[arg(long, default_value_t = 1)]
    weight: u32,
    /// Offer the `shell` handler, for these programs only: absolute paths or
    /// globs (`/usr/local/bin/backup-*`; `*` stays within one directory). A
    /// fire naming any other program is recorded failed and runs nothing.
    /// Without this option the node does not run external programs.
    #[arg(long, num_args = 1.., value_name = "PROGRAM")]
    allow_shell: Vec<String>,
    /// An environment variable of the node that `shell` programs get (they
    /// get only PATH, the QUARTZ_JOB/FIRE_ID/FIRE_TIME/ATTEMPT variables and
    /// these).
    #[arg(long, num_args = 1.., value_name = "NAME")]
    pass_env: Vec<String>,
    /// The working directory of `shell` programs [default: the system's
    /// temporary directory].
    #[arg(long, value_name = "DIR")]
    shell_dir: Option<PathBuf>,
    /// How long succeeded fires stay in the ledger [default: 24h].
    #[arg(long, value_parser = duration_arg)]
    keep_succeeded: Option<Duration>,
    /// How long failed, misfired, skipped and abandoned fires stay, and
    /// complete triggers [default: 7d].
    #[arg(long, value_parser = duration_arg)]
    keep_failed: Option<Duration>,
    /// Each job's newest fires kept whatever their age [default: 10].
    #[arg(long)]
    keep_last: Option<u32>,
    /// How often the cluster purges (one node per turn) [default: 1m].
    #[arg(long, value_parser = duration_arg)]
    purge_every: Option<Duration>,
    /// This node never purges (others still may; see `quartz history purge`).
    #[arg(long)]
    no_purge: bool,
    /// Keep a run log in DIR: a JSON line for every handler start and end,
    /// written apart from the database, which `quartz audit --runs DIR`
    /// checks against the triggers and the ledger.
    #[arg(long, value_name = "DIR")]
    run_log: Option<PathBuf>,
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
            run_log: self.run_log.clone(),
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
        if self.no_claim_runs {
            settings.claim_runs = false;
        }
        if let Some(v) = self.heartbeat {
            settings.heartbeat_interval = v;
        }
        if let Some(v) = self.dead_after {
            settings.dead_after = v;
        }
        if let Some(v) = self.misfire_threshold {
            settings.misfire.threshold = v;
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
        let retention = &mut settings.retention;
        retention.enabled = !self.no_purge;
        if let Some(v) = self.keep_succeeded {
            retention.succeeded = v;
        }
        if let Some(v) = self.keep_failed {
            retention.failed = v;
        }
        if let Some(v) = self.keep_last {
            retention.keep_last = v;
        }
        if let Some(v) = self.purge_every {
            retention.every = v;
        }
        settings
    }

    /// What the `shell` handler may run on this node.
    ///
    /// # Errors
    ///
    /// An invalid `--allow-shell`, `--pass-env` or `--shell-dir`.
    pub fn shell_policy(&self) -> anyhow::Result<ShellPolicy> {
        ShellPolicy::new(&self.allow_shell, &self.pass_env, self.shell_dir.clone())
    }
}

/// A node builder with the built-in handlers, and `shell` when the policy
/// allows any program.
pub fn builder(scheduler: &str, settings: Settings, shell: ShellPolicy) -> SchedulerBuilder {
    let builder = SchedulerBuilder::new(scheduler)
        .settings(settings)
        .handler("noop", |_| Ok(()))
        .handler("log", log)
        .handler("sleep", sleep);
    // A fire of work enqueued with a trace context links to its enqueuer's span.
    #[cfg(feature = "otel")]
    let builder = builder.link_spans(crate::telemetry::link);
    if shell.is_enabled() {
        builder
            .handler("shell", move |ctx| shell.run(&ctx))
            .payload_schema("shell", crate::shell::payload_schema())
    } else {
        builder
    }
}

/// Runs a node until a signal asks it to stop.
pub async fn run(url: &str, scheduler: &str, args: &RunArgs) -> anyhow::Result<()> {
    // The store's errors name the URL, with any password hidden.
    let shell = args.shell_policy()?;
    let store = AnyStore::connect(url).await?;
    let mut handlers = BUILT_IN_HANDLERS.to_vec();
    let allowed = shell.allowed().join(" ");
    if shell.is_enabled() {
        handlers.push("shell");
    }
    // The web server's address is checked and bound before the node
    // registers: a refused --listen leaves no node row behind.
    let listener = match args.listen {
        Some(addr) => Some(crate::web::Listener::bind(addr, false).await?),
        None => None,
    };
    let node = builder(scheduler, args.settings(), shell).start(store).await?;
    let me = node.node();
    println!(
        "quartz node {} (incarnation {}) running in scheduler {:?}; handlers: {}; Ctrl-C to stop",
        me.node_id,
        me.incarnation,
        node.scheduler(),
        handlers.join(", ")
    );
    if !allowed.is_empty() {
        println!("shell may run: {allowed}");
    }
    if let Some(listener) = listener {
        let bound = listener.serve(node.admin().acting_as("http"), Some(node.probe()))?;
        println!(
            "web console http://{bound}/, API http://{bound}/api/v1/, metrics http://{bound}/metrics, probes \
             http://{bound}/livez, /readyz, /startupz"
        );
    }
    wait_for_signal().await?;
    let summary = node.shutdown().await;
    if summary.marked_gone && summary.claims_left + summary.outcomes_unrecorded == 0 {
        println!(
            "left the cluster: {} claimed fires given back, {} still running",
            summary.released, summary.still_running
        );
    } else {
        println!(
            "stopped without the database's answer to everything: {} claimed fires given back, {} not \
             (recovery fires them once this node is declared dead), {} still running, {} outcomes not recorded, \
             node {}marked gone",
            summary.released,
            summary.claims_left,
            summary.still_running,
            summary.outcomes_unrecorded,
            if summary.marked_gone { "" } else { "not " }
        );
    }
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

/// Waits for SIGINT or SIGTERM.
pub async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
