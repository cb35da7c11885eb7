//! The explicit DST choice, in America/New_York, Europe/London and
//! Australia/Lord_Howe (whose clocks move by half an hour): named cases for
//! each choice, then every choice against a second-by-second reference
//! around each of 2026's changes in the three zones.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Offset, TimeZone};
use quartz_core::Timestamp;
use quartz_core::cron::{CronExpression, DstChoice, RepeatedTime, SkippedTime, parse_time_zone};

fn ms(rfc3339: &str) -> i64 {
    DateTime::parse_from_rfc3339(rfc3339).unwrap().timestamp_millis()
}

fn choice(skipped: SkippedTime, repeated: RepeatedTime) -> DstChoice {
    DstChoice { skipped, repeated }
}

/// The fire times in `[from, to]`, in UTC.
fn fires(expr: &str, zone: &str, dst: DstChoice, from: &str, to: &str) -> Vec<String> {
    let cron = CronExpression::parse(expr).unwrap();
    let zone = parse_time_zone(zone).unwrap();
    cron.iter_after_with(Timestamp::from_millis(ms(from) - 1), zone, dst)
        .take_while(|t| t.as_millis() <= ms(to))
        .map(|t| t.to_string())
        .collect()
}

#[test]
fn a_skipped_time_fires_at_the_shifted_instant_or_not_at_all() {
    // New York, 8 March 2026: 02:00 EST becomes 03:00 EDT; 02:30 does not exist.
    let (from, to) = ("2026-03-08T00:00:00Z", "2026-03-09T23:59:59Z");
    let shift = fires(
        "0 30 2 * * ?",
        "America/New_York",
        choice(SkippedTime::Shift, RepeatedTime::Second),
        from,
        to,
    );
    assert_eq!(shift, ["2026-03-08T07:30:00.000Z", "2026-03-09T06:30:00.000Z"]);
    let skip = fires(
        "0 30 2 * * ?",
        "America/New_York",
        choice(SkippedTime::Skip, RepeatedTime::Second),
        from,
        to,
    );
    assert_eq!(skip, ["2026-03-09T06:30:00.000Z"]);
    // Quartz, by default, passes over it.
    let quartz = fires("0 30 2 * * ?", "America/New_York", DstChoice::QUARTZ, from, to);
    assert_eq!(quartz, skip);

    // London, 29 March 2026: 01:00 GMT becomes 02:00 BST. A shifted 01:30 and
    // the real 02:30 are the same instant, and fire once.
    let both_hours = fires(
        "0 30 1,2 * * ?",
        "Europe/London",
        choice(SkippedTime::Shift, RepeatedTime::Second),
        "2026-03-29T00:00:00Z",
        "2026-03-29T12:00:00Z",
    );
    assert_eq!(both_hours, ["2026-03-29T01:30:00.000Z"]);

    // Lord Howe, 4 October 2026: 02:00 (+10:30) becomes 02:30 (+11). Quartz's
    // own walk passes over 02:33, which exists; the explicit choices do not.
    let (from, to) = ("2026-10-03T15:20:00Z", "2026-10-03T16:00:00Z");
    let howe = |dst| fires("0 5/7 * * * ?", "Australia/Lord_Howe", dst, from, to);
    let quartz = [
        "2026-10-03T15:24:00.000Z", // 01:54 +10:30
        "2026-10-03T15:40:00.000Z", // 02:40 +11: Quartz passed over 02:33
        "2026-10-03T15:47:00.000Z",
        "2026-10-03T15:54:00.000Z",
    ];
    assert_eq!(howe(DstChoice::QUARTZ), quartz);
    let skip = [
        "2026-10-03T15:24:00.000Z",
        "2026-10-03T15:33:00.000Z", // 02:33 +11, which exists
        "2026-10-03T15:40:00.000Z",
        "2026-10-03T15:47:00.000Z",
        "2026-10-03T15:54:00.000Z",
    ];
    assert_eq!(howe(choice(SkippedTime::Skip, RepeatedTime::Second)), skip);
    // And a repeated choice alone keeps Quartz's skip, without its pass-over.
    assert_eq!(howe(choice(SkippedTime::Quartz, RepeatedTime::Both)), skip);
    let shift = [
        "2026-10-03T15:24:00.000Z",
        "2026-10-03T15:33:00.000Z", // 02:33
        "2026-10-03T15:35:00.000Z", // 02:05 shifted by the half hour
        "2026-10-03T15:40:00.000Z", // 02:40
        "2026-10-03T15:42:00.000Z", // 02:12 shifted
        "2026-10-03T15:47:00.000Z",
        "2026-10-03T15:49:00.000Z", // 02:19 shifted
        "2026-10-03T15:54:00.000Z",
        "2026-10-03T15:56:00.000Z", // 02:26 shifted
    ];
    assert_eq!(howe(choice(SkippedTime::Shift, RepeatedTime::Second)), shift);
}

#[test]
fn a_repeated_time_fires_at_the_first_the_second_or_both() {
    // New York, 1 November 2026: 02:00 EDT becomes 01:00 EST; 01:30 happens
    // at 05:30Z and again at 06:30Z.
    let (from, to) = ("2026-11-01T00:00:00Z", "2026-11-01T23:59:59Z");
    let ny = |repeated| {
        fires(
            "0 30 1 * * ?",
            "America/New_York",
            choice(SkippedTime::Shift, repeated),
            from,
            to,
        )
    };
    assert_eq!(ny(RepeatedTime::First), ["2026-11-01T05:30:00.000Z"]);
    assert_eq!(ny(RepeatedTime::Second), ["2026-11-01T06:30:00.000Z"]);
    assert_eq!(
        ny(RepeatedTime::Both),
        ["2026-11-01T05:30:00.000Z", "2026-11-01T06:30:00.000Z"]
    );
    // Quartz fires once, at the later instant.
    assert_eq!(
        fires("0 30 1 * * ?", "America/New_York", DstChoice::QUARTZ, from, to),
        ny(RepeatedTime::Second)
    );

    // An hourly trigger in London on 25 October 2026 (02:00 BST becomes
    // 01:00 GMT): Quartz, and `second`, leave two hours between 00:00 and
    // 01:00 GMT; `first` leaves two between 01:00 BST and 02:00 GMT; `both`
    // fires every hour.
    let (from, to) = ("2026-10-24T23:00:00Z", "2026-10-25T02:00:00Z");
    let london = |dst| fires("0 0 * * * ?", "Europe/London", dst, from, to);
    let every_hour = [
        "2026-10-24T23:00:00.000Z", // 00:00 BST
        "2026-10-25T00:00:00.000Z", // 01:00 BST
        "2026-10-25T01:00:00.000Z", // 01:00 GMT
        "2026-10-25T02:00:00.000Z", // 02:00 GMT
    ];
    assert_eq!(london(choice(SkippedTime::Shift, RepeatedTime::Both)), every_hour);
    let without = |i: usize| -> Vec<&str> {
        every_hour
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, t)| *t)
            .collect()
    };
    assert_eq!(london(choice(SkippedTime::Shift, RepeatedTime::First)), without(2));
    assert_eq!(london(choice(SkippedTime::Shift, RepeatedTime::Second)), without(1));
    assert_eq!(london(DstChoice::QUARTZ), without(1));

    // Lord Howe, 5 April 2026: 02:00 (+11) becomes 01:30 (+10:30), so 01:45
    // happens twice, half an hour apart.
    let (from, to) = ("2026-04-04T14:00:00Z", "2026-04-04T16:00:00Z");
    let howe = |repeated| {
        fires(
            "0 45 1 * * ?",
            "Australia/Lord_Howe",
            choice(SkippedTime::Skip, repeated),
            from,
            to,
        )
    };
    assert_eq!(howe(RepeatedTime::First), ["2026-04-04T14:45:00.000Z"]);
    assert_eq!(howe(RepeatedTime::Second), ["2026-04-04T15:15:00.000Z"]);
    assert_eq!(
        howe(RepeatedTime::Both),
        ["2026-04-04T14:45:00.000Z", "2026-04-04T15:15:00.000Z"]
    );
}

#[test]
fn choices_are_parsed_by_name_and_unknown_names_are_refused() {
    assert_eq!("Shift".parse::<SkippedTime>().unwrap(), SkippedTime::Shift);
    assert_eq!("both".parse::<RepeatedTime>().unwrap(), RepeatedTime::Both);
    let err = "later".parse::<RepeatedTime>().unwrap_err().to_string();
    assert!(err.contains("quartz, first, second, both"), "{err}");
    assert_eq!(DstChoice::default(), DstChoice::QUARTZ);
}

const EXPRESSIONS: [&str; 12] = [
    "0 30 2 * * ?",
    "0 30 1 * * ?",
    "0 45 1 * * ?",
    "0 0 * * * ?",
    "0 */15 * * * ?",
    "0 5/7 * * * ?",
    "0 15,45 1,2 * * ?",
    "*/20 * 1-3 * * ?",
    "0 0,30 0-3 * * ?",
    "30 59 1 * * ?",
    "0 0 2 * * ?",
    "0 0 3 * * ?",
];

fn offset_ms(zone: &chrono_tz::Tz, at: i64) -> i64 {
    let utc = DateTime::from_timestamp_millis(at).unwrap().naive_utc();
    i64::from(zone.offset_from_utc_datetime(&utc).fix().local_minus_utc()) * 1000
}

/// The instants in 2026 at which the zone's offset changes: scanned by the
/// hour, then narrowed to the second.
fn changes_in_2026(zone: &chrono_tz::Tz) -> Vec<i64> {
    let (start, end) = (ms("2026-01-01T00:00:00Z"), ms("2027-01-01T00:00:00Z"));
    let mut changes = Vec::new();
    let mut t = start;
    while t < end {
        let (mut lo, mut hi) = (t, t + 3_600_000);
        if offset_ms(zone, lo) != offset_ms(zone, hi) {
            while hi - lo > 1000 {
                let mid = lo + (hi - lo) / 2 / 1000 * 1000;
                if offset_ms(zone, mid) == offset_ms(zone, lo) {
                    lo = mid
                } else {
                    hi = mid
                }
            }
            changes.push(hi);
        }
        t += 3_600_000;
    }
    changes
}

/// Every second in `[from, to]` by its wall time: one instant, or two where
/// the wall time repeats.
fn walls_of(zone: &chrono_tz::Tz, from: i64, to: i64) -> BTreeMap<i64, Vec<i64>> {
    let mut walls: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for instant in (from..=to).step_by(1000) {
        walls
            .entry(instant + offset_ms(zone, instant))
            .or_default()
            .push(instant);
    }
    walls
}

/// The fire times in `[from, to]` computed second by second from the rule
/// the choice states: every instant whose wall time the expression matches
/// (`matched`, evaluated in UTC), kept or not by whether its wall time is
/// repeated and which occurrence it is; and every matched wall time no
/// instant has (a gap), shifted by the gap.
fn reference(
    walls: &BTreeMap<i64, Vec<i64>>,
    matched: &BTreeSet<i64>,
    gap_offset: i64,
    dst: DstChoice,
    (from, to): (i64, i64),
) -> Vec<i64> {
    let mut fires = BTreeSet::new();
    for wall in matched {
        match (walls.get(wall).map(Vec::as_slice), dst.repeated, dst.skipped) {
            (Some([one]), _, _) => fires.insert(*one),
            (Some([first, _]), RepeatedTime::First, _) => fires.insert(*first),
            (Some([_, second]), RepeatedTime::Second, _) => fires.insert(*second),
            (Some([first, second]), RepeatedTime::Both, _) => fires.insert(*first) | fires.insert(*second),
            (None, _, SkippedTime::Shift) => fires.insert(wall - gap_offset),
            (None, _, SkippedTime::Skip) => false,
            other => unreachable!("{wall}: {other:?}"),
        };
    }
    fires.into_iter().filter(|t| (from..=to).contains(t)).collect()
}

fn agrees_with_the_reference(zone_name: &str) {
    let zone = parse_time_zone(zone_name).unwrap();
    let changes = changes_in_2026(&zone);
    assert_eq!(changes.len(), 2, "{zone_name}: {changes:?}");
    let mut checked = 0;
    for change in changes {
        let (from, to) = (change - 6 * 3_600_000, change + 6 * 3_600_000);
        let walls = walls_of(&zone, from, to);
        // The offset before the change: a wall time in a gap is shifted by it.
        let gap_offset = offset_ms(&zone, change - 1000);
        let (first_wall, last_wall) = (*walls.keys().next().unwrap(), *walls.keys().last().unwrap());
        for expr in EXPRESSIONS {
            let cron = CronExpression::parse(expr).unwrap();
            let matched: BTreeSet<i64> = cron
                .iter_after(Timestamp::from_millis(first_wall - 1), chrono_tz::UTC)
                .map(Timestamp::as_millis)
                .take_while(|w| *w <= last_wall)
                .collect();
            for skipped in [SkippedTime::Shift, SkippedTime::Skip] {
                for repeated in [RepeatedTime::First, RepeatedTime::Second, RepeatedTime::Both] {
                    let dst = choice(skipped, repeated);
                    let expected = reference(&walls, &matched, gap_offset, dst, (from, to));
                    let got: Vec<i64> = cron
                        .iter_after_with(Timestamp::from_millis(from - 1), zone, dst)
                        .map(Timestamp::as_millis)
                        .take_while(|t| *t <= to)
                        .collect();
                    assert_eq!(
                        got,
                        expected,
                        "{zone_name} {expr:?} {dst} around {}",
                        Timestamp::from_millis(change)
                    );
                    // From any instant, not only from a fire time: the next
                    // fire is the reference's first after it.
                    for after in (from..to).step_by(397_000) {
                        let next = cron
                            .next_after_with(Timestamp::from_millis(after), zone, dst)
                            .map(Timestamp::as_millis);
                        let want = expected.iter().copied().find(|t| *t > after);
                        if want.is_some() {
                            assert_eq!(
                                next,
                                want,
                                "{zone_name} {expr:?} {dst} after {}",
                                Timestamp::from_millis(after)
                            );
                        } else {
                            assert!(next.is_some_and(|n| n > to), "{zone_name} {expr:?} {dst} after {after}");
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}

#[test]
fn every_choice_agrees_with_a_second_by_second_reference_in_new_york() {
    agrees_with_the_reference("America/New_York");
}

#[test]
fn every_choice_agrees_with_a_second_by_second_reference_in_london() {
    agrees_with_the_reference("Europe/London");
}

#[test]
fn every_choice_agrees_with_a_second_by_second_reference_in_lord_howe() {
    agrees_with_the_reference("Australia/Lord_Howe");
}
