//! One misfire decision in the making: what each policy does with an
//! overdue trigger, as the table of the module's docs says.

use super::{MisfireDecision, MisfirePolicy};
use crate::time::Timestamp;
use crate::trigger::{Schedule, Trigger, TriggerState};

/// One decision in the making.
pub(super) struct Decider<'a> {
    pub(super) trigger: &'a Trigger,
    pub(super) state: &'a TriggerState,
    pub(super) overdue: Timestamp,
    pub(super) now: Timestamp,
}

impl Decider<'_> {
    fn after_now(&self) -> Timestamp {
        self.now.checked_add_millis(1).unwrap_or(self.now)
    }

    fn with_next(&self, next: Option<Timestamp>, times_triggered: u64) -> TriggerState {
        TriggerState {
            prev_fire_time: self.state.prev_fire_time,
            next_fire_time: next,
            times_triggered,
            awaiting_finish: false,
            calendar_stamp: self.state.calendar_stamp,
        }
    }

    /// Fire once now; the missed times before now are skipped.
    pub(super) fn fire_now(&self, applied: MisfirePolicy) -> MisfireDecision {
        MisfireDecision {
            applied,
            state: self.with_next(Some(self.now), self.state.times_triggered),
            rescheduled: None,
            skipped: self.trigger.skipped(self.overdue, self.now),
            runs: vec![self.now],
            beyond_window: None,
        }
    }

    /// Skip to the next time after now (cron), or one delay after now (fixed delay).
    pub(super) fn do_nothing(&self) -> MisfireDecision {
        let next = match self.trigger.schedule() {
            Schedule::FixedDelay { .. } => self.trigger.next_after_finish(self.now),
            _ => self.trigger.fire_time_after(self.now),
        };
        MisfireDecision {
            applied: MisfirePolicy::DoNothing,
            state: self.with_next(next, self.state.times_triggered),
            rescheduled: None,
            skipped: self.trigger.skipped(self.overdue, next.unwrap_or(self.after_now())),
            runs: Vec::new(),
            beyond_window: None,
        }
    }

    /// Run the missed times, at most `cap` (the most recent), and no more than the
    /// repeat limit leaves.
    pub(super) fn ignore(&self, cap: usize) -> MisfireDecision {
        let left = self.trigger.repeat_limit().map_or(usize::MAX, |limit| {
            usize::try_from(limit.saturating_sub(self.state.times_triggered)).unwrap_or(usize::MAX)
        });
        let (latest, complete) = self.trigger.latest_times(self.overdue, self.now, cap.saturating_add(1));
        let (state, skipped, mut runs) = if complete && latest.len() <= cap {
            (self.state.clone(), None, latest)
        } else {
            // The oldest are skipped; the row resumes at the first kept time, with
            // the last skipped one as its previous fire time.
            let split = latest.len().saturating_sub(cap);
            let kept = latest[split..].to_vec();
            let (Some(&first_kept), Some(&last_skipped)) =
                (kept.first(), split.checked_sub(1).and_then(|i| latest.get(i)))
            else {
                return self.fire_now(MisfirePolicy::FireNow);
            };
            let state = TriggerState {
                prev_fire_time: Some(last_skipped),
                next_fire_time: Some(first_kept),
                times_triggered: self.state.times_triggered,
                awaiting_finish: false,
                calendar_stamp: self.state.calendar_stamp,
            };
            (state, self.trigger.skipped(self.overdue, first_kept), kept)
        };
        runs.truncate(left);
        MisfireDecision {
            applied: MisfirePolicy::IgnoreMisfires,
            state,
            rescheduled: None,
            skipped,
            runs,
            beyond_window: None,
        }
    }

    /// Restart the schedule at now, with the fires left (less `missed`, but at
    /// least one) as its new repeat limit and its count reset, as Quartz does. A
    /// trigger whose end has passed completes instead.
    pub(super) fn reschedule_now(&self, applied: MisfirePolicy, missed: u64) -> MisfireDecision {
        if self.trigger.end().is_some_and(|end| end < self.now) {
            return MisfireDecision {
                applied,
                state: self.with_next(None, self.state.times_triggered),
                rescheduled: None,
                skipped: self.trigger.skipped(self.overdue, self.after_now()),
                runs: Vec::new(),
                beyond_window: None,
            };
        }
        let (limit, times_triggered) = match self.trigger.repeat_limit() {
            Some(limit) if limit > 1 => {
                let left = limit.saturating_sub(self.state.times_triggered.saturating_add(missed));
                (Some(left.max(1)), 0)
            }
            other => (other, self.state.times_triggered),
        };
        MisfireDecision {
            applied,
            state: self.with_next(Some(self.now), times_triggered),
            rescheduled: Some(self.trigger.restarted(self.now, limit)),
            skipped: self.trigger.skipped(self.overdue, self.now),
            runs: vec![self.now],
            beyond_window: None,
        }
    }

    /// The next time after now on the original schedule; with `count_missed`, the
    /// times skipped count as fired.
    pub(super) fn reschedule_next(&self, applied: MisfirePolicy, count_missed: bool) -> MisfireDecision {
        let next = self.trigger.fire_time_after(self.now);
        let times_triggered = match next {
            Some(next) if count_missed => self
                .state
                .times_triggered
                .saturating_add(self.trigger.intervals_between(self.overdue, next)),
            _ => self.state.times_triggered,
        };
        MisfireDecision {
            applied,
            state: self.with_next(next, times_triggered),
            rescheduled: None,
            skipped: self.trigger.skipped(self.overdue, next.unwrap_or(self.after_now())),
            runs: Vec::new(),
            beyond_window: None,
        }
    }
}
