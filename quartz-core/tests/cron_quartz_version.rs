//! Which Quartz the evaluator follows: 2.3.2, the release the cluster-enhanced
//! fork was built on and the one Linux distributions ship. Quartz 2.5 rewrote
//! `nW` (and 2.5.2 fixed part of it, quartz #1420); where 2.3.2 and 2.5.2
//! disagree, every answer here is 2.3.2's. The cases were computed by each
//! release's own `CronExpression` (see `tools/quartz-versions/`).

#![allow(clippy::unwrap_used)]

use quartz_core::Timestamp;
use quartz_core::cron::{CronExpression, parse_time_zone};

fn next(expr: &str, zone: &str, after: &str) -> String {
    let after = chrono::DateTime::parse_from_rfc3339(after).unwrap().timestamp_millis();
    let cron = CronExpression::parse(expr).unwrap();
    cron.next_after(Timestamp::from_millis(after), parse_time_zone(zone).unwrap())
        .map_or_else(|| "none".to_owned(), |t| t.to_string())
}

#[test]
fn every_nearest_weekday_case_where_the_releases_differ_follows_2_3_2() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/nearest-weekday-2.3.2-vs-2.5.2.tsv"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.starts_with("expr\t")) {
        let cols: Vec<&str> = line.split('\t').collect();
        let [expr, zone, after, v232, v252] = cols[..] else {
            panic!("malformed line {line:?}");
        };
        assert_ne!(v232, v252, "a row where the releases agree: {line}");
        let cron = CronExpression::parse(expr).unwrap();
        let got = cron
            .next_after(
                Timestamp::from_millis(after.parse().unwrap()),
                parse_time_zone(zone).unwrap(),
            )
            .map(Timestamp::as_millis);
        if got != Some(v232.parse().unwrap()) {
            failures.push(format!("{expr} in {zone} after {after}: 2.3.2 {v232}, we {got:?}"));
        }
        checked += 1;
    }
    assert!(checked > 400, "{checked} cases");
    assert!(
        failures.is_empty(),
        "{} cases differ from 2.3.2:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// 2.5.2 never fires `31W` in a month without a 31st; 2.3.2, asked after
/// March's fire, fires on April's last weekday.
#[test]
fn day_31w_can_fire_in_april_as_in_2_3_2_where_2_5_2_waits_for_may() {
    assert_eq!(
        next("0 0 12 31W * ?", "UTC", "2027-03-31T12:00:00Z"),
        "2027-04-30T12:00:00.000Z"
    ); // 2.5.2: 2027-05-31
}

/// Sunday 1 February 2026: `1W` is Monday the 2nd. Asked between the two,
/// 2.3.2 gives the Monday; 2.5.2 skips to March.
#[test]
fn day_1w_asked_on_a_sunday_first_fires_the_next_monday_as_in_2_3_2() {
    assert_eq!(
        next("0 0 12 1W * ?", "UTC", "2026-02-01T12:00:00Z"),
        "2026-02-02T12:00:00.000Z"
    ); // 2.5.2: 2026-03-02
    assert_eq!(
        next("0 0 12 1W * ?", "UTC", "2026-03-01T18:00:00Z"),
        "2026-03-02T12:00:00.000Z"
    ); // 2.5.2: 2026-04-01
}

/// The same for any day: Sunday 15 February 2026, `15W` is Monday the 16th.
#[test]
fn day_15w_asked_on_its_sunday_fires_the_next_monday_as_in_2_3_2() {
    assert_eq!(
        next("0 0 12 15W * ?", "UTC", "2026-02-15T12:00:00Z"),
        "2026-02-16T12:00:00.000Z"
    ); // 2.5.2: 2026-03-16
}

/// Where the releases agree, so do we: `1W` on a Saturday 1st moves forward
/// to Monday the 3rd (it never crosses into the month before).
#[test]
fn day_1w_on_a_saturday_first_fires_on_monday_the_third_in_both() {
    assert_eq!(
        next("0 0 12 1W * ?", "UTC", "2026-07-15T00:00:00Z"),
        "2026-08-03T12:00:00.000Z"
    );
}
