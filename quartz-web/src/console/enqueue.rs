//! Work enqueued from the console: a form on the job's page (a payload of
//! its own, a due time, a unique key), back to the job's page saying what
//! became of it.

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{Markup, html};
use quartz_core::admin::{AdminError, WorkRequest, parse_instant};

use super::html::{self};
use super::{AdminForm, Fields, Viewer};
use crate::AppState;

/// The enqueue form of job `name`.
pub(super) fn form(viewer: &Viewer, name: &str) -> Markup {
    html! {
        form.enqueue method="post" action={ (viewer.base) "/jobs/" (html::segment(name)) "/enqueue" } {
            (html::csrf(viewer))
            label { "Payload (JSON; empty: the job's) " textarea name="payload" rows="3" placeholder="{\"to\": \"ada@example.com\"}" {} }
            label { "Due at " input type="text" name="at" placeholder="now"; }
            label { "Unique key " input type="text" name="unique_key" placeholder="none"; }
            label { "Key held for (seconds after enqueueing) " input type="text" name="unique_for" placeholder="while pending or running"; }
            button type="submit" class="act enqueue" { "Enqueue" }
        }
    }
}

/// The request a posted form makes, or the field at fault.
fn request_of(fields: &Fields) -> Result<WorkRequest, AdminError> {
    let text = |name: &str| Some(fields.get(name).trim()).filter(|t| !t.is_empty());
    let payload = text("payload")
        .map(|t| serde_json::from_str(t).map_err(|e| AdminError::invalid("payload", format!("not JSON: {e}"))))
        .transpose()?;
    let at = text("at")
        .map(|t| parse_instant(t).map_err(|e| AdminError::invalid("at", e)))
        .transpose()?;
    let unique_for_ms = text("unique_for")
        .map(|t| {
            t.parse::<u64>()
                .map(|s| s.saturating_mul(1_000))
                .map_err(|_| AdminError::invalid("unique_for", format!("{t:?} is not a number of seconds")))
        })
        .transpose()?;
    Ok(WorkRequest {
        payload,
        at,
        after_ms: None,
        unique_key: text("unique_key").map(str::to_owned),
        unique_for_ms,
        trace_parent: None,
    })
}

/// Enqueues the work the form asks for, back to the job's page.
pub(super) async fn enqueue(
    State(state): State<AppState>,
    Path(name): Path<String>,
    AdminForm { viewer, fields }: AdminForm,
) -> Response {
    let request = match request_of(&fields) {
        Ok(r) => r,
        Err(e) => return viewer.failure(&e),
    };
    match state
        .admin
        .acting_as(viewer.actor)
        .enqueue_request(&name, &request)
        .await
    {
        Ok(view) => {
            let code = if view.outcome == "queued" {
                "enqueued"
            } else {
                "duplicate"
            };
            viewer.redirect(&format!(
                "/jobs/{}{}",
                html::segment(&name),
                viewer.notice_query(code, &view.note)
            ))
        }
        Err(e) => viewer.failure(&e),
    }
}
