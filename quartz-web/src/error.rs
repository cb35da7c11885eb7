//! The API's one error shape, `{"error": {"code", "message", "field"}}`, its
//! status codes, and the extractors that turn bad JSON and bad query strings
//! into it (naming the field) instead of axum's plain-text rejections.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use quartz_core::admin::AdminError;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// An error as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable name: `invalid`, `not_found`, `conflict`, `stale` (412: a
    /// write's `If-Match` names a version no longer stored),
    /// `unauthorized`, `forbidden`, `too_large`, `unsupported_media_type`,
    /// `busy`, `too_many_requests`, `unavailable`, `internal`.
    pub code: &'static str,
    /// For people.
    pub message: String,
    /// The field at fault, for `invalid`.
    pub field: Option<String>,
    /// For `too_many_requests`: when to come back, sent as `Retry-After`.
    pub retry_after: Option<std::time::Duration>,
}

/// The body of an error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// A stable name: `invalid`, `not_found`, `conflict`, `stale` (412: a
    /// write's `If-Match` names a version no longer stored),
    /// `unauthorized`, `forbidden`, `too_large`, `unsupported_media_type`,
    /// `busy`, `too_many_requests`, `unavailable`, `internal`.
    pub code: String,
    /// For people.
    pub message: String,
    /// The field at fault, for `invalid`.
    pub field: Option<String>,
}

impl ApiError {
    /// An error with no field.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// A 400 naming the field at fault.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            field: Some(field.into()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
        }
    }

    /// 401: no credentials, or wrong ones.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 429: the client sent too many refused tokens, and this one was
    /// refused too; its window of refusals ends after `wait`
    /// (`Retry-After`). The right token is never refused this way.
    pub fn too_many_guesses(wait: std::time::Duration) -> ApiError {
        ApiError {
            retry_after: Some(wait),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                format!(
                    "too many refused tokens from this address; try again in {} s",
                    wait.as_secs().max(1)
                ),
            )
        }
    }

    /// 403: the credentials do not allow this.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
}

/// The HTTP status of an admin error.
pub(crate) fn status_of(e: &AdminError) -> StatusCode {
    match e {
        AdminError::Invalid { .. } => StatusCode::BAD_REQUEST,
        AdminError::NotFound { .. } | AdminError::CalendarNotFound { .. } | AdminError::FireNotFound { .. } => {
            StatusCode::NOT_FOUND
        }
        AdminError::Conflict { .. }
        | AdminError::CalendarExists { .. }
        | AdminError::InUse { .. }
        | AdminError::Refused { .. } => StatusCode::CONFLICT,
        AdminError::Stale { .. } => StatusCode::PRECONDITION_FAILED,
        AdminError::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
        AdminError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> ApiError {
        let status = status_of(&e);
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %e, "admin call failed");
        }
        let (message, field) = match &e {
            AdminError::Invalid { field, message } => (message.clone(), Some(field.clone()).filter(|f| !f.is_empty())),
            other => (other.to_string(), None),
        };
        // A busy surface may be asked again shortly.
        let retry_after = (status == StatusCode::TOO_MANY_REQUESTS).then_some(std::time::Duration::from_secs(1));
        ApiError {
            status,
            code: e.code(),
            message,
            field,
            retry_after,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
                field: self.field,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        if let Some(wait) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(wait.as_secs().max(1)));
        }
        response
    }
}

/// The field a serde error names: its path, or for a missing or unknown
/// field at that path, or a value the job model refused by name
/// ([`FieldError`](quartz_core::admin::FieldError)), the field itself.
fn field_of(path: &str, message: &str) -> String {
    let named = message
        .strip_prefix("missing field `")
        .or_else(|| message.strip_prefix("unknown field `"))
        .and_then(|rest| rest.split('`').next())
        .or_else(|| quartz_core::admin::FieldError::parse(message).map(|(field, _)| field));
    match (path, named) {
        (".", Some(name)) => name.to_owned(),
        (".", None) => String::new(),
        (path, Some(name)) if path == name || path.ends_with(&format!(".{name}")) => path.to_owned(),
        (path, Some(name)) => format!("{path}.{name}"),
        (path, None) => path.to_owned(),
    }
}

/// A serde error as the API's 400, the field at fault named.
fn serde_error(path: &str, message: &str) -> ApiError {
    let field = field_of(path, message);
    let message = quartz_core::admin::FieldError::parse(message).map_or(message, |(_, rest)| rest);
    ApiError::invalid(field, message)
}

/// A JSON body decoded with the field at fault named on error (400), a
/// 415 for another content type, and a 413 past the body limit.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, St: Send + Sync> FromRequest<St> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &St) -> Result<ApiJson<T>, ApiError> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(is_json_media_type);
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON (Content-Type: application/json)",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", e.body_text())
            } else {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid", e.body_text())
            }
        })?;
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        match serde_path_to_error::deserialize(&mut de) {
            // Whitespace may follow the value; anything else is refused,
            // not ignored.
            Ok(value) => match de.end() {
                Ok(()) => Ok(ApiJson(value)),
                Err(e) => Err(ApiError::invalid(
                    "",
                    format!("the body holds more than one JSON value: {e}"),
                )),
            },
            Err(e) => Err(serde_error(&e.path().to_string(), &e.inner().to_string())),
        }
    }
}

/// Whether a `Content-Type` is JSON: `application/json`, with parameters
/// (`; charset=utf-8`) or not, in any case; `application/jsonfoo` is not.
fn is_json_media_type(value: &str) -> bool {
    value
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// A query string decoded with the field at fault named on error (400).
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, St: Send + Sync> FromRequestParts<St> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &St) -> Result<ApiQuery<T>, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        match serde_path_to_error::deserialize(de) {
            Ok(value) => Ok(ApiQuery(value)),
            Err(e) => Err(serde_error(&e.path().to_string(), &e.inner().to_string())),
        }
    }
}

/// The most of a plain-text error body [`uniform_errors`] reads.
const PLAIN_ERROR_LIMIT: usize = 16 * 1024;

/// Middleware: an error answered by the framework itself (a 405 with no
/// body, a path that is not UTF-8, any other plain-text rejection) is
/// answered in the API's one error shape instead, with its text as the
/// message, so that every error a client meets is JSON it can read.
pub(crate) async fn uniform_errors(request: Request, next: axum::middleware::Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.starts_with("text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, PLAIN_ERROR_LIMIT).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let code = match status {
        StatusCode::BAD_REQUEST => "invalid",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        s if s.is_server_error() => "internal",
        _ => "invalid",
    };
    let message = if text.is_empty() {
        match status {
            StatusCode::METHOD_NOT_ALLOWED => {
                let allowed = parts
                    .headers
                    .get(header::ALLOW)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                format!("this route does not take that method (it takes: {allowed})")
            }
            other => other.canonical_reason().unwrap_or("error").to_owned(),
        }
    } else {
        text
    };
    let mut answer = ApiError::new(status, code, message).into_response();
    for name in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(v) = parts.headers.get(&name) {
            answer.headers_mut().insert(name, v.clone());
        }
    }
    answer
}
