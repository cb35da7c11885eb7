//! A job declared whole ([`Admin::job_put`](super::Admin::job_put)): the
//! condition it is made under, what it did, and whether the stored
//! triggers are already the declared ones.

use super::TriggerDefinition;
use crate::store::ExecuteSpec;

/// The condition a declaration ([`Admin::job_put_if`](super::Admin::job_put_if)) is made under, as
/// HTTP's `If-Match` and `If-None-Match` say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PutIf {
    /// Whatever is stored (no condition).
    #[default]
    Any,
    /// Only when no job of the name exists (`If-None-Match: *`).
    Absent,
    /// Only when the job exists at this version (`If-Match`).
    Version(i64),
}

/// What [`Admin::job_put`](super::Admin::job_put) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PutOutcome {
    /// No job of the name existed: it was added.
    Created,
    /// The stored job differed: what differs was applied.
    Updated,
    /// The stored job is as declared: nothing was written.
    Unchanged,
}

impl PutOutcome {
    /// `created`, `updated` or `unchanged`.
    pub fn as_str(self) -> &'static str {
        match self {
            PutOutcome::Created => "created",
            PutOutcome::Updated => "updated",
            PutOutcome::Unchanged => "unchanged",
        }
    }
}

/// Whether a job's stored triggers are the ones `new` defines (in order):
/// the same schedule, end, limit, misfire policy, calendar and priority,
/// and the same start where the definition gives one. A row that cannot be
/// read makes them differ.
pub(super) fn same_triggers(stored: &crate::store::JobDetail, new: &[ExecuteSpec], defs: &[TriggerDefinition]) -> bool {
    stored.broken.is_empty()
        && stored.executes.len() == new.len()
        && stored.executes.iter().zip(new).zip(defs).all(|((s, n), d)| {
            let (a, b) = (&s.trigger, &n.trigger);
            a.schedule() == b.schedule()
                && a.end() == b.end()
                && a.repeat_limit() == b.repeat_limit()
                && a.misfire_policy() == b.misfire_policy()
                && a.calendar_name() == b.calendar_name()
                && s.priority == n.priority
                && (d.start.is_none() || a.start() == b.start())
        })
}
