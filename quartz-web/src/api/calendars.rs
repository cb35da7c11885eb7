//! The API's calendars and cron previews.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use quartz_core::Timestamp;
use quartz_core::admin::{CalendarView, deserialize_instant, instant_schema};
use quartz_core::calendar::CalendarDefinition;
use serde::{Deserialize, Serialize};

use super::{ApiResult, IF_MATCH, now_ms, versioned};
use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, ErrorBody};
use crate::versions::{IfMatch, if_none_match_any};

/// A cron preview's question.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PreviewQuery {
    /// The expression (Quartz syntax).
    pub cron: String,
    /// The IANA zone (default UTC).
    pub time_zone: Option<String>,
    /// After this instant (epoch ms or RFC 3339; default now on this
    /// server's clock).
    #[serde(default, deserialize_with = "deserialize_instant")]
    #[param(schema_with = instant_schema)]
    pub after: Option<i64>,
    /// How many (default 10, at most 100).
    pub count: Option<usize>,
    /// Pass over the times this calendar (by name) excludes.
    pub calendar: Option<String>,
    /// A local time a DST change skips: `shift`, `skip` or `quartz` (the
    /// default, Quartz's behaviour).
    pub dst_skipped: Option<String>,
    /// A local time a DST change repeats: `first`, `second`, `both` or
    /// `quartz` (the default).
    pub dst_repeated: Option<String>,
}

/// A cron preview's answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Preview {
    /// The next fire times, epoch ms.
    pub fire_times: Vec<i64>,
    /// The same, RFC 3339 in UTC.
    pub fire_times_utc: Vec<String>,
    /// When the search stopped (its time or step limit) before it found as
    /// many times as asked: every instant before this was searched (epoch ms).
    pub searched_until: Option<i64>,
    /// Why fewer times than asked are listed, in words.
    pub note: Option<String>,
}

/// The next fire times of a cron expression in a zone, passing over the
/// times a calendar excludes when one is named.
#[utoipa::path(get, path = "/api/v1/cron/preview", params(PreviewQuery), tag = "cron",
    responses((status = 200, body = Preview), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 429, body = ErrorBody)))]
pub(super) async fn cron_preview(
    State(state): State<AppState>,
    _: Caller,
    ApiQuery(q): ApiQuery<PreviewQuery>,
) -> ApiResult<Preview> {
    let after = q.after.map_or_else(now_ms, Timestamp::from_millis);
    let preview = state
        .admin
        .cron_preview_with(
            &q.cron,
            q.time_zone.as_deref().unwrap_or("UTC"),
            quartz_core::admin::parse_dst(q.dst_skipped.as_deref(), q.dst_repeated.as_deref())?,
            q.calendar.as_deref(),
            after,
            q.count.unwrap_or(10),
        )
        .await?;
    Ok(Json(Preview {
        fire_times: preview.times.iter().map(|t| t.as_millis()).collect(),
        fire_times_utc: preview.times.iter().map(ToString::to_string).collect(),
        searched_until: preview.searched_until.map(Timestamp::as_millis),
        note: preview.note,
    }))
}

/// Every calendar, by name.
#[utoipa::path(get, path = "/api/v1/calendars", tag = "calendars",
    responses((status = 200, body = [CalendarView]), (status = 401, body = ErrorBody)))]
pub(super) async fn calendars_list(State(state): State<AppState>, _: Caller) -> ApiResult<Vec<CalendarView>> {
    Ok(Json(state.admin.calendars().await?))
}

/// A calendar.
#[utoipa::path(get, path = "/api/v1/calendars/{name}", params(("name" = String, Path, description = "the calendar's name")),
    tag = "calendars", responses((status = 200, body = CalendarView,
        headers(("ETag" = String, description = "the calendar's version"))), (status = 404, body = ErrorBody)))]
pub(super) async fn calendar_get(
    State(state): State<AppState>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let view = state.admin.calendar(&name).await?;
    Ok(versioned(StatusCode::OK, view.version, view))
}

/// The version a write of calendar `name` is made against, from its
/// `If-Match`.
async fn calendar_expected(state: &AppState, if_match: IfMatch, name: &str) -> Result<Option<i64>, ApiError> {
    let any = if_match == IfMatch::Any;
    let expected = if_match
        .expected("calendar", name, async {
            Ok(state.admin.calendar(name).await?.version)
        })
        .await?;
    if any && expected.is_none() {
        // `*`: it must exist (a replace, never an add).
        let version = match state.admin.calendar(name).await {
            Ok(view) => view.version,
            Err(quartz_core::admin::AdminError::CalendarNotFound { .. }) => {
                return Err(quartz_core::admin::AdminError::Stale {
                    kind: "calendar",
                    name: name.to_owned(),
                    expected: 0,
                    current: None,
                }
                .into());
            }
            Err(e) => return Err(e.into()),
        };
        return Ok(Some(version));
    }
    Ok(expected)
}

/// Adds a calendar or replaces the one of that name; the triggers that use
/// it are rescheduled on every node. With `If-Match`, only a replace of
/// that version; with `If-None-Match: *`, only an add.
#[utoipa::path(put, path = "/api/v1/calendars/{name}", params(("name" = String, Path, description = "the calendar's name"),
        ("If-Match" = Option<String>, Header, description = IF_MATCH),
        ("If-None-Match" = Option<String>, Header, description = "`*`: add only, 412 `stale` when one of that name exists")),
    request_body = CalendarDefinition, tag = "calendars",
    responses((status = 200, body = CalendarView, headers(("ETag" = String, description = "the calendar's new version"))),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 412, body = ErrorBody)))]
pub(super) async fn calendar_put(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
    ApiJson(definition): ApiJson<CalendarDefinition>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let admin = state.admin.acting_as(&caller.actor);
    let view = if if_none_match_any(&headers) {
        admin.calendar_add(&name, &definition).await.map_err(|e| match e {
            quartz_core::admin::AdminError::CalendarExists { name } => ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                "stale",
                format!("a calendar named {name:?} exists"),
            ),
            other => other.into(),
        })?
    } else {
        let expected = calendar_expected(&state, IfMatch::from_headers(&headers), &name).await?;
        admin.calendar_put(&name, &definition, expected).await?
    };
    Ok(versioned(StatusCode::OK, view.version, view))
}

/// Deletes a calendar no trigger and no calendar uses (409 naming them
/// otherwise); with `If-Match`, only if it is still at that version.
#[utoipa::path(delete, path = "/api/v1/calendars/{name}", params(("name" = String, Path, description = "the calendar's name"),
        ("If-Match" = Option<String>, Header, description = IF_MATCH)),
    tag = "calendars", responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 412, body = ErrorBody)))]
pub(super) async fn calendar_delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    if_match: IfMatch,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let expected = calendar_expected(&state, if_match, &name).await?;
    state
        .admin
        .acting_as(&caller.actor)
        .calendar_delete(&name, expected)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
