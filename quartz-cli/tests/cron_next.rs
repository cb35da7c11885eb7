//! `quartz cron next`, run as a user runs it: the built binary, its stdout, stderr
//! and exit status.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

fn quartz(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quartz")).args(args).output().unwrap()
}

fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn prints_the_next_fire_times_one_per_line_and_nothing_else() {
    let out = quartz(&[
        "cron",
        "next",
        "0 15 10 ? * 6L",
        "--after",
        "2026-01-01T00:00:00Z",
        "--count",
        "3",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        stdout_lines(&out),
        ["2026-01-30T10:15:00Z", "2026-02-27T10:15:00Z", "2026-03-27T10:15:00Z"]
    );
}

#[test]
fn defaults_to_five_fire_times_from_now_in_utc() {
    let out = quartz(&["cron", "next", "* * * * * ?"]);
    assert!(out.status.success());
    let lines = stdout_lines(&out);
    assert_eq!(lines.len(), 5);
    assert!(lines.iter().all(|l| l.ends_with('Z')), "{lines:?}");
}

#[test]
fn zone_and_epoch_formats() {
    let out = quartz(&[
        "cron",
        "next",
        "0 30 2 * * ?",
        "--tz",
        "America/New_York",
        "--after",
        "1772946000000",
        "--count",
        "2",
    ]);
    // 2026-03-08 has no 02:30 in New York; Quartz fires on the 9th and 10th.
    assert_eq!(
        stdout_lines(&out),
        ["2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"]
    );
    let out = quartz(&[
        "cron",
        "next",
        "0/10 * * * * ?",
        "--after",
        "1767225600000",
        "--count",
        "2",
        "--format",
        "epoch-ms",
    ]);
    assert_eq!(stdout_lines(&out), ["1767225610000", "1767225620000"]);
    let out = quartz(&[
        "cron",
        "next",
        "*/5 * * * *",
        "--unix",
        "--after",
        "1767225600000",
        "--count",
        "1",
        "--format",
        "epoch-ms",
    ]);
    assert_eq!(stdout_lines(&out), ["1767225900000"]);
}

#[test]
fn an_expression_with_fewer_fire_times_prints_those_and_exits_zero() {
    let out = quartz(&[
        "cron",
        "next",
        "0 0 0 1 1 ? 2027-2028",
        "--after",
        "2026-06-01T00:00:00Z",
        "--count",
        "5",
    ]);
    assert!(out.status.success());
    assert_eq!(stdout_lines(&out), ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"]);
    let out = quartz(&["cron", "next", "0 0 0 1 1 ? 2020", "--after", "2026-06-01T00:00:00Z"]);
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
}

#[test]
fn invalid_expressions_zones_and_instants_exit_two_with_the_error_on_stderr() {
    for args in [
        &["cron", "next", "0 60 * * * ?"][..],
        &["cron", "next", "* * * * *"],
        &["cron", "next", "0 0 0 ? * 1#6"],
        &["cron", "next", "* * * * * ?", "--tz", "Mars/Olympus_Mons"],
        &["cron", "next", "* * * * * ?", "--after", "yesterday"],
    ] {
        let out = quartz(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.starts_with("quartz: "), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one clear line: {stderr}");
    }
    let stderr = String::from_utf8(quartz(&["cron", "next", "0 60 * * * ?"]).stderr).unwrap();
    assert!(stderr.contains("minutes field \"60\""), "{stderr}");
}

#[test]
fn the_dst_choice_is_shown_for_skipped_and_repeated_local_times() {
    let next = |args: &[&str]| {
        let mut all = vec!["cron", "next"];
        all.extend_from_slice(args);
        let out = quartz(&all);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        stdout_lines(&out)
    };
    // New York's spring day: 02:30 does not exist; shifted, it is 03:30 EDT.
    let spring = [
        "0 30 2 * * ?",
        "--tz",
        "America/New_York",
        "--after",
        "2026-03-08T00:00:00Z",
        "--count",
        "2",
    ];
    let shifted = [&spring[..], &["--dst-skipped", "shift"]].concat();
    assert_eq!(
        next(&shifted),
        ["2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00"]
    );
    assert_eq!(
        next(&spring),
        ["2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"]
    );
    // London's autumn day: 01:30 happens in BST, then in GMT.
    let autumn = [
        "0 30 1 * * ?",
        "--tz",
        "Europe/London",
        "--after",
        "2026-10-25T00:00:00Z",
        "--count",
        "2",
    ];
    let both = [&autumn[..], &["--dst-repeated", "both"]].concat();
    assert_eq!(next(&both), ["2026-10-25T01:30:00+01:00", "2026-10-25T01:30:00Z"]);
    let first = [&autumn[..], &["--dst-repeated", "first"]].concat();
    assert_eq!(next(&first), ["2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00Z"]);
    assert_eq!(next(&autumn), ["2026-10-25T01:30:00Z", "2026-10-26T01:30:00Z"]);

    let out = quartz(&["cron", "next", "0 30 1 * * ?", "--dst-repeated", "later"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("later") && err.contains("both"), "{err}");
}
