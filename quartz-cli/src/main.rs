//! The `quartz` command: operate a quartz-rs cluster from a terminal. See
//! `quartz --help`, and `quartz demo` for a first look.

mod admin;
mod args;
mod demo;
mod run;
mod shell;
mod telemetry;
mod web;

use std::process::ExitCode;

use anyhow::Context;
use chrono::{SecondsFormat, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use quartz_core::Timestamp;
use quartz_core::cron::{CronExpression, parse_time_zone};

/// Operate a quartz-rs scheduler from a terminal: its schema, jobs, nodes and
/// fire ledger, and a node process.
#[derive(Parser)]
#[command(
    name = "quartz",
    version,
    about,
    after_help = "Examples:
  quartz demo                                  a node with demo jobs on a fresh SQLite file
  quartz migrate --database-url postgres://postgres@127.0.0.1/test
  quartz job add hello --handler log --payload '\"hi\"' --cron '0/10 * * * * ?'
  quartz run --node-id a                       run a node until Ctrl-C
  quartz history --job hello --limit 5
  quartz audit --since 2026-01-01T00:00:00Z"
)]
struct Cli {
    /// The database: sqlite://FILE, postgres://USER@HOST/DB, mysql://USER@HOST/DB, redis://HOST[:PORT][/DB] or redis+cluster://HOST:PORT,HOST:PORT.
    #[arg(
        long,
        global = true,
        env = "QUARTZ_DATABASE_URL",
        default_value = "sqlite://quartz.db",
        visible_alias = "url"
    )]
    database_url: String,
    /// The scheduler (cluster) name.
    #[arg(long, global = true, env = "QUARTZ_SCHEDULER", default_value = "default")]
    scheduler: String,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create or upgrade the schema (every command does it on connect; this
    /// does only that).
    ///
    /// Example:
    ///   quartz migrate --database-url mysql://root@127.0.0.1:3306/test
    #[command(verbatim_doc_comment)]
    Migrate,
    /// Add, list, show, pause, resume, trigger, edit and delete jobs.
    #[command(subcommand)]
    Job(admin::JobCommand),
    /// Add, list, show and delete calendars: times triggers do not fire at.
    #[command(subcommand)]
    Calendar(admin::CalendarCommand),
    /// Pause everything (the whole scheduler on standby), resume, or show which.
    ///
    /// Examples:
    ///   quartz scheduler pause --database-url postgres://postgres@127.0.0.1/test
    ///   quartz scheduler status --json
    #[command(subcommand, verbatim_doc_comment)]
    Scheduler(admin::SchedulerCommand),
    /// The nodes of the scheduler: live or dead, heartbeat age, incarnation, running fires.
    ///
    /// Example:
    ///   quartz nodes --scheduler billing --json
    #[command(verbatim_doc_comment)]
    Nodes,
    /// What the live nodes publish of a handler: its payload's JSON Schema.
    ///
    /// Example:
    ///   quartz handler schema shell
    #[command(subcommand, verbatim_doc_comment)]
    Handler(admin::HandlerCommand),
    /// The fire ledger, newest first; `history purge` deletes old finished fires.
    ///
    /// Examples:
    ///   quartz history --job report --state failed --since 2026-01-01T00:00:00Z --limit 20
    ///   quartz history purge --older-than 30d
    #[command(verbatim_doc_comment)]
    History(admin::HistoryCommand),
    /// Check the ledger against the triggers: duplicates, scheduled fire times
    /// with no ledger row, late starts with no misfire record. Exits 1 when it
    /// finds any.
    ///
    /// Example:
    ///   quartz audit --since 2026-01-01T00:00:00Z --until 2026-01-02T00:00:00Z --misfire-threshold 5s
    #[command(verbatim_doc_comment)]
    Audit(admin::AuditArgs),
    /// Run a scheduler node until SIGINT or SIGTERM, with the built-in handlers:
    /// noop, log (logs the payload), sleep ({"ms": N}) and shell ({"command":
    /// "...", "args": [...]}, run without a shell interpreter).
    ///
    /// Example:
    ///   quartz run --database-url postgres://postgres@127.0.0.1/test --node-id a --pool-max 32
    #[command(verbatim_doc_comment, alias = "node")]
    Run(run::RunArgs),
    /// Serve the HTTP API, web console and /metrics until SIGINT or SIGTERM.
    ///
    /// With no token set only loopback callers are answered, and a
    /// non-loopback --listen is refused. QUARTZ_ADMIN_TOKEN reads and writes;
    /// QUARTZ_READ_TOKEN only reads.
    ///
    /// Example:
    ///   QUARTZ_ADMIN_TOKEN=s3cret quartz serve --listen 0.0.0.0:8080 --database-url postgres://postgres@127.0.0.1/test
    #[command(verbatim_doc_comment)]
    Serve(web::ServeArgs),
    /// Cron expressions (Quartz syntax).
    #[command(subcommand)]
    Cron(CronCommand),
    /// A first look: demo jobs on a fresh SQLite file and a node firing them,
    /// each fire shown as it happens, until Ctrl-C.
    ///
    /// Example:
    ///   quartz demo --file /tmp/demo.db --seconds 30
    #[command(verbatim_doc_comment)]
    Demo(demo::DemoArgs),
}

#[derive(Subcommand)]
enum CronCommand {
    /// Print the next fire times of an expression, one instant per line.
    ///
    /// Examples:
    ///   quartz cron next "0 15 10 ? * 6L"
    ///   quartz cron next "0 0/5 14,18 * * ?" --tz Europe/London --count 3
    ///   quartz cron next "0 30 2 * * ?" --tz America/New_York --after 2026-03-07T12:00:00Z
    ///   quartz cron next "0 30 1 * * ?" --tz America/New_York --after 2026-10-31T12:00:00Z --dst-repeated both
    ///   quartz cron next "*/5 * * * *" --unix --format epoch-ms
    ///   quartz cron next "0 0 9 ? * *" --calendar holidays --database-url postgres://postgres@127.0.0.1/test
    ///
    /// Prints fewer lines (possibly none) when the expression has fewer fire times
    /// left, and exits 0. An invalid expression or zone exits with status 2.
    #[command(verbatim_doc_comment)]
    Next(NextArgs),
}

#[derive(clap::Args)]
struct NextArgs {
    /// A 6- or 7-field Quartz expression (or a 5-field one with --unix); quote it.
    expression: String,
    /// The IANA time zone the expression is evaluated in.
    #[arg(long, default_value = "UTC")]
    tz: String,
    /// Start after this instant: epoch milliseconds or RFC 3339. Default: now.
    #[arg(long)]
    after: Option<String>,
    /// How many fire times to print.
    #[arg(long, default_value_t = 5)]
    count: usize,
    /// How to print each instant.
    #[arg(long, value_enum, default_value_t = Format::Rfc3339)]
    format: Format,
    /// Read a standard 5-field Unix expression (minute hour day month weekday).
    #[arg(long)]
    unix: bool,
    /// Pass over the times this calendar of the scheduler excludes (read
    /// from --database-url).
    #[arg(long)]
    calendar: Option<String>,
    #[command(flatten)]
    dst: args::DstArgs,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// RFC 3339, with the zone's offset at that instant.
    Rfc3339,
    /// Milliseconds since the Unix epoch.
    EpochMs,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One line, like every other error.
            let text = e.render().to_string();
            let line = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .collect::<Vec<_>>()
                .join(" ");
            eprintln!("quartz: {} (see --help)", line.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    match dispatch(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("quartz: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs a command; `Ok(false)` when it ran and found a problem (an audit's
/// violations).
fn dispatch(cli: Cli) -> anyhow::Result<bool> {
    let Cli {
        database_url: url,
        scheduler,
        json,
        command,
    } = cli;
    let out = admin::Out { json };
    let log_level = match command {
        Command::Run(_) => "info",
        _ => "warn",
    };
    // The commands that run a node or a server report metrics (and, with
    // OpenTelemetry configured, export them and the fires' spans).
    let reports = matches!(command, Command::Run(_) | Command::Serve(_) | Command::Demo(_));
    let telemetry = telemetry::Telemetry::init(log_level, reports)?;
    if let Command::Cron(CronCommand::Next(args)) = &command
        && args.calendar.is_none()
    {
        let (cron, zone) = parse_next(args)?;
        let fires = cron.iter_after_with(after_of(args)?, zone, args.dst.choice()?);
        print_times(args, zone, fires.take(args.count))?;
        return Ok(true);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        if reports {
            telemetry::PROMETHEUS
                .set(telemetry.install_metrics()?)
                .map_err(|_| anyhow::anyhow!("the metrics recorder is installed twice"))?;
            if telemetry.exporting() {
                tracing::info!("exporting the fires' spans and the metrics over OTLP/HTTP");
            }
        }
        match command {
            Command::Migrate => admin::migrate(&url, out).await.map(|()| true),
            Command::Job(job) => admin::job(&url, &scheduler, out, job).await.map(|()| true),
            Command::Calendar(c) => admin::calendar(&url, &scheduler, out, c).await.map(|()| true),
            Command::Scheduler(c) => admin::scheduler_command(&url, &scheduler, out, c).await.map(|()| true),
            Command::Nodes => admin::nodes(&url, &scheduler, out).await.map(|()| true),
            Command::Handler(c) => admin::handler_command(&url, &scheduler, out, c).await.map(|()| true),
            Command::History(args) => admin::history_command(&url, &scheduler, out, args).await.map(|()| true),
            Command::Audit(args) => admin::audit(&url, &scheduler, out, args).await,
            Command::Run(args) => run::run(&url, &scheduler, &args).await.map(|()| true),
            Command::Demo(args) => demo::run(&args).await.map(|()| true),
            Command::Serve(args) => web::serve(&url, &scheduler, &args).await.map(|()| true),
            Command::Cron(CronCommand::Next(args)) => {
                cron_next_with_calendar(&url, &scheduler, &args).await.map(|()| true)
            }
        }
    })
}

fn parse_next(args: &NextArgs) -> anyhow::Result<(CronExpression, quartz_core::Tz)> {
    let cron = if args.unix {
        CronExpression::parse_unix(&args.expression)?
    } else {
        CronExpression::parse(&args.expression)?
    };
    Ok((cron, parse_time_zone(&args.tz)?))
}

fn after_of(args: &NextArgs) -> anyhow::Result<Timestamp> {
    match &args.after {
        Some(text) => args::parse_instant(text).context("--after"),
        None => Ok(Timestamp::from(Utc::now())),
    }
}

/// `quartz cron next --calendar NAME`: the calendar read from the database.
async fn cron_next_with_calendar(url: &str, scheduler: &str, args: &NextArgs) -> anyhow::Result<()> {
    let (cron, zone) = parse_next(args)?;
    let store = quartz_store::AnyStore::connect(url).await?;
    let admin = quartz_core::admin::Admin::new(store, scheduler);
    let preview = admin
        .cron_preview_with(
            cron.as_str(),
            &args.tz,
            args.dst.choice()?,
            args.calendar.as_deref(),
            after_of(args)?,
            args.count,
        )
        .await?;
    print_times(args, zone, preview.times.into_iter())?;
    if let Some(note) = preview.note {
        eprintln!("{note}");
    }
    Ok(())
}

fn print_times(args: &NextArgs, zone: quartz_core::Tz, times: impl Iterator<Item = Timestamp>) -> anyhow::Result<()> {
    let mut out = String::new();
    for fire in times {
        match args.format {
            Format::EpochMs => out.push_str(&fire.as_millis().to_string()),
            Format::Rfc3339 => {
                let utc = fire.to_datetime().context("fire time out of range")?;
                out.push_str(&utc.with_timezone(&zone).to_rfc3339_opts(SecondsFormat::Secs, true));
            }
        }
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}
