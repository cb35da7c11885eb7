//! The six calendar kinds, alone and chained, against Quartz 2.3.2's own
//! `Calendar.isTimeIncluded` (computed by `tools/quartz-calendars/`), in UTC,
//! New York, London and Lord Howe (a half-hour shift): over 2026, around every
//! DST shift, and at the first milliseconds of each month.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use chrono::{NaiveDate, Weekday};
use quartz_core::Timestamp;
use quartz_core::calendar::{Calendar, CalendarKind};
use quartz_core::cron::{CronExpression, parse_time_zone};

/// `HH:MM:SS:mmm` as milliseconds of the day.
fn time_of_day(text: &str) -> u32 {
    let p: Vec<u32> = text.split(':').map(|v| v.parse().unwrap()).collect();
    ((p[0] * 60 + p[1]) * 60 + p[2]) * 1000 + p[3]
}

/// A calendar from the generator's notation: `a>b` is `a` on top of `b`.
fn build(spec: &str, zone: chrono_tz::Tz) -> Calendar {
    let mut chain = spec.split('>').rev();
    let mut calendar = one(chain.next().unwrap(), zone);
    for above in chain {
        calendar = one(above, zone).with_base(calendar);
    }
    calendar
}

fn one(spec: &str, zone: chrono_tz::Tz) -> Calendar {
    let (kind, arg) = spec.split_once(':').unwrap();
    let list = || arg.split(',');
    let kind = match kind {
        "holiday" => CalendarKind::Holiday(list().map(|d| d.parse::<NaiveDate>().unwrap()).collect()),
        "annual" => CalendarKind::Annual(
            list()
                .map(|d| {
                    let (m, d) = d.split_once('-').unwrap();
                    (m.parse().unwrap(), d.parse().unwrap())
                })
                .collect::<BTreeSet<_>>(),
        ),
        "monthly" => CalendarKind::Monthly(list().map(|d| d.parse().unwrap()).collect()),
        "weekly" => CalendarKind::Weekly(list().map(|d| d.parse::<Weekday>().unwrap()).collect()),
        "daily" | "daily!" => {
            let (start, end) = arg.split_once('-').unwrap();
            CalendarKind::Daily {
                start_ms: time_of_day(start),
                end_ms: time_of_day(end),
                invert: kind == "daily!",
            }
        }
        "cron" => CalendarKind::Cron(CronExpression::parse(arg).unwrap()),
        other => panic!("unknown kind {other}"),
    };
    Calendar::new(kind, zone)
}

#[test]
fn every_calendar_kind_alone_and_chained_agrees_with_quartz_2_3_2() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/calendar-quartz-cases.tsv");
    let text = std::fs::read_to_string(path).unwrap();
    let mut instants: Vec<i64> = Vec::new();
    let (mut checked, mut cases) = (0, 0);
    let mut failures = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('\t').collect();
        match cols[..] {
            ["instants", _, list] => instants = list.split(',').map(|t| t.parse().unwrap()).collect(),
            ["case", zone, spec, bits] => {
                assert_eq!(bits.len(), instants.len(), "{spec} in {zone}");
                let calendar = build(spec, parse_time_zone(zone).unwrap());
                cases += 1;
                for (t, bit) in instants.iter().zip(bits.chars()) {
                    let got = calendar.is_time_included(Timestamp::from_millis(*t));
                    if got != (bit == '1') {
                        failures.push(format!(
                            "{spec} in {zone} at {}: Quartz says {bit}, we {got}",
                            Timestamp::from_millis(*t)
                        ));
                    }
                    checked += 1;
                }
            }
            _ => panic!("malformed line {line:?}"),
        }
    }
    assert!(cases >= 56 && checked > 45_000, "{cases} calendars, {checked} instants");
    assert!(
        failures.is_empty(),
        "{} of {checked} differ from Quartz:\n{}",
        failures.len(),
        failures.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Triggers with a calendar against Quartz 2.3.2's `computeFirstFireTime`
/// and `triggered` (computed by `tools/quartz-calendars/`): cron triggers
/// in the calendar's zone and simple (fixed-rate) triggers, behind every
/// calendar of the test above, in the four zones, from the start of 2026 and
/// from just before each zone's DST shifts.
///
/// One test per zone, so they run side by side: the cases where Quartz
/// finds no fire time search 100 years before giving up.
#[test]
fn triggers_pass_over_excluded_times_as_quartz_2_3_2_does_in_utc() {
    triggers_agree_with_quartz_in("UTC");
}

#[test]
fn triggers_pass_over_excluded_times_as_quartz_2_3_2_does_in_new_york() {
    triggers_agree_with_quartz_in("America/New_York");
}

#[test]
fn triggers_pass_over_excluded_times_as_quartz_2_3_2_does_in_london() {
    triggers_agree_with_quartz_in("Europe/London");
}

#[test]
fn triggers_pass_over_excluded_times_as_quartz_2_3_2_does_in_lord_howe() {
    triggers_agree_with_quartz_in("Australia/Lord_Howe");
}

fn triggers_agree_with_quartz_in(only: &str) {
    use quartz_core::trigger::{Schedule, Trigger};
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/trigger-calendar-quartz-cases.tsv"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let (mut cases, mut checked) = (0, 0);
    let mut failures = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut cols: Vec<&str> = line.split('\t').collect();
        if cols.len() == 5 {
            cols.push(""); // no fire time at all
        }
        let ["fires", zone, spec, trigger, start, times] = cols[..] else {
            panic!("malformed line {line:?}");
        };
        if zone != only {
            continue;
        }
        let tz = parse_time_zone(zone).unwrap();
        let start = Timestamp::from_millis(start.parse().unwrap());
        let schedule = match trigger.split_once(':').unwrap() {
            ("cron", expr) => Schedule::cron(CronExpression::parse(expr).unwrap(), tz),
            ("every", ms) => Schedule::fixed_rate_millis(ms.parse().unwrap()).unwrap(),
            other => panic!("unknown trigger {other:?}"),
        };
        let trigger_at = Trigger::new(schedule, start)
            .unwrap()
            .with_calendar("c")
            .unwrap()
            .with_calendar_read(std::sync::Arc::new(build(spec, tz)));
        let want: Vec<i64> = times
            .split(',')
            .filter(|t| !t.is_empty())
            .map(|t| t.parse().unwrap())
            .collect();
        let mut got = Vec::new();
        let mut next = trigger_at.first_fire_time();
        while let Some(t) = next
            && got.len() < want.len().max(1)
        {
            // A checkpoint (a search that passed over its steps' worth of
            // excluded runs) is no fire time: the search resumes after it.
            if !trigger_at.is_checkpoint(t) {
                got.push(t.as_millis());
            }
            next = trigger_at.fire_time_after(t);
        }
        got.truncate(want.len());
        cases += 1;
        checked += want.len();
        if got != want {
            let at = got
                .iter()
                .zip(&want)
                .position(|(g, w)| g != w)
                .unwrap_or(got.len().min(want.len()));
            failures.push(format!(
                "{trigger} from {start} behind {spec} in {zone}: fire {at}: Quartz {:?}, we {:?}",
                want.get(at).map(|t| Timestamp::from_millis(*t)),
                got.get(at).map(|t| Timestamp::from_millis(*t)),
            ));
        }
    }
    assert!(
        cases >= 250 && checked > 7_500,
        "{cases} triggers, {checked} fire times in {only}"
    );
    assert!(
        failures.is_empty(),
        "{} of {cases} differ from Quartz:\n{}",
        failures.len(),
        failures.iter().take(30).cloned().collect::<Vec<_>>().join("\n")
    );
}
