//! The JSON API under `/api/v1/`, each route a call of the admin surface,
//! and its OpenAPI document, generated from these handlers and the admin
//! surface's types.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use quartz_core::Timestamp;
use quartz_core::admin::{
    AdminError, BackfillRequest, BackfillView, CalendarView, ChangeFilter, ChangeView, ClusterHealth, EnqueuedView,
    FireFilter, FireView, JobDefinition, JobFilter, JobPatch, JobStats, JobView, ManualFire, NodeView, Overview, Page,
    PayloadSchemaView, PutIf, PutOutcome, Standby, TriggerDefinition, TriggerKind, TriggerView, WorkRequest,
    deserialize_instant, instant_schema,
};
use quartz_core::audit::AuditParams;
use quartz_core::calendar::{CalendarDefinition, CalendarType};
use serde::{Deserialize, Serialize};
use utoipa::OpenApi;

use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, ErrorBody};
use crate::versions::{IfMatch, etag};
use crate::{AppState, Router};

mod calendars;
mod scheduler;

use calendars::Preview;

/// The API's routes, under `/api/v1`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/jobs", get(jobs_list).post(job_add))
        .route(
            "/jobs/{name}",
            get(job_get).put(job_put).patch(job_edit).delete(job_delete),
        )
        .route("/jobs/{name}/pause", post(job_pause))
        .route("/jobs/{name}/resume", post(job_resume))
        .route("/jobs/{name}/trigger", post(job_trigger))
        .route("/jobs/{name}/enqueue", post(job_enqueue))
        .route("/jobs/{name}/backfill", post(scheduler::job_backfill))
        .route("/jobs/{name}/stats", get(job_stats))
        .route("/fires", get(fires_list))
        .route("/fires/{id}/retry", post(fire_retry))
        .route("/handlers/{name}/payload-schema", get(payload_schema))
        .route("/nodes", get(nodes_list))
        .route("/changes", get(changes_list))
        .route("/audit", get(audit))
        .route("/overview", get(overview))
        .route("/health", get(health))
        .route("/calendars", get(calendars::calendars_list))
        .route(
            "/calendars/{name}",
            get(calendars::calendar_get)
                .put(calendars::calendar_put)
                .delete(calendars::calendar_delete),
        )
        .route("/cron/preview", get(calendars::cron_preview))
        .route("/scheduler/standby", get(scheduler::standby_get))
        .route("/scheduler/pause", post(scheduler::pause_all))
        .route("/scheduler/resume", post(scheduler::resume_all))
        .route("/openapi.json", get(openapi))
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// An answer carrying a job's or calendar's version as its `ETag`.
fn versioned<T: Serialize>(status: StatusCode, version: i64, body: T) -> Response {
    (status, [etag(version)], Json(body)).into_response()
}

/// The description of the `If-Match` header a write takes.
const IF_MATCH: &str = "the ETag (version) this write is made against: 412 `stale` when it is no longer the stored \
     one, and nothing is written; `*` asks only that it exist";

/// Lists jobs by name, filtered, searched and paged by key.
#[utoipa::path(get, path = "/api/v1/jobs", params(JobFilter), tag = "jobs",
    responses((status = 200, body = JobPage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn jobs_list(
    State(state): State<AppState>,
    _: Caller,
    ApiQuery(filter): ApiQuery<JobFilter>,
) -> ApiResult<Page<JobView>> {
    Ok(Json(state.admin.jobs(&filter).await?))
}

/// Adds a job with its triggers.
#[utoipa::path(post, path = "/api/v1/jobs", request_body = JobDefinition, tag = "jobs",
    responses((status = 201, body = JobView, headers(("ETag" = String, description = "the job's version"))),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn job_add(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(job): ApiJson<JobDefinition>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let view = state.admin.acting_as(&caller.actor).job_add(&job).await?;
    Ok(versioned(StatusCode::CREATED, view.version, view))
}

/// A job, its triggers and their next fire times.
#[utoipa::path(get, path = "/api/v1/jobs/{name}", params(("name" = String, Path, description = "the job's name")),
    tag = "jobs", responses((status = 200, body = JobView, headers(("ETag" = String, description = "the job's version"))),
        (status = 404, body = ErrorBody)))]
async fn job_get(State(state): State<AppState>, _: Caller, Path(name): Path<String>) -> Result<Response, ApiError> {
    let view = state.admin.job(&name).await?;
    Ok(versioned(StatusCode::OK, view.version, view))
}

/// Declares a job (an upsert): adds it when none of the name exists (201),
/// applies what differs when one does, and writes nothing when nothing
/// does (200 either way; `X-Quartz-Outcome` says `created`, `updated` or
/// `unchanged`). Triggers without a `start` keep their place when they are
/// the same. For services that declare their jobs on every start. With
/// `If-Match`, only over the job at that version (`*`: at any, if it
/// exists); with `If-None-Match: *`, only an add (412 `stale` otherwise,
/// nothing written).
#[utoipa::path(put, path = "/api/v1/jobs/{name}", params(("name" = String, Path, description = "the job's name"),
        ("If-Match" = Option<String>, Header, description = IF_MATCH),
        ("If-None-Match" = Option<String>, Header, description = "`*`: add only, 412 `stale` when a job of that name exists")),
    request_body = JobDefinition, tag = "jobs",
    responses((status = 200, body = JobView, headers(("ETag" = String, description = "the job's version"),
            ("X-Quartz-Outcome" = String, description = "updated or unchanged"))),
        (status = 201, body = JobView, headers(("ETag" = String, description = "the job's version"),
            ("X-Quartz-Outcome" = String, description = "created"))),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 412, body = ErrorBody)))]
async fn job_put(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
    ApiJson(job): ApiJson<JobDefinition>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    if job.spec.name != name {
        return Err(ApiError::invalid(
            "name",
            format!("the body's name {:?} is not the path's {name:?}", job.spec.name),
        ));
    }
    let condition = if crate::versions::if_none_match_any(&headers) {
        PutIf::Absent
    } else {
        match IfMatch::from_headers(&headers) {
            IfMatch::Absent => PutIf::Any,
            // `*`: it must exist, at whatever version it is now.
            IfMatch::Any => match state.admin.job(&name).await {
                Ok(view) => PutIf::Version(view.version),
                Err(AdminError::NotFound { .. }) => {
                    return Err(ApiError::new(
                        StatusCode::PRECONDITION_FAILED,
                        "stale",
                        format!("no job named {name:?} exists (If-Match: *)"),
                    ));
                }
                Err(e) => return Err(e.into()),
            },
            versions => match job_expected(&state, versions, &name).await? {
                Some(v) => PutIf::Version(v),
                None => PutIf::Any,
            },
        }
    };
    let (view, outcome) = state
        .admin
        .acting_as(&caller.actor)
        .job_put_if(&job, condition)
        .await
        .map_err(|e| match (e, condition) {
            (AdminError::Stale { current: Some(v), .. }, PutIf::Absent) => ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                "stale",
                format!("a job named {name:?} exists, at version {v} (If-None-Match: *)"),
            ),
            (e, _) => e.into(),
        })?;
    let status = if outcome == PutOutcome::Created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut response = versioned(status, view.version, view);
    response.headers_mut().insert(
        axum::http::HeaderName::from_static("x-quartz-outcome"),
        axum::http::HeaderValue::from_static(outcome.as_str()),
    );
    Ok(response)
}

/// The version a write of job `name` is made against, from its `If-Match`.
async fn job_expected(state: &AppState, if_match: IfMatch, name: &str) -> Result<Option<i64>, ApiError> {
    if_match
        .expected("job", name, async { Ok(state.admin.job(name).await?.version) })
        .await
}

/// Changes a job: each field given replaces the job's; `triggers` replaces all
/// its triggers. With `If-Match`, only if the job is still at that version.
#[utoipa::path(patch, path = "/api/v1/jobs/{name}", params(("name" = String, Path, description = "the job's name"),
        ("If-Match" = Option<String>, Header, description = IF_MATCH)),
    request_body = JobPatch, tag = "jobs",
    responses((status = 200, body = JobView, headers(("ETag" = String, description = "the job's new version"))),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 412, body = ErrorBody)))]
async fn job_edit(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    if_match: IfMatch,
    ApiJson(patch): ApiJson<JobPatch>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let expected = job_expected(&state, if_match, &name).await?;
    let view = state
        .admin
        .acting_as(&caller.actor)
        .job_edit(&name, &patch, expected)
        .await?;
    Ok(versioned(StatusCode::OK, view.version, view))
}

/// Deletes a job and its triggers; its fires stay as history. With
/// `If-Match`, only if the job is still at that version.
#[utoipa::path(delete, path = "/api/v1/jobs/{name}", params(("name" = String, Path, description = "the job's name"),
        ("If-Match" = Option<String>, Header, description = IF_MATCH)),
    tag = "jobs", responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 412, body = ErrorBody)))]
async fn job_delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    if_match: IfMatch,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let expected = job_expected(&state, if_match, &name).await?;
    state.admin.acting_as(&caller.actor).job_delete(&name, expected).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pauses a job (with `If-Match`, only at that version).
#[utoipa::path(post, path = "/api/v1/jobs/{name}/pause", params(("name" = String, Path, description = "the job's name"),
        ("If-Match" = Option<String>, Header, description = IF_MATCH)),
    tag = "jobs", responses((status = 200, body = JobView, headers(("ETag" = String, description = "the job's new version"))),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 412, body = ErrorBody)))]
async fn job_pause(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    if_match: IfMatch,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let expected = job_expected(&state, if_match, &name).await?;
    let view = state.admin.acting_as(&caller.actor).job_pause(&name, expected).await?;
    Ok(versioned(StatusCode::OK, view.version, view))
}

/// Resumes a paused job; missed fire times follow each trigger's misfire
/// policy (with `If-Match`, only at that version).
#[utoipa::path(post, path = "/api/v1/jobs/{name}/resume", params(("name" = String, Path, description = "the job's name"),
        ("If-Match" = Option<String>, Header, description = IF_MATCH)),
    tag = "jobs", responses((status = 200, body = JobView, headers(("ETag" = String, description = "the job's new version"))),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 412, body = ErrorBody)))]
async fn job_resume(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    if_match: IfMatch,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let expected = job_expected(&state, if_match, &name).await?;
    let view = state.admin.acting_as(&caller.actor).job_resume(&name, expected).await?;
    Ok(versioned(StatusCode::OK, view.version, view))
}

/// Fires a job now, once, beside its schedule: a pending fire in the
/// ledger, no trigger added. A paused job's fire runs too, and the job stays
/// paused; `note` says what happens in words.
#[utoipa::path(post, path = "/api/v1/jobs/{name}/trigger", params(("name" = String, Path, description = "the job's name")),
    tag = "jobs", responses((status = 202, body = ManualFire), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn job_trigger(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let fired = state.admin.acting_as(&caller.actor).job_trigger(&name).await?;
    Ok((StatusCode::ACCEPTED, Json(fired)).into_response())
}

/// Enqueues a piece of work of the job: a one-off fire with its own
/// payload, due now, `at` an instant or `after_ms`, perhaps unique by a
/// key. 202 when queued; 409 `duplicate` when another piece of work of the
/// job holds the key (nothing written; `work_id` names the holder). A W3C
/// `traceparent` header is kept with the work: each of its fires' spans
/// links to the span it names (an invalid one is ignored, as the W3C asks).
#[utoipa::path(post, path = "/api/v1/jobs/{name}/enqueue", params(("name" = String, Path, description = "the job's name"),
        ("traceparent" = Option<String>, Header, description = "the W3C trace context of the caller's span, which the work's fires' spans link to")),
    request_body = WorkRequest, tag = "jobs",
    responses((status = 202, body = EnqueuedView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = EnqueuedView)))]
async fn job_enqueue(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
    ApiJson(mut request): ApiJson<WorkRequest>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    request.trace_parent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| quartz_core::store::valid_trace_parent(v))
        .map(str::to_owned);
    let view = state
        .admin
        .acting_as(&caller.actor)
        .enqueue_request(&name, &request)
        .await?;
    let status = if view.outcome == "queued" {
        StatusCode::ACCEPTED
    } else {
        StatusCode::CONFLICT
    };
    Ok((status, Json(view)).into_response())
}

/// The fire ledger, newest first, paged by key.
#[utoipa::path(get, path = "/api/v1/fires", params(FireFilter), tag = "history",
    responses((status = 200, body = FirePage), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn fires_list(
    State(state): State<AppState>,
    _: Caller,
    ApiQuery(filter): ApiQuery<FireFilter>,
) -> ApiResult<Page<FireView>> {
    Ok(Json(state.admin.fires(&filter).await?))
}

/// How a job's last 200 fires went: success rate, run times, the last
/// failure (a deleted job's too, by the name it had).
#[utoipa::path(get, path = "/api/v1/jobs/{name}/stats", params(("name" = String, Path, description = "the job's name")),
    tag = "jobs", responses((status = 200, body = JobStats), (status = 404, body = ErrorBody)))]
async fn job_stats(State(state): State<AppState>, _: Caller, Path(name): Path<String>) -> ApiResult<JobStats> {
    Ok(Json(state.admin.job_stats(&name).await?))
}

/// Retries a failed, abandoned or misfired fire: a new attempt of it,
/// pending now (its ledger row is the answer), run by the first node with
/// the job's handler. 409 saying why when it cannot be retried.
#[utoipa::path(post, path = "/api/v1/fires/{id}/retry", params(("id" = i64, Path, description = "the fire's ledger id")),
    tag = "history", responses((status = 202, body = FireView), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn fire_retry(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let id: i64 = id
        .parse()
        .map_err(|_| ApiError::invalid("id", format!("{id:?} is not a fire id")))?;
    let fire = state.admin.acting_as(&caller.actor).fire_retry(id).await?;
    Ok((StatusCode::ACCEPTED, Json(fire)).into_response())
}

/// The JSON Schema a payload of handler `name` must fit: what the live
/// nodes offering it published (a typed job's `payload_schema`), the
/// newest's; jobs and work whose payload does not fit are refused with 400
/// naming the field. 404 when no live node publishes one for the handler.
#[utoipa::path(get, path = "/api/v1/handlers/{name}/payload-schema", params(("name" = String, Path, description = "the handler (a typed job's kind)")),
    tag = "cluster", responses((status = 200, body = PayloadSchemaView), (status = 404, body = ErrorBody)))]
async fn payload_schema(
    State(state): State<AppState>,
    _: Caller,
    Path(name): Path<String>,
) -> ApiResult<PayloadSchemaView> {
    match state.admin.payload_schema(&name).await? {
        Some(view) => Ok(Json(view)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "no live node offering handler {name:?} publishes a payload schema for it: any JSON payload is accepted"
            ),
        )),
    }
}

/// The cluster's nodes, live first.
#[utoipa::path(get, path = "/api/v1/nodes", tag = "cluster", responses((status = 200, body = Vec<NodeView>)))]
async fn nodes_list(State(state): State<AppState>, _: Caller) -> ApiResult<Vec<NodeView>> {
    Ok(Json(state.admin.nodes().await?))
}

/// The change log, newest first: who changed which job, how, when.
#[utoipa::path(get, path = "/api/v1/changes", params(ChangeFilter), tag = "history",
    responses((status = 200, body = ChangePage), (status = 400, body = ErrorBody)))]
async fn changes_list(
    State(state): State<AppState>,
    _: Caller,
    ApiQuery(filter): ApiQuery<ChangeFilter>,
) -> ApiResult<Page<ChangeView>> {
    Ok(Json(state.admin.changes(&filter).await?))
}

/// The range of a ledger audit.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditRange {
    /// From (epoch ms or RFC 3339; default an hour ago).
    #[serde(default, deserialize_with = "deserialize_instant")]
    #[param(schema_with = instant_schema)]
    pub since: Option<i64>,
    /// To (epoch ms or RFC 3339; default now).
    #[serde(default, deserialize_with = "deserialize_instant")]
    #[param(schema_with = instant_schema)]
    pub until: Option<i64>,
}

/// What a ledger audit found.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditView {
    /// The range checked, from (after the purge horizon) ...
    pub since: i64,
    /// ... to.
    pub until: i64,
    /// Ledger rows read.
    pub fires: usize,
    /// Scheduled fire times checked for gaps.
    pub fire_times_checked: u64,
    /// What disagrees: `duplicate`, `missing`, `late` or `stranded`, with the
    /// job, trigger, fire time and detail.
    pub violations: Vec<ViolationView>,
}

/// One thing the audit found.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ViolationView {
    /// `duplicate`, `missing`, `late` or `stranded`.
    pub kind: String,
    /// The job.
    pub job: String,
    /// The trigger.
    pub execute_id: i64,
    /// The fire time.
    pub fire_time: i64,
    /// What was found.
    pub detail: String,
}

/// Checks the ledger against the triggers (duplicates, gaps, late starts,
/// stranded retries).
#[utoipa::path(get, path = "/api/v1/audit", params(AuditRange), tag = "history",
    responses((status = 200, body = AuditView)))]
async fn audit(
    State(state): State<AppState>,
    _: Caller,
    ApiQuery(range): ApiQuery<AuditRange>,
) -> ApiResult<AuditView> {
    let now = state.admin.now().await?;
    let mut params = AuditParams::last_hour(now);
    if let Some(since) = range.since {
        params.since = Timestamp::from_millis(since);
    }
    if let Some(until) = range.until {
        params.until = Timestamp::from_millis(until).min(now);
    }
    let report = state.admin.audit(&params).await?;
    Ok(Json(AuditView {
        since: report.since.as_millis(),
        until: report.until.as_millis(),
        fires: report.fires,
        fire_times_checked: report.fire_times_checked,
        violations: report
            .violations
            .iter()
            .map(|v| ViolationView {
                kind: v.kind.as_str().to_owned(),
                job: v.job.clone(),
                execute_id: v.execute_id,
                fire_time: v.fire_time.as_millis(),
                detail: v.detail.clone(),
            })
            .collect(),
    }))
}

/// The span of the overview.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OverviewWindow {
    /// Milliseconds back from now (default 15 minutes, at most a day).
    pub window_ms: Option<i64>,
}

/// The cluster at a glance: nodes, jobs, and recent fires by outcome, per
/// minute and by lateness.
#[utoipa::path(get, path = "/api/v1/overview", params(OverviewWindow), tag = "cluster",
    responses((status = 200, body = Overview), (status = 400, body = ErrorBody)))]
async fn overview(
    State(state): State<AppState>,
    _: Caller,
    ApiQuery(window): ApiQuery<OverviewWindow>,
) -> ApiResult<Overview> {
    let window = window.window_ms.unwrap_or(15 * 60_000);
    if !(60_000..=86_400_000).contains(&window) {
        return Err(ApiError::invalid(
            "window_ms",
            format!("window_ms must be between 60000 (a minute) and 86400000 (a day), got {window}"),
        ));
    }
    Ok(Json(state.admin.overview(window).await?))
}

/// The cluster's health as the database has it: nodes by state (silent
/// ones apart), overdue triggers, open, pending and stranded fires, and the
/// last five minutes' outcomes (what `/metrics` exports as gauges).
#[utoipa::path(get, path = "/api/v1/health", tag = "cluster", responses((status = 200, body = ClusterHealth)))]
async fn health(State(state): State<AppState>, _: Caller) -> ApiResult<ClusterHealth> {
    Ok(Json(state.admin.health().await?))
}

/// This server's clock, for a preview with no `after`: a preview decides
/// nothing another node must agree with.
pub(crate) fn now_ms() -> Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp::from_millis(ms)
}

/// A page of jobs.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct JobPage {
    items: Vec<JobView>,
    next: Option<String>,
}

/// A page of fires.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct FirePage {
    items: Vec<FireView>,
    next: Option<String>,
}

/// A page of changes.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ChangePage {
    items: Vec<ChangeView>,
    next: Option<String>,
}

/// The API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    info(title = "quartz-rs admin API", description = "Jobs, triggers, the fire ledger, nodes and the change log \
        of a quartz-rs cluster. Authenticate with `Authorization: Bearer TOKEN` (QUARTZ_ADMIN_TOKEN reads and \
        writes, QUARTZ_READ_TOKEN reads); with no token configured only loopback callers are answered."),
    paths(jobs_list, job_add, job_get, job_put, job_edit, job_delete, job_pause, job_resume, job_trigger, job_enqueue, job_stats, fires_list, fire_retry,
        payload_schema, nodes_list, changes_list, audit, overview, health, calendars::cron_preview, calendars::calendars_list,
        calendars::calendar_get, calendars::calendar_put, calendars::calendar_delete, scheduler::standby_get,
        scheduler::pause_all, scheduler::resume_all, scheduler::job_backfill),
    components(schemas(JobDefinition, JobPatch, TriggerDefinition, TriggerKind, JobView, TriggerView, FireView,
        NodeView, PayloadSchemaView, ChangeView, Overview, ClusterHealth, JobStats, JobPage, FirePage, ChangePage, ErrorBody, ManualFire, WorkRequest, EnqueuedView, AuditView,
        ViolationView, Preview, CalendarDefinition, CalendarType, CalendarView, Standby,
        BackfillRequest, BackfillView)),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI document (no token needed: it describes, it does not read).
async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
