//! Work enqueued through the admin surface (the API, the console, the
//! CLI): a request in the wire's terms, and what became of it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::definition::deserialize_instant;
use super::{Admin, AdminError};
use crate::Timestamp;
use crate::store::{Enqueued, Work};

/// A piece of work to enqueue, as the API, the console and the CLI take it
/// (see [`Work`]): of the job the request names, due now unless `at` or
/// `after_ms` says otherwise.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkRequest {
    /// Its own payload (any JSON); absent: the job's.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub payload: Option<serde_json::Value>,
    /// Due at this instant (epoch ms or RFC 3339; in the past: now).
    #[serde(default, deserialize_with = "deserialize_instant")]
    #[cfg_attr(feature = "openapi", schema(schema_with = super::definition::instant_schema))]
    pub at: Option<i64>,
    /// Due this many milliseconds from now.
    #[serde(default)]
    pub after_ms: Option<u64>,
    /// A unique key: refused as a duplicate while another piece of work of
    /// the job with this key is pending or running (or within its window).
    #[serde(default)]
    pub unique_key: Option<String>,
    /// How long after it is enqueued the key stays taken once the work has
    /// ended, in milliseconds (needs `unique_key`).
    #[serde(default)]
    pub unique_for_ms: Option<u64>,
    /// The W3C trace context of the span that asks for it, which each of
    /// its fires' spans links to: the API takes it from the request's
    /// `traceparent` header, the CLI from `--trace-parent` or `TRACEPARENT`.
    #[serde(skip)]
    pub trace_parent: Option<String>,
}

impl WorkRequest {
    /// The [`Work`] of job `job` this request asks for.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming the field: both `at` and `after_ms`,
    /// a window without a key, and what [`Work::validate`] refuses.
    pub fn to_work(&self, job: &str) -> Result<Work, AdminError> {
        let mut work = Work::new(job);
        if let Some(payload) = &self.payload {
            work = work.payload_json(payload.to_string());
        }
        work = match (self.at, self.after_ms) {
            (Some(_), Some(_)) => {
                return Err(AdminError::invalid("at", "give `at` or `after_ms`, not both"));
            }
            (Some(at), None) => work.at(Timestamp::from_millis(at)),
            (None, Some(ms)) => work.after(Duration::from_millis(ms)),
            (None, None) => work,
        };
        work = match (&self.unique_key, self.unique_for_ms) {
            (Some(key), Some(ms)) => work.unique_for(key.clone(), Duration::from_millis(ms)),
            (Some(key), None) => work.unique(key.clone()),
            (None, Some(_)) => {
                return Err(AdminError::invalid("unique_for_ms", "a window needs a `unique_key`"));
            }
            (None, None) => work,
        };
        if let Some(tp) = &self.trace_parent {
            work = work.trace_parent(tp.clone());
        }
        work.validate().map_err(crate::store::StoreError::Invalid)?;
        Ok(work)
    }
}

/// What became of a piece of work enqueued ([`Admin::enqueue`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnqueuedView {
    /// The job.
    pub job: String,
    /// `queued`, or `duplicate` (its unique key is taken: nothing written).
    pub outcome: String,
    /// The work's id (for a duplicate, the one holding the key, when known).
    pub work_id: Option<i64>,
    /// Its pending fire's ledger id (queued only).
    pub fire_id: Option<i64>,
    /// When it is due: its fire time (epoch ms).
    pub due_at: Option<i64>,
    /// What happens now, in words.
    pub note: String,
}

impl EnqueuedView {
    /// The view of `enqueued`, work of job `job`.
    pub fn of(job: &str, enqueued: &Enqueued) -> EnqueuedView {
        match enqueued {
            Enqueued::Queued {
                work_id,
                fire_id,
                due_at,
            } => EnqueuedView {
                job: job.to_owned(),
                outcome: "queued".to_owned(),
                work_id: Some(*work_id),
                fire_id: Some(*fire_id),
                due_at: Some(due_at.as_millis()),
                note: format!(
                    "work {work_id} of {job} is pending as fire {fire_id}, due {due_at}: the first node with the \
                     job's handler and a free thread runs it, once"
                ),
            },
            Enqueued::Duplicate { key, work_id, due_at } => EnqueuedView {
                job: job.to_owned(),
                outcome: "duplicate".to_owned(),
                work_id: *work_id,
                fire_id: None,
                due_at: due_at.map(Timestamp::as_millis),
                note: match work_id {
                    Some(id) => format!("unique key {key:?} is held by work {id} of {job}: nothing was enqueued"),
                    None => format!("unique key {key:?} is held by other work of {job}: nothing was enqueued"),
                },
            },
        }
    }
}

impl Admin {
    /// Enqueues a piece of work (see [`Work`] and
    /// [`JobStore::enqueue`](crate::store::JobStore::enqueue)).
    ///
    /// # Errors
    ///
    /// [`AdminError::NotFound`] for an unknown job, [`AdminError::Invalid`]
    /// naming the field (a payload that does not fit the schema its
    /// handler's nodes published included); the store's errors.
    pub async fn enqueue(&self, work: &Work) -> Result<Enqueued, AdminError> {
        if let Some(payload) = &work.payload
            && cfg!(feature = "payload-schema")
        {
            let job = self
                .store
                .get_job(&work.job)
                .await?
                .ok_or_else(|| AdminError::NotFound { name: work.job.clone() })?;
            let payload: serde_json::Value =
                serde_json::from_str(payload).map_err(|e| AdminError::invalid("payload", format!("not JSON: {e}")))?;
            self.check_payload(&job.job.spec.handler, &payload).await?;
        }
        Ok(self.store.enqueue(work).await?)
    }

    /// Enqueues the work `request` asks for, of job `job`, as the API, the
    /// console and the CLI do.
    ///
    /// # Errors
    ///
    /// As [`WorkRequest::to_work`] and [`Admin::enqueue`].
    pub async fn enqueue_request(&self, job: &str, request: &WorkRequest) -> Result<EnqueuedView, AdminError> {
        let work = request.to_work(job)?;
        let enqueued = self.enqueue(&work).await?;
        Ok(EnqueuedView::of(job, &enqueued))
    }
}
