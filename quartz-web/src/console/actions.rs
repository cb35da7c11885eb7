//! The console's actions on jobs and fires from a button: pause, resume,
//! fire now, delete, retry; and the notices they leave.

use axum::extract::{Path, State};
use axum::response::Response;
use quartz_core::admin::AdminError;

use super::{AdminForm, html};
use crate::AppState;

/// Retries a failed, abandoned or misfired fire, back to the history with
/// the new attempt's id said.
pub(super) async fn retry(
    State(state): State<AppState>,
    Path(id): Path<String>,
    AdminForm { viewer, .. }: AdminForm,
) -> Response {
    let Ok(id) = id.parse::<i64>() else {
        return viewer.failure(&AdminError::FireNotFound { id: -1 });
    };
    match state.admin.acting_as(viewer.actor).fire_retry(id).await {
        Ok(fire) => {
            let subject = format!("fire {id}: attempt {} is fire {}", fire.attempt, fire.id);
            viewer.redirect(&format!("/fires{}", viewer.notice_query("retried", &subject)))
        }
        Err(e) => viewer.failure(&e),
    }
}

/// An action on a job from a button.
#[derive(Debug, Clone, Copy)]
enum Verb {
    Pause,
    Resume,
    Trigger,
    Delete,
}

async fn act(state: AppState, AdminForm { viewer, fields }: AdminForm, name: String, verb: Verb) -> Response {
    let admin = state.admin.acting_as(viewer.actor);
    // The version the page showed, when its form carries one (the delete
    // confirmation does): the action is refused if the job changed since.
    let version = fields.version();
    let done = match verb {
        Verb::Pause => admin.job_pause(&name, version).await.map(|_| "paused"),
        Verb::Resume => admin.job_resume(&name, version).await.map(|_| "resumed"),
        Verb::Trigger => admin
            .job_trigger(&name)
            .await
            .map(|fired| if fired.paused { "triggered_paused" } else { "triggered" }),
        Verb::Delete => admin.job_delete(&name, version).await.map(|()| "deleted"),
    };
    match done {
        Ok(done) => {
            let notice = viewer.notice_query(done, &name);
            if fields.get("from") == "detail" && !matches!(verb, Verb::Delete) {
                viewer.redirect(&format!("/jobs/{}{notice}", html::segment(&name)))
            } else {
                viewer.redirect(&format!("/jobs{notice}"))
            }
        }
        Err(e) => viewer.failure(&e),
    }
}

pub(super) async fn pause(State(state): State<AppState>, Path(name): Path<String>, form: AdminForm) -> Response {
    act(state, form, name, Verb::Pause).await
}

pub(super) async fn resume(State(state): State<AppState>, Path(name): Path<String>, form: AdminForm) -> Response {
    act(state, form, name, Verb::Resume).await
}

pub(super) async fn trigger(State(state): State<AppState>, Path(name): Path<String>, form: AdminForm) -> Response {
    act(state, form, name, Verb::Trigger).await
}

pub(super) async fn delete(State(state): State<AppState>, Path(name): Path<String>, form: AdminForm) -> Response {
    act(state, form, name, Verb::Delete).await
}

/// Pauses everything (the whole scheduler on standby), back to the overview.
pub(super) async fn pause_all(State(state): State<AppState>, form: AdminForm) -> Response {
    standby(state, form, true).await
}

/// Takes the scheduler off standby, back to the overview.
pub(super) async fn resume_all(State(state): State<AppState>, form: AdminForm) -> Response {
    standby(state, form, false).await
}

async fn standby(state: AppState, AdminForm { viewer, .. }: AdminForm, on: bool) -> Response {
    let admin = state.admin.acting_as(viewer.actor);
    let done = if on {
        admin.pause_all().await
    } else {
        admin.resume_all().await
    };
    match done {
        Ok(_) => {
            let code = if on { "paused_all" } else { "resumed_all" };
            let subject = viewer.scheduler.clone();
            // The overview: the mount point itself, `/` at the root.
            let home = if viewer.base.is_empty() { "/" } else { "" };
            viewer.redirect(&format!("{home}{}", viewer.notice_query(code, &subject)))
        }
        Err(e) => viewer.failure(&e),
    }
}

/// What a notice code in a redirect says.
pub(crate) fn notice_text(code: &str, subject: &str) -> Option<String> {
    let verb = match code {
        "triggered" => {
            return Some(format!(
                "Fired {subject} now, once: the first node with its handler and a free thread runs it; its schedule is unchanged."
            ));
        }
        "triggered_paused" => {
            return Some(format!(
                "Fired {subject} now, once: it runs although the job is paused, and the job stays paused (its triggers hold until you resume it)."
            ));
        }
        "enqueued" => return Some(format!("Enqueued: {subject}.")),
        "duplicate" => return Some(format!("Not enqueued: {subject}.")),
        "backfilled" => {
            return Some(format!(
                "Backfilled {subject}: each runs once, at its turn, on the first node with the job's handler."
            ));
        }
        "paused_all" => {
            return Some(format!(
                "Paused everything: scheduler {subject} is on standby. No node claims a fire until you resume it; fires already running finish."
            ));
        }
        "resumed_all" => {
            return Some(format!(
                "Resumed scheduler {subject}: the nodes claim again, and each trigger found overdue follows its misfire policy."
            ));
        }
        "retried" => {
            return Some(format!(
                "Retried {subject}, pending: the first node with its job's handler and a free thread runs it."
            ));
        }
        "created_unoffered" | "saved_unoffered" => {
            let verb = if code == "created_unoffered" {
                "Created"
            } else {
                "Saved"
            };
            return Some(format!(
                "{verb} {subject}. No live node offers its handler now: its fires run when a node with it joins."
            ));
        }
        "paused" => "Paused",
        "resumed" => "Resumed",
        "deleted" => "Deleted",
        "created" => "Created",
        "saved" => "Saved",
        _ => return None,
    };
    Some(format!("{verb} {subject}."))
}
