//! Misfires: what a trigger does when it is found overdue.
//!
//! A trigger has misfired when its `next_fire_time` is at or before
//! `now - threshold` (database time): the cluster was down, the node paused, the
//! pool was full. Its [`MisfirePolicy`] then decides, with the semantics of
//! Quartz's `CronTrigger` and `SimpleTrigger` (fixed-rate and once triggers are
//! Quartz's simple trigger; fixed-delay triggers have no Quartz equivalent and
//! take the cron policies):
//!
//! | policy | cron | fixed rate / once | fixed delay |
//! |---|---|---|---|
//! | [`Smart`](MisfirePolicy::Smart) (default) | fire now | once or a limit of 1: fire now; no limit: reschedule next with remaining count; otherwise reschedule now with existing count | fire now |
//! | [`FireNow`](MisfirePolicy::FireNow) | fire once now, then the next time after now | once or a limit of 1: fire now; otherwise reschedule now with remaining count | fire now |
//! | [`IgnoreMisfires`](MisfirePolicy::IgnoreMisfires) | fire every missed time, oldest first, at most [`MisfireSettings::ignore_cap`] of them (the most recent) | same | fire the missed time |
//! | [`DoNothing`](MisfirePolicy::DoNothing) | skip to the next time after now | refused | skip; next fire one delay after now |
//! | [`RescheduleNowWithExistingCount`](MisfirePolicy::RescheduleNowWithExistingCount) | refused | restart the schedule now; the fires left stay as they were | refused |
//! | [`RescheduleNowWithRemainingCount`](MisfirePolicy::RescheduleNowWithRemainingCount) | refused | restart the schedule now; the missed fires count as fired | refused |
//! | [`RescheduleNextWithExistingCount`](MisfirePolicy::RescheduleNextWithExistingCount) | refused | the next time after now on the original schedule; times triggered unchanged | refused |
//! | [`RescheduleNextWithRemainingCount`](MisfirePolicy::RescheduleNextWithRemainingCount) | refused | the next time after now on the original schedule; the missed fires count as fired | refused |
//!
//! As in Quartz, the reschedule-now policies restart a fixed-rate trigger at `now`
//! with the fires it has left as its new repeat limit and its count reset to 0
//! (the decision carries the rescheduled trigger); the end time still holds, and a
//! trigger whose end has passed completes instead. "Fire now" fires even when the
//! end has passed, as Quartz does: it stands in for the missed fires.
//!
//! A trigger with a catch-up window ([`Trigger::with_catch_up`]) makes up only
//! for the missed times within the window before `now`: the older ones are
//! skipped whatever the policy and reported apart, in
//! [`MisfireDecision::beyond_window`]; the policy then decides as though the
//! first missed time within the window were the overdue one. With none
//! within it, the trigger moves to its next time (a fixed delay: one delay
//! after now), so a service that was down for a week does not replay a week.
//!
//! Every missed time that will not run is reported in [`MisfireDecision::skipped`]
//! as a range with a count, so the ledger can record it; the times that will run
//! are in [`MisfireDecision::runs`].
//!
//! ```
//! use quartz_core::cron::CronExpression;
//! use quartz_core::misfire::{MisfirePolicy, MisfireSettings};
//! use quartz_core::trigger::{Schedule, Trigger, TriggerState};
//! use quartz_core::{Timestamp, Tz};
//!
//! let start = Timestamp::from_millis(1_767_225_600_000); // 2026-01-01T00:00:00Z
//! let every_minute = Trigger::new(Schedule::cron(CronExpression::parse("0 * * * * ?")?, Tz::UTC), start)?;
//! let overdue = TriggerState::initial(&every_minute); // due at 00:00, never fired
//! let now = Timestamp::from_millis(1_767_225_600_000 + 10 * 60_000 + 30_000); // 00:10:30
//!
//! // The default for cron: fire once now, and record the 11 missed minutes 00:00-00:10.
//! let decision = every_minute.on_misfire(&overdue, now, &MisfireSettings::default()).expect("overdue");
//! assert_eq!(decision.applied, MisfirePolicy::FireNow);
//! assert_eq!(decision.runs, [now]);
//! assert_eq!(decision.skipped.as_ref().map(|s| s.count), Some(11));
//! assert_eq!(decision.state.next_fire_time, Some(now));
//! # Ok::<(), quartz_core::Error>(())
//! ```

mod decider;
pub(crate) mod policy;

use std::collections::VecDeque;

use crate::time::Timestamp;
use crate::trigger::{Schedule, Trigger, TriggerState};
use decider::Decider;
pub use policy::MisfirePolicy;

/// The default misfire threshold: 5 seconds.
pub const DEFAULT_THRESHOLD_MILLIS: i64 = 5_000;

/// The default most missed fires the ignore policy runs.
pub const DEFAULT_IGNORE_CAP: usize = 1_000;

/// Skipped fires are counted one by one (for cron) up to this many; beyond it
/// the count is a lower bound and [`SkippedFires::count_exact`] is false.
pub const MAX_COUNTED_SKIPS: u64 = 100_000;

/// The cluster-wide settings misfire decisions depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MisfireSettings {
    /// How late (database time) a fire may be found before it counts as
    /// misfired. Default [`DEFAULT_THRESHOLD_MILLIS`] ms.
    pub threshold: std::time::Duration,
    /// The most missed fires [`MisfirePolicy::IgnoreMisfires`] runs: beyond it the
    /// oldest are skipped and the most recent `ignore_cap` run. At least 1;
    /// default [`DEFAULT_IGNORE_CAP`].
    pub ignore_cap: usize,
}

impl MisfireSettings {
    /// The threshold in milliseconds, as database times are compared.
    pub fn threshold_ms(&self) -> i64 {
        let ms = i64::try_from(self.threshold.as_millis()).unwrap_or(i64::MAX);
        if crate::mutants::on("misfire-threshold-late") {
            return ms.saturating_add(5_000);
        }
        ms
    }
}

impl Default for MisfireSettings {
    fn default() -> MisfireSettings {
        MisfireSettings {
            threshold: std::time::Duration::from_millis(DEFAULT_THRESHOLD_MILLIS.unsigned_abs()),
            ignore_cap: DEFAULT_IGNORE_CAP,
        }
    }
}

/// A range of scheduled fire times that will not run: every time `t` of the
/// trigger with `from <= t < until`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedFires {
    /// The first skipped time (the overdue `next_fire_time`).
    pub from: Timestamp,
    /// The first time after the range: the next time that runs or is scheduled,
    /// or `now + 1 ms` when the trigger completes.
    pub until: Timestamp,
    /// How many scheduled times the range holds (at least 1).
    pub count: u64,
    /// False when counting stopped at [`MAX_COUNTED_SKIPS`] and `count` is a
    /// lower bound.
    pub count_exact: bool,
}

/// What a misfired trigger does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MisfireDecision {
    /// The policy applied: the trigger's own, or what [`MisfirePolicy::Smart`]
    /// and [`MisfirePolicy::FireNow`] resolve to for its schedule. Never `Smart`.
    pub applied: MisfirePolicy,
    /// The state the row moves to, by compare-and-set from the overdue state.
    /// When [`runs`](Self::runs) is not empty its `next_fire_time` is the first of
    /// them, and the ordinary fire path fires them.
    pub state: TriggerState,
    /// The trigger the row holds from now on, when the policy restarted it (the
    /// reschedule-now policies on a fixed-rate or once trigger): a new start and
    /// repeat limit.
    pub rescheduled: Option<Trigger>,
    /// The missed times that will not run, for the ledger.
    pub skipped: Option<SkippedFires>,
    /// The missed times further back than the trigger's catch-up window,
    /// skipped whatever the policy, for the ledger: they come before
    /// [`skipped`](Self::skipped), which holds what the policy skipped of
    /// the times within the window.
    pub beyond_window: Option<SkippedFires>,
    /// The times that will run now, in order (some may be missed times that run
    /// late, under the ignore policy).
    pub runs: Vec<Timestamp>,
}

impl Trigger {
    /// The policy the trigger's own resolves to for its schedule, as Quartz
    /// resolves it: never [`MisfirePolicy::Smart`]. Smart is fire now for cron,
    /// fixed delay, once and a repeat limit of 1; for other fixed-rate triggers it
    /// is reschedule next with remaining count without a limit and reschedule now
    /// with existing count with one. Fire now on such a trigger is reschedule now
    /// with remaining count.
    pub fn resolved_misfire_policy(&self) -> MisfirePolicy {
        let limited_to_one = matches!(self.schedule(), Schedule::Once) || self.repeat_limit() == Some(1);
        match (self.misfire_policy(), self.schedule()) {
            (MisfirePolicy::Smart, Schedule::FixedRate { .. } | Schedule::Once) => {
                if limited_to_one {
                    MisfirePolicy::FireNow
                } else if self.repeat_limit().is_none() {
                    MisfirePolicy::RescheduleNextWithRemainingCount
                } else {
                    MisfirePolicy::RescheduleNowWithExistingCount
                }
            }
            (MisfirePolicy::Smart, _) => MisfirePolicy::FireNow,
            (MisfirePolicy::FireNow, Schedule::FixedRate { .. }) if !limited_to_one => {
                MisfirePolicy::RescheduleNowWithRemainingCount
            }
            (policy, _) => policy,
        }
    }

    /// Whether a trigger in `state` has misfired at database time `now`: its next
    /// fire time is at or before `now - threshold` (as in Quartz). A fixed-delay
    /// trigger waiting for a finish has not.
    pub fn has_misfired(&self, state: &TriggerState, now: Timestamp, threshold_ms: i64) -> bool {
        !state.awaiting_finish
            && state
                .next_fire_time
                .is_some_and(|next| next.as_millis() <= now.as_millis().saturating_sub(threshold_ms))
    }

    /// The misfire policy's decision for a trigger in `state` at database time
    /// `now`, or `None` when it has not misfired. Pure: the caller applies
    /// [`MisfireDecision::state`] by compare-and-set and records the skipped fires.
    pub fn on_misfire(
        &self,
        state: &TriggerState,
        now: Timestamp,
        settings: &MisfireSettings,
    ) -> Option<MisfireDecision> {
        if !self.has_misfired(state, now, settings.threshold_ms()) {
            return None;
        }
        let overdue = state.next_fire_time?;
        if let Some(window) = self.catch_up_ms() {
            let cutoff = now.saturating_add_millis(-window);
            if overdue < cutoff {
                return Some(self.beyond_catch_up(state, overdue, cutoff, now, settings));
            }
        }
        let applied = self.resolved_misfire_policy();
        let decision = Decider {
            trigger: self,
            state,
            overdue,
            now,
        };
        Some(match applied {
            MisfirePolicy::Smart | MisfirePolicy::FireNow => decision.fire_now(applied),
            MisfirePolicy::IgnoreMisfires => decision.ignore(settings.ignore_cap.max(1)),
            MisfirePolicy::DoNothing => decision.do_nothing(),
            MisfirePolicy::RescheduleNowWithExistingCount => decision.reschedule_now(applied, 0),
            MisfirePolicy::RescheduleNowWithRemainingCount => {
                // Quartz: the fire now stands in for one of the missed times.
                let missed = self.intervals_between(overdue, now);
                decision.reschedule_now(applied, missed)
            }
            MisfirePolicy::RescheduleNextWithExistingCount => decision.reschedule_next(applied, false),
            MisfirePolicy::RescheduleNextWithRemainingCount => decision.reschedule_next(applied, true),
        })
    }

    /// A misfire whose first missed time is before `cutoff`, the start of
    /// the catch-up window: the times before it are skipped whatever the
    /// policy; the policy decides for the missed times within the window, as
    /// though the first of them were the trigger's overdue time; with none,
    /// the trigger moves to its first time within the window (or, for a
    /// fixed delay, one delay after now).
    fn beyond_catch_up(
        &self,
        state: &TriggerState,
        overdue: Timestamp,
        cutoff: Timestamp,
        now: Timestamp,
        settings: &MisfireSettings,
    ) -> MisfireDecision {
        let first_within = match self.schedule() {
            Schedule::FixedDelay { .. } => None,
            _ => cutoff.checked_add_millis(-1).and_then(|t| self.fire_time_after(t)),
        };
        let resumed = TriggerState {
            next_fire_time: first_within,
            ..state.clone()
        };
        if let Some(mut decision) = first_within.and_then(|_| self.on_misfire(&resumed, now, settings)) {
            decision.beyond_window = first_within.and_then(|t| self.skipped(overdue, t));
            return decision;
        }
        let next = match self.schedule() {
            Schedule::FixedDelay { .. } => self.next_after_finish(now),
            _ => first_within,
        };
        let applied = match self.schedule() {
            Schedule::Cron { .. } | Schedule::FixedDelay { .. } => MisfirePolicy::DoNothing,
            Schedule::FixedRate { .. } | Schedule::Once => MisfirePolicy::RescheduleNextWithExistingCount,
        };
        MisfireDecision {
            applied,
            state: TriggerState {
                next_fire_time: next,
                awaiting_finish: false,
                ..state.clone()
            },
            rescheduled: None,
            skipped: None,
            beyond_window: self.skipped(overdue, next.unwrap_or(now.saturating_add_millis(1))),
            runs: Vec::new(),
        }
    }

    /// Quartz's `computeNumTimesFiredBetween`: whole intervals from `from` to
    /// `to`; 0 for schedules without an interval.
    fn intervals_between(&self, from: Timestamp, to: Timestamp) -> u64 {
        match self.schedule() {
            Schedule::FixedRate { interval_ms } => {
                u64::try_from((to.as_millis() - from.as_millis()) / interval_ms).unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// The scheduled times from `from` (itself the first) onwards: `from`, then
    /// each next fire time.
    fn times_from(&self, from: Timestamp) -> impl Iterator<Item = Timestamp> + '_ {
        self.stops_from(Some(from))
    }

    /// `first` and the fire times after it, passing over the checkpoints a
    /// calendar's search stops at (see [`Trigger::fire_time_after`]).
    fn stops_from(&self, first: Option<Timestamp>) -> impl Iterator<Item = Timestamp> + '_ {
        std::iter::successors(first, move |t| self.fire_time_after(*t)).filter(|t| !self.is_checkpoint(*t))
    }

    /// How many scheduled times lie in `[from, until)`, `from` being one of them;
    /// and whether the count is exact.
    fn count_between(&self, from: Timestamp, until: Timestamp) -> (u64, bool) {
        if until <= from {
            return (0, true);
        }
        if let (Schedule::FixedRate { interval_ms }, None) = (self.schedule(), self.jitter()) {
            // Arithmetic: the grid after `from`, up to its last valid time.
            let Some(second) = self.fire_time_after(from) else {
                return (1, true);
            };
            let mut last = until.as_millis() - 1;
            if let Some(end) = self.end() {
                last = last.min(end.as_millis());
            }
            if let Some(limit) = self.repeat_limit() {
                let grid_end = i64::try_from(limit - 1)
                    .ok()
                    .and_then(|n| n.checked_mul(*interval_ms))
                    .and_then(|span| self.start().as_millis().checked_add(span));
                if let Some(grid_end) = grid_end {
                    last = last.min(grid_end);
                }
            }
            let rest = if last >= second.as_millis() {
                u64::try_from((last - second.as_millis()) / interval_ms + 1).unwrap_or(0)
            } else {
                0
            };
            return (1 + rest, true);
        }
        let mut count = 0;
        for t in self.times_from(from) {
            if t >= until {
                return (count, true);
            }
            if count == MAX_COUNTED_SKIPS {
                return (count, false);
            }
            count += 1;
        }
        (count, true)
    }

    /// The latest `n` scheduled times in `[from, now]`, oldest first, and whether
    /// they are all the times in the range. Searches backwards from `now` by
    /// bisection so that a long outage of a frequent schedule costs a bounded
    /// number of steps, never one per missed time.
    fn latest_times(&self, from: Timestamp, now: Timestamp, n: usize) -> (Vec<Timestamp>, bool) {
        let ceiling = n.saturating_mul(4).max(n + 1);
        // The times in [lo, now], keeping the last n, or None past `ceiling` times.
        let probe = |lo: Timestamp| -> Option<VecDeque<Timestamp>> {
            let first = if lo <= from {
                Some(from)
            } else {
                self.fire_time_after(lo.checked_add_millis(-1)?)
            };
            let mut kept = VecDeque::with_capacity(n + 1);
            let mut seen = 0;
            for t in self.stops_from(first) {
                if t > now {
                    break;
                }
                seen += 1;
                if seen > ceiling {
                    return None;
                }
                if kept.len() == n {
                    kept.pop_front();
                }
                kept.push_back(t);
            }
            Some(kept)
        };
        if let Some(all) = probe(from) {
            return (all.into(), true);
        }
        // Invariant: [lo, now] holds more than `ceiling` times, [hi, now] fewer than n.
        let (mut lo, mut hi) = (from.as_millis(), now.as_millis());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match probe(Timestamp::from_millis(mid)) {
                None => lo = mid,
                Some(kept) if kept.len() < n => hi = mid,
                Some(kept) => return (kept.into(), false),
            }
        }
        // Adjacent bounds: one millisecond adds at most one time, so this is
        // reached only for a pathological n; fall back to the latest times found.
        (
            probe(Timestamp::from_millis(hi)).map(Vec::from).unwrap_or_default(),
            false,
        )
    }

    fn skipped(&self, from: Timestamp, until: Timestamp) -> Option<SkippedFires> {
        let (count, count_exact) = self.count_between(from, until);
        (count > 0).then_some(SkippedFires {
            from,
            until,
            count,
            count_exact,
        })
    }
}
