//! A change to a job, as the admin surface takes it: each field checked so
//! that an error names the field at fault.

use serde::{Deserialize, Serialize};

use super::AdminError;
use super::definition::{TriggerDefinition, wire_duration};
use crate::store::{ExecuteSpec, JobSpec};
use crate::time::Timestamp;

/// A change to a job: each field given replaces the job's; `triggers`, when
/// given, replaces all its triggers (which start afresh).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobPatch {
    /// A new name.
    pub name: Option<String>,
    /// Another handler.
    pub handler: Option<String>,
    /// Another payload.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub payload: Option<serde_json::Value>,
    /// Another description.
    pub description: Option<String>,
    /// Re-run after a node's death, or not.
    pub requests_recovery: Option<bool>,
    /// Allow overlapping fires, or not.
    pub allow_concurrent: Option<bool>,
    /// A timeout in milliseconds; `0` removes it.
    pub timeout_ms: Option<i64>,
    /// Attempts in all.
    pub max_attempts: Option<u32>,
    /// Milliseconds between attempts.
    pub backoff_ms: Option<i64>,
    /// Exponential backoff's longest wait; `0` makes the backoff fixed.
    pub backoff_max_ms: Option<i64>,
    /// A parent job; `""` removes it.
    pub parent: Option<String>,
    /// New triggers, replacing all the job's.
    pub triggers: Option<Vec<TriggerDefinition>>,
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
        if let Some(ms) = self.timeout_ms {
            base.timeout = (ms != 0).then(|| wire_duration("timeout_ms", ms)).transpose()?;
        }
        if let Some(n) = self.max_attempts {
            base.retry.max_attempts = n;
        }
        if let Some(ms) = self.backoff_ms {
            base.retry.backoff = wire_duration("backoff_ms", ms)?;
        }
        if let Some(ms) = self.backoff_max_ms {
            base.retry.backoff_max = (ms != 0).then(|| wire_duration("backoff_max_ms", ms)).transpose()?;
        }
        if let Some(parent) = &self.parent {
            base.parent = (!parent.is_empty()).then(|| parent.clone());
        }
        base.check_fields()
            .map_err(|(field, e)| AdminError::invalid(field, e.to_string()))?;
        let executes = match &self.triggers {
            Some(triggers) => Some(
                triggers
                    .iter()
                    .enumerate()
                    .map(|(i, t)| t.to_execute(i, now))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        Ok((base, executes))
    }
}
