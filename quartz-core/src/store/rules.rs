//! The domain rules every store applies, as pure functions, so that a new
//! store does not re-derive them: the calendars a set of triggers name,
//! resolved; a new trigger's first row; how a calendar change moves a
//! trigger; the change log's actor and details; which fires may be retried
//! by hand; the cut of long error text. The SQL and Redis stores of
//! `quartz-store` and the in-memory store of `quartz-testkit` call them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::calendar::{self, Calendar, CalendarDefinition};
use crate::store::{
    CHANGE_VISIBILITY_MS, CalendarRecord, ExecuteSpec, ExecuteState, MAX_ERROR_BYTES, StoreError, TriggerColumns,
};
use crate::time::Timestamp;
use crate::trigger::{Schedule, Trigger, TriggerState};

/// The calendars a set of triggers name, each resolved (its bases
/// followed), or why it cannot be.
#[derive(Debug, Default)]
pub struct CalendarSet {
    resolved: HashMap<String, Result<Arc<Calendar>, String>>,
}

impl CalendarSet {
    /// Resolves `names` among `definitions`.
    pub fn resolve<'a>(
        definitions: &BTreeMap<String, CalendarDefinition>,
        names: impl Iterator<Item = &'a str>,
    ) -> Self {
        let resolved = names
            .map(|name| {
                let calendar = calendar::resolve(name, |n| definitions.get(n).cloned())
                    .map(Arc::new)
                    .map_err(|e| format!("calendar {name:?}: {e}"));
                (name.to_owned(), calendar)
            })
            .collect();
        CalendarSet { resolved }
    }

    /// The trigger with its calendar read; why not, when it cannot be.
    pub fn attach(&self, trigger: Trigger) -> Result<Trigger, String> {
        let Some(name) = trigger.calendar_name() else {
            return Ok(trigger);
        };
        match self.resolved.get(name) {
            Some(Ok(calendar)) => Ok(trigger.with_calendar_read(Arc::clone(calendar))),
            Some(Err(reason)) => Err(reason.clone()),
            None => Err(format!("no calendar named {name:?}")),
        }
    }
}

/// The definitions by name, for resolving.
pub fn by_name(records: Vec<CalendarRecord>) -> BTreeMap<String, CalendarDefinition> {
    records.into_iter().map(|r| (r.name, r.definition)).collect()
}

/// The calendars a change of `name` reaches (itself and every calendar
/// built on it), each checked to resolve with the definitions as changed.
pub fn changed_calendars(
    definitions: &BTreeMap<String, CalendarDefinition>,
    name: &str,
) -> Result<Vec<String>, StoreError> {
    let users: Vec<String> = definitions
        .keys()
        .filter(|n| builds_on(definitions, n, name))
        .cloned()
        .collect();
    for user in &users {
        calendar::resolve(user, |n| definitions.get(n).cloned())?;
    }
    Ok(users)
}

/// Whether the chain from `name` reaches `target` (itself included).
fn builds_on(definitions: &BTreeMap<String, CalendarDefinition>, name: &str, target: &str) -> bool {
    let mut at = Some(name);
    for _ in 0..=calendar::MAX_CHAIN {
        match at {
            Some(n) if n == target => return true,
            Some(n) => at = definitions.get(n).and_then(|d| d.base.as_deref()),
            None => return false,
        }
    }
    false
}

/// What replacing a calendar at `now` makes of a trigger that uses it: its
/// new state and next fire time, or `None` when the row stays as it is.
///
/// - A waiting or paused trigger is recomputed (see `rescheduled` below) and
///   completes when no time is left; one whose next fire time is still
///   unset (a row written by hand) is left to the poll, which sets it under
///   the calendar as it is then.
/// - A complete trigger is revived, paused with a paused job and waiting
///   otherwise, when its schedule has a time left that the calendar now
///   includes: a calendar that excluded every time by mistake, once mended,
///   lets its triggers fire again. A one-off whose time has passed stays
///   complete (it is not fired late), as does a trigger past its end or its
///   repeat limit.
///
/// Each trigger's search stops at a checkpoint after
/// [`RECALENDAR_STEPS`] excluded runs (the polls resume it), so that a
/// change of a calendar many triggers use, which every store makes in one
/// transaction, stays short whatever the calendar excludes.
pub fn recalendared(
    execute: &crate::store::Execute,
    job_paused: bool,
    now: Timestamp,
) -> Option<(ExecuteState, Option<Timestamp>)> {
    crate::trigger::with_search_steps(RECALENDAR_STEPS, || recalendared_within(execute, job_paused, now))
}

/// The excluded runs [`recalendared`] passes over per trigger before it
/// leaves a checkpoint for the polls: about 2.5 ms of a search.
pub const RECALENDAR_STEPS: u32 = 1_000;

fn recalendared_within(
    execute: &crate::store::Execute,
    job_paused: bool,
    now: Timestamp,
) -> Option<(ExecuteState, Option<Timestamp>)> {
    match execute.state {
        ExecuteState::Waiting | ExecuteState::Paused if execute.fire_state.next_fire_time.is_some() => {
            let next = rescheduled(execute, now);
            let state = if next.is_some() {
                execute.state
            } else {
                ExecuteState::Complete
            };
            Some((state, next))
        }
        ExecuteState::Complete => {
            let state = &execute.fire_state;
            let from = after_prev(state, now.saturating_add_millis(CHANGE_VISIBILITY_MS))?;
            if matches!(execute.trigger.schedule(), Schedule::Once) && execute.trigger.first_fire_time()? < from {
                return None;
            }
            let next = execute.trigger.first_at_or_after(state, from)?;
            let revived = if job_paused {
                ExecuteState::Paused
            } else {
                ExecuteState::Waiting
            };
            Some((revived, Some(next)))
        }
        _ => None,
    }
}

/// The next fire time of a trigger whose calendar changed at `now`: from the
/// earlier of its next fire time and the moment every node has seen the
/// change (a cron or fixed-rate trigger may fire sooner than before), after
/// its previous one; a fixed-delay or once trigger keeps its time if the
/// calendar still includes it.
fn rescheduled(execute: &crate::store::Execute, now: Timestamp) -> Option<Timestamp> {
    let state = &execute.fire_state;
    let visible_at = now.saturating_add_millis(CHANGE_VISIBILITY_MS);
    let next = state.next_fire_time?;
    let from = match execute.trigger.schedule() {
        Schedule::Cron { .. } | Schedule::FixedRate { .. } => next.min(visible_at),
        _ => next,
    };
    execute.trigger.first_at_or_after(state, after_prev(state, from)?)
}

/// `from`, or just after the previous fire time when that is not earlier.
fn after_prev(state: &TriggerState, from: Timestamp) -> Option<Timestamp> {
    match state.prev_fire_time {
        Some(prev) if prev >= from => prev.checked_add_millis(1),
        _ => Some(from),
    }
}

/// A new trigger's row: its columns, its signature, its first fire time
/// (none: it is complete) and its priority.
pub struct NewExecute {
    /// The trigger as the execute row's columns.
    pub columns: TriggerColumns,
    /// The columns' signature (`schedule_sig`), which tells a row edited
    /// by hand.
    pub signature: i64,
    /// Its first fire time; `None`: it is complete from the start.
    pub first: Option<Timestamp>,
    /// Its priority among fires due at one time.
    pub priority: i32,
}

impl NewExecute {
    /// The state a new row takes: complete without a first fire time,
    /// paused with a paused job, waiting otherwise.
    pub fn state(&self, paused: bool) -> ExecuteState {
        match (self.first, paused) {
            (None, _) => ExecuteState::Complete,
            (Some(_), true) => ExecuteState::Paused,
            (Some(_), false) => ExecuteState::Waiting,
        }
    }
}

/// The rows of new triggers created at `now` (database time), their
/// calendars read from `calendars`: no fire time earlier than the moment
/// every node has seen them.
pub fn new_executes(
    executes: &[ExecuteSpec],
    calendars: &CalendarSet,
    now: Timestamp,
) -> Result<Vec<NewExecute>, StoreError> {
    let visible_at = now.saturating_add_millis(CHANGE_VISIBILITY_MS);
    executes
        .iter()
        .map(|spec| {
            let trigger = calendars.attach(spec.trigger.clone()).map_err(|reason| {
                StoreError::Invalid(crate::Error::InvalidCalendar {
                    field: "calendar",
                    reason,
                })
            })?;
            let trigger = trigger.visible_from(now, visible_at);
            let columns = TriggerColumns::from_trigger(&trigger);
            Ok(NewExecute {
                signature: columns.signature(),
                columns,
                first: TriggerState::initial(&trigger).next_fire_time,
                priority: spec.priority,
            })
        })
        .collect()
}

/// The change log's detail for a job's edit: each field changed, `was →
/// now`, and the triggers before and after when they were replaced
/// (`before` is the job as stored, with its triggers when they are).
pub fn edit_detail(
    before: &crate::store::JobDetail,
    now: &crate::store::JobSpec,
    executes: Option<&[ExecuteSpec]>,
) -> String {
    fn shown(text: &str) -> String {
        const MOST: usize = 80;
        let mut end = text.len().min(MOST);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let cut = if end < text.len() { "…" } else { "" };
        format!("{:?}{cut}", &text[..end])
    }
    fn ms(d: Option<std::time::Duration>) -> String {
        d.map_or_else(|| "none".to_owned(), |d| format!("{} ms", d.as_millis()))
    }
    let was = &before.job.spec;
    let mut detail = Vec::new();
    let mut field = |name: &str, old: String, new: String| {
        if old != new {
            detail.push(format!("{name}: {old} → {new}"));
        }
    };
    field("name", shown(&was.name), shown(&now.name));
    field("handler", shown(&was.handler), shown(&now.handler));
    field("payload", shown(&was.payload), shown(&now.payload));
    field("description", shown(&was.description), shown(&now.description));
    field(
        "requests_recovery",
        was.requests_recovery.to_string(),
        now.requests_recovery.to_string(),
    );
    field(
        "allow_concurrent",
        was.allow_concurrent.to_string(),
        now.allow_concurrent.to_string(),
    );
    field("timeout", ms(was.timeout), ms(now.timeout));
    field(
        "max_attempts",
        was.retry.max_attempts.to_string(),
        now.retry.max_attempts.to_string(),
    );
    field("backoff", ms(Some(was.retry.backoff)), ms(Some(now.retry.backoff)));
    field("backoff_max", ms(was.retry.backoff_max), ms(now.retry.backoff_max));
    field(
        "parent",
        was.parent.as_deref().map_or_else(|| "none".to_owned(), shown),
        now.parent.as_deref().map_or_else(|| "none".to_owned(), shown),
    );
    if let Some(executes) = executes {
        let list = |summaries: Vec<String>| {
            if summaries.is_empty() {
                "none".to_owned()
            } else {
                summaries.join(", ")
            }
        };
        let old = list(
            before
                .executes
                .iter()
                .map(|e| crate::admin::summary(&e.trigger))
                .collect(),
        );
        let new = list(executes.iter().map(|e| crate::admin::summary(&e.trigger)).collect());
        detail.push(format!("triggers: {old} → {new}"));
    }
    if detail.is_empty() {
        "nothing changed".to_owned()
    } else {
        detail.join("; ")
    }
}

/// The change log's detail for a calendar added or replaced.
pub fn calendar_detail(existed: bool, definition: &CalendarDefinition, moved: usize) -> String {
    if existed {
        format!("replaced; {moved} trigger(s) rescheduled")
    } else {
        format!("added ({:?})", definition.kind)
    }
}

/// A calendar checked for storing (the scheduler's and its own names, its
/// definition on its own), as the JSON text stored.
pub fn calendar_text(scheduler: &str, name: &str, definition: &CalendarDefinition) -> Result<String, StoreError> {
    crate::store::check_name("scheduler name", scheduler)?;
    crate::store::check_name("calendar name", name)?;
    definition.calendar(None)?;
    serde_json::to_string(definition).map_err(|e| StoreError::Database {
        reason: format!("cannot write the calendar: {e}"),
    })
}

/// Refuses a purge of open fires (claimed or running), which are never
/// purged.
pub fn refuse_open_purge(state: crate::store::FireState) -> Result<(), StoreError> {
    use crate::store::FireState;
    if matches!(state, FireState::Claimed | FireState::Running) {
        return Err(StoreError::Invalid(crate::Error::InvalidJob {
            reason: format!("a {state} fire is open and is never purged"),
        }));
    }
    Ok(())
}

/// An actor's name as the change log keeps it: at most
/// [`MAX_NAME_BYTES`](crate::store::MAX_NAME_BYTES), cut on a character
/// boundary.
pub fn actor_name(actor: &str) -> &str {
    let mut end = actor.len().min(crate::store::MAX_NAME_BYTES);
    while !actor.is_char_boundary(end) {
        end -= 1;
    }
    &actor[..end]
}

/// Error text cut to [`MAX_ERROR_BYTES`] on a character boundary.
pub fn truncate(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Why a fire in `state` is not retried by hand; `None` when it may be
/// (failed, abandoned or misfired).
pub fn unretryable(fire_id: i64, state: &str) -> Option<String> {
    (!matches!(state, "failed" | "abandoned" | "misfired"))
        .then(|| format!("fire {fire_id} is {state}: only a failed, abandoned or misfired fire is retried"))
}

/// Why an attempt of a fire (from the one retried on) in `state` blocks
/// its retry: one open, or one that succeeded.
pub fn blocks_retry(attempt_id: i64, state: &str) -> Option<String> {
    match state {
        "claimed" | "running" | "pending" => {
            Some(format!("an attempt of this fire is open: fire {attempt_id} is {state}"))
        }
        "succeeded" => Some(format!("an attempt of this fire succeeded since: fire {attempt_id}")),
        _ => None,
    }
}
