//! `quartz history` (the ledger, and `history purge`) and `quartz audit`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use quartz_core::Timestamp;
use quartz_core::audit::{AuditParams, AuditReport};
use quartz_core::retention::{PurgePlan, purge};
use quartz_core::runlog::{CheckParams, Lateness, RunCheck, check, read_dir};
use quartz_core::store::{FireQuery, FireRecord, FireState, Job};
use quartz_store::AnyStore;
use serde_json::{Value, json};

use super::*;
use crate::args::{millis, show_instant};

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
            let store = AnyStore::connect(url).await?.scoped(scheduler);
            let now = store.now().await?;
            let before = now.saturating_add_millis(-millis(older_than));
            let mut plan = PurgePlan::older_than(before);
            plan.keep_last = keep_last;
            let report = purge(&*store, &plan).await?;
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

pub(super) fn fire_json(f: &FireRecord) -> Value {
    json!({
        "id": f.id,
        "execute_id": f.execute_id,
        "by_hand": f.by_hand(),
        "enqueued": f.enqueued(),
        "backfill": f.by_backfill(),
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
    let store = AnyStore::connect(url).await?.scoped(scheduler);
    let mut query = FireQuery::new();
    query.job = args.job;
    query.state = args.state.as_deref().map(FireState::parse).transpose()?;
    query.since = args.since;
    query.until = args.until;
    query.limit = args.limit;
    let fires = store.fires(&query).await?;
    let names = job_names(&store).await?;
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

async fn job_names(store: &AnyStore) -> anyhow::Result<HashMap<i64, String>> {
    Ok(store
        .list_jobs()
        .await?
        .into_iter()
        .map(|j: Job| (j.id, j.spec.name))
        .collect())
}

/// Every ledger row a query matches, through its pages.
pub(super) async fn all_fires(store: &AnyStore, mut query: FireQuery) -> anyhow::Result<Vec<FireRecord>> {
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
    /// Also check the runs the nodes' run logs in DIR show (`quartz run
    /// --run-log DIR`) against the triggers and the ledger: fire times
    /// lost, run twice, started by a fenced node, early or late.
    #[arg(long, value_name = "DIR")]
    runs: Option<std::path::PathBuf>,
    /// How far two nodes' estimates of database time may disagree, for
    /// `--runs`: a start counts as a fenced node's only this long after its
    /// incarnation was retired.
    #[arg(long, default_value = "100ms", value_parser = crate::args::duration_arg)]
    clock_slack: Duration,
}

/// An audit of a scheduler that holds nothing here (no job, node or fire)
/// would be clean and say nothing: refused, naming the schedulers the
/// database does hold (a mistyped or forgotten `--scheduler`).
async fn refuse_empty(store: &dyn quartz_core::store::Store, scheduler: &str) -> anyhow::Result<()> {
    let mut one = quartz_core::store::FireQuery::new();
    one.limit = 1;
    if !store.list_jobs().await?.is_empty()
        || !store.list_nodes().await?.is_empty()
        || !store.fires(&one).await?.is_empty()
    {
        return Ok(());
    }
    let held = store.schedulers().await?;
    if held.is_empty() {
        anyhow::bail!(
            "scheduler {scheduler:?} has no jobs, nodes or fires here, and neither has any other: is this the \
             database the nodes use (--database-url, QUARTZ_DATABASE_URL)?"
        );
    }
    anyhow::bail!(
        "scheduler {scheduler:?} has no jobs, nodes or fires here, so there is nothing to audit; this database \
         holds {}: choose one with --scheduler NAME (or QUARTZ_SCHEDULER)",
        held.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
    );
}

/// `quartz audit`: `Ok(true)` when the ledger is clean.
pub async fn audit(url: &str, scheduler: &str, out: Out, args: AuditArgs) -> anyhow::Result<bool> {
    let store = AnyStore::connect(url).await?.scoped(scheduler);
    refuse_empty(&*store, scheduler).await?;
    let now = store.now().await?;
    let until = args.until.unwrap_or(now).min(now);
    let params = AuditParams {
        since: args.since.unwrap_or_else(|| until.saturating_add_millis(-3_600_000)),
        until,
        misfire_threshold: args.misfire_threshold,
    };
    let report = quartz_core::audit::audit(&*store, &params).await?;
    let runs = match &args.runs {
        Some(dir) => {
            let files = read_dir(dir).with_context(|| format!("reading the run logs in {}", dir.display()))?;
            if files.is_empty() {
                anyhow::bail!("no run log (*{}) in {}", quartz_core::runlog::SUFFIX, dir.display());
            }
            let check_params = CheckParams {
                since: params.since,
                until: params.until,
                misfire_threshold: params.misfire_threshold,
                clock_slack: args.clock_slack,
            };
            Some(check(&*store, &files, &check_params).await?)
        }
        None => None,
    };
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
        "violations": violations.iter()
            .map(|v| violation_json(v.kind.as_str(), &v.job, v.execute_id, v.fire_time, &v.detail))
            .collect::<Vec<_>>(),
        "runs": runs.as_ref().map(runs_json),
    });
    out.print(&value, || {
        let mut s = String::new();
        if let Some(r) = &runs {
            s.push_str(&runs_text(r));
        }
        for v in violations {
            s.push_str(&violation_line(
                "",
                v.kind.as_str(),
                &v.job,
                v.execute_id,
                v.fire_time,
                &v.detail,
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
    Ok(violations.is_empty() && runs.is_none_or(|r| r.violations.is_empty()))
}

/// A run log check as JSON.
fn runs_json(r: &RunCheck) -> Value {
    let lateness = |l: &Lateness| json!({ "count": l.count, "p50": l.p50, "p99": l.p99, "max": l.max });
    json!({
        "files": r.files,
        "unreadable_lines": r.unreadable,
        "fire_times_checked": r.fire_times_checked,
        "fire_times_run": r.fire_times_run,
        "fire_times_by_policy": r.fire_times_by_policy,
        "fire_times_unwitnessed": r.fire_times_unwitnessed,
        "starts": r.starts,
        "ends": r.ends,
        "overlapping_attempts": r.overlapping_attempts,
        "rerun_after_unrecorded_success": r.rerun_after_unrecorded_success,
        "lateness_ms": lateness(&r.lateness),
        "ledger_lateness_ms": lateness(&r.ledger_lateness),
        "ledger_start_gap_max_ms": r.ledger_start_gap_max,
        "violations": r.violations.iter()
            .map(|v| violation_json(v.kind.as_str(), &v.job, v.execute_id, v.fire_time, &v.detail))
            .collect::<Vec<_>>(),
    })
}

/// A violation (the ledger audit's or the run log checker's) as JSON.
fn violation_json(kind: &str, job: &str, execute_id: i64, fire_time: Timestamp, detail: &str) -> Value {
    json!({
        "kind": kind, "job": job, "execute_id": execute_id,
        "fire_time": fire_time.as_millis(), "detail": detail,
    })
}

/// A violation as a line of text.
fn violation_line(prefix: &str, kind: &str, job: &str, execute_id: i64, fire_time: Timestamp, detail: &str) -> String {
    format!(
        "{prefix}{kind}: job {job} trigger {execute_id} at {}: {detail}\n",
        show_instant(fire_time)
    )
}

/// A run log check as text: its violations, then its figures.
fn runs_text(r: &RunCheck) -> String {
    let mut s = String::new();
    for v in &r.violations {
        s.push_str(&violation_line(
            "runs: ",
            v.kind.as_str(),
            &v.job,
            v.execute_id,
            v.fire_time,
            &v.detail,
        ));
    }
    s.push_str(&format!(
        "runs: {} violation(s); {} fire times: {} run, {} ended by policy, {} run by nodes without a run log; \
         {} starts and {} ends in {} run log(s); {} attempts overlapping the one before; \
         {} recovery re-runs of a success the ledger never recorded (at-least-once)\n",
        r.violations.len(),
        r.fire_times_checked,
        r.fire_times_run,
        r.fire_times_by_policy,
        r.fire_times_unwitnessed,
        r.starts,
        r.ends,
        r.files,
        r.overlapping_attempts,
        r.rerun_after_unrecorded_success,
    ));
    let (h, l) = (&r.lateness, &r.ledger_lateness);
    s.push_str(&format!(
        "runs: lateness of first attempts, handlers p50/p99/max {}/{}/{} ms ({} starts), ledger {}/{}/{} ms; \
         the two differ by {} ms at most\n",
        h.p50, h.p99, h.max, h.count, l.p50, l.p99, l.max, r.ledger_start_gap_max
    ));
    s
}
