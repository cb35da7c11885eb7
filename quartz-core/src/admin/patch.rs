//! A change to a job, as the admin surface takes it: each field checked so
//! that an error names the field at fault.

use serde::{Deserialize, Serialize};

use std::time::Duration;

use super::AdminError;
use super::definition::TriggerDefinition;
use super::wire::{FieldError, wire_duration};
use crate::store::{ConcurrencyLimit, DEFAULT_LIMIT_KEY, ExecuteSpec, JobSpec, millis_of};
use crate::time::Timestamp;

/// A change to a job: each field given replaces the job's; `triggers`, when
/// given, replaces all its triggers (which start afresh). Its JSON form is
/// the API's `PATCH` body: the definition's field names, durations in
/// milliseconds, `0` for no timeout or a fixed backoff, `""` for no parent.
///
/// ```
/// use std::time::Duration;
/// use quartz_core::admin::JobPatch;
///
/// let patch: JobPatch = serde_json::from_str(r#"{"timeout_ms": 0, "backoff_ms": 500}"#)?;
/// assert_eq!(patch.timeout, Some(None), "the timeout removed");
/// assert_eq!(patch.backoff, Some(Duration::from_millis(500)));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PatchWire", into = "PatchWire")]
pub struct JobPatch {
    /// A new name.
    pub name: Option<String>,
    /// Another handler.
    pub handler: Option<String>,
    /// Another payload.
    pub payload: Option<serde_json::Value>,
    /// Another description.
    pub description: Option<String>,
    /// Re-run after a node's death, or not.
    pub requests_recovery: Option<bool>,
    /// Allow overlapping fires, or not.
    pub allow_concurrent: Option<bool>,
    /// A timeout, or (`Some(None)`) none.
    pub timeout: Option<Option<Duration>>,
    /// Attempts in all.
    pub max_attempts: Option<u32>,
    /// The wait between attempts.
    pub backoff: Option<Duration>,
    /// Exponential backoff's longest wait, or (`Some(None)`) a fixed
    /// backoff.
    pub backoff_max: Option<Option<Duration>>,
    /// A parent job, or (`Some(None)`) none.
    pub parent: Option<Option<String>>,
    /// A concurrency limit, or (`Some(None)`) none.
    pub concurrency_limit: Option<Option<u32>>,
    /// Another key for the concurrency limit.
    pub concurrency_key: Option<String>,
    /// New triggers, replacing all the job's.
    pub triggers: Option<Vec<TriggerDefinition>>,
}

/// A change to a job as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = JobPatch))]
pub(super) struct PatchWire {
    /// A new name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// Another handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    handler: Option<String>,
    /// Another payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    payload: Option<serde_json::Value>,
    /// Another description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// Re-run after a node's death, or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requests_recovery: Option<bool>,
    /// Allow overlapping fires, or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allow_concurrent: Option<bool>,
    /// A timeout in milliseconds; `0` removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<i64>,
    /// Attempts in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_attempts: Option<u32>,
    /// Milliseconds between attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backoff_ms: Option<i64>,
    /// Exponential backoff's longest wait; `0` makes the backoff fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backoff_max_ms: Option<i64>,
    /// A parent job; `""` removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    /// At most this many fires at once of the job's concurrency key; `0`
    /// removes the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    concurrency_limit: Option<u32>,
    /// The concurrency limit's key template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    concurrency_key: Option<String>,
    /// New triggers, replacing all the job's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    triggers: Option<Vec<TriggerDefinition>>,
}

impl TryFrom<PatchWire> for JobPatch {
    type Error = FieldError;

    fn try_from(w: PatchWire) -> Result<JobPatch, FieldError> {
        // Zero is none, for the durations that may be absent.
        let optional = |field: &str, ms: Option<i64>| {
            ms.map(|ms| wire_duration(field, ms).map(|d| (!d.is_zero()).then_some(d)))
                .transpose()
        };
        Ok(JobPatch {
            name: w.name,
            handler: w.handler,
            payload: w.payload,
            description: w.description,
            requests_recovery: w.requests_recovery,
            allow_concurrent: w.allow_concurrent,
            timeout: optional("timeout_ms", w.timeout_ms)?,
            max_attempts: w.max_attempts,
            backoff: w.backoff_ms.map(|ms| wire_duration("backoff_ms", ms)).transpose()?,
            backoff_max: optional("backoff_max_ms", w.backoff_max_ms)?,
            parent: w.parent.map(|p| (!p.is_empty()).then_some(p)),
            concurrency_limit: w.concurrency_limit.map(|n| (n != 0).then_some(n)),
            concurrency_key: w.concurrency_key,
            triggers: w.triggers,
        })
    }
}

impl From<JobPatch> for PatchWire {
    fn from(p: JobPatch) -> PatchWire {
        let ms = |d: Option<Duration>| d.map_or(0, millis_of);
        PatchWire {
            name: p.name,
            handler: p.handler,
            payload: p.payload,
            description: p.description,
            requests_recovery: p.requests_recovery,
            allow_concurrent: p.allow_concurrent,
            timeout_ms: p.timeout.map(ms),
            max_attempts: p.max_attempts,
            backoff_ms: p.backoff.map(millis_of),
            backoff_max_ms: p.backoff_max.map(ms),
            parent: p.parent.map(Option::unwrap_or_default),
            concurrency_limit: p.concurrency_limit.map(Option::unwrap_or_default),
            concurrency_key: p.concurrency_key,
            triggers: p.triggers,
        }
    }
}

impl JobPatch {
    /// `base` with this change applied, every field checked, and the new
    /// triggers if any.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming the first field at fault.
    pub fn apply(&self, mut base: JobSpec, now: Timestamp) -> Result<(JobSpec, Option<Vec<ExecuteSpec>>), AdminError> {
        if let Some(name) = &self.name {
            base.name.clone_from(name);
        }
        if let Some(handler) = &self.handler {
            base.handler.clone_from(handler);
        }
        if let Some(payload) = &self.payload {
            base.payload = payload.to_string();
        }
        if let Some(description) = &self.description {
            base.description.clone_from(description);
        }
        if let Some(v) = self.requests_recovery {
            base.requests_recovery = v;
        }
        if let Some(v) = self.allow_concurrent {
            base.allow_concurrent = v;
        }
        if let Some(timeout) = self.timeout {
            base.timeout = timeout;
        }
        if let Some(n) = self.max_attempts {
            base.retry.max_attempts = n;
        }
        if let Some(backoff) = self.backoff {
            base.retry.backoff = backoff;
        }
        if let Some(max) = self.backoff_max {
            base.retry.backoff_max = max;
        }
        if let Some(parent) = &self.parent {
            base.parent.clone_from(parent);
        }
        match (self.concurrency_limit, &self.concurrency_key) {
            (Some(None), _) => base.limit = None,
            (Some(Some(max)), key) => {
                let key = key
                    .clone()
                    .or_else(|| base.limit.as_ref().map(|l| l.key.clone()))
                    .unwrap_or_else(|| DEFAULT_LIMIT_KEY.to_owned());
                base.limit = Some(ConcurrencyLimit::new(max, key));
            }
            (None, Some(key)) => match &mut base.limit {
                Some(limit) => limit.key.clone_from(key),
                None => {
                    return Err(AdminError::invalid(
                        "concurrency_key",
                        "the job has no concurrency limit: give concurrency_limit too".to_owned(),
                    ));
                }
            },
            (None, None) => {}
        }
        base.check_fields()
            .map_err(|(field, e)| AdminError::invalid(field, e.to_string()))?;
        if let Some(triggers) = &self.triggers {
            super::definition::check_overlaps(base.allow_concurrent, triggers)?;
        }
        let executes = match &self.triggers {
            Some(triggers) => Some(
                triggers
                    .iter()
                    .enumerate()
                    .map(|(i, t)| t.to_execute(&base.name, i, now))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        Ok((base, executes))
    }
}
