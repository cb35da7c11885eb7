//! Next fire times computed by Quartz's own `CronExpression.getTimeAfter` (the shared
//! cases file: DST edges, leap days, year ends, invalid expressions) must be ours
//! to the millisecond.

#![allow(clippy::unwrap_used)]

use quartz_core::Timestamp;
use quartz_core::cron::{CronExpression, parse_time_zone};

/// A copy of the project's shared cases file, kept with the tests.
fn cases() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cron-quartz-cases.tsv");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

#[test]
fn every_case_computed_by_quartz_is_reproduced() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in cases()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("expr\t"))
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let [expr, zone, after, want] = cols[..] else {
            panic!("malformed case line: {line:?}");
        };
        checked += 1;
        if want == "INVALID" {
            if let Ok(c) = CronExpression::parse(expr) {
                failures.push(format!("{expr:?}: Quartz rejects it, we accepted {c:?}"));
            }
            continue;
        }
        let zone = parse_time_zone(zone).unwrap();
        let cron = match CronExpression::parse(expr) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{expr:?}: Quartz accepts it, we said {e}"));
                continue;
            }
        };
        let want: Vec<i64> = if want == "NONE" {
            Vec::new()
        } else {
            want.split(',').map(|v| v.parse().unwrap()).collect()
        };
        let after = Timestamp::from_millis(after.parse().unwrap());
        // One more than Quartz listed, so that "no further fire" is checked too
        // when the file says NONE.
        let mut got: Vec<i64> = cron
            .iter_after(after, zone)
            .take(want.len() + 1)
            .map(Timestamp::as_millis)
            .collect();
        if !want.is_empty() {
            got.truncate(want.len());
        }
        if got != want {
            failures.push(format!(
                "{expr:?} in {zone} after {after}:\n  want {:?}\n  got  {:?}",
                want.iter()
                    .map(|&t| Timestamp::from_millis(t).to_string())
                    .collect::<Vec<_>>(),
                got.iter()
                    .map(|&t| Timestamp::from_millis(t).to_string())
                    .collect::<Vec<_>>()
            ));
        }
    }
    assert!(checked > 100, "only {checked} cases read");
    assert!(
        failures.is_empty(),
        "{} of {checked} cases differ from Quartz:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
