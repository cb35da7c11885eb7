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

use chrono::{DateTime, Datelike, NaiveDate, Offset, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::cron::CronExpression;
use crate::error::Error;
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
        self.local(t).is_none_or(|local| self.own_includes(t, &local))
    }

    /// `t` in the calendar's zone (`None` out of chrono's range, where
    /// every time is included).
    fn local(&self, t: Timestamp) -> Option<DateTime<Tz>> {
        DateTime::from_timestamp_millis(t.as_millis()).map(|utc| utc.with_timezone(&self.zone))
    }

    /// Whether this calendar's own kind, without its bases, includes `t`.
    fn own_includes(&self, t: Timestamp, local: &DateTime<Tz>) -> bool {
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

    /// When `t` is excluded, an instant after it up to which every instant
    /// is excluded too (not always the last one: a lower bound, so a search
    /// for the next included time can jump there); `None` when `t` is
    /// included.
    pub fn excluded_until(&self, t: Timestamp) -> Option<Timestamp> {
        if let Some(base) = &self.base
            && let Some(until) = base.excluded_until(t)
        {
            return Some(until);
        }
        // The bases include `t`: only this calendar's own kind can exclude it.
        let local = self.local(t)?;
        if self.own_includes(t, &local) {
            return None;
        }
        let ms = t.as_millis();
        let date = local.date_naive();
        let until = match &self.kind {
            CalendarKind::Holiday(_) | CalendarKind::Annual(_) | CalendarKind::Monthly(_) | CalendarKind::Weekly(_) => {
                self.next_day_bound(ms, date)
            }
            CalendarKind::Daily {
                start_ms,
                end_ms,
                invert,
            } => {
                let at = |date: NaiveDate, ms: u32| crate::cron::eval::java_instant_ms(&self.zone, date, i64::from(ms));
                match (at(date, *start_ms), at(date, *end_ms)) {
                    (Some(start), Some(end)) if !invert && (start..=end).contains(&ms) => end + 1,
                    (Some(start), Some(_)) if *invert && ms < start => start,
                    (Some(_), Some(end)) if *invert && ms > end => {
                        date.succ_opt().and_then(|next| at(next, *start_ms)).unwrap_or(ms + 1)
                    }
                    _ => ms + 1,
                }
            }
            CalendarKind::Cron(_) => (ms.div_euclid(1000) + 1) * 1000,
        };
        Some(Timestamp::from_millis(until.max(ms + 1)))
    }

    /// An instant no later than the first one whose local date is after
    /// `date` (the offsets around the change of day may differ from `t`'s:
    /// the largest of those over the next two days gives the earliest).
    fn next_day_bound(&self, t: i64, date: NaiveDate) -> i64 {
        let Some(midnight) = date.succ_opt().and_then(|d| d.and_hms_opt(0, 0, 0)) else {
            return t + 1;
        };
        let offset_ms = |at: i64| {
            DateTime::from_timestamp_millis(at).map_or(0, |u| {
                i64::from(u.with_timezone(&self.zone).offset().fix().local_minus_utc()) * 1000
            })
        };
        let largest = [0, 1, 2]
            .iter()
            .map(|d| offset_ms(t + d * i64::from(MS_PER_DAY)))
            .max()
            .unwrap_or(0);
        midnight.and_utc().timestamp_millis() - largest
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

/// The longest chain of base calendars followed.
pub const MAX_CHAIN: usize = 16;

/// The kinds of calendar, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CalendarType {
    /// Listed dates.
    Holiday,
    /// Days of the year.
    Annual,
    /// Days of the month.
    Monthly,
    /// Days of the week.
    Weekly,
    /// A time range of every day.
    Daily,
    /// The seconds a cron expression matches.
    Cron,
}

/// A calendar as it is stored (its JSON) and as the CLI and the API take it,
/// its base named rather than resolved.
///
/// ```
/// use quartz_core::calendar::CalendarDefinition;
///
/// let holidays: CalendarDefinition = serde_json::from_str(
///     r#"{"kind": "holiday", "days": ["2026-12-25", "2027-01-01"], "time_zone": "Europe/Paris"}"#,
/// )?;
/// let calendar = holidays.calendar(None)?;
/// assert!(!calendar.is_time_included(quartz_core::Timestamp::from_millis(1_798_196_400_000)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CalendarDefinition {
    /// What it excludes.
    pub kind: CalendarType,
    /// The days excluded: for `holiday` dates (`2026-12-25`), for `annual`
    /// days of the year (`12-25`), for `monthly` days of the month (`1` to
    /// `31`), for `weekly` days of the week (`mon` … `sun`).
    #[serde(default, alias = "dates", skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<String>,
    /// For `daily`: the range, `HH:MM[:SS[.mmm]]-HH:MM[:SS[.mmm]]`, both ends
    /// included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// For `daily`: exclude every time but the range.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invert: bool,
    /// For `cron`: the expression whose seconds are excluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA zone of its days and times (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// A base calendar, by name, whose exclusions it adds to its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidCalendar {
        field,
        reason: reason.into(),
    }
}

/// `HH:MM[:SS[.mmm]]` as milliseconds after midnight.
fn time_of_day(text: &str) -> Option<u32> {
    let (hms, ms) = text.split_once('.').unwrap_or((text, "0"));
    let parts: Vec<&str> = hms.split(':').collect();
    if !(2..=3).contains(&parts.len()) || ms.is_empty() || ms.len() > 3 {
        return None;
    }
    let number = |s: &str, max: u32| s.parse::<u32>().ok().filter(|v| *v <= max && !s.is_empty());
    let h = number(parts[0], 23)?;
    let m = number(parts[1], 59)?;
    let s = parts.get(2).map_or(Some(0), |s| number(s, 59))?;
    let ms = format!("{ms:0<3}").parse::<u32>().ok()?;
    Some(((h * 60 + m) * 60 + s) * 1000 + ms)
}

impl CalendarDefinition {
    /// What it excludes, in words, as the CLI and the console show it:
    /// `holiday: 2026-12-25, 2027-01-01`, `weekly: sat, sun`, `monthly: day
    /// 1, 15`, `daily: all but 09:00-17:30`, `cron: * * 0-6 ? * *`.
    pub fn describe(&self) -> String {
        let days = self.days.join(", ");
        match self.kind {
            CalendarType::Holiday => format!("holiday: {days}"),
            CalendarType::Annual => format!("annual: {days}"),
            CalendarType::Monthly => format!("monthly: day {days}"),
            CalendarType::Weekly => format!("weekly: {days}"),
            CalendarType::Daily => {
                let range = self.range.as_deref().unwrap_or("?");
                if self.invert {
                    format!("daily: all but {range}")
                } else {
                    format!("daily: {range}")
                }
            }
            CalendarType::Cron => format!("cron: {}", self.cron.as_deref().unwrap_or("?")),
        }
    }

    /// What it excludes, checked.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCalendar`] naming the field at fault.
    pub fn kind(&self) -> Result<CalendarKind, Error> {
        let needs_days = |what: &str| {
            if self.days.is_empty() {
                Err(invalid("days", format!("a {what} calendar needs at least one day")))
            } else {
                Ok(())
            }
        };
        let bad_day = |d: &String, form: &str| invalid("days", format!("{d:?} is not {form}"));
        let unused = |field: &'static str, set: bool| {
            if set {
                Err(invalid(field, format!("a {:?} calendar takes no {field}", self.kind)))
            } else {
                Ok(())
            }
        };
        if self.kind != CalendarType::Daily {
            unused("range", self.range.is_some())?;
            unused("invert", self.invert)?;
        }
        if self.kind != CalendarType::Cron {
            unused("cron", self.cron.is_some())?;
        }
        Ok(match self.kind {
            CalendarType::Holiday => {
                needs_days("holiday")?;
                CalendarKind::Holiday(
                    self.days
                        .iter()
                        .map(|d| d.parse::<NaiveDate>().map_err(|_| bad_day(d, "a date (2026-12-25)")))
                        .collect::<Result<_, _>>()?,
                )
            }
            CalendarType::Annual => {
                needs_days("annual")?;
                let day = |d: &String| {
                    let (m, day) = d.split_once('-')?;
                    let (m, day) = (m.parse::<u32>().ok()?, day.parse::<u32>().ok()?);
                    // A leap year, so that 02-29 is a day of the year.
                    NaiveDate::from_ymd_opt(2000, m, day).map(|_| (m, day))
                };
                CalendarKind::Annual(
                    self.days
                        .iter()
                        .map(|d| day(d).ok_or_else(|| bad_day(d, "a day of the year (12-25)")))
                        .collect::<Result<_, _>>()?,
                )
            }
            CalendarType::Monthly => {
                needs_days("monthly")?;
                CalendarKind::Monthly(
                    self.days
                        .iter()
                        .map(|d| {
                            d.parse::<u32>()
                                .ok()
                                .filter(|n| (1..=31).contains(n))
                                .ok_or_else(|| bad_day(d, "a day of the month (1 to 31)"))
                        })
                        .collect::<Result<_, _>>()?,
                )
            }
            CalendarType::Weekly => {
                needs_days("weekly")?;
                let mut days: Vec<Weekday> = self
                    .days
                    .iter()
                    .map(|d| {
                        d.parse::<Weekday>()
                            .map_err(|_| bad_day(d, "a day of the week (mon … sun)"))
                    })
                    .collect::<Result<_, _>>()?;
                days.sort_by_key(Weekday::num_days_from_monday);
                days.dedup();
                CalendarKind::Weekly(days)
            }
            CalendarType::Daily => {
                if !self.days.is_empty() {
                    return Err(invalid("days", "a daily calendar takes a range, not days"));
                }
                let range = self
                    .range
                    .as_deref()
                    .ok_or_else(|| invalid("range", "a daily calendar needs a range (09:00-17:30)"))?;
                let (start, end) = range
                    .split_once('-')
                    .and_then(|(s, e)| Some((time_of_day(s.trim())?, time_of_day(e.trim())?)))
                    .ok_or_else(|| invalid("range", format!("{range:?} is not HH:MM[:SS[.mmm]]-HH:MM[:SS[.mmm]]")))?;
                if start >= end {
                    return Err(invalid("range", format!("{range:?} must start before it ends")));
                }
                CalendarKind::Daily {
                    start_ms: start,
                    end_ms: end,
                    invert: self.invert,
                }
            }
            CalendarType::Cron => {
                if !self.days.is_empty() {
                    return Err(invalid("days", "a cron calendar takes an expression, not days"));
                }
                let expr = self
                    .cron
                    .as_deref()
                    .ok_or_else(|| invalid("cron", "a cron calendar needs an expression"))?;
                CalendarKind::Cron(CronExpression::parse(expr).map_err(|e| invalid("cron", e.to_string()))?)
            }
        })
    }

    /// Its zone, checked (default UTC).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCalendar`] on `time_zone`.
    pub fn zone(&self) -> Result<Tz, Error> {
        crate::cron::parse_time_zone(self.time_zone.as_deref().unwrap_or("UTC"))
            .map_err(|e| invalid("time_zone", e.to_string()))
    }

    /// The calendar, on top of `base` (the calendar its `base` names,
    /// resolved by the caller).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCalendar`] naming the field at fault.
    pub fn calendar(&self, base: Option<Calendar>) -> Result<Calendar, Error> {
        let calendar = Calendar::new(self.kind()?, self.zone()?);
        Ok(match base {
            Some(base) => calendar.with_base(base),
            None => calendar,
        })
    }
}

/// The calendar named `name`, its chain of bases resolved through `lookup`
/// (a calendar by name).
///
/// # Errors
///
/// [`Error::InvalidCalendar`]: a name `lookup` does not know, a cycle, a chain
/// longer than [`MAX_CHAIN`], or a definition out of range.
pub fn resolve(name: &str, lookup: impl Fn(&str) -> Option<CalendarDefinition>) -> Result<Calendar, Error> {
    let mut chain: Vec<(String, CalendarDefinition)> = Vec::new();
    let mut next = Some(name.to_owned());
    while let Some(name) = next.take() {
        if chain.iter().any(|(n, _)| *n == name) {
            let names: Vec<&str> = chain.iter().map(|(n, _)| n.as_str()).collect();
            return Err(invalid(
                "base",
                format!("the bases make a cycle: {} > {name}", names.join(" > ")),
            ));
        }
        if chain.len() == MAX_CHAIN {
            return Err(invalid("base", format!("more than {MAX_CHAIN} calendars chained")));
        }
        let definition = lookup(&name).ok_or_else(|| invalid("base", format!("no calendar is named {name:?}")))?;
        next = definition.base.clone();
        chain.push((name, definition));
    }
    let mut calendar: Option<Calendar> = None;
    for (_, definition) in chain.iter().rev() {
        calendar = Some(definition.calendar(calendar)?);
    }
    calendar.ok_or_else(|| invalid("base", "an empty chain"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(json: &str) -> CalendarDefinition {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn each_kind_reads_its_form_and_names_the_field_at_fault() {
        for ok in [
            r#"{"kind": "holiday", "dates": ["2026-12-25"]}"#,
            r#"{"kind": "annual", "days": ["02-29", "12-25"]}"#,
            r#"{"kind": "monthly", "days": ["1", "31"]}"#,
            r#"{"kind": "weekly", "days": ["sat", "Sunday"]}"#,
            r#"{"kind": "daily", "range": "09:00-17:30:15.5", "invert": true, "time_zone": "Europe/London"}"#,
            r#"{"kind": "cron", "cron": "* * 0-7 ? * MON-FRI"}"#,
        ] {
            def(ok).calendar(None).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, field) in [
            (r#"{"kind": "holiday", "days": []}"#, "days"),
            (r#"{"kind": "holiday", "days": ["2026-02-30"]}"#, "days"),
            (r#"{"kind": "annual", "days": ["02-30"]}"#, "days"),
            (r#"{"kind": "monthly", "days": ["32"]}"#, "days"),
            (r#"{"kind": "weekly", "days": ["someday"]}"#, "days"),
            (r#"{"kind": "daily", "range": "17:30-09:00"}"#, "range"),
            (r#"{"kind": "daily", "range": "25:00-26:00"}"#, "range"),
            (r#"{"kind": "daily"}"#, "range"),
            (r#"{"kind": "cron", "cron": "not cron"}"#, "cron"),
            (r#"{"kind": "weekly", "days": ["sat"], "cron": "* * * * * ?"}"#, "cron"),
            (
                r#"{"kind": "weekly", "days": ["sat"], "time_zone": "Mars/Olympus"}"#,
                "time_zone",
            ),
        ] {
            match def(bad).calendar(None) {
                Err(Error::InvalidCalendar { field: got, .. }) => assert_eq!(got, field, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let daily = def(r#"{"kind": "daily", "range": "09:00-17:30:15.5"}"#).kind().unwrap();
        assert_eq!(
            daily,
            CalendarKind::Daily {
                start_ms: 9 * 3_600_000,
                end_ms: (17 * 3_600 + 30 * 60 + 15) * 1000 + 500,
                invert: false
            }
        );
    }

    #[test]
    fn chains_resolve_by_name_and_cycles_and_missing_bases_are_refused() {
        let all = |name: &str| match name {
            "trading" => Some(def(
                r#"{"kind": "daily", "range": "09:00-17:30", "invert": true, "base": "weekdays"}"#,
            )),
            "weekdays" => Some(def(r#"{"kind": "weekly", "days": ["sat", "sun"], "base": "holidays"}"#)),
            "holidays" => Some(def(r#"{"kind": "holiday", "days": ["2026-12-25"]}"#)),
            "loop-a" => Some(def(r#"{"kind": "monthly", "days": ["1"], "base": "loop-b"}"#)),
            "loop-b" => Some(def(r#"{"kind": "monthly", "days": ["2"], "base": "loop-a"}"#)),
            "orphan" => Some(def(r#"{"kind": "monthly", "days": ["1"], "base": "gone"}"#)),
            _ => None,
        };
        let trading = resolve("trading", all).unwrap();
        let at = |s: &str| Timestamp::from_millis(chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis());
        assert!(
            trading.is_time_included(at("2026-12-24T10:00:00Z")),
            "a Thursday morning"
        );
        assert!(!trading.is_time_included(at("2026-12-24T18:00:00Z")), "after hours");
        assert!(!trading.is_time_included(at("2026-12-25T10:00:00Z")), "a holiday");
        assert!(!trading.is_time_included(at("2026-12-26T10:00:00Z")), "a Saturday");
        for (name, says) in [("loop-a", "cycle"), ("orphan", "\"gone\""), ("nothing", "\"nothing\"")] {
            match resolve(name, all) {
                Err(Error::InvalidCalendar { field: "base", reason }) => assert!(reason.contains(says), "{reason}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
