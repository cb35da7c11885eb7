//! The console's history: the fire ledger, filtered, searched and paged
//! forward and back, each failed fire with a Retry button.

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use quartz_core::admin::{FireFilter, FireView};
use serde::Deserialize;

use super::Viewer;
use super::html::{self, Section, badge, empty, instant, job_link, millis, pager, query};
use super::pages::Notice;
use crate::AppState;

/// The history page's query.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct FiresQuery {
    job: Option<String>,
    job_id: Option<String>,
    error: Option<String>,
    node: Option<String>,
    /// The cursors of the pages before this one, oldest last (comma
    /// separated): how "previous page" goes back.
    trail: Option<String>,
    state: Option<String>,
    since: Option<String>,
    until: Option<String>,
    before: Option<String>,
}

/// An instant typed by a person: RFC 3339, or `YYYY-MM-DD HH:MM[:SS]` and
/// `YYYY-MM-DD` in UTC.
fn typed_instant(text: &str) -> Result<Option<i64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(Some(t.timestamp_millis()));
    }
    let spaced = text.replacen('T', " ", 1);
    for format in ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(&spaced, format) {
            return Ok(Some(t.and_utc().timestamp_millis()));
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).map(|t| t.and_utc().timestamp_millis()));
    }
    Err(format!(
        "{text:?} is not an instant: write 2026-01-31 09:00 (UTC) or RFC 3339"
    ))
}

pub(crate) async fn fires(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<FiresQuery>,
    Query(notice): Query<Notice>,
) -> Response {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let (job, state_f, since, until) = (text(&q.job), text(&q.state), text(&q.since), text(&q.until));
    let (error, node) = (text(&q.error), text(&q.node));
    let since_ms = typed_instant(&since);
    let until_ms = typed_instant(&until);
    let job_id = q.job_id.as_deref().and_then(|id| id.trim().parse::<i64>().ok());
    let filter = FireFilter {
        job: Some(job.clone()).filter(|s| !s.is_empty()),
        job_id,
        error: Some(error.clone()).filter(|s| !s.is_empty()),
        node: Some(node.clone()).filter(|s| !s.is_empty()),
        state: Some(state_f.clone()).filter(|s| !s.is_empty()),
        since: since_ms.clone().ok().flatten(),
        until: until_ms.clone().ok().flatten(),
        before: q.before.clone().filter(|s| !s.is_empty()),
        limit: Some(100),
    };
    let (page, now) = match (state.admin.fires(&filter).await, state.admin.now().await) {
        (Ok(p), Ok(n)) => (p, n.as_millis()),
        (Err(e), _) | (_, Err(e)) => return viewer.failure(&e),
    };
    // The pages seen before this one, by cursor ("" for the first): the
    // next page's trail is this one's with this page's cursor added.
    let trail: Vec<String> = q
        .trail
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|t| t.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let job_id_text = job_id.map(|id| id.to_string()).unwrap_or_default();
    let href = |before: &str, trail: &[String]| {
        let trail = trail.join(",");
        format!(
            "{}/fires{}",
            viewer.base,
            query(&[
                ("job", &job),
                ("job_id", &job_id_text),
                ("error", &error),
                ("node", &node),
                ("state", &state_f),
                ("since", &since),
                ("until", &until),
                ("before", before),
                ("trail", &trail),
            ])
        )
    };
    let here = q.before.clone().unwrap_or_default();
    let next = page.next.as_ref().map(|before| {
        let mut deeper = trail.clone();
        deeper.push(if here.is_empty() {
            "first".to_owned()
        } else {
            here.clone()
        });
        href(before, &deeper)
    });
    let back = trail.split_last().map(|(previous, rest)| {
        let previous = if previous == "first" { "" } else { previous.as_str() };
        href(previous, rest)
    });
    let states = [
        "",
        "claimed",
        "running",
        "succeeded",
        "failed",
        "misfired",
        "skipped",
        "abandoned",
        "pending",
    ];
    let body = html! {
        form.filters method="get" action={ (viewer.base) "/fires" } {
            input type="text" name="job" value=(job) placeholder="Job name";
            input type="text" name="error" value=(error) placeholder="Error text";
            input type="text" name="node" value=(node) placeholder="Node id";
            select name="state" {
                @for s in states { option value=(s) selected[s == state_f] { @if s.is_empty() { "Any state" } @else { (s) } } }
            }
            label { "from " input type="text" name="since" value=(since) placeholder="2026-01-31 09:00"; }
            label { "to " input type="text" name="until" value=(until) placeholder="UTC or RFC 3339"; }
            button type="submit" { "Filter" }
            @if let Err(e) = &since_ms { p.field-error { "From: " (e) } }
            @if let Err(e) = &until_ms { p.field-error { "To: " (e) } }
        }
        @if page.items.is_empty() { (empty("No fires match.")) } @else { (fire_table(&viewer, &page.items, now)) }
        (pager(back, next))
    };
    let text = notice.text(&viewer);
    viewer.ok(html::page(&viewer, Section::History, "History", text.as_deref(), body))
}

/// A table of ledger rows.
pub(super) fn fire_table(viewer: &Viewer, fires: &[FireView], now: i64) -> Markup {
    html! {
        table.fires {
            thead { tr { th { "#" } th { "Job" } th { "Fire time" } th { "Attempt" } th { "State" } th { "Node" }
                th { "Late" } th { "Ran" } th { "Error" } th {} } }
            tbody {
                @for f in fires {
                    tr data-state=(f.state) {
                        td { (f.id) }
                        td {
                            @match &f.job {
                                Some(job) => (job_link(viewer, job)),
                                None => a.none href={ (viewer.base) "/fires?job_id=" (f.job_id) } { "deleted job #" (f.job_id) },
                            }
                            @if f.by_hand { " " small.by-hand title="Fired by hand (fire now), not by a trigger" { "by hand" } }
                            @if f.enqueued { " " small.by-hand title="Work enqueued with a payload of its own, not by a trigger" { "enqueued" } }
                            @if f.backfill { " " small.by-hand title="A past fire time a backfill queued" { "backfill" } }
                        }
                        td { (instant(Some(f.fire_time), now)) @if f.fire_count > 1 { " (" (f.fire_count) " times)" } }
                        td { (f.attempt) }
                        td { (badge(&f.state)) }
                        td { @if let Some(node) = &f.node_id { code { (node) } } }
                        td { (millis(f.lateness_ms)) }
                        td { (millis(f.duration_ms)) }
                        td.error-text { @if let Some(e) = &f.error { (e) } }
                        td {
                            @if matches!(f.state.as_str(), "failed" | "abandoned" | "misfired") {
                                form.inline method="post" action={ (viewer.base) "/fires/" (f.id) "/retry" } {
                                    (html::csrf(viewer))
                                    button.act.retry type="submit" disabled[viewer.role != crate::Role::Admin]
                                        title="Run this fire again: a new attempt, now" { "Retry" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
