//! Triggers: when an execute fires. Cron (expression + zone), fixed rate (every
//! interval from the start, like Quartz's simple trigger), fixed delay (an interval
//! after the previous fire finished) and once, each with a validity window and an
//! optional limit on how many times it fires.
//!
//! The scheduler's claim is a compare-and-set on `(prev_fire_time, next_fire_time)`;
//! [`Trigger::fires_until`] expands a row's state into the fires due before an
//! instant, each with the state the row holds before and after it is won.
//!
//! ```
//! use quartz_core::trigger::{Schedule, Trigger, TriggerState};
//! use quartz_core::Timestamp;
//!
//! let start = Timestamp::from_millis(1_767_225_600_000); // 2026-01-01T00:00:00Z
//! let every_second = Trigger::new(Schedule::fixed_rate_millis(1000)?, start)?;
//! let state = TriggerState::initial(&every_second);
//! let fires: Vec<_> = every_second.fires_until(&state, start.checked_add_millis(5000).unwrap()).collect();
//! assert_eq!(fires.len(), 5); // a row that fires every second appears five times in 5 s
//! assert_eq!(fires[1].before.prev_fire_time, Some(start));
//! # Ok::<(), quartz_core::Error>(())
//! ```

mod calendar;
mod overlap;
mod schedule;
mod spread;
mod state;

pub(crate) use calendar::CALENDAR_GIVE_UP_MS;
pub use calendar::{CALENDAR_SEARCH_STEPS, TriggerCalendar, with_search_steps};
pub use overlap::Overlap;
pub(crate) use schedule::check_interval;
pub use schedule::{MAX_INTERVAL_MILLIS, Schedule};
pub use spread::{Jitter, check_catch_up};
pub use state::{Fire, NextFire, TriggerState};

use crate::cron::{CronExpression, DstChoice};
use crate::error::Error;
use crate::misfire::policy::MisfirePolicy;
use crate::time::Timestamp;

/// A schedule with its validity window and repeat limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    schedule: Schedule,
    start: Timestamp,
    end: Option<Timestamp>,
    repeat_limit: Option<u64>,
    misfire_policy: MisfirePolicy,
    calendar: Option<TriggerCalendar>,
    jitter: Option<Jitter>,
    catch_up_ms: Option<i64>,
    overlap: Option<Overlap>,
}

impl Trigger {
    /// A trigger that may fire from `start` on (for `Once`, exactly at `start`),
    /// with no end and no limit.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] when a fixed-rate or fixed-delay interval is out
    /// of range (the [`Schedule`] constructors check this too).
    pub fn new(schedule: Schedule, start: Timestamp) -> Result<Trigger, Error> {
        match &schedule {
            Schedule::FixedRate { interval_ms } => check_interval("fixed-rate interval", *interval_ms)?,
            Schedule::FixedDelay { delay_ms } => check_interval("fixed-delay delay", *delay_ms)?,
            Schedule::Cron { .. } | Schedule::Once => {}
        }
        Ok(Trigger {
            schedule,
            start,
            end: None,
            repeat_limit: None,
            misfire_policy: MisfirePolicy::Smart,
            calendar: None,
            jitter: None,
            catch_up_ms: None,
            overlap: None,
        })
    }

    /// A cron trigger from `start` on: a Quartz expression (seconds first) in
    /// an IANA zone, parsed together.
    ///
    /// ```
    /// use quartz_core::Timestamp;
    /// use quartz_core::trigger::Trigger;
    ///
    /// let nightly = Trigger::cron("0 0 2 * * ?", "Europe/Paris", Timestamp::from_millis(0))?;
    /// assert_eq!(nightly.start(), Timestamp::from_millis(0));
    /// # Ok::<(), quartz_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCron`](crate::Error) or an unknown zone.
    pub fn cron(expr: &str, zone: &str, start: Timestamp) -> Result<Trigger, Error> {
        let expr = CronExpression::parse(expr)?;
        let zone = crate::cron::parse_time_zone(zone)?;
        Trigger::new(Schedule::cron(expr, zone), start)
    }

    /// A fixed-rate trigger: every `interval` from `start`.
    ///
    /// # Errors
    ///
    /// An interval not between 1 ms and 100 years.
    pub fn every(interval: std::time::Duration, start: Timestamp) -> Result<Trigger, Error> {
        Trigger::new(Schedule::every(interval)?, start)
    }

    /// A fixed-delay trigger: first at `start`, then `delay` after each run
    /// finished.
    ///
    /// # Errors
    ///
    /// A delay not between 1 ms and 100 years.
    pub fn after_each(delay: std::time::Duration, start: Timestamp) -> Result<Trigger, Error> {
        Trigger::new(Schedule::after_each(delay)?, start)
    }

    /// A trigger that fires once, at `at`.
    pub fn once(at: Timestamp) -> Trigger {
        Trigger {
            schedule: Schedule::Once,
            start: at,
            end: None,
            repeat_limit: None,
            misfire_policy: MisfirePolicy::Smart,
            calendar: None,
            jitter: None,
            catch_up_ms: None,
            overlap: None,
        }
    }

    /// The last instant the trigger may fire at (inclusive, as in Quartz).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] when `end` is before the start.
    pub fn with_end(mut self, end: Timestamp) -> Result<Trigger, Error> {
        if end < self.start {
            return Err(Error::InvalidTrigger {
                reason: format!("end {end} is before start {}", self.start),
            });
        }
        self.end = Some(end);
        Ok(self)
    }

    /// The most times the trigger fires in all; a trigger that has fired that many
    /// times is complete.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] when `limit` is 0.
    pub fn with_repeat_limit(mut self, limit: u64) -> Result<Trigger, Error> {
        if limit == 0 {
            return Err(Error::InvalidTrigger {
                reason: "a repeat limit must be at least 1".to_owned(),
            });
        }
        self.repeat_limit = Some(limit);
        Ok(self)
    }

    /// What happens when the trigger is found overdue (default
    /// [`MisfirePolicy::Smart`]); see [`crate::misfire`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] when the policy does not apply to the schedule,
    /// as Quartz refuses it: the reschedule variants are for fixed-rate and once
    /// triggers only, do-nothing is for cron and fixed-delay triggers only.
    pub fn with_misfire_policy(mut self, policy: MisfirePolicy) -> Result<Trigger, Error> {
        policy.check_applies_to(&self.schedule)?;
        self.misfire_policy = policy;
        Ok(self)
    }

    /// The misfire policy.
    pub fn misfire_policy(&self) -> MisfirePolicy {
        self.misfire_policy
    }

    /// The same cron trigger with an explicit choice for the local times a
    /// DST change skips or repeats (see [`DstChoice`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] for a trigger that is not a cron trigger and
    /// a choice other than Quartz's: only wall times can be skipped or
    /// repeated.
    pub fn with_dst(mut self, choice: DstChoice) -> Result<Trigger, Error> {
        match &mut self.schedule {
            Schedule::Cron { dst, .. } => *dst = choice,
            _ if choice.is_quartz() => {}
            _ => {
                return Err(Error::InvalidTrigger {
                    reason: "a DST choice applies to cron triggers only".to_owned(),
                });
            }
        }
        Ok(self)
    }

    /// The DST choice: a cron trigger's, or Quartz's for other schedules.
    pub fn dst(&self) -> DstChoice {
        match &self.schedule {
            Schedule::Cron { dst, .. } => *dst,
            _ => DstChoice::QUARTZ,
        }
    }

    /// The same trigger started afresh at `start` with a new repeat limit, as a
    /// reschedule-now misfire policy leaves it.
    pub(crate) fn restarted(&self, start: Timestamp, repeat_limit: Option<u64>) -> Trigger {
        Trigger {
            start,
            repeat_limit,
            ..self.clone()
        }
    }

    /// The trigger as it is stored when created or edited at `now` (database
    /// time): a first fire time from [`START_NOW_GRACE_MS`] before `now` up to
    /// `visible_at` (when every node has seen the change) is one no node
    /// could run on time, so the trigger starts at `visible_at` instead (a
    /// fixed-rate grid moves with it, a repeat limit counts from there). A
    /// first fire time further in the past is left alone: the start was meant
    /// to be in the past, and the misfire policy decides, as in Quartz.
    ///
    /// [`START_NOW_GRACE_MS`]: crate::store::START_NOW_GRACE_MS
    pub fn visible_from(&self, now: Timestamp, visible_at: Timestamp) -> Trigger {
        let Some(first) = self.first_fire_time() else {
            return self.clone();
        };
        let recent = now.saturating_add_millis(-crate::store::START_NOW_GRACE_MS);
        if first >= visible_at || first < recent || self.end.is_some_and(|end| end < visible_at) {
            return self.clone();
        }
        Trigger {
            start: visible_at,
            ..self.clone()
        }
    }

    /// How fire times are spaced.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The start of the validity window.
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// The end of the validity window (inclusive), if any.
    pub fn end(&self) -> Option<Timestamp> {
        self.end
    }

    /// The most times the trigger fires, if limited.
    pub fn repeat_limit(&self) -> Option<u64> {
        self.repeat_limit
    }

    /// The first fire time: the start itself, or for cron the first matching time
    /// at or after it (moved by the jitter, if any). `None` when there is none
    /// inside the window.
    pub fn first_fire_time(&self) -> Option<Timestamp> {
        self.plain_first().map(|t| self.jittered(t))
    }

    /// The first scheduled time, before any jitter.
    fn plain_first(&self) -> Option<Timestamp> {
        let first = self.first_candidate()?;
        match &self.schedule {
            Schedule::Once => self.included(first, |_| None),
            Schedule::FixedDelay { .. } => self.included(first, |t| self.within_end(t.checked_add_millis(1)?)),
            Schedule::Cron { .. } | Schedule::FixedRate { .. } => self.included(first, |t| self.candidate_after(t)),
        }
    }

    /// The first fire time before the calendar is asked.
    fn first_candidate(&self) -> Option<Timestamp> {
        let first = match &self.schedule {
            Schedule::Cron { expr, zone, dst } => {
                expr.next_after_with(self.start.checked_add_millis(-1)?, *zone, *dst)?
            }
            Schedule::FixedRate { .. } | Schedule::FixedDelay { .. } | Schedule::Once => self.start,
        };
        self.within_end(first)
    }

    /// The first scheduled fire time strictly after `after`. The repeat limit is
    /// counted against fires for most schedules (see [`fires_until`](Self::fires_until));
    /// a fixed-rate trigger's limit also ends its grid, as Quartz's simple trigger
    /// does: with a limit of `n` its last fire time is `start + (n - 1) * interval`,
    /// whatever was missed. For a fixed-delay trigger
    /// this is only the start, if after `after`: later fire times follow finishes,
    /// see [`next_after_finish`](Self::next_after_finish).
    ///
    /// With a calendar, times it excludes are passed over, as Quartz's
    /// triggers do (a fixed-rate trigger's excluded times still count against
    /// its limit's grid, as in Quartz). A search passes over at most
    /// [`CALENDAR_SEARCH_STEPS`] excluded runs: past that it answers a
    /// checkpoint, a time the calendar excludes ([`is_checkpoint`](Self::is_checkpoint)),
    /// every candidate before which is excluded too; asking again after the
    /// checkpoint resumes the search. The engine stores a checkpoint as the
    /// row's next fire time and resumes at a later poll, so that a calendar
    /// that excludes almost everything never stalls it.
    ///
    /// With a jitter, the answer is the first jittered time after `after`
    /// (see [`with_jitter`](Self::with_jitter)).
    pub fn fire_time_after(&self, after: Timestamp) -> Option<Timestamp> {
        let Some(jitter) = self.jitter else {
            return self.plain_after(after);
        };
        // The last scheduled time at or before `after` may be jittered past it.
        if let Some(t) = self.plain_at_or_before(after, jitter.max_ms) {
            let at = self.jittered(t);
            if at > after {
                return Some(at);
            }
        }
        self.plain_after(after).map(|t| self.jittered(t))
    }

    /// The first scheduled time strictly after `after`, before any jitter.
    fn plain_after(&self, after: Timestamp) -> Option<Timestamp> {
        if after < self.start {
            return self.plain_first();
        }
        self.included(self.candidate_after(after)?, |t| self.candidate_after(t))
    }

    /// The next scheduled time after `after` (at or after the start) before
    /// the calendar is asked.
    fn candidate_after(&self, after: Timestamp) -> Option<Timestamp> {
        if after < self.start {
            return self.first_candidate();
        }
        let next = match &self.schedule {
            Schedule::Cron { expr, zone, dst } => expr.next_after_with(after, *zone, *dst)?,
            Schedule::FixedRate { interval_ms } => {
                let elapsed = after.as_millis() - self.start.as_millis();
                let n = elapsed / interval_ms + 1;
                if self
                    .repeat_limit
                    .is_some_and(|limit| u64::try_from(n).map_or(true, |n| n >= limit))
                {
                    return None;
                }
                self.start.checked_add_millis(n.checked_mul(*interval_ms)?)?
            }
            Schedule::FixedDelay { .. } | Schedule::Once => return None,
        };
        self.within_end(next)
    }

    /// The first fire time at or after `now` of a trigger in `state`, as a
    /// recomputed row takes it (a schedule edited by hand, a calendar
    /// changed): `None` once the repeat limit is reached. A fixed-delay
    /// trigger, and a once trigger that has not fired, are due at `now` (or
    /// the first instant after it the calendar includes).
    pub fn first_at_or_after(&self, state: &TriggerState, now: Timestamp) -> Option<Timestamp> {
        if self.repeat_limit.is_some_and(|limit| state.times_triggered >= limit) {
            return None;
        }
        let first = self.first_fire_time()?;
        if first >= now {
            return Some(first);
        }
        match self.schedule {
            Schedule::Cron { .. } | Schedule::FixedRate { .. } => self.fire_time_after(now.checked_add_millis(-1)?),
            // Already due: fire now, unless a once trigger has fired.
            Schedule::Once if state.times_triggered > 0 => None,
            Schedule::Once => self.within_end(now).and_then(|now| self.included(now, |_| None)),
            Schedule::FixedDelay { .. } => self
                .within_end(now)
                .and_then(|now| self.included(now, |t| self.within_end(t.checked_add_millis(1)?))),
        }
    }

    /// For a fixed-delay trigger: the next fire time once a run finished at
    /// `finished_at` (moved by the jitter, if any). `None` for other
    /// schedules, or past the end.
    pub fn next_after_finish(&self, finished_at: Timestamp) -> Option<Timestamp> {
        self.plain_after_finish(finished_at).map(|t| self.jittered(t))
    }

    fn plain_after_finish(&self, finished_at: Timestamp) -> Option<Timestamp> {
        match &self.schedule {
            Schedule::FixedDelay { delay_ms } => {
                // Any instant may follow a finish: the first the calendar
                // includes, within the end.
                let first = finished_at.checked_add_millis(*delay_ms)?;
                self.within_end(first)?;
                self.included(first, |t| self.within_end(t.checked_add_millis(1)?))
            }
            _ => None,
        }
    }

    fn within_end(&self, t: Timestamp) -> Option<Timestamp> {
        match self.end {
            Some(end) if t > end => None,
            _ => Some(t),
        }
    }

    /// Spreads the fires: each scheduled time `t` fires at `t` plus an
    /// offset below `jitter.max_ms` and below the time to the next
    /// scheduled time, fixed per fire time (see [`Jitter`]). A jittered time
    /// past the end, or one the calendar excludes, stays at `t`. The misfire
    /// threshold, the ledger and the audit count from the jittered time.
    #[must_use]
    pub fn with_jitter(mut self, jitter: Jitter) -> Trigger {
        self.jitter = Some(jitter);
        self
    }

    /// The jitter, if the trigger has one.
    pub fn jitter(&self) -> Option<Jitter> {
        self.jitter
    }

    /// The catch-up window: a missed fire time further back than `window`
    /// from the moment the misfire is found is recorded as misfired and
    /// skipped, whatever the misfire policy; the policy decides only for the
    /// missed times within the window (see [`crate::misfire`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] when the window is under 1 ms or over 100
    /// years.
    pub fn with_catch_up(mut self, window: std::time::Duration) -> Result<Trigger, Error> {
        self.catch_up_ms = Some(check_catch_up(window)?);
        Ok(self)
    }

    /// The catch-up window, if the trigger has one.
    pub fn catch_up(&self) -> Option<std::time::Duration> {
        self.catch_up_ms.map(crate::store::duration_of)
    }

    /// The catch-up window in milliseconds.
    pub(crate) fn catch_up_ms(&self) -> Option<i64> {
        self.catch_up_ms
    }

    /// What a fire does when its job's previous fire is still running
    /// ([`Overlap`]); `None` keeps the job's own rule.
    pub fn with_overlap(mut self, overlap: Option<Overlap>) -> Trigger {
        self.overlap = overlap;
        self
    }

    /// The overlap policy, if the trigger has one.
    pub fn overlap(&self) -> Option<Overlap> {
        self.overlap
    }

    /// Scheduled time `t` moved by the jitter: not a checkpoint, not past
    /// the end, not into a time the calendar excludes.
    fn jittered(&self, t: Timestamp) -> Timestamp {
        let Some(jitter) = self.jitter else { return t };
        if self.is_checkpoint(t) {
            return t;
        }
        let next = match self.schedule {
            Schedule::Cron { .. } | Schedule::FixedRate { .. } => self.plain_after(t),
            Schedule::FixedDelay { .. } | Schedule::Once => None,
        };
        let at = t.saturating_add_millis(jitter.offset(t, next));
        if self.within_end(at).is_none() || !self.calendar_includes(at) {
            return t;
        }
        at
    }

    /// The last scheduled time (before any jitter) in `(at - span, at]`, if
    /// any: found by looking back 1, 2, 4… ms until a time turns up, then
    /// stepping forward to the last, so that a frequent schedule costs a few
    /// steps and a sparse one a few dozen.
    fn plain_at_or_before(&self, at: Timestamp, span: i64) -> Option<Timestamp> {
        let mut back: i64 = 1;
        loop {
            let from = at.checked_add_millis(-back)?;
            if let Some(mut t) = self.plain_after(from).filter(|t| *t <= at) {
                while let Some(n) = self.plain_after(t).filter(|n| *n <= at) {
                    t = n;
                }
                return Some(t);
            }
            if back >= span {
                return None;
            }
            back = back.saturating_mul(2).min(span);
        }
    }

    /// The fires due before `until`, in order, starting from the row's
    /// `next_fire_time`, each with the state the row holds before and after it is
    /// won. Stops at `until`, when the trigger completes (end or repeat limit), and
    /// after a fixed-delay fire (whose successor waits for its finish).
    pub fn fires_until<'a>(&'a self, state: &TriggerState, until: Timestamp) -> impl Iterator<Item = Fire> + 'a {
        let mut current = state.clone();
        std::iter::from_fn(move || {
            let NextFire::At(fire_time) = current.next_fire_time_kind() else {
                return None;
            };
            // A checkpoint is no fire: the poll resumes the search from it.
            if fire_time >= until || self.is_checkpoint(fire_time) {
                return None;
            }
            let times_triggered = current.times_triggered + 1;
            let next = if self.repeat_limit.is_some_and(|limit| times_triggered >= limit) {
                NextFire::Done
            } else if matches!(self.schedule, Schedule::FixedDelay { .. }) {
                NextFire::AfterFinish
            } else {
                self.fire_time_after(fire_time).map_or(NextFire::Done, NextFire::At)
            };
            let after = TriggerState {
                prev_fire_time: Some(fire_time),
                next_fire_time: match next {
                    NextFire::At(t) => Some(t),
                    NextFire::AfterFinish | NextFire::Done => None,
                },
                times_triggered,
                awaiting_finish: next == NextFire::AfterFinish,
                calendar_stamp: current.calendar_stamp,
            };
            let fire = Fire {
                fire_time,
                before: current.clone(),
                after: after.clone(),
                next,
            };
            current = after;
            Some(fire)
        })
    }
}
