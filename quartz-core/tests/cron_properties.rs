//! For random valid expressions, `next_after` agrees with a brute-force matcher
//! that walks time second by second (skipping hours and days that cannot match),
//! in several zones, over bounded ranges.
//!
//! The matcher is built from the generated structure, not from our parser, so the
//! two are independent. Windows that contain a DST transition are not compared
//! here: there Quartz's lenient calendar departs from "the first matching instant"
//! by design, and the cases file from Quartz and the DST tests in `cron.rs` cover
//! them.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use chrono::{DateTime, Datelike, Offset, TimeZone, Timelike};
use chrono_tz::Tz;
use proptest::prelude::*;
use quartz_core::Timestamp;
use quartz_core::cron::CronExpression;

/// One field of a plain (non-day) kind.
#[derive(Debug, Clone)]
enum Spec {
    Star,
    Value(u32),
    Range(u32, u32),
    Step(u32, u32),
    RangeStep(u32, u32, u32),
    StarStep(u32),
    List(Vec<u32>),
}

impl Spec {
    fn render(&self) -> String {
        match self {
            Spec::Star => "*".into(),
            Spec::Value(v) => v.to_string(),
            Spec::Range(a, b) => format!("{a}-{b}"),
            Spec::Step(a, s) => format!("{a}/{s}"),
            Spec::RangeStep(a, b, s) => format!("{a}-{b}/{s}"),
            Spec::StarStep(s) => format!("*/{s}"),
            Spec::List(vs) => vs.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        }
    }

    /// The values it selects in `lo..=hi`, computed plainly.
    fn values(&self, lo: u32, hi: u32) -> BTreeSet<u32> {
        let modulus = hi - lo + 1;
        let wrap = |v: u32| if v > hi { v - modulus } else { v };
        match self {
            Spec::Star => (lo..=hi).collect(),
            Spec::Value(v) => [*v].into(),
            Spec::Range(a, b) if a <= b => (*a..=*b).collect(),
            Spec::Range(a, b) => (*a..=*b + modulus).map(wrap).collect(),
            Spec::Step(a, s) => (*a..=hi).step_by(*s as usize).collect(),
            Spec::RangeStep(a, b, s) if a <= b => (*a..=*b).step_by(*s as usize).collect(),
            Spec::RangeStep(a, b, s) => (*a..=*b + modulus).step_by(*s as usize).map(wrap).collect(),
            Spec::StarStep(s) => (lo..=hi).step_by(*s as usize).collect(),
            Spec::List(vs) => vs.iter().copied().collect(),
        }
    }
}

fn spec(lo: u32, hi: u32) -> impl Strategy<Value = Spec> {
    prop_oneof![
        3 => Just(Spec::Star),
        2 => (lo..=hi).prop_map(Spec::Value),
        2 => (lo..=hi, lo..=hi).prop_map(|(a, b)| Spec::Range(a, b)),
        2 => (lo..=hi, 1..=(hi - lo).max(1)).prop_map(|(a, s)| Spec::Step(a, s)),
        1 => (lo..=hi, lo..=hi, 1..=(hi - lo).max(1)).prop_map(|(a, b, s)| Spec::RangeStep(a, b, s)),
        1 => (1..=(hi - lo).max(1)).prop_map(Spec::StarStep),
        2 => proptest::collection::vec(lo..=hi, 1..4).prop_map(Spec::List),
    ]
}

/// The day rule: exactly one of the two day fields is `?`.
#[derive(Debug, Clone)]
enum Day {
    Month(Spec),
    Week(Spec),
    Last(u32),
    LastWeekday,
    NearestWeekday(u32),
    LastOfWeek(u32),
    Nth(u32, u32),
}

impl Day {
    fn render(&self) -> (String, String) {
        match self {
            Day::Month(s) => (s.render(), "?".into()),
            Day::Week(s) => ("?".into(), s.render()),
            Day::Last(0) => ("L".into(), "?".into()),
            Day::Last(n) => (format!("L-{n}"), "?".into()),
            Day::LastWeekday => ("LW".into(), "?".into()),
            Day::NearestWeekday(n) => (format!("{n}W"), "?".into()),
            Day::LastOfWeek(d) => ("?".into(), format!("{d}L")),
            Day::Nth(d, k) => ("?".into(), format!("{d}#{k}")),
        }
    }

    fn matches(&self, year: i32, month: u32, day: u32, dow: u32) -> bool {
        let ldom = days_in_month(year, month);
        let weekday_of = |d: u32| {
            chrono::NaiveDate::from_ymd_opt(year, month, d)
                .unwrap()
                .weekday()
                .number_from_sunday()
        };
        let nearest = |d: u32| {
            let w = weekday_of(d);
            match (w, d) {
                (7, 1) => 3,
                (7, _) => d - 1,
                (1, d) if d == ldom => d - 2,
                (1, _) => d + 1,
                _ => d,
            }
        };
        match self {
            Day::Month(s) => s.values(1, 31).contains(&day),
            Day::Week(s) => s.values(1, 7).contains(&dow),
            Day::Last(n) => ldom > *n && day == ldom - n,
            Day::LastWeekday => day == nearest(ldom),
            Day::NearestWeekday(n) => day == nearest(*n),
            Day::LastOfWeek(d) => dow == *d && day + 7 > ldom,
            Day::Nth(d, k) => dow == *d && (day - 1) / 7 + 1 == *k,
        }
    }
}

fn days_in_month(year: i32, month: u32) -> u32 {
    let (y, m) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
    chrono::NaiveDate::from_ymd_opt(y, m, 1)
        .unwrap()
        .pred_opt()
        .unwrap()
        .day()
}

fn day() -> impl Strategy<Value = Day> {
    prop_oneof![
        4 => spec(1, 31).prop_map(Day::Month),
        4 => spec(1, 7).prop_map(Day::Week),
        1 => (0u32..5).prop_map(Day::Last),
        1 => Just(Day::LastWeekday),
        1 => (1u32..=28).prop_map(Day::NearestWeekday),
        1 => (1u32..=7).prop_map(Day::LastOfWeek),
        1 => (1u32..=7, 1u32..=5).prop_map(|(d, k)| Day::Nth(d, k)),
    ]
}

#[derive(Debug, Clone)]
struct Expr {
    seconds: Spec,
    minutes: Spec,
    hours: Spec,
    day: Day,
    months: Spec,
}

impl Expr {
    fn render(&self) -> String {
        let (dom, dow) = self.day.render();
        format!(
            "{} {} {} {dom} {} {dow}",
            self.seconds.render(),
            self.minutes.render(),
            self.hours.render(),
            self.months.render()
        )
    }
}

fn expr() -> impl Strategy<Value = Expr> {
    (
        spec(0, 59),
        spec(0, 59),
        spec(0, 23),
        day(),
        prop_oneof![3 => Just(Spec::Star), 1 => spec(1, 12)],
    )
        .prop_map(|(seconds, minutes, hours, day, months)| Expr {
            seconds,
            minutes,
            hours,
            day,
            months,
        })
}

const ZONES: [Tz; 6] = [
    chrono_tz::UTC,
    chrono_tz::Asia::Kolkata,
    chrono_tz::Asia::Kathmandu,
    chrono_tz::America::New_York,
    chrono_tz::Europe::London,
    chrono_tz::Australia::Lord_Howe,
];

/// How far the brute force looks.
const WINDOW_SECONDS: i64 = 45 * 86_400;

/// The first instant after `after_ms` (whole seconds) whose wall time in `tz`
/// matches, within the window; `None` if there is none in it.
fn brute_force(e: &Expr, tz: Tz, after_ms: i64) -> Option<i64> {
    let seconds = e.seconds.values(0, 59);
    let minutes = e.minutes.values(0, 59);
    let hours = e.hours.values(0, 23);
    let months = e.months.values(1, 12);
    let start = after_ms.div_euclid(1000) + 1;
    let end = start + WINDOW_SECONDS;
    // Zones in use here have whole-minute offsets, so a UTC minute is a wall minute.
    let mut minute = start.div_euclid(60) * 60;
    while minute < end {
        let local = tz.from_utc_datetime(&DateTime::from_timestamp(minute, 0).unwrap().naive_utc());
        let day_ok = months.contains(&local.month())
            && e.day.matches(
                local.year(),
                local.month(),
                local.day(),
                local.weekday().number_from_sunday(),
            );
        if !day_ok {
            minute += 60 * i64::from(24 * 60 - (local.hour() * 60 + local.minute()));
            continue;
        }
        if !hours.contains(&local.hour()) {
            minute += 60 * i64::from(60 - local.minute());
            continue;
        }
        if minutes.contains(&local.minute())
            && let Some(&s) = seconds.iter().find(|&&s| minute + i64::from(s) >= start)
        {
            return Some((minute + i64::from(s)) * 1000);
        }
        minute += 60;
    }
    None
}

fn offset_at(tz: Tz, seconds: i64) -> i32 {
    let utc = DateTime::from_timestamp(seconds, 0).unwrap().naive_utc();
    tz.offset_from_utc_datetime(&utc).fix().local_minus_utc()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn next_after_agrees_with_a_brute_force_matcher(
        e in expr(),
        zone in 0..ZONES.len(),
        // 2025-01-01 .. 2029-01-01, to the millisecond.
        after_ms in 1_735_689_600_000i64..1_861_920_000_000,
    ) {
        let tz = ZONES[zone];
        let text = e.render();
        let cron = CronExpression::parse(&text).map_err(|err| TestCaseError::fail(format!("{text}: {err}")))?;
        let ours = cron.next_after(Timestamp::from_millis(after_ms), tz).map(Timestamp::as_millis);
        let window_end = after_ms.div_euclid(1000) + 1 + WINDOW_SECONDS;
        let horizon = ours.map_or(window_end, |t| (t / 1000).min(window_end));
        prop_assume!(offset_at(tz, after_ms.div_euclid(1000)) == offset_at(tz, horizon));
        match brute_force(&e, tz, after_ms) {
            Some(expected) => prop_assert_eq!(ours, Some(expected), "{} in {} after {}", text, tz, after_ms),
            None => prop_assert!(
                ours.is_none_or(|t| t / 1000 >= window_end),
                "{} in {} after {}: brute force found nothing in the window, we said {:?}", text, tz, after_ms, ours
            ),
        }
    }
}
