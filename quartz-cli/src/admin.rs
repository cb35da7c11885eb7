//! The commands that read and change a cluster's rows: `migrate`, `job …`,
//! `nodes`, `history` and `audit`. Each prints a table for people, or JSON
//! with `--json`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use quartz_core::Timestamp;
use quartz_core::audit::{AuditParams, AuditReport};
use quartz_core::retention::{PurgePlan, purge};
use quartz_core::store::{
    ExecuteSpec, FireQuery, FireRecord, FireState, Job, JobDetail, JobSpec, Node, NodeState, Store, TriggerColumns,
};
use quartz_core::trigger::{Schedule, Trigger};
use quartz_store::SqlStore;
use serde_json::{Value, json};

use crate::args::{JobArgs, TriggerArgs, millis, show_instant};
use crate::run::BUILT_IN_HANDLERS;

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
    match trigger.schedule() {
        Schedule::Cron { expr, zone } => format!("cron {expr} {zone}"),
        Schedule::FixedRate { interval_ms } => format!("every {interval_ms}ms"),
        Schedule::FixedDelay { delay_ms } => format!("delay {delay_ms}ms"),
        Schedule::Once => format!("once at {}", show_instant(trigger.start())),
        _ => TriggerColumns::from_trigger(trigger).kind.to_string(),
    }
}

// ---- migrate ----

/// `quartz migrate`.
pub async fn migrate(url: &str, out: Out) -> anyhow::Result<()> {
    // Connecting applies the migrations (under a lock on PostgreSQL and MySQL).
    let store = SqlStore::connect(url).await?;
    let now = store.now().await?;
    out.print(&json!({"migrated": true, "database_now": now.as_millis()}), || {
        format!("schema up to date; database time {}\n", show_instant(now))
    });
    Ok(())
}

// ---- jobs ----

/// The `job` subcommands.
#[derive(clap::Subcommand)]
pub enum JobCommand {
    /// Add a job with one trigger.
    ///
    /// Examples:
    ///   quartz job add report --handler log --payload '"daily report"' --cron "0 0 6 * * ?" --tz Europe/Paris
    ///   quartz job add poll --handler sleep --payload '{"ms": 200}' --every 10s --no-concurrent
    ///   quartz job add cleanup --handler shell --payload '{"command": "rm", "args": ["-f", "/tmp/x"]}' --delay 1m
    ///   quartz job add once --handler noop --at 2026-12-24T18:00:00Z
    ///   quartz job add notify --handler log --parent report   (runs after each success of report)
    #[command(verbatim_doc_comment)]
    Add {
        /// The job's name, unique in the scheduler.
        name: String,
        #[command(flatten)]
        job: JobArgs,
        #[command(flatten)]
        trigger: TriggerArgs,
    },
    /// List the jobs.
    ///
    /// Example:
    ///   quartz job list --json
    #[command(verbatim_doc_comment)]
    List,
    /// Show a job, its triggers and its last fires.
    ///
    /// Example:
    ///   quartz job show report
    #[command(verbatim_doc_comment)]
    Show {
        /// The job.
        name: String,
    },
    /// Pause a job: its triggers stop firing until it is resumed.
    ///
    /// Example:
    ///   quartz job pause report
    #[command(verbatim_doc_comment)]
    Pause {
        /// The job.
        name: String,
    },
    /// Resume a paused job; missed fire times follow each trigger's misfire policy.
    ///
    /// Example:
    ///   quartz job resume report
    #[command(verbatim_doc_comment)]
    Resume {
        /// The job.
        name: String,
    },
    /// Fire a job now, once (a one-off trigger beside its others).
    ///
    /// Example:
    ///   quartz job trigger report
    #[command(verbatim_doc_comment)]
    Trigger {
        /// The job.
        name: String,
    },
    /// Change a job; with a trigger option, its triggers are replaced by that one.
    ///
    /// Example:
    ///   quartz job edit report --cron "0 30 6 * * ?" --timeout 5m
    #[command(verbatim_doc_comment)]
    Edit {
        /// The job.
        name: String,
        #[command(flatten)]
        job: JobArgs,
        #[command(flatten)]
        trigger: TriggerArgs,
    },
    /// Delete a job and its triggers; its ledger rows stay as history.
    ///
    /// Example:
    ///   quartz job delete report
    #[command(verbatim_doc_comment)]
    Delete {
        /// The job.
        name: String,
    },
}

/// Warns on stderr when no live node offers a job's handler: the job is
/// stored all the same (the nodes of the service that runs it may be down, or
/// not deployed yet), and its fires are recorded failed, saying so, once past
/// the misfire threshold unless a node with the handler joins.
async fn warn_unless_offered(store: &SqlStore, scheduler: &str, handler: &str) -> anyhow::Result<()> {
    let live: Vec<Node> = store
        .list_nodes(scheduler)
        .await?
        .into_iter()
        .filter(|n| n.state == NodeState::Live)
        .collect();
    if live.iter().any(|n| n.handlers.iter().any(|h| h == handler)) {
        return Ok(());
    }
    let mut offered: Vec<&str> = live
        .iter()
        .flat_map(|n| n.handlers.iter().map(String::as_str))
        .collect();
    offered.sort_unstable();
    offered.dedup();
    eprintln!(
        "warning: no live node of scheduler {scheduler:?} offers handler {handler:?} ({}); its fires are recorded \
         failed once past the misfire threshold unless a node with it joins",
        if live.is_empty() {
            "no node is live".to_owned()
        } else {
            format!("live nodes offer: {}", offered.join(", "))
        }
    );
    Ok(())
}

/// Runs a `job` subcommand.
pub async fn job(url: &str, scheduler: &str, out: Out, command: JobCommand) -> anyhow::Result<()> {
    let store = SqlStore::connect(url).await?;
    match command {
        JobCommand::Add { name, job, trigger } => {
            let Some(handler) = &job.handler else {
                anyhow::bail!(
                    "a job needs --handler: a handler of the service that runs it, or one of `quartz run`'s \
                     ({}, and shell with --allow-shell)",
                    BUILT_IN_HANDLERS.join(", ")
                );
            };
            let spec = job.apply(JobSpec::new(name, handler.clone()))?;
            let executes = if trigger.given() {
                vec![trigger.to_execute(store.now().await?)?]
            } else if spec.parent.is_some() {
                Vec::new()
            } else {
                anyhow::bail!("a job needs a trigger (--cron, --every, --delay or --at) or a --parent");
            };
            store.create_job(scheduler, &spec, &executes).await?;
            warn_unless_offered(&store, scheduler, &spec.handler).await?;
            show(&store, scheduler, &spec.name, out).await
        }
        JobCommand::List => list(&store, scheduler, out).await,
        JobCommand::Show { name } => show(&store, scheduler, &name, out).await,
        JobCommand::Pause { name } => {
            store.set_paused(scheduler, &name, true).await?;
            out.print(&json!({"job": name, "state": "paused"}), || format!("paused {name}\n"));
            Ok(())
        }
        JobCommand::Resume { name } => {
            store.set_paused(scheduler, &name, false).await?;
            out.print(&json!({"job": name, "state": "enabled"}), || {
                format!("resumed {name}\n")
            });
            Ok(())
        }
        JobCommand::Trigger { name } => {
            let now = store.now().await?;
            let once = ExecuteSpec::new(Trigger::new(Schedule::Once, now)?);
            store.add_executes(scheduler, &name, &[once]).await?;
            // The store moves a fire time of "now" to when every node has
            // seen the change: read back the one it stored.
            let fire_time = store
                .get_job(scheduler, &name)
                .await?
                .and_then(|d| {
                    d.executes
                        .iter()
                        .filter(|e| matches!(e.trigger.schedule(), Schedule::Once))
                        .max_by_key(|e| e.id)
                        .map(|e| e.trigger.start())
                })
                .unwrap_or(now);
            out.print(&json!({"job": name, "fire_time": fire_time.as_millis()}), || {
                format!("{name} fires now ({}), once\n", show_instant(fire_time))
            });
            Ok(())
        }
        JobCommand::Edit { name, job, trigger } => {
            let current = store
                .get_job(scheduler, &name)
                .await?
                .with_context(|| format!("no job {name:?} in scheduler {scheduler:?}"))?;
            let spec = job.apply(current.job.spec)?;
            let executes = if trigger.given() {
                Some(vec![trigger.to_execute(store.now().await?)?])
            } else {
                None
            };
            store.update_job(scheduler, &name, &spec, executes.as_deref()).await?;
            if job.handler.is_some() {
                warn_unless_offered(&store, scheduler, &spec.handler).await?;
            }
            show(&store, scheduler, &spec.name, out).await
        }
        JobCommand::Delete { name } => {
            store.delete_job(scheduler, &name).await?;
            out.print(&json!({"job": name, "deleted": true}), || format!("deleted {name}\n"));
            Ok(())
        }
    }
}

fn job_json(detail: &JobDetail) -> Value {
    let job = &detail.job;
    json!({
        "id": job.id,
        "name": job.spec.name,
        "handler": job.spec.handler,
        "payload": serde_json::from_str::<Value>(&job.spec.payload).unwrap_or(Value::Null),
        "description": job.spec.description,
        "state": job.state.as_str(),
        "requests_recovery": job.spec.requests_recovery,
        "allow_concurrent": job.spec.allow_concurrent,
        "timeout_ms": job.spec.timeout_ms,
        "max_attempts": job.spec.retry.max_attempts,
        "backoff_ms": job.spec.retry.backoff_ms,
        "backoff_max_ms": job.spec.retry.backoff_max_ms,
        "parent": job.spec.parent,
        "triggers": detail.executes.iter().map(|e| {
            let c = TriggerColumns::from_trigger(&e.trigger);
            json!({
                "id": e.id,
                "kind": c.kind,
                "cron": c.cron_expression,
                "time_zone": c.time_zone,
                "interval_ms": c.interval_ms,
                "start": e.trigger.start().as_millis(),
                "end": opt_json(e.trigger.end()),
                "repeat": e.trigger.repeat_limit(),
                "misfire": e.trigger.misfire_policy().as_str(),
                "state": e.state.as_str(),
                "prev_fire_time": opt_json(e.fire_state.prev_fire_time),
                "next_fire_time": opt_json(e.fire_state.next_fire_time),
                "times_triggered": e.fire_state.times_triggered,
                "error": e.error,
            })
        }).collect::<Vec<_>>(),
        "broken_triggers": detail.broken.iter().map(|b| json!({"id": b.execute_id, "reason": b.reason})).collect::<Vec<_>>(),
    })
}

async fn list(store: &SqlStore, scheduler: &str, out: Out) -> anyhow::Result<()> {
    let mut details = Vec::new();
    for job in store.list_jobs(scheduler).await? {
        if let Some(detail) = store.get_job(scheduler, &job.spec.name).await? {
            details.push(detail);
        }
    }
    let value = Value::Array(details.iter().map(job_json).collect());
    out.print(&value, || {
        if details.is_empty() {
            return format!("no jobs in scheduler {scheduler:?}\n");
        }
        let rows: Vec<Vec<String>> = details
            .iter()
            .map(|d| {
                let next = d.executes.iter().filter_map(|e| e.fire_state.next_fire_time).min();
                let schedule = match (d.executes.as_slice(), &d.job.spec.parent) {
                    ([], Some(parent)) => format!("after {parent}"),
                    ([one], _) => describe(&one.trigger),
                    (many, _) => format!("{} triggers", many.len()),
                };
                vec![
                    d.job.spec.name.clone(),
                    d.job.spec.handler.clone(),
                    d.job.state.as_str().to_owned(),
                    schedule,
                    opt_instant(next),
                ]
            })
            .collect();
        table(&["NAME", "HANDLER", "STATE", "SCHEDULE", "NEXT FIRE"], &rows)
    });
    Ok(())
}

async fn show(store: &SqlStore, scheduler: &str, name: &str, out: Out) -> anyhow::Result<()> {
    let detail = store
        .get_job(scheduler, name)
        .await?
        .with_context(|| format!("no job {name:?} in scheduler {scheduler:?}"))?;
    let mut query = FireQuery::new(scheduler);
    query.job = Some(name.to_owned());
    query.limit = 5;
    let recent = store.fires(&query).await?;
    let mut value = job_json(&detail);
    value["recent_fires"] = Value::Array(recent.iter().map(fire_json).collect());
    out.print(&value, || {
        let job = &detail.job;
        let mut s = format!(
            "job {} (id {}), handler {}, {}\n",
            job.spec.name,
            job.id,
            job.spec.handler,
            job.state.as_str()
        );
        s.push_str(&format!("  payload: {}\n", job.spec.payload));
        if !job.spec.description.is_empty() {
            s.push_str(&format!("  description: {}\n", job.spec.description));
        }
        s.push_str(&format!(
            "  concurrent: {}, recovery: {}, timeout: {}, attempts: {} (backoff {} ms)\n",
            if job.spec.allow_concurrent { "yes" } else { "no" },
            if job.spec.requests_recovery {
                "re-run"
            } else {
                "abandon"
            },
            job.spec
                .timeout_ms
                .map_or_else(|| "none".to_owned(), |ms| format!("{ms} ms")),
            job.spec.retry.max_attempts,
            job.spec.retry.backoff_ms
        ));
        if let Some(parent) = &job.spec.parent {
            s.push_str(&format!("  runs after each success of {parent}\n"));
        }
        for e in &detail.executes {
            s.push_str(&format!(
                "  trigger {}: {} [{}], misfire {}, next {}, fired {} times{}\n",
                e.id,
                describe(&e.trigger),
                e.state.as_str(),
                e.trigger.misfire_policy(),
                opt_instant(e.fire_state.next_fire_time),
                e.fire_state.times_triggered,
                e.error.as_ref().map_or_else(String::new, |r| format!(" (error: {r})"))
            ));
        }
        for b in &detail.broken {
            s.push_str(&format!("  trigger {}: cannot be read: {}\n", b.execute_id, b.reason));
        }
        if !recent.is_empty() {
            s.push_str("  last fires:\n");
            for f in &recent {
                s.push_str(&format!(
                    "    {} {} attempt {}{}\n",
                    show_instant(f.fire_time),
                    f.state.as_str(),
                    f.attempt,
                    f.error.as_ref().map_or_else(String::new, |e| format!(": {e}"))
                ));
            }
        }
        s
    });
    Ok(())
}

// ---- nodes ----

/// `quartz nodes`.
pub async fn nodes(url: &str, scheduler: &str, out: Out) -> anyhow::Result<()> {
    let store = SqlStore::connect(url).await?;
    let now = store.now().await?;
    let members = store.list_nodes(scheduler).await?;
    let mut running: HashMap<(String, i64), usize> = HashMap::new();
    let mut query = FireQuery::new(scheduler);
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

// ---- history ----

/// `quartz history`: the ledger, or `quartz history purge`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct HistoryCommand {
    #[command(subcommand)]
    action: Option<HistoryAction>,
    #[command(flatten)]
    list: HistoryArgs,
}

/// The `history` subcommands.
#[derive(clap::Subcommand)]
enum HistoryAction {
    /// Delete finished fires (succeeded, failed, misfired, skipped, abandoned)
    /// scheduled more than DURATION ago, in small batches. Claimed and running
    /// fires are never deleted. Nodes purge by themselves under their
    /// retention settings (`quartz run --keep-succeeded ...`); this is for
    /// operators who want less.
    ///
    /// Example:
    ///   quartz history purge --older-than 30d
    #[command(verbatim_doc_comment)]
    Purge {
        /// Fires scheduled longer ago than this go (e.g. 12h, 30d).
        #[arg(long, value_parser = crate::args::duration_arg)]
        older_than: Duration,
        /// Keep each job's newest N fires whatever their age.
        #[arg(long, default_value_t = 0)]
        keep_last: u32,
    },
}

/// Runs `quartz history` or one of its subcommands.
pub async fn history_command(url: &str, scheduler: &str, out: Out, command: HistoryCommand) -> anyhow::Result<()> {
    match command.action {
        None => history(url, scheduler, out, command.list).await,
        Some(HistoryAction::Purge { older_than, keep_last }) => {
            let store = SqlStore::connect(url).await?;
            let now = store.now().await?;
            let before = now.saturating_add_millis(-millis(older_than));
            let mut plan = PurgePlan::older_than(before);
            plan.keep_last = keep_last;
            let report = purge(&store, scheduler, &plan).await?;
            out.print(
                &json!({"purged_fires": report.fires, "before": before.as_millis()}),
                || {
                    format!(
                        "purged {} finished fires scheduled before {}\n",
                        report.fires,
                        show_instant(before)
                    )
                },
            );
            Ok(())
        }
    }
}

/// Options of `quartz history`.
#[derive(clap::Args)]
pub struct HistoryArgs {
    /// Only this job's fires.
    #[arg(long)]
    job: Option<String>,
    /// Only fires in this state: claimed, running, succeeded, failed, misfired, skipped, abandoned.
    #[arg(long)]
    state: Option<String>,
    /// Only fires scheduled at or after this instant (RFC 3339 or epoch ms).
    #[arg(long, value_parser = crate::args::instant_arg)]
    since: Option<Timestamp>,
    /// Only fires scheduled before this instant.
    #[arg(long, value_parser = crate::args::instant_arg)]
    until: Option<Timestamp>,
    /// The most rows.
    #[arg(long, default_value_t = 50)]
    limit: u32,
}

fn fire_json(f: &FireRecord) -> Value {
    json!({
        "id": f.id,
        "execute_id": f.execute_id,
        "job_id": f.job_id,
        "fire_time": f.fire_time.as_millis(),
        "attempt": f.attempt,
        "node_id": f.owner.as_ref().map(|o| o.node_id.clone()),
        "state": f.state.as_str(),
        "claimed_at": f.claimed_at.as_millis(),
        "started_at": opt_json(f.started_at),
        "finished_at": opt_json(f.finished_at),
        "error": f.error,
        "skipped_until": opt_json(f.skipped_until),
        "fire_count": f.fire_count,
    })
}

/// `quartz history`.
async fn history(url: &str, scheduler: &str, out: Out, args: HistoryArgs) -> anyhow::Result<()> {
    let store = SqlStore::connect(url).await?;
    let mut query = FireQuery::new(scheduler);
    query.job = args.job;
    query.state = args.state.as_deref().map(FireState::parse).transpose()?;
    query.since = args.since;
    query.until = args.until;
    query.limit = args.limit;
    let fires = store.fires(&query).await?;
    let names = job_names(&store, scheduler).await?;
    let value = Value::Array(
        fires
            .iter()
            .map(|f| {
                let mut v = fire_json(f);
                v["job"] = json!(names.get(&f.job_id));
                v
            })
            .collect(),
    );
    out.print(&value, || {
        if fires.is_empty() {
            return "no fires\n".to_owned();
        }
        let rows: Vec<Vec<String>> = fires
            .iter()
            .map(|f| {
                let late = f.started_at.map_or_else(String::new, |s| {
                    format!("{} ms", s.as_millis() - f.fire_time.as_millis())
                });
                vec![
                    f.id.to_string(),
                    names
                        .get(&f.job_id)
                        .cloned()
                        .unwrap_or_else(|| format!("#{}", f.job_id)),
                    show_instant(f.fire_time),
                    f.attempt.to_string(),
                    f.state.as_str().to_owned(),
                    f.owner.as_ref().map_or_else(|| "-".to_owned(), |o| o.node_id.clone()),
                    late,
                    f.error.clone().unwrap_or_default(),
                ]
            })
            .collect();
        table(
            &["ID", "JOB", "FIRE TIME", "ATTEMPT", "STATE", "NODE", "LATE", "ERROR"],
            &rows,
        )
    });
    Ok(())
}

async fn job_names(store: &SqlStore, scheduler: &str) -> anyhow::Result<HashMap<i64, String>> {
    Ok(store
        .list_jobs(scheduler)
        .await?
        .into_iter()
        .map(|j: Job| (j.id, j.spec.name))
        .collect())
}

/// Every ledger row a query matches, through its pages.
async fn all_fires(store: &SqlStore, mut query: FireQuery) -> anyhow::Result<Vec<FireRecord>> {
    query.limit = 1_000;
    let mut all = Vec::new();
    loop {
        let page = store.fires(&query).await?;
        let Some(last) = page.last() else { break };
        query.before_id = Some(last.id);
        all.extend(page);
    }
    Ok(all)
}

// ---- audit ----

/// Options of `quartz audit`.
#[derive(clap::Args)]
pub struct AuditArgs {
    /// Check fire times from this instant [default: an hour ago].
    #[arg(long, value_parser = crate::args::instant_arg)]
    since: Option<Timestamp>,
    /// Check fire times before this instant [default: now].
    #[arg(long, value_parser = crate::args::instant_arg)]
    until: Option<Timestamp>,
    /// The cluster's misfire threshold: a start later than this needs a misfire record.
    #[arg(long, default_value = "5s", value_parser = crate::args::duration_arg)]
    misfire_threshold: Duration,
}

/// `quartz audit`: `Ok(true)` when the ledger is clean.
pub async fn audit(url: &str, scheduler: &str, out: Out, args: AuditArgs) -> anyhow::Result<bool> {
    let store = SqlStore::connect(url).await?;
    let now = store.now().await?;
    let until = args.until.unwrap_or(now).min(now);
    let params = AuditParams {
        since: args.since.unwrap_or_else(|| until.saturating_add_millis(-3_600_000)),
        until,
        misfire_threshold_ms: millis(args.misfire_threshold),
    };
    let report = quartz_core::audit::audit(&store, scheduler, &params).await?;
    let AuditReport {
        since,
        until,
        purge_horizon: horizon,
        fire_times_checked: checked,
        ref violations,
        ..
    } = report;
    let value = json!({
        "since": since.as_millis(),
        "until": until.as_millis(),
        "purge_horizon": opt_json(horizon),
        "fires": report.fires,
        "fire_times_checked": checked,
        "violations": violations.iter().map(|v| json!({
            "kind": v.kind.as_str(), "job": v.job, "execute_id": v.execute_id,
            "fire_time": v.fire_time.as_millis(), "detail": v.detail,
        })).collect::<Vec<_>>(),
    });
    out.print(&value, || {
        let mut s = String::new();
        for v in violations {
            s.push_str(&format!(
                "{}: job {} trigger {} at {}: {}\n",
                v.kind.as_str(),
                v.job,
                v.execute_id,
                show_instant(v.fire_time),
                v.detail
            ));
        }
        s.push_str(&format!(
            "{} violation(s) in {} ledger rows and {checked} scheduled fire times from {} to {}\n",
            violations.len(),
            report.fires,
            show_instant(since),
            show_instant(until)
        ));
        s
    });
    Ok(violations.is_empty())
}
