//! The `quartz` command: `quartz node` runs a scheduler node with the built-in
//! handlers (`noop`, `sleep`, `shell`); `quartz cron next` prints the next fire
//! times of a Quartz cron expression in a time zone.

mod node;

use std::process::ExitCode;

use anyhow::{Context, bail};
use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use quartz_core::Timestamp;
use quartz_core::cron::{CronExpression, parse_time_zone};

/// Operate a quartz-rs scheduler from a terminal.
#[derive(Parser)]
#[command(name = "quartz", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scheduler node until SIGINT or SIGTERM, with the built-in handlers:
    /// noop, sleep (payload: ms) and shell (payload: a command string).
    Node(node::NodeArgs),
    /// Cron expressions (Quartz syntax).
    #[command(subcommand)]
    Cron(CronCommand),
}

#[derive(Subcommand)]
enum CronCommand {
    /// Print the next fire times of an expression, one instant per line.
    ///
    /// Examples:
    ///   quartz cron next "0 15 10 ? * 6L"
    ///   quartz cron next "0 0/5 14,18 * * ?" --tz Europe/London --count 3
    ///   quartz cron next "0 30 2 * * ?" --tz America/New_York --after 2026-03-07T12:00:00Z
    ///   quartz cron next "*/5 * * * *" --unix --format epoch-ms
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
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// RFC 3339, with the zone's offset at that instant.
    Rfc3339,
    /// Milliseconds since the Unix epoch.
    EpochMs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Cron(CronCommand::Next(args)) => cron_next(&args),
        Command::Node(args) => run_node(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("quartz: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn run_node(args: node::NodeArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(node::run(args))
}

fn cron_next(args: &NextArgs) -> anyhow::Result<()> {
    let cron = if args.unix {
        CronExpression::parse_unix(&args.expression)?
    } else {
        CronExpression::parse(&args.expression)?
    };
    let zone = parse_time_zone(&args.tz)?;
    let after = match &args.after {
        Some(text) => parse_instant(text)?,
        None => Timestamp::from(Utc::now()),
    };
    let mut out = String::new();
    for fire in cron.iter_after(after, zone).take(args.count) {
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

/// Epoch milliseconds (`1767225600000`) or RFC 3339 (`2026-01-01T00:00:00Z`).
fn parse_instant(text: &str) -> anyhow::Result<Timestamp> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(Timestamp::from_millis(ms));
    }
    match DateTime::parse_from_rfc3339(text) {
        Ok(t) => Ok(Timestamp::from(t.to_utc())),
        Err(_) => bail!("--after {text:?} is neither epoch milliseconds nor an RFC 3339 instant"),
    }
}
