//! The commands that read and change a cluster's rows: `migrate`, `job …`,
//! `nodes`, `history` and `audit`. Each prints a table for people, or JSON
//! with `--json`.

use std::collections::HashMap;

use quartz_core::Timestamp;
use quartz_core::store::{FireQuery, FireState, NodeState};
use quartz_core::trigger::Trigger;
use quartz_store::AnyStore;
use serde_json::{Value, json};

use crate::args::show_instant;

mod calendars;
mod history;
mod jobs;

pub use calendars::{CalendarCommand, calendar};
pub use history::{AuditArgs, HistoryCommand, audit, history_command};
use history::{all_fires, fire_json};
pub use jobs::{JobCommand, job};

/// `quartz scheduler …`: the whole scheduler on standby or running.
#[derive(clap::Subcommand, Debug)]
pub enum SchedulerCommand {
    /// Pause everything: no node claims a fire (of a trigger, a retry, a
    /// late run or one fired by hand) until `scheduler resume`; fires
    /// already claimed or running finish. Recorded in the change log.
    Pause,
    /// Resume: the nodes claim again, and each trigger found overdue gets
    /// its misfire policy. Recorded in the change log.
    Resume,
    /// Whether the scheduler is on standby, and since when.
    Status,
}

/// `quartz handler …`: what the live nodes publish of their handlers.
#[derive(clap::Subcommand, Debug)]
pub enum HandlerCommand {
    /// The JSON Schema a payload of handler NAME must fit, as the live
    /// nodes offering it published it (a typed job's payload schema;
    /// `quartz run` publishes shell's): jobs and work whose payload does
    /// not fit are refused, naming the field.
    ///
    /// Example:
    ///   quartz handler schema shell --json
    #[command(verbatim_doc_comment)]
    Schema {
        /// The handler (a typed job's kind).
        name: String,
    },
}

/// Runs a `handler` command.
pub async fn handler_command(url: &str, scheduler: &str, out: Out, command: HandlerCommand) -> anyhow::Result<()> {
    let store = AnyStore::connect(url).await?.scoped(scheduler);
    let admin = quartz_core::admin::Admin::new(store, scheduler);
    let HandlerCommand::Schema { name } = command;
    let Some(view) = admin.payload_schema(&name).await? else {
        anyhow::bail!(
            "no live node of scheduler {scheduler:?} offering handler {name:?} publishes a payload schema for it: \
             any JSON payload is accepted"
        );
    };
    out.print(&serde_json::to_value(&view)?, || {
        format!(
            "handler {} (schema published by node {}):\n{}\n",
            view.handler,
            view.node,
            serde_json::to_string_pretty(&view.schema).unwrap_or_default()
        )
    });
    Ok(())
}

/// Runs a `scheduler` command.
pub async fn scheduler_command(url: &str, scheduler: &str, out: Out, command: SchedulerCommand) -> anyhow::Result<()> {
    let store = AnyStore::connect(url).await?.scoped(scheduler);
    let admin = quartz_core::admin::Admin::new(store, scheduler).acting_as(jobs::CLI_ACTOR);
    let standby = match command {
        SchedulerCommand::Pause => admin.pause_all().await?,
        SchedulerCommand::Resume => admin.resume_all().await?,
        SchedulerCommand::Status => admin.standby().await?,
    };
    let since = standby.standby_since.map(Timestamp::from_millis);
    out.print(&serde_json::to_value(&standby)?, || match since {
        Some(since) => format!(
            "scheduler {scheduler} is on standby since {}: no fire is claimed until `quartz scheduler resume`\n",
            show_instant(since)
        ),
        None => format!("scheduler {scheduler} is running\n"),
    });
    Ok(())
}

/// Where output goes and in which form.
#[derive(Clone, Copy)]
pub struct Out {
    /// JSON instead of tables.
    pub json: bool,
}

impl Out {
    fn print(self, value: &Value, table: impl FnOnce() -> String) {
        if self.json {
            println!("{value}");
        } else {
            print!("{}", table());
        }
    }
}

/// Columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn opt_instant(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "-".to_owned(), show_instant)
}

fn opt_json(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, |t| json!(t.as_millis()))
}

/// How a trigger reads in a table: `cron 0/2 * * * * ? UTC`, `every 5000ms`, …
pub fn describe(trigger: &Trigger) -> String {
    quartz_core::admin::summary(trigger)
}

// ---- migrate ----

/// `quartz migrate`.
pub async fn migrate(url: &str, out: Out) -> anyhow::Result<()> {
    // Connecting applies the migrations (under a lock on PostgreSQL and MySQL).
    let store = AnyStore::connect(url).await?;
    let now = store.now().await?;
    out.print(&json!({"migrated": true, "database_now": now.as_millis()}), || {
        format!("schema up to date; database time {}\n", show_instant(now))
    });
    Ok(())
}

/// `quartz nodes`.
pub async fn nodes(url: &str, scheduler: &str, out: Out) -> anyhow::Result<()> {
    let store = AnyStore::connect(url).await?.scoped(scheduler);
    let now = store.now().await?;
    let members = store.list_nodes().await?;
    let mut running: HashMap<(String, i64), usize> = HashMap::new();
    let mut query = FireQuery::new();
    query.state = Some(FireState::Running);
    for f in all_fires(&store, query).await? {
        if let Some(owner) = f.owner {
            *running.entry((owner.node_id, owner.incarnation)).or_default() += 1;
        }
    }
    let running_of =
        |n: &quartz_core::store::Node| running.get(&(n.node_id.clone(), n.incarnation)).copied().unwrap_or(0);
    let value = Value::Array(
        members
            .iter()
            .map(|n| {
                json!({
                    "node_id": n.node_id,
                    "host": n.host,
                    "pid": n.pid,
                    "state": n.state.as_str(),
                    "incarnation": n.incarnation,
                    "weight": n.weight,
                    "heartbeat_age_ms": now.as_millis() - n.heartbeat_at.as_millis(),
                    "registered_at": n.registered_at.as_millis(),
                    "busy": n.busy,
                    "running_fires": running_of(n),
                    "handlers": n.handlers,
                })
            })
            .collect(),
    );
    out.print(&value, || {
        if members.is_empty() {
            return format!("no nodes have joined scheduler {scheduler:?}\n");
        }
        let rows: Vec<Vec<String>> = members
            .iter()
            .map(|n| {
                vec![
                    n.node_id.clone(),
                    n.state.as_str().to_owned(),
                    format!("{} ms", now.as_millis() - n.heartbeat_at.as_millis()),
                    n.incarnation.to_string(),
                    running_of(n).to_string(),
                    format!("{}:{}", n.host, n.pid),
                    n.handlers.join(","),
                ]
            })
            .collect();
        let live = members.iter().filter(|n| n.state == NodeState::Live).count();
        table(
            &[
                "NODE",
                "STATE",
                "HEARTBEAT AGE",
                "INCARNATION",
                "RUNNING",
                "HOST:PID",
                "HANDLERS",
            ],
            &rows,
        ) + &format!("{live} live of {}\n", members.len())
    });
    Ok(())
}
