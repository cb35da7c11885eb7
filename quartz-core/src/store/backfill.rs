//! Backfill: a job's fire times over a past range, run once each at a
//! bounded pace, as pending first attempts in the ledger (or, for a time
//! the ledger records as misfired or skipped, its next attempt). A fire
//! time that ran, or has an attempt under way, is left alone.

use super::{FireState, StoreError};
use crate::error::Error;
use crate::time::Timestamp;

/// The most fire times one backfill queues.
pub const MAX_BACKFILL: usize = 10_000;

/// One fire time to backfill: of which trigger (execute), when it was due,
/// and from when a node may run it (the pace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackfillFire {
    /// The trigger's execute row.
    pub execute_id: i64,
    /// The scheduled fire time.
    pub fire_time: Timestamp,
    /// When it may run.
    pub due_at: Timestamp,
}

/// A fire time a backfill queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedFire {
    /// Its ledger row (pending).
    pub fire_id: i64,
    /// The trigger's execute row.
    pub execute_id: i64,
    /// The scheduled fire time.
    pub fire_time: Timestamp,
    /// Its attempt: 1, or the next after a misfired or skipped one.
    pub attempt: u32,
}

/// What a backfill did ([`JobStore::backfill`](super::JobStore::backfill)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backfilled {
    /// The fire times queued, in the order asked.
    pub queued: Vec<QueuedFire>,
    /// The fire times left alone: they ran, or an attempt is under way.
    pub already: u64,
}

impl Backfilled {
    /// What the change log says of a backfill of `fires` that did this,
    /// on every backend.
    pub fn detail(&self, fires: &[BackfillFire]) -> String {
        format!(
            "{} fire time(s){}: {} queued, {} already in the ledger",
            fires.len(),
            backfill_span(fires),
            self.queued.len(),
            self.already
        )
    }
}

/// The range of a backfill, as the change log says it: ` from A to B`, or
/// nothing for none.
pub fn backfill_span(fires: &[BackfillFire]) -> String {
    match (fires.first(), fires.last()) {
        (Some(first), Some(last)) => format!(" from {} to {}", first.fire_time, last.fire_time),
        _ => String::new(),
    }
}

/// The attempt a backfill inserts for a fire time whose ledger rows are
/// `rows` (attempt, state): 1 with none; the next when every attempt was
/// misfired or skipped (it never ran); `None` when one ran or is under way.
/// Every backend applies this rule.
pub fn backfill_attempt(rows: impl IntoIterator<Item = (u32, FireState)>) -> Option<u32> {
    let mut last = 0;
    for (attempt, state) in rows {
        if !matches!(state, FireState::Misfired | FireState::Skipped) {
            return None;
        }
        last = last.max(attempt);
    }
    Some(last + 1)
}

/// Checks a backfill of job `name`, whose executes are `executes`: at most
/// [`MAX_BACKFILL`] fires, each of one of them.
///
/// # Errors
///
/// [`StoreError::Invalid`] saying which.
pub fn check_backfill(name: &str, fires: &[BackfillFire], executes: &[i64]) -> Result<(), StoreError> {
    let invalid = |reason: String| Err(StoreError::Invalid(Error::InvalidJob { reason }));
    if fires.len() > MAX_BACKFILL {
        return invalid(format!(
            "a backfill queues at most {MAX_BACKFILL} fire times, not {}: backfill a shorter range",
            fires.len()
        ));
    }
    if let Some(f) = fires.iter().find(|f| !executes.contains(&f.execute_id)) {
        return invalid(format!("trigger {} is not one of job {name:?}'s", f.execute_id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_never_ran_is_backfilled() {
        assert_eq!(backfill_attempt([]), Some(1));
        assert_eq!(backfill_attempt([(1, FireState::Misfired)]), Some(2));
        assert_eq!(
            backfill_attempt([(1, FireState::Skipped), (2, FireState::Misfired)]),
            Some(3)
        );
        assert_eq!(backfill_attempt([(1, FireState::Succeeded)]), None);
        assert_eq!(backfill_attempt([(1, FireState::Failed)]), None);
        assert_eq!(
            backfill_attempt([(1, FireState::Misfired), (2, FireState::Pending)]),
            None
        );
    }
}
