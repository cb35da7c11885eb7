//! Calendars: the times a trigger does not fire at, as in Quartz.
//!
//! A time a calendar excludes is simply not a fire time: neither a misfire
//! nor a skip. Each calendar has a time zone (its days are that zone's days)
//! and an optional base calendar, whose exclusions it adds to its own, so
//! calendars chain. The six kinds are Quartz's (`org.quartz.impl.calendar`,
//! 2.3.2), with Quartz's answers:
//!
//! - [`CalendarKind::Holiday`]: listed dates;
//! - [`CalendarKind::Annual`]: days of the year (month and day, any year);
//! - [`CalendarKind::Monthly`]: days of the month;
//! - [`CalendarKind::Weekly`]: days of the week;
//! - [`CalendarKind::Daily`]: a time range of every day, or (inverted) all but
//!   that range. As in Quartz, a range that is not inverted also excludes the
//!   first and the last millisecond of each day (00:00:00.000 and
//!   23:59:59.999);
//! - [`CalendarKind::Cron`]: the seconds a cron expression matches.
//!
//! ```
//! use chrono::NaiveDate;
//! use quartz_core::Timestamp;
//! use quartz_core::calendar::{Calendar, CalendarKind};
//!
//! let christmas = NaiveDate::from_ymd_opt(2026, 12, 25).unwrap();
//! let holidays = Calendar::new(CalendarKind::Holiday([christmas].into()), chrono_tz::Europe::Paris);
//! let noon = Timestamp::from_millis(1_798_196_400_000); // 2026-12-25T11:00:00Z, noon in Paris
//! assert!(!holidays.is_time_included(noon));
//! ```

use std::collections::BTreeSet;

use chrono::{DateTime, Datelike, NaiveDate, Weekday};
use chrono_tz::Tz;

use crate::cron::CronExpression;
use crate::time::Timestamp;

/// The milliseconds in a day.
pub const MS_PER_DAY: u32 = 86_400_000;

/// What a calendar excludes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CalendarKind {
    /// These dates, whole days in the calendar's zone.
    Holiday(BTreeSet<NaiveDate>),
    /// These days of every year: `(month, day)`, 1-based.
    Annual(BTreeSet<(u32, u32)>),
    /// These days of every month, 1 to 31.
    Monthly(BTreeSet<u32>),
    /// These days of every week.
    Weekly(Vec<Weekday>),
    /// The times of day from `start_ms` to `end_ms` (milliseconds after
    /// midnight, both included, `start_ms < end_ms`); with `invert`, every
    /// time of day but those.
    Daily {
        /// The first excluded (or, inverted, included) millisecond of the day.
        start_ms: u32,
        /// The last one.
        end_ms: u32,
        /// Exclude all but the range.
        invert: bool,
    },
    /// The seconds the expression matches (in the calendar's zone).
    Cron(CronExpression),
}

/// A calendar: what it excludes, in which zone, on top of which base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    /// What it excludes.
    pub kind: CalendarKind,
    /// The zone its days and times of day are in.
    pub zone: Tz,
    /// A calendar whose exclusions it adds to its own.
    pub base: Option<Box<Calendar>>,
}

impl Calendar {
    /// A calendar with no base.
    pub fn new(kind: CalendarKind, zone: Tz) -> Calendar {
        Calendar { kind, zone, base: None }
    }

    /// This calendar on top of `base`.
    #[must_use]
    pub fn with_base(mut self, base: Calendar) -> Calendar {
        self.base = Some(Box::new(base));
        self
    }

    /// Whether a trigger may fire at `t`: neither this calendar nor any of
    /// its bases excludes it.
    pub fn is_time_included(&self, t: Timestamp) -> bool {
        if let Some(base) = &self.base
            && !base.is_time_included(t)
        {
            return false;
        }
        let Some(utc) = DateTime::from_timestamp_millis(t.as_millis()) else {
            return true;
        };
        let local = utc.with_timezone(&self.zone);
        match &self.kind {
            CalendarKind::Holiday(dates) => !dates.contains(&local.date_naive()),
            CalendarKind::Annual(days) => !days.contains(&(local.month(), local.day())),
            CalendarKind::Monthly(days) => !days.contains(&local.day()),
            CalendarKind::Weekly(days) => !days.contains(&local.weekday()),
            CalendarKind::Daily {
                start_ms,
                end_ms,
                invert,
            } => self.daily_includes(t.as_millis(), local.date_naive(), *start_ms, *end_ms, *invert),
            CalendarKind::Cron(expr) => !expr.is_satisfied_by(t, self.zone),
        }
    }

    /// Quartz's `DailyCalendar.isTimeIncluded`: the day's bounds and the
    /// range's are the instants a lenient Java calendar in the zone sets.
    fn daily_includes(&self, t: i64, date: NaiveDate, start_ms: u32, end_ms: u32, invert: bool) -> bool {
        let at = |ms: u32| crate::cron::eval::java_instant_ms(&self.zone, date, i64::from(ms));
        let (Some(day_start), Some(day_end), Some(range_start), Some(range_end)) =
            (at(0), at(MS_PER_DAY - 1), at(start_ms), at(end_ms))
        else {
            return true;
        };
        if invert {
            (range_start..=range_end).contains(&t)
        } else {
            (t > day_start && t < range_start) || (t > range_end && t < day_end)
        }
    }
}
