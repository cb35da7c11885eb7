//! `quartz job …`: add, edit, list, show, pause, resume, trigger and delete
//! a job and its triggers.

use anyhow::Context;
use quartz_core::admin::{Admin, JobDefinition, JobView};
use quartz_core::store::{FireQuery, JobDetail, JobSpec};
use quartz_store::AnyStore;
use serde_json::{Value, json};

use super::*;
use crate::args::{JobArgs, TriggerArgs, show_instant};
use crate::run::BUILT_IN_HANDLERS;

/// Who the change log says made the CLI's changes.
pub const CLI_ACTOR: &str = "cli";

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
    ///   quartz job add rebuild --handler shell --payload '{"command": "make"}' --on-demand   (runs when fired)
    #[command(verbatim_doc_comment)]
    Add {
        /// The job's name, unique in the scheduler.
        name: String,
        #[command(flatten)]
        job: JobArgs,
        #[command(flatten)]
        trigger: TriggerArgs,
        /// No trigger and no parent: the job runs only when fired by hand
        /// (`quartz job trigger NAME`, the console, the API).
        #[arg(long)]
        on_demand: bool,
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
    /// Enqueue a piece of work of a job: a one-off fire with its own
    /// payload, due now, --at an instant or --after a delay; with --unique,
    /// refused as a duplicate while another piece of work of the job holds
    /// the key (pending or running, or within --unique-for of its enqueueing).
    ///
    /// Examples:
    ///   quartz job enqueue welcome-mail --payload '{"to": "ada@example.com"}'
    ///   quartz job enqueue welcome-mail --payload '{"to": "ada@example.com"}' --after 10m --unique ada --unique-for 1h
    #[command(verbatim_doc_comment)]
    Enqueue {
        /// The job (the work's kind: its handler and retry policy apply).
        name: String,
        /// The work's own payload, JSON [default: the job's].
        #[arg(long)]
        payload: Option<String>,
        /// Due at this instant (RFC 3339 or epoch ms).
        #[arg(long, value_parser = crate::args::instant_arg, conflicts_with = "after")]
        at: Option<Timestamp>,
        /// Due this long from now (`90s`, `10m`, `1h`).
        #[arg(long, value_parser = crate::args::duration_arg)]
        after: Option<std::time::Duration>,
        /// A unique key.
        #[arg(long)]
        unique: Option<String>,
        /// How long the key stays taken after the work is enqueued, even once it has ended.
        #[arg(long, value_parser = crate::args::duration_arg, requires = "unique")]
        unique_for: Option<std::time::Duration>,
        /// The W3C trace context of the span that enqueues it
        /// (`00-<trace id>-<span id>-<flags>`): its fires' spans link to it.
        #[arg(long, env = "TRACEPARENT")]
        trace_parent: Option<String>,
    },
    /// Run a job's past fire times from --from to --to, once each, at most
    /// --rate a second; times that ran are left alone. --preview lists them.
    ///
    /// Examples:
    ///   quartz job backfill report --from 2026-11-01T00:00:00Z --to 2026-11-08T00:00:00Z --preview
    ///   quartz job backfill report --from 2026-11-01T00:00:00Z --rate 2
    #[command(verbatim_doc_comment)]
    Backfill {
        /// The job.
        name: String,
        /// The first instant of the range (RFC 3339 or epoch ms).
        #[arg(long, value_parser = crate::args::instant_arg)]
        from: Timestamp,
        /// The last instant of the range [default: now].
        #[arg(long, value_parser = crate::args::instant_arg)]
        to: Option<Timestamp>,
        /// At most this many fires a second [default: 10].
        #[arg(long)]
        rate: Option<u32>,
        /// Only list the fire times; queue nothing.
        #[arg(long)]
        preview: bool,
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

/// Prints on stderr what the admin surface warned of when it stored a job
/// (for example, that no node is live to offer its handler: the job is
/// stored all the same, and runs when a node with its handler joins).
fn warn(view: &quartz_core::admin::JobView) {
    for warning in &view.warnings {
        eprintln!("warning: {warning}");
    }
}

/// Runs a `job` subcommand. Every change goes through the library's admin
/// surface, recorded in the change log as made by `cli`.
pub async fn job(url: &str, scheduler: &str, out: Out, command: JobCommand) -> anyhow::Result<()> {
    let store = AnyStore::connect(url).await?.scoped(scheduler);
    let admin = Admin::new(store.clone(), scheduler).acting_as(CLI_ACTOR);
    match command {
        JobCommand::Add {
            name,
            job,
            trigger,
            on_demand,
        } => {
            let Some(handler) = &job.handler else {
                anyhow::bail!(
                    "a job needs --handler: a handler of the service that runs it, or one of `quartz run`'s \
                     ({}, and shell with --allow-shell)",
                    BUILT_IN_HANDLERS.join(", ")
                );
            };
            let spec = job.apply(JobSpec::new(name, handler.clone()))?;
            let triggers = if trigger.given() {
                vec![trigger.to_definition()?]
            } else if spec.parent.is_some() || on_demand {
                Vec::new()
            } else {
                anyhow::bail!(
                    "a job needs a trigger (--cron, --every, --delay or --at), a --parent, or --on-demand to run \
                     only when fired by hand"
                );
            };
            let name = spec.name.clone();
            warn(&admin.job_add(&JobDefinition { spec, triggers }).await?);
            show(&store, scheduler, &name, out).await
        }
        JobCommand::List => list(&store, scheduler, out).await,
        JobCommand::Show { name } => show(&store, scheduler, &name, out).await,
        JobCommand::Pause { name } => {
            admin.job_pause(&name, None).await?;
            out.print(&json!({"job": name, "state": "paused"}), || format!("paused {name}\n"));
            Ok(())
        }
        JobCommand::Resume { name } => {
            admin.job_resume(&name, None).await?;
            out.print(&json!({"job": name, "state": "enabled"}), || {
                format!("resumed {name}\n")
            });
            Ok(())
        }
        JobCommand::Trigger { name } => {
            let fired = admin.job_trigger(&name).await?;
            out.print(&serde_json::to_value(&fired)?, || {
                format!(
                    "{name} fires now ({}), once: {}\n",
                    show_instant(Timestamp::from_millis(fired.fire_time)),
                    fired.note
                )
            });
            Ok(())
        }
        JobCommand::Enqueue {
            name,
            payload,
            at,
            after,
            unique,
            unique_for,
            trace_parent,
        } => {
            let payload = payload
                .map(|text| serde_json::from_str::<Value>(&text).context("--payload is not JSON"))
                .transpose()?;
            let request = quartz_core::admin::WorkRequest {
                payload,
                at: at.map(Timestamp::as_millis),
                after_ms: after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                unique_key: unique,
                unique_for_ms: unique_for.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                trace_parent,
            };
            let view = admin.enqueue_request(&name, &request).await?;
            out.print(&serde_json::to_value(&view)?, || {
                format!("{}: {}\n", view.outcome, view.note)
            });
            Ok(())
        }
        JobCommand::Backfill {
            name,
            from,
            to,
            rate,
            preview,
        } => {
            let request = quartz_core::admin::BackfillRequest {
                from: Some(from.as_millis()),
                to: to.map(Timestamp::as_millis),
                rate,
                preview,
            };
            let done = admin.job_backfill(&name, &request).await?;
            out.print(&serde_json::to_value(&done)?, || {
                let mut text = String::new();
                if done.preview {
                    for t in &done.times {
                        text.push_str(&show_instant(Timestamp::from_millis(*t)));
                        text.push('\n');
                    }
                }
                text.push_str(&done.note);
                text.push('\n');
                text
            });
            Ok(())
        }
        JobCommand::Edit { name, job, trigger } => {
            let mut patch = job.patch()?;
            if trigger.given() {
                patch.triggers = Some(vec![trigger.to_definition()?]);
            }
            // Applied to the job as it is when written: a change made
            // meanwhile to another field is kept.
            let view = admin.job_edit(&name, &patch, None).await?;
            warn(&view);
            show(&store, scheduler, view.name(), out).await
        }
        JobCommand::Delete { name } => {
            admin.job_delete(&name, None).await?;
            out.print(&json!({"job": name, "deleted": true}), || format!("deleted {name}\n"));
            Ok(())
        }
    }
}

/// A job as JSON: the admin API's view of it (its definition, where it
/// stands and its triggers' next fire times), the same shape `GET
/// /api/v1/jobs/{name}` answers.
fn job_json(detail: &JobDetail) -> Value {
    serde_json::to_value(JobView::new(detail, UPCOMING)).unwrap_or(Value::Null)
}

/// The next fire times a job's JSON shows of each trigger.
const UPCOMING: usize = 5;

async fn list(store: &AnyStore, scheduler: &str, out: Out) -> anyhow::Result<()> {
    let mut details = Vec::new();
    for job in store.list_jobs().await? {
        if let Some(detail) = store.get_job(&job.spec.name).await? {
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

async fn show(store: &AnyStore, scheduler: &str, name: &str, out: Out) -> anyhow::Result<()> {
    let detail = store
        .get_job(name)
        .await?
        .with_context(|| format!("no job {name:?} in scheduler {scheduler:?}"))?;
    let mut query = FireQuery::new();
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
                .timeout
                .map_or_else(|| "none".to_owned(), |d| format!("{} ms", d.as_millis())),
            job.spec.retry.max_attempts,
            job.spec.retry.backoff.as_millis()
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
