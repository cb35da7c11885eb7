//! A job's backfill from the console: its form on the job's page, a
//! preview of the fire times it would run, then the backfill itself.

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{Markup, html};
use quartz_core::Timestamp;
use quartz_core::admin::{AdminError, BackfillRequest, DEFAULT_BACKFILL_RATE, parse_instant};

use super::html::{self, Section, instant};
use super::{AdminForm, Fields, Viewer};
use crate::AppState;
use crate::access::Role;

/// The backfill form of job `name`, with the values given (empty: none).
pub(super) fn form(viewer: &Viewer, name: &str, from: &str, to: &str, rate: &str) -> Markup {
    html! {
        form.backfill method="post" action={ (viewer.base) "/jobs/" (html::segment(name)) "/backfill" } {
            (html::csrf(viewer))
            label { "From " input type="text" name="from" value=(from) placeholder="2026-11-01T00:00:00Z"; }
            label { "To " input type="text" name="to" value=(to) placeholder="now"; }
            label { "Fires a second " input type="text" name="rate" value=(rate) placeholder=(DEFAULT_BACKFILL_RATE); }
            button type="submit" name="preview" value="on" class="act" disabled[viewer.role != Role::Admin] { "Preview the times" }
            button type="submit" class="act backfill" disabled[viewer.role != Role::Admin] { "Backfill" }
        }
    }
}

/// The request a posted form makes, or the field at fault.
fn request_of(fields: &Fields) -> Result<BackfillRequest, AdminError> {
    let instant = |name: &str| -> Result<Option<i64>, AdminError> {
        match fields.get(name).trim() {
            "" => Ok(None),
            text => parse_instant(text).map(Some).map_err(|e| AdminError::invalid(name, e)),
        }
    };
    let rate = match fields.get("rate").trim() {
        "" => None,
        text => Some(
            text.parse()
                .map_err(|_| AdminError::invalid("rate", format!("{text:?} is not a number of fires a second")))?,
        ),
    };
    Ok(BackfillRequest {
        from: instant("from")?,
        to: instant("to")?,
        rate,
        preview: fields.on("preview"),
    })
}

/// Previews or runs a backfill: a preview is a page of the times with the
/// form to go on; a backfill goes back to the job's page, saying what it
/// queued.
pub(super) async fn backfill(
    State(state): State<AppState>,
    Path(name): Path<String>,
    AdminForm { viewer, fields }: AdminForm,
) -> Response {
    let request = match request_of(&fields) {
        Ok(r) => r,
        Err(e) => return viewer.failure(&e),
    };
    let admin = state.admin.acting_as(viewer.actor);
    let done = match admin.job_backfill(&name, &request).await {
        Ok(done) => done,
        Err(e) => return viewer.failure(&e),
    };
    if !done.preview {
        let subject = format!(
            "{name} ({} fire times queued, {} already in the ledger)",
            done.queued, done.already
        );
        return viewer.redirect(&format!(
            "/jobs/{}{}",
            html::segment(&name),
            viewer.notice_query("backfilled", &subject)
        ));
    }
    let now = admin.now().await.map_or(0, Timestamp::as_millis);
    let body = html! {
        p.lead { (done.note) }
        @if done.times.is_empty() { p.empty { "No fire time in this range." } } @else {
            ol.backfill-times { @for t in &done.times { li { (instant(Some(*t), now)) } } }
        }
        (form(&viewer, &name, fields.get("from"), fields.get("to"), fields.get("rate")))
    };
    viewer.ok(html::page(
        &viewer,
        Section::Jobs,
        &format!("Backfill {name}"),
        None,
        body,
    ))
}
