//! Optimistic concurrency over HTTP: a job's or calendar's version is its
//! `ETag` (`"7"`), and a write that sends `If-Match` is made only against
//! that version (412 `stale` otherwise, nothing written), so that of two
//! people editing one job the second is told instead of silently
//! overwriting the first.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use quartz_core::admin::AdminError;

use crate::error::ApiError;

/// What a request's `If-Match` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum IfMatch {
    /// No `If-Match`: the write is made whatever the version.
    #[default]
    Absent,
    /// `*`: the resource must exist, at any version.
    Any,
    /// One of these versions. Entity tags that are not ours (weak ones
    /// among them: `If-Match` compares strongly) match nothing, so a list
    /// of only such tags is refused.
    Versions(Vec<i64>),
}

impl IfMatch {
    /// Reads the `If-Match` headers.
    pub(crate) fn from_headers(headers: &HeaderMap) -> IfMatch {
        let mut versions = Vec::new();
        let mut present = false;
        for value in headers.get_all(header::IF_MATCH) {
            present = true;
            let Ok(text) = value.to_str() else {
                continue;
            };
            for tag in text.split(',').map(str::trim) {
                if tag == "*" {
                    return IfMatch::Any;
                }
                if let Some(version) = tag
                    .strip_prefix('"')
                    .and_then(|t| t.strip_suffix('"'))
                    .and_then(|t| t.parse::<i64>().ok())
                {
                    versions.push(version);
                }
            }
        }
        if present {
            IfMatch::Versions(versions)
        } else {
            IfMatch::Absent
        }
    }

    /// The version a write of `kind` `name` is made against: `None` for
    /// none (absent, or `*`: the write's own not-found answers a missing
    /// one); with several versions, the current one if it is among them
    /// (`current` reads it).
    ///
    /// # Errors
    ///
    /// [`AdminError::Stale`] (412) when no version listed can match.
    pub(crate) async fn expected<F>(self, kind: &'static str, name: &str, current: F) -> Result<Option<i64>, ApiError>
    where
        F: std::future::Future<Output = Result<i64, AdminError>>,
    {
        match self {
            IfMatch::Absent | IfMatch::Any => Ok(None),
            IfMatch::Versions(versions) => match versions.as_slice() {
                [one] => Ok(Some(*one)),
                [] => Err(AdminError::Stale {
                    kind,
                    name: name.to_owned(),
                    expected: 0,
                    current: None,
                }
                .into()),
                many => {
                    let now = current.await?;
                    if many.contains(&now) {
                        Ok(Some(now))
                    } else {
                        Err(AdminError::Stale {
                            kind,
                            name: name.to_owned(),
                            expected: many[0],
                            current: Some(now),
                        }
                        .into())
                    }
                }
            },
        }
    }
}

impl<St: Send + Sync> FromRequestParts<St> for IfMatch {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &St) -> Result<IfMatch, ApiError> {
        Ok(IfMatch::from_headers(&parts.headers))
    }
}

/// Whether the request sent `If-None-Match: *` (create, never replace).
pub(crate) fn if_none_match_any(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim() == "*"))
}

/// The `ETag` of a version.
pub(crate) fn etag(version: i64) -> (header::HeaderName, HeaderValue) {
    let value = HeaderValue::from_str(&format!("\"{version}\"")).unwrap_or(HeaderValue::from_static("\"0\""));
    (header::ETAG, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(values: &[&str]) -> IfMatch {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(header::IF_MATCH, HeaderValue::from_str(v).unwrap());
        }
        IfMatch::from_headers(&headers)
    }

    #[test]
    fn if_match_reads_our_strong_tags_and_nothing_else() {
        assert_eq!(parsed(&[]), IfMatch::Absent);
        assert_eq!(parsed(&["*"]), IfMatch::Any);
        assert_eq!(parsed(&["\"7\""]), IfMatch::Versions(vec![7]));
        assert_eq!(parsed(&["\"7\", \"9\"", "\"11\""]), IfMatch::Versions(vec![7, 9, 11]));
        // Weak tags never match in If-Match; foreign tags match nothing.
        assert_eq!(parsed(&["W/\"7\""]), IfMatch::Versions(vec![]));
        assert_eq!(parsed(&["7", "\"x\""]), IfMatch::Versions(vec![]));
    }
}
