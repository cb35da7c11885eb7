//! The console's read pages: overview, jobs, a job, history, nodes, changes,
//! and the confirmation before a delete.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use maud::{Markup, html};
use quartz_core::admin::{ChangeFilter, ChangeView, FireFilter, JobFilter, JobView, NodeView};
use quartz_core::store::millis_of as ms;
use serde::Deserialize;

use super::Viewer;
use super::actions::notice_text;
use super::history::fire_table;
use super::html::{
    self, Section, badge, empty, instant, job_actions, job_link, millis, next_page, query, segment, zoned,
};
use crate::AppState;

/// The span the overview covers.
const OVERVIEW_WINDOW_MS: i64 = 3_600_000;

/// A notice carried by a redirect.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Notice {
    notice: Option<String>,
    subject: Option<String>,
    /// The notice's seal for the viewer's session ([`Viewer::notice_query`]):
    /// a notice without it is not shown, so that a link cannot make the
    /// console say what it did not do.
    seal: Option<String>,
}

impl Notice {
    pub(crate) fn text(&self, viewer: &Viewer) -> Option<String> {
        let code = self.notice.as_deref()?;
        let subject = self.subject.as_deref().unwrap_or("");
        let seal = self.seal.as_deref()?;
        crate::access::same(seal.as_bytes(), viewer.notice_seal(code, subject).as_bytes())
            .then(|| notice_text(code, subject))
            .flatten()
    }
}

pub(crate) async fn overview(State(state): State<AppState>, viewer: Viewer, Query(notice): Query<Notice>) -> Response {
    let overview = match state.admin.overview(OVERVIEW_WINDOW_MS).await {
        Ok(o) => o,
        Err(e) => return viewer.failure(&e),
    };
    let nodes = match state.admin.nodes().await {
        Ok(n) => n,
        Err(e) => return viewer.failure(&e),
    };
    let standby = match state.admin.standby().await {
        Ok(s) => s,
        Err(e) => return viewer.failure(&e),
    };
    let failures = state
        .admin
        .fires(&FireFilter {
            state: Some("failed".into()),
            limit: Some(10),
            ..FireFilter::default()
        })
        .await
        .map(|p| p.items)
        .unwrap_or_default();
    let minutes = overview.fires_per_minute.len();
    let per_minute: Vec<(String, usize)> = overview
        .fires_per_minute
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("{} min ago", minutes - 1 - i), *n))
        .collect();
    let now = overview.now;
    let cards = [
        ("Live nodes", overview.live_nodes, "live"),
        ("Jobs", overview.jobs, "jobs"),
        ("Paused jobs", overview.paused_jobs, "paused"),
        ("Succeeded", overview.succeeded, "succeeded"),
        ("Failed", overview.failed, "failed"),
        ("Misfired", overview.misfired, "misfired"),
        ("Late (> 5 s)", overview.late, "late"),
        ("Running", overview.open, "running"),
    ];
    let body = html! {
        p.lead { "The last hour of the cluster's fire ledger, in database time (" (instant(Some(now), now)) ")." }
        (standby_panel(&viewer, &standby, now))
        @if overview.fires_read >= quartz_core::admin::OVERVIEW_FIRES as usize {
            p.warning { "Only the newest " (overview.fires_read) " fires are counted." }
        }
        @if overview.silent_nodes > 0 {
            p.warning {
                (overview.silent_nodes) " node(s) live by their row have sent no heartbeat within their dead_after: "
                "stalled, or dead with no peer left to declare it. See " a href={ (viewer.base) "/nodes" } { "Nodes" } "."
            }
        }
        section.cards {
            @for (label, value, class) in cards {
                div class={ "card " (class) } { span.value { (value) } span.label { (label) } }
            }
        }
        div.charts {
            (html::bars("per-minute", "Fires per minute, the last hour", &per_minute, false,
                &html::Axes { y_unit: "fires", x_title: "minute (database time)" }))
            (html::bars("lateness", "Lateness of first attempts (start less fire time)", &overview.lateness_histogram, true,
                &html::Axes { y_unit: "fires", x_title: "start less fire time" }))
        }
        @if let Some([p50, p99, max]) = overview.lateness_ms {
            p.figures { "Lateness p50 " (millis(Some(p50))) ", p99 " (millis(Some(p99))) ", max " (millis(Some(max))) "." }
        }
        h2 { "Nodes" }
        (node_table(&nodes, now))
        h2 { "Recent failures" }
        @if failures.is_empty() { (empty("No failed fires.")) } @else { (fire_table(&viewer, &failures, now)) }
    };
    viewer.ok(html::page(
        &viewer,
        Section::Overview,
        "Overview",
        notice.text(&viewer).as_deref(),
        body,
    ))
}

/// Whether the whole scheduler is on standby, with the button that changes it.
fn standby_panel(viewer: &Viewer, standby: &quartz_core::admin::Standby, now: i64) -> Markup {
    let (verb, label) = if standby.on_standby {
        ("resume", "Resume the scheduler")
    } else {
        ("pause", "Pause everything")
    };
    html! {
        div.standby {
            @if let Some(since) = standby.standby_since {
                p.warning role="status" {
                    "The scheduler is on standby since " (instant(Some(since), now))
                    ": no node claims a fire until it resumes; fires already running finish."
                }
            }
            form.inline method="post" action={ (viewer.base) "/scheduler/" (verb) } {
                (html::csrf(viewer))
                button type="submit" class={ "act " (verb) } disabled[viewer.role != crate::access::Role::Admin] { (label) }
            }
        }
    }
}

/// The jobs page's query.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct JobsQuery {
    search: Option<String>,
    state: Option<String>,
    after: Option<String>,
    #[serde(flatten)]
    notice: Notice,
}

pub(crate) async fn jobs(State(state): State<AppState>, viewer: Viewer, Query(q): Query<JobsQuery>) -> Response {
    let filter = JobFilter {
        search: q.search.clone().filter(|s| !s.is_empty()),
        state: q.state.clone().filter(|s| !s.is_empty()),
        after: q.after.clone().filter(|s| !s.is_empty()),
        ..JobFilter::default()
    };
    let (page, now) = match (state.admin.jobs(&filter).await, state.admin.now().await) {
        (Ok(p), Ok(n)) => (p, n.as_millis()),
        (Err(e), _) | (_, Err(e)) => return viewer.failure(&e),
    };
    let search = q.search.as_deref().unwrap_or("");
    let selected = q.state.as_deref().unwrap_or("");
    let next = page.next.as_ref().map(|after| {
        format!(
            "{}/jobs{}",
            viewer.base,
            query(&[("search", search), ("state", selected), ("after", after)])
        )
    });
    let body = html! {
        form.filters method="get" action={ (viewer.base) "/jobs" } {
            input #search type="search" name="search" value=(search) placeholder="Search by name";
            select name="state" {
                @for (value, label) in [("", "Any state"), ("enabled", "Enabled"), ("paused", "Paused")] {
                    option value=(value) selected[value == selected] { (label) }
                }
            }
            button type="submit" { "Filter" }
            @if viewer.role == crate::Role::Admin {
                a.button.primary href={ (viewer.base) "/new" } { "New job" }
            }
        }
        @if page.items.is_empty() {
            (empty("No jobs match."))
        } @else {
            table #jobs {
                thead { tr { th { "Name" } th { "Handler" } th { "State" } th { "Schedule" } th { "Next fire" } th {} } }
                tbody {
                    @for job in &page.items {
                        tr data-job=(job.spec.name) {
                            td { (job_link(&viewer, &job.spec.name)) @if !job.spec.description.is_empty() { br; small { (job.spec.description) } } }
                            td { code { (job.spec.handler) } }
                            td { (badge(&job.state)) }
                            td { (schedule(job)) }
                            td { (instant(job.next_fire_time, now)) }
                            td { (job_actions(&viewer, &job.spec.name, &job.state, "list")) }
                        }
                    }
                }
            }
        }
        (next_page(next))
    };
    viewer.ok(html::page(
        &viewer,
        Section::Jobs,
        "Jobs",
        q.notice.text(&viewer).as_deref(),
        body,
    ))
}

fn schedule(job: &JobView) -> Markup {
    html! {
        @if let Some(parent) = &job.spec.parent {
            "after each success of " code { (parent) }
        }
        @for t in &job.triggers {
            div { code { (t.summary) } }
        }
        @if job.triggers.is_empty() && job.spec.parent.is_none() { span.none { "no trigger" } }
    }
}

pub(crate) async fn job(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(notice): Query<Notice>,
) -> Response {
    let (job, now) = match (state.admin.job(&name).await, state.admin.now().await) {
        (Ok(j), Ok(n)) => (j, n.as_millis()),
        (Err(e), _) | (_, Err(e)) => return viewer.failure(&e),
    };
    let fires = |state_filter: Option<&str>, limit| FireFilter {
        job: Some(name.clone()),
        state: state_filter.map(str::to_owned),
        limit: Some(limit),
        ..FireFilter::default()
    };
    let stats = state.admin.job_stats(&name).await.ok();
    let schema = state.admin.payload_schema(&job.spec.handler).await.ok().flatten();
    let recent = state
        .admin
        .fires(&fires(None, 20))
        .await
        .map(|p| p.items)
        .unwrap_or_default();
    let errors = state
        .admin
        .fires(&fires(Some("failed"), 10))
        .await
        .map(|p| p.items)
        .unwrap_or_default();
    let changes = state
        .admin
        .changes(&ChangeFilter {
            job: Some(name.clone()),
            limit: Some(10),
            ..ChangeFilter::default()
        })
        .await
        .map(|p| p.items)
        .unwrap_or_default();
    let history = format!("{}/fires{}", viewer.base, query(&[("job", &job.spec.name)]));
    let body = html! {
        div.job-head {
            (badge(&job.state))
            (job_actions(&viewer, &job.spec.name, &job.state, "detail"))
        }
        dl.definition {
            dt { "Handler" } dd { code { (job.spec.handler) } }
            dt { "Description" } dd { @if job.spec.description.is_empty() { span.none { "—" } } @else { (job.spec.description) } }
            dt { "Payload" } dd { (html::json(&job.spec.payload_value())) }
            dt { "Attempts" } dd { (job.spec.retry.max_attempts) ", backoff " (millis(Some(ms(job.spec.retry.backoff))))
                @if let Some(cap) = job.spec.retry.backoff_max { " doubling up to " (millis(Some(ms(cap)))) } }
            dt { "Timeout" } dd { (millis(job.spec.timeout.map(ms))) }
            dt { "Overlapping fires" } dd { @if job.spec.allow_concurrent { "allowed" } @else { "not allowed" } }
            dt { "After a node dies mid-run" } dd { @if job.spec.requests_recovery { "run again" } @else { "abandoned" } }
            @if let Some(parent) = &job.spec.parent { dt { "Runs after" } dd { (job_link(&viewer, parent)) } }
            dt { "Created" } dd { (instant(Some(job.created_at), now)) }
            dt { "Changed" } dd { (instant(Some(job.updated_at), now)) }
        }
        h2 { "Triggers" }
        @if job.triggers.is_empty() { (empty("No trigger.")) } @else {
            table #triggers {
                thead { tr { th { "Schedule" } th { "State" } th { "Misfire policy" } th { "Last fire" } th { "Fired" } th { "Next fires" } } }
                tbody {
                    @for t in &job.triggers {
                        tr {
                            td { code { (t.summary) } @if let Some(error) = &t.error { p.error { (error) } } }
                            td { (badge(&t.state)) }
                            td { (t.definition.misfire.as_str()) }
                            td { (zoned(t.prev_fire_time, t.definition.zone_name(), now)) }
                            td { (t.times_triggered) }
                            td { ol.upcoming { @for at in &t.upcoming { li { (zoned(Some(*at), t.definition.zone_name(), now)) } } } }
                        }
                    }
                }
            }
        }
        @for b in &job.broken_triggers {
            p.error { "Trigger row " (b.id) " cannot be read: " (b.reason) }
        }
        @if let Some(s) = stats.as_ref().filter(|s| s.fires_read > 0) {
            p.stats #job-stats {
                "Last " (s.fires_read) " fires: "
                @if let Some(rate) = s.success_rate {
                    strong { (format!("{:.1}%", rate * 100.0)) } " succeeded (" (s.succeeded) " of " (s.succeeded + s.failed) ")"
                } @else { "none ran to an end" }
                @if let Some(mean) = s.mean_duration_ms { "; mean run " (millis(Some(mean))) }
                @if let Some(max) = s.max_duration_ms { ", longest " (millis(Some(max))) }
                @if s.missed > 0 { "; " (s.missed) " misfired or abandoned" }
                @if let Some(at) = s.last_failure { "; last failure " (instant(Some(at), now)) }
                "."
            }
        }
        @if viewer.role == crate::access::Role::Admin {
            h2 { "Backfill" }
            p.hint { "Run the fire times of a past range, once each, at a bounded pace; times that ran are left alone." }
            (super::backfill::form(&viewer, &job.spec.name, "", "", ""))
            h2 { "Enqueue work" }
            p.hint { "Run the job once with a payload of its own, now or at a time; a unique key refuses a second while one is pending or running." }
            @if let Some(s) = &schema {
                details.payload-schema {
                    summary { "The payload must fit handler " code { (s.handler) } "'s schema (published by node " (s.node) ")" }
                    pre { (serde_json::to_string_pretty(&s.schema).unwrap_or_default()) }
                }
            }
            (super::enqueue::form(&viewer, &job.spec.name))
        }
        h2 { "Recent fires " small { a href=(history) { "all history →" } } }
        @if recent.is_empty() { (empty("No fires yet.")) } @else { (fire_table(&viewer, &recent, now)) }
        h2 { "Errors" }
        @if errors.is_empty() { (empty("No failed fires.")) } @else { (fire_table(&viewer, &errors, now)) }
        h2 { "Changes" }
        @if changes.is_empty() { (empty("No recorded change.")) } @else { (change_table(&viewer, &changes, now)) }
    };
    let title = format!("Job {}", job.spec.name);
    viewer.ok(html::page(
        &viewer,
        Section::Jobs,
        &title,
        notice.text(&viewer).as_deref(),
        body,
    ))
}

pub(crate) async fn delete_page(State(state): State<AppState>, viewer: Viewer, Path(name): Path<String>) -> Response {
    let job = match state.admin.job(&name).await {
        Ok(j) => j,
        Err(e) => return viewer.failure(&e),
    };
    let body = html! {
        p.warning {
            "Delete " strong { (job.spec.name) } " and its " (job.triggers.len()) " trigger(s)? "
            "It will not fire again; its fires stay in the history. This cannot be undone."
        }
        form.confirm method="post" action={ (viewer.base) "/jobs/" (segment(&job.spec.name)) "/delete" } {
            (html::csrf(&viewer))
            // Deletes the job as shown: refused if it changed since.
            input type="hidden" name="version" value=(job.version);
            (html::submit(&viewer, "confirm-delete", "danger", &format!("Delete {}", job.spec.name)))
            " "
            a href={ (viewer.base) "/jobs/" (segment(&job.spec.name)) } { "Cancel" }
        }
    };
    viewer.ok(html::page(&viewer, Section::Jobs, "Delete a job", None, body))
}

pub(crate) async fn nodes(State(state): State<AppState>, viewer: Viewer) -> Response {
    let (nodes, now) = match (state.admin.nodes().await, state.admin.now().await) {
        (Ok(n), Ok(now)) => (n, now.as_millis()),
        (Err(e), _) | (_, Err(e)) => return viewer.failure(&e),
    };
    let body = node_table(&nodes, now);
    viewer.ok(html::page(&viewer, Section::Nodes, "Nodes", None, body))
}

fn node_table(nodes: &[NodeView], now: i64) -> Markup {
    html! {
        @if nodes.is_empty() { (empty("No node has registered.")) } @else {
            table #nodes {
                thead { tr { th { "Node" } th { "State" } th { "Incarnation" } th { "Host" } th { "Pid" } th { "Weight" }
                    th { "Busy" } th { "Last heartbeat" } th { "Dead after" } th { "Registered" } th { "Handlers" } } }
                tbody {
                    @for n in nodes {
                        tr {
                            td { code { (n.node_id) } }
                            td {
                                (badge(&n.state))
                                @if n.state == "silent" {
                                    " " small.silent title="Its row says live, but it has not sent a heartbeat within its dead_after: it has stalled, or died with no peer left to declare it dead" {
                                        "no heartbeat for " (n.heartbeat_age_ms / 1000) " s"
                                    }
                                }
                            }
                            td { (n.incarnation) }
                            td { (n.host) }
                            td { (n.pid) }
                            td { (n.weight) }
                            td { (n.busy) }
                            td { (instant(Some(n.heartbeat_at), now)) }
                            td { @if let Some(ms) = n.dead_after_ms { (ms / 1000) " s" } @else { span.none { "unknown" } } }
                            td { (instant(Some(n.registered_at), now)) }
                            td { @for h in &n.handlers { code { (h) } " " } }
                        }
                    }
                }
            }
        }
    }
}

/// The change log page's query.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ChangesQuery {
    job: Option<String>,
    before: Option<String>,
}

pub(crate) async fn changes(State(state): State<AppState>, viewer: Viewer, Query(q): Query<ChangesQuery>) -> Response {
    let job = q.job.clone().unwrap_or_default();
    let filter = ChangeFilter {
        job: Some(job.clone()).filter(|s| !s.is_empty()),
        before: q.before.clone().filter(|s| !s.is_empty()),
        limit: Some(100),
    };
    let (page, now) = match (state.admin.changes(&filter).await, state.admin.now().await) {
        (Ok(p), Ok(n)) => (p, n.as_millis()),
        (Err(e), _) | (_, Err(e)) => return viewer.failure(&e),
    };
    let next = page
        .next
        .as_ref()
        .map(|before| format!("{}/changes{}", viewer.base, query(&[("job", &job), ("before", before)])));
    let body = html! {
        form.filters method="get" action={ (viewer.base) "/changes" } {
            input type="text" name="job" value=(job) placeholder="Job name";
            button type="submit" { "Filter" }
        }
        @if page.items.is_empty() { (empty("No recorded change.")) } @else { (change_table(&viewer, &page.items, now)) }
        (next_page(next))
    };
    viewer.ok(html::page(&viewer, Section::Changes, "Changes", None, body))
}

fn change_table(viewer: &Viewer, changes: &[ChangeView], now: i64) -> Markup {
    html! {
        table.changes {
            thead { tr { th { "When" } th { "Who" } th { "What" } th { "Of" } th { "Detail" } } }
            tbody {
                @for c in changes {
                    tr {
                        td { (instant(Some(c.at), now)) }
                        td { code { (c.actor) } }
                        td { (c.action) }
                        td {
                            @if c.action.starts_with("calendar.") {
                                "calendar " a.calendar href={ (viewer.base) "/calendars/" (segment(&c.target)) } { (c.target) }
                            } @else {
                                (job_link(viewer, &c.target))
                                @if let Some(id) = c.target_id {
                                    " " small { a href={ (viewer.base) "/fires?job_id=" (id) } { "fires" } }
                                }
                            }
                        }
                        td { (c.detail) }
                    }
                }
            }
        }
    }
}
