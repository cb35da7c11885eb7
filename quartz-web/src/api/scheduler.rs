//! The API's whole-scheduler switch, standby (pause everything) and
//! resume, and a job's backfill.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use quartz_core::admin::{BackfillRequest, BackfillView, Standby};

use super::ApiResult;
use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ErrorBody};

/// Whether the scheduler is on standby, and since when.
#[utoipa::path(get, path = "/api/v1/scheduler/standby", tag = "scheduler",
    responses((status = 200, body = Standby)))]
pub(super) async fn standby_get(State(state): State<AppState>, _: Caller) -> ApiResult<Standby> {
    Ok(Json(state.admin.standby().await?))
}

/// Pauses everything: the whole scheduler on standby. No node claims a fire
/// (of a trigger, a retry, a late run or one asked for by hand) until it
/// resumes; fires already claimed or running finish. Recorded in the change
/// log as `scheduler.pause`; a second pause keeps the first's time.
#[utoipa::path(post, path = "/api/v1/scheduler/pause", tag = "scheduler",
    responses((status = 200, body = Standby), (status = 403, body = ErrorBody)))]
pub(super) async fn pause_all(State(state): State<AppState>, caller: Caller) -> Result<Json<Standby>, ApiError> {
    caller.require_admin()?;
    Ok(Json(state.admin.acting_as(&caller.actor).pause_all().await?))
}

/// Takes the scheduler off standby: nodes claim again, and each trigger found
/// overdue gets its misfire policy. Recorded in the change log as
/// `scheduler.resume`.
#[utoipa::path(post, path = "/api/v1/scheduler/resume", tag = "scheduler",
    responses((status = 200, body = Standby), (status = 403, body = ErrorBody)))]
pub(super) async fn resume_all(State(state): State<AppState>, caller: Caller) -> Result<Json<Standby>, ApiError> {
    caller.require_admin()?;
    Ok(Json(state.admin.acting_as(&caller.actor).resume_all().await?))
}

/// Backfills a job: the fire times of its triggers from `from` to `to`
/// (default now) are queued, at most `rate` a second (default 10), each run
/// once by the first node with the job's handler; a time that ran, or has
/// an attempt under way, is left alone. With `preview`, only the times are
/// listed (200); otherwise 202. Recorded in the change log as
/// `job.backfill`.
#[utoipa::path(post, path = "/api/v1/jobs/{name}/backfill", params(("name" = String, Path, description = "the job's name")),
    request_body = BackfillRequest, tag = "jobs",
    responses((status = 200, body = BackfillView, description = "a preview"), (status = 202, body = BackfillView),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn job_backfill(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(request): ApiJson<BackfillRequest>,
) -> Result<Response, ApiError> {
    if !request.preview {
        caller.require_admin()?;
    }
    let view = state
        .admin
        .acting_as(&caller.actor)
        .job_backfill(&name, &request)
        .await?;
    let status = if view.preview {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(view)).into_response())
}
