//! A trigger's calendar: the times it excludes are not fire times, found as
//! Quartz's triggers find them.

use std::sync::Arc;

use super::Trigger;
use crate::calendar::Calendar;
use crate::error::Error;
use crate::time::Timestamp;

/// The calendar a trigger names and, once the store has read it, the
/// calendar itself (its chain of bases resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerCalendar {
    /// The calendar's name in the scheduler.
    pub name: String,
    /// The calendar, when read; a trigger whose calendar is not read has no
    /// fire time (the store reads it with the trigger).
    pub calendar: Option<Arc<Calendar>>,
}

/// How far past a candidate the search for a fire time its calendar
/// includes goes before it gives up (Quartz gives up 100 years ahead).
pub(crate) const CALENDAR_GIVE_UP_MS: i64 = 100 * 366 * 86_400_000;

/// The most excluded runs one search passes over before it stops at a
/// checkpoint (see [`Trigger::fire_time_after`]): a calendar that excludes
/// almost every candidate (a cron calendar steps a second at a time) costs a
/// poll, a claim or a preview at most this many steps (about 0.1 s in a
/// release build), and the search resumes from the checkpoint when it is
/// next asked. It covers a hundred years of calendars that exclude whole
/// days, so that a trigger whose calendar excludes every day completes as
/// Quartz's does when its search gives up a hundred years ahead.
pub const CALENDAR_SEARCH_STEPS: u32 = 40_000;

thread_local! {
    /// The excluded runs a search on this thread passes over before it
    /// stops at a checkpoint ([`with_search_steps`]).
    static SEARCH_STEPS: std::cell::Cell<u32> = const { std::cell::Cell::new(CALENDAR_SEARCH_STEPS) };
}

/// Runs `f` with every calendar search it makes on this thread stopping at
/// a checkpoint after `steps` excluded runs instead of
/// [`CALENDAR_SEARCH_STEPS`]: for work that searches many triggers at once
/// and may leave the rest of each search to the polls (a calendar's
/// change moving every trigger that uses it, a page of jobs with their
/// next fire times), so that its cost stays a fraction of a second
/// whatever the calendars exclude.
pub fn with_search_steps<T>(steps: u32, f: impl FnOnce() -> T) -> T {
    let before = SEARCH_STEPS.with(|s| s.replace(steps));
    let out = f();
    SEARCH_STEPS.with(|s| s.set(before));
    out
}

impl Trigger {
    /// Names the calendar whose excluded times are not fire times (see
    /// [`crate::calendar`]). The store reads it with the trigger; until then
    /// the trigger has no fire time.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] when the name is empty or over 200 bytes.
    pub fn with_calendar(mut self, name: &str) -> Result<Trigger, Error> {
        if name.trim().is_empty() || name.len() > 200 {
            return Err(Error::InvalidTrigger {
                reason: format!("a calendar name must be 1 to 200 bytes, not blank; got {name:?}"),
            });
        }
        self.calendar = Some(TriggerCalendar {
            name: name.to_owned(),
            calendar: None,
        });
        Ok(self)
    }

    /// The trigger with its named calendar read: `calendar` is what the
    /// name stands for. Without a name, the trigger is unchanged.
    #[must_use]
    pub fn with_calendar_read(mut self, calendar: Arc<Calendar>) -> Trigger {
        if let Some(named) = &mut self.calendar {
            named.calendar = Some(calendar);
        }
        self
    }

    /// The name of the calendar the trigger uses, if any.
    pub fn calendar_name(&self) -> Option<&str> {
        self.calendar.as_ref().map(|c| c.name.as_str())
    }

    /// The calendar the trigger uses, with whether it has been read.
    pub fn calendar(&self) -> Option<&TriggerCalendar> {
        self.calendar.as_ref()
    }

    /// Whether `t` may be a fire time as far as the calendar says (always,
    /// without one).
    pub fn calendar_includes(&self, t: Timestamp) -> bool {
        match &self.calendar {
            None => true,
            Some(TriggerCalendar { calendar: None, .. }) => false,
            Some(TriggerCalendar {
                calendar: Some(calendar),
                ..
            }) => calendar.is_time_included(t),
        }
    }

    /// Whether `t`, as a search answered it, is a checkpoint rather than a
    /// fire time: a time the trigger's calendar excludes, at which a search
    /// that passed over [`CALENDAR_SEARCH_STEPS`] excluded runs stopped.
    /// Every candidate up to it is excluded; the next search starts after it.
    pub fn is_checkpoint(&self, t: Timestamp) -> bool {
        self.calendar.as_ref().is_some_and(|c| c.calendar.is_some()) && !self.calendar_includes(t)
    }

    /// The first of `first` and the candidates after it (`after(t)` is the
    /// next candidate after `t`) that the calendar includes, as Quartz's
    /// triggers search: `None` when there is none within
    /// [`CALENDAR_GIVE_UP_MS`], or when the calendar is not read; a
    /// checkpoint (an excluded candidate) after [`CALENDAR_SEARCH_STEPS`]
    /// excluded runs, so that no caller's search is unbounded.
    pub(super) fn included(
        &self,
        first: Timestamp,
        after: impl Fn(Timestamp) -> Option<Timestamp>,
    ) -> Option<Timestamp> {
        let Some(named) = &self.calendar else {
            return Some(first);
        };
        let calendar = named.calendar.as_ref()?;
        let give_up = first.checked_add_millis(CALENDAR_GIVE_UP_MS)?;
        let mut t = first;
        let mut steps = 0;
        let most = SEARCH_STEPS.with(std::cell::Cell::get);
        while let Some(until) = calendar.excluded_until(t) {
            steps += 1;
            if steps > most {
                return Some(t);
            }
            // Every instant before `until` is excluded: the next candidate is
            // the first at or after it.
            t = after(until.checked_add_millis(-1)?.max(t))?;
            if t > give_up {
                return None;
            }
        }
        Some(t)
    }
}
