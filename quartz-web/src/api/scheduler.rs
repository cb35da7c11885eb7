//! The API's whole-scheduler switch: standby (pause everything) and resume.

use axum::Json;
use axum::extract::State;
use quartz_core::admin::Standby;

use super::ApiResult;
use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ErrorBody};

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
