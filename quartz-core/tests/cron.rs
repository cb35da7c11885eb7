//! Cron expressions: every syntax element, every refusal, and the DST edges of
//! America/New_York, Europe/London and Australia/Lord_Howe, case by case.

#![allow(clippy::unwrap_used)]

use chrono::DateTime;
use quartz_core::cron::{CronExpression, parse_time_zone};
use quartz_core::{CronField, Error, Timestamp};

fn at(rfc3339: &str) -> Timestamp {
    Timestamp::from(DateTime::parse_from_rfc3339(rfc3339).unwrap().to_utc())
}

/// The next `n` fire times after `after`, as RFC 3339 UTC strings.
fn fires(expr: &str, zone: &str, after: &str, n: usize) -> Vec<String> {
    let cron = CronExpression::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let zone = parse_time_zone(zone).unwrap();
    cron.iter_after(at(after), zone)
        .take(n)
        .map(|t| t.to_datetime().unwrap().format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .collect()
}

fn next(expr: &str, after: &str) -> String {
    fires(expr, "UTC", after, 1).pop().unwrap_or_else(|| "none".to_owned())
}

#[test]
fn stars_values_lists_and_ranges_select_what_they_say() {
    assert_eq!(next("* * * * * ?", "2026-01-01T00:00:00Z"), "2026-01-01T00:00:01Z");
    assert_eq!(next("0 0 1,15 * * ?", "2026-01-01T02:00:00Z"), "2026-01-01T15:00:00Z");
    assert_eq!(next("0 0 9-17 * * ?", "2026-01-01T17:30:00Z"), "2026-01-02T09:00:00Z");
    assert_eq!(
        fires("0 0 22-2 * * ?", "UTC", "2026-01-01T02:30:00Z", 6),
        [
            "2026-01-01T22:00:00Z",
            "2026-01-01T23:00:00Z",
            "2026-01-02T00:00:00Z",
            "2026-01-02T01:00:00Z",
            "2026-01-02T02:00:00Z",
            "2026-01-02T22:00:00Z"
        ]
    );
}

#[test]
fn steps_start_where_quartz_starts_them() {
    let seconds = |expr: &str| -> Vec<String> {
        fires(expr, "UTC", "2026-01-01T00:00:00Z", 5)
            .iter()
            .map(|t| t[17..19].to_owned())
            .collect()
    };
    assert_eq!(seconds("0/10 * * * * ?"), ["10", "20", "30", "40", "50"]);
    assert_eq!(seconds("5/15 * * * * ?"), ["05", "20", "35", "50", "05"]);
    assert_eq!(seconds("10-20/3 * * * * ?"), ["10", "13", "16", "19", "10"]);
    assert_eq!(seconds("*/3 * * * * ?"), ["03", "06", "09", "12", "15"]);
    assert_eq!(seconds("/20 * * * * ?"), ["20", "40", "00", "20", "40"]);
    assert_eq!(seconds("50-10/5 * * * * ?"), ["05", "10", "50", "55", "00"]);
}

#[test]
fn month_and_weekday_names_match_their_numbers_in_any_case() {
    let after = "2026-01-01T00:00:00Z";
    assert_eq!(
        fires("0 0 0 1 JAN,jul ?", "UTC", after, 2),
        fires("0 0 0 1 1,7 ?", "UTC", after, 2)
    );
    assert_eq!(fires("0 0 0 1 jul ?", "UTC", after, 1), ["2026-07-01T00:00:00Z"]);
    assert_eq!(
        fires("0 0 12 ? * MON-FRI", "UTC", after, 10),
        fires("0 0 12 ? * 2-6", "UTC", after, 10)
    );
    assert_eq!(
        fires("0 0 12 ? * sun", "UTC", after, 3),
        fires("0 0 12 ? * 1", "UTC", after, 3)
    );
    // 2026-01-01 is a Thursday; FRI-MON wraps the week end.
    assert_eq!(
        fires("0 0 12 ? * FRI-MON", "UTC", after, 5),
        [
            "2026-01-02T12:00:00Z",
            "2026-01-03T12:00:00Z",
            "2026-01-04T12:00:00Z",
            "2026-01-05T12:00:00Z",
            "2026-01-09T12:00:00Z"
        ]
    );
    // A lone L in day-of-week is Saturday.
    assert_eq!(next("0 0 0 ? * L", after), "2026-01-03T00:00:00Z");
}

#[test]
fn last_day_forms_in_day_of_month() {
    assert_eq!(next("0 0 0 L * ?", "2026-02-01T00:00:00Z"), "2026-02-28T00:00:00Z");
    assert_eq!(next("0 0 0 L * ?", "2028-02-01T00:00:00Z"), "2028-02-29T00:00:00Z");
    assert_eq!(next("0 0 0 L * ?", "2026-12-31T00:00:00Z"), "2027-01-31T00:00:00Z");
    assert_eq!(next("0 0 0 L-3 * ?", "2026-01-01T00:00:00Z"), "2026-01-28T00:00:00Z");
    // May 31, 2026 is a Sunday and October 31 a Saturday: the last weekday is the Friday.
    assert_eq!(next("0 0 0 LW * ?", "2026-05-01T00:00:00Z"), "2026-05-29T00:00:00Z");
    assert_eq!(next("0 0 0 LW * ?", "2026-10-01T00:00:00Z"), "2026-10-30T00:00:00Z");
}

#[test]
fn a_weekday_fire_due_within_the_second_after_a_millisecond_instant_is_not_skipped() {
    // Found by the property test: Quartz's own answer here depends on the wall
    // clock's milliseconds; Jan 31, 2028 is a Monday, so LW is that day.
    assert_eq!(
        next("* 0-41 * LW * ?", "2028-01-31T01:59:59.001Z"),
        "2028-01-31T02:00:00Z"
    );
    assert_eq!(
        next("0 0 2 31W * ?", "2028-01-31T01:59:59.999Z"),
        "2028-01-31T02:00:00Z"
    );
}

#[test]
fn nearest_weekday_stays_in_its_month() {
    // Aug 15, 2026 is a Saturday (so the Friday), Nov 15 a Sunday (so the Monday).
    assert_eq!(next("0 0 0 15W * ?", "2026-08-01T00:00:00Z"), "2026-08-14T00:00:00Z");
    assert_eq!(next("0 0 0 15W * ?", "2026-11-01T00:00:00Z"), "2026-11-16T00:00:00Z");
    // Aug 1 is a Saturday: not back into July, forward to Monday the 3rd.
    assert_eq!(next("0 0 0 1W * ?", "2026-07-15T00:00:00Z"), "2026-08-03T00:00:00Z");
    // May 31 is a Sunday and the month's last day: back to Friday the 29th.
    assert_eq!(next("0 0 0 31W * ?", "2026-05-01T00:00:00Z"), "2026-05-29T00:00:00Z");
}

#[test]
fn last_and_nth_weekday_forms_in_day_of_week() {
    assert_eq!(next("0 0 0 ? * 6L", "2026-01-01T00:00:00Z"), "2026-01-30T00:00:00Z");
    assert_eq!(next("0 0 0 ? * FRIL", "2026-01-01T00:00:00Z"), "2026-01-30T00:00:00Z");
    assert_eq!(next("0 0 0 ? * 2#1", "2026-01-06T00:00:00Z"), "2026-02-02T00:00:00Z");
    assert_eq!(next("0 0 0 ? * MON#1", "2026-01-06T00:00:00Z"), "2026-02-02T00:00:00Z");
    assert_eq!(next("0 0 0 ? * 6#3", "2026-01-01T00:00:00Z"), "2026-01-16T00:00:00Z");
    // A fifth Monday: January and February 2026 have four, March has five.
    assert_eq!(next("0 0 0 ? * 2#5", "2026-01-01T00:00:00Z"), "2026-03-30T00:00:00Z");
}

#[test]
fn years_leap_days_and_year_ends() {
    assert_eq!(next("0 0 0 1 1 ? 2030", "2026-01-01T00:00:00Z"), "2030-01-01T00:00:00Z");
    assert_eq!(
        fires("0 0 0 1 1 ? 2026-2028", "UTC", "2025-06-01T00:00:00Z", 5),
        ["2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"]
    );
    assert_eq!(next("0 0 0 29 2 ?", "2026-01-01T00:00:00Z"), "2028-02-29T00:00:00Z");
    assert_eq!(next("0 0 0 * * ?", "2026-12-31T23:59:59Z"), "2027-01-01T00:00:00Z");
    assert_eq!(next("59 59 23 31 12 ?", "2026-12-31T23:59:59Z"), "2027-12-31T23:59:59Z");
}

#[test]
fn an_expression_with_no_future_fire_says_so() {
    assert_eq!(next("0 0 0 1 1 ? 2020", "2026-01-01T00:00:00Z"), "none");
    assert_eq!(next("0 0 0 30 2 ?", "2026-01-01T00:00:00Z"), "none");
    assert_eq!(next("0 0 0 * * ?", "2099-12-31T00:00:00Z"), "none");
}

#[test]
fn next_after_is_strictly_increasing_and_on_whole_seconds() {
    assert_eq!(
        CronExpression::parse("* * * * * ?")
            .unwrap()
            .next_after(Timestamp::from_millis(1_767_225_600_999), chrono_tz::UTC),
        Some(Timestamp::from_millis(1_767_225_601_000))
    );
    for expr in ["*/7 * * * * ?", "0 0/5 14,18 * * ?", "0 15 10 ? * 6L", "0 0 2 ? * SUN"] {
        for zone in ["UTC", "America/New_York", "Australia/Lord_Howe"] {
            let cron = CronExpression::parse(expr).unwrap();
            let mut t = at("2026-01-01T00:00:00.500Z");
            for _ in 0..500 {
                let n = cron.next_after(t, parse_time_zone(zone).unwrap()).unwrap();
                assert!(n > t, "{expr} in {zone}: {n} after {t}");
                assert_eq!(n.as_millis() % 1000, 0);
                t = n;
            }
        }
    }
}

fn refusal(expr: &str) -> (Option<CronField>, String, String) {
    match CronExpression::parse(expr) {
        Err(Error::InvalidCron {
            field,
            text,
            reason,
            expr: e,
        }) => {
            assert_eq!(e, expr);
            (field, text, reason)
        }
        other => panic!("{expr:?} should be refused, got {other:?}"),
    }
}

#[test]
fn what_quartz_rejects_is_refused_naming_the_field_and_text() {
    use CronField::*;
    let cases: &[(&str, Option<CronField>, &str)] = &[
        ("* * * * * *", None, "* * * * * *"),
        ("0 0 12 * * MON", None, "0 0 12 * * MON"),
        ("0 0 0 ? * ?", None, "0 0 0 ? * ?"),
        ("0 0 0 32 * ?", Some(DayOfMonth), "32"),
        ("0 60 * * * ?", Some(Minutes), "60"),
        ("60 * * * * ?", Some(Seconds), "60"),
        ("0 0 24 * * ?", Some(Hours), "24"),
        ("0 0 0 ? * 8", Some(DayOfWeek), "8"),
        ("0 0 0 ? * 0", Some(DayOfWeek), "0"),
        ("0 0 0 ? 13 *", Some(Month), "13"),
        ("0 0 0 L-31 * ?", Some(DayOfMonth), "L-31"),
        ("0 0 0 ? * 1#6", Some(DayOfWeek), "1#6"),
        ("0 0 0 ? * 1#0", Some(DayOfWeek), "1#0"),
        ("0 0 0 * *", None, "0 0 0 * *"),
        ("0 0 0 * * ? 2026 1", None, "0 0 0 * * ? 2026 1"),
        ("", None, ""),
        ("0 0 0 L,5 * ?", Some(DayOfMonth), "L,5"),
        ("0 0 0 1W,15 * ?", Some(DayOfMonth), "1W,15"),
        ("0 0 0 ? * 1L,3", Some(DayOfWeek), "1L,3"),
        ("0 0 0 ? * 2#1,3", Some(DayOfWeek), "2#1,3"),
        ("0 0 L * * ?", Some(Hours), "L"),
        ("0 0 0 ? JANUARY *", Some(Month), "JANUARY"),
        ("0 0 0 ? FOO *", Some(Month), "FOO"),
        ("0 0 0 ? * MON-FRI/2", Some(DayOfWeek), "MON-FRI/2"),
        ("0 0 0 1 1 ? 1969", Some(Year), "1969"),
        ("0 0 0 1 1 ? 2100", Some(Year), "2100"),
        ("0 0 0 1 1 ? 2028-2026", Some(Year), "2028-2026"),
        ("0/0 * * * * ?", Some(Seconds), "0/0"),
        ("0/60 * * * * ?", Some(Seconds), "0/60"),
        ("5X * * * * ?", Some(Seconds), "5X"),
        ("0 0 0 ? * 5X", Some(DayOfWeek), "5X"),
        ("0 0 0 1W * 1", None, "0 0 0 1W * 1"),
        ("0 ? 0 * * ?", Some(Minutes), "?"),
        ("0 0 0 ?,1 * ?", Some(DayOfMonth), "?,1"),
        ("0 0 0 1,,2 * ?", Some(DayOfMonth), "1,,2"),
        ("0 0 0 5-MAY * ?", Some(DayOfMonth), "5-MAY"),
        ("0 0 0 1 JAN-5 ?", Some(Month), "JAN-5"),
        ("0 0 0 ? * 4L-5", Some(DayOfWeek), "4L-5"),
    ];
    for &(expr, field, text) in cases {
        let (got_field, got_text, reason) = refusal(expr);
        assert_eq!((got_field, got_text.as_str()), (field, text), "{expr:?}: {reason}");
        assert!(!reason.is_empty());
    }
    // The message a user sees names the field and the text.
    let message = CronExpression::parse("0 60 * * * ?").unwrap_err().to_string();
    assert!(message.contains("minutes field \"60\""), "{message}");
}

#[test]
fn unix_expressions_are_accepted_only_through_their_own_constructor() {
    assert!(
        CronExpression::parse("*/5 * * * *").is_err(),
        "five fields are never guessed"
    );
    let unix = CronExpression::parse_unix("*/5 * * * *").unwrap();
    assert_eq!(unix.as_str(), "0 */5 * * * ?");
    let after = "2026-01-01T00:00:00Z";
    let unix_fires = |expr: &str| -> Vec<String> {
        CronExpression::parse_unix(expr)
            .unwrap()
            .iter_after(at(after), chrono_tz::UTC)
            .take(10)
            .map(|t| t.to_string())
            .collect()
    };
    let quartz_fires = |expr: &str| -> Vec<String> {
        CronExpression::parse(expr)
            .unwrap()
            .iter_after(at(after), chrono_tz::UTC)
            .take(10)
            .map(|t| t.to_string())
            .collect()
    };
    // Unix weekdays count from 0 = Sunday (7 too); Quartz's from 1 = Sunday.
    assert_eq!(unix_fires("0 9 * * 1-5"), quartz_fires("0 0 9 ? * 2-6"));
    assert_eq!(unix_fires("0 9 * * 0"), quartz_fires("0 0 9 ? * 1"));
    assert_eq!(unix_fires("0 9 * * 7"), quartz_fires("0 0 9 ? * 1"));
    assert_eq!(unix_fires("0 9 * * 5-7"), quartz_fires("0 0 9 ? * 6-1"));
    assert_eq!(unix_fires("0 9 * * */2"), quartz_fires("0 0 9 ? * SUN,TUE,THU,SAT"));
    assert_eq!(unix_fires("30 2 1 * *"), quartz_fires("0 30 2 1 * ?"));
    assert_eq!(unix_fires("0 0 * * mon"), quartz_fires("0 0 0 ? * MON"));
    let (field, _, reason) = match CronExpression::parse_unix("0 0 1 * 1") {
        Err(Error::InvalidCron {
            field, text, reason, ..
        }) => (field, text, reason),
        other => panic!("{other:?}"),
    };
    assert_eq!(field, None);
    assert!(reason.contains("both"), "{reason}");
    assert!(CronExpression::parse_unix("0 0 0 * * ?").is_err());
    assert!(CronExpression::parse_unix("0 0 * * 8").is_err());
}

#[test]
fn unknown_time_zones_are_refused() {
    assert_eq!(
        parse_time_zone("Mars/Olympus_Mons"),
        Err(Error::UnknownTimeZone {
            zone: "Mars/Olympus_Mons".to_owned()
        })
    );
    assert!(parse_time_zone("Europe/London").is_ok());
}

// DST edges. Quartz walks a lenient java.util.GregorianCalendar: a wall time in a
// spring-forward gap takes the offset before the gap (so it lands after the gap),
// and a wall time in a fall-back overlap is the later instant (standard time).

#[test]
fn new_york_spring_forward_skips_the_missing_hour_as_quartz_does() {
    // 2026-03-08: 02:00 EST becomes 03:00 EDT. 02:30 does not exist that day.
    assert_eq!(
        fires("0 30 2 * * ?", "America/New_York", "2026-03-08T05:00:00Z", 2),
        ["2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]
    );
    // Every 20 minutes through the gap: 01:40 EST, then 03:00 EDT.
    assert_eq!(
        fires("0 0/20 * * * ?", "America/New_York", "2026-03-08T06:30:00Z", 3),
        ["2026-03-08T06:40:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:20:00Z"]
    );
}

#[test]
fn new_york_fall_back_fires_once_in_the_repeated_hour_at_standard_time() {
    // 2026-11-01: 02:00 EDT becomes 01:00 EST. 01:30 happens twice; Quartz's
    // calendar resolves it to the second, 01:30 EST (06:30Z), and fires once.
    assert_eq!(
        fires("0 30 1 * * ?", "America/New_York", "2026-11-01T04:00:00Z", 2),
        ["2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"]
    );
}

#[test]
fn london_edges() {
    // 2026-03-29: 01:00 GMT becomes 02:00 BST; 01:30 does not exist.
    assert_eq!(
        next_in("0 30 1 * * ?", "Europe/London", "2026-03-29T00:00:00Z"),
        "2026-03-30T00:30:00Z"
    );
    assert_eq!(
        next_in("0 30 2 * * ?", "Europe/London", "2026-03-29T00:00:00Z"),
        "2026-03-29T01:30:00Z"
    );
    // 2026-10-25: 02:00 BST becomes 01:00 GMT; 01:30 is the GMT one.
    assert_eq!(
        next_in("0 30 1 * * ?", "Europe/London", "2026-10-24T23:00:00Z"),
        "2026-10-25T01:30:00Z"
    );
}

#[test]
fn lord_howe_half_hour_edges() {
    // 2026-10-04: 02:00 +10:30 becomes 02:30 +11; 02:00-02:29 do not exist.
    assert_eq!(
        next_in("0 15 2 * * ?", "Australia/Lord_Howe", "2026-10-03T13:30:00Z"),
        "2026-10-04T15:15:00Z"
    );
    assert_eq!(
        next_in("0 45 2 * * ?", "Australia/Lord_Howe", "2026-10-03T13:30:00Z"),
        "2026-10-03T15:45:00Z"
    );
    // Quartz passes over 02:33 (it resolves 02:05 to 02:35 and moves on to 02:40).
    assert_eq!(
        fires("0 5/7 * * * ?", "Australia/Lord_Howe", "2026-10-03T15:24:00Z", 2),
        ["2026-10-03T15:40:00Z", "2026-10-03T15:47:00Z"]
    );
    // 2026-04-05: 02:00 +11 becomes 01:30 +10:30; 01:45 is the later one.
    assert_eq!(
        next_in("0 45 1 * * ?", "Australia/Lord_Howe", "2026-04-04T13:00:00Z"),
        "2026-04-04T15:15:00Z"
    );
}

fn next_in(expr: &str, zone: &str, after: &str) -> String {
    fires(expr, zone, after, 1).pop().unwrap_or_else(|| "none".to_owned())
}
