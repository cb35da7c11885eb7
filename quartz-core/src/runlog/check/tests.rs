use super::*;
use crate::runlog::{RunEnd, RunEvent, RunStart};
use crate::store::NodeRef;

const T: i64 = 1_000_000;

fn params() -> CheckParams {
    CheckParams {
        since: Timestamp::from_millis(0),
        until: Timestamp::from_millis(10 * T),
        misfire_threshold: Duration::from_millis(5_000),
        clock_slack: Duration::from_millis(100),
    }
}

fn start(node: &str, incarnation: i64, fire_id: i64, attempt: u32, db_ms: i64) -> RunEvent {
    RunEvent::Start(RunStart {
        node: node.to_owned(),
        incarnation,
        fire_id,
        execute_id: 7,
        job_id: 3,
        job: "job".to_owned(),
        fire_time: T,
        attempt,
        kind: "scheduled".to_owned(),
        local_ms: db_ms,
        db_ms,
        db_spread_ms: 0,
    })
}

fn end(node: &str, incarnation: i64, fire_id: i64, attempt: u32, db_ms: i64, outcome: &str) -> RunEvent {
    RunEvent::End(RunEnd {
        node: node.to_owned(),
        incarnation,
        fire_id,
        execute_id: 7,
        job_id: 3,
        fire_time: T,
        attempt,
        outcome: outcome.to_owned(),
        local_ms: db_ms,
        db_ms,
    })
}

fn registered(node: &str, incarnation: i64, db_ms: i64) -> RunEvent {
    RunEvent::Registered {
        node: node.to_owned(),
        incarnation,
        db_ms,
        local_ms: db_ms,
    }
}

fn file(events: Vec<RunEvent>) -> RunFile {
    RunFile {
        events,
        ..RunFile::default()
    }
}

fn row(id: i64, attempt: u32, state: FireState, node: &str, started: Option<i64>) -> FireRecord {
    FireRecord {
        id,
        execute_id: 7,
        job_id: 3,
        fire_time: Timestamp::from_millis(T),
        attempt,
        owner: Some(NodeRef {
            node_id: node.to_owned(),
            incarnation: 1,
        }),
        state,
        claimed_at: Timestamp::from_millis(T - 1_000),
        started_at: started.map(Timestamp::from_millis),
        finished_at: None,
        timed_out_at: None,
        due_at: None,
        error: None,
        skipped_until: None,
        fire_count: 1,
    }
}

fn kinds(report: &RunCheck) -> Vec<RunViolationKind> {
    report.violations.iter().map(|v| v.kind).collect()
}

fn judged(files: &[RunFile], fires: &[FireRecord]) -> RunCheck {
    let p = params();
    judge(files, fires, &[], p.since, p.until, &p)
}

#[test]
fn one_start_of_each_attempt_is_clean() {
    let files = [file(vec![
        registered("a", 1, T - 5_000),
        start("a", 1, 10, 1, T + 3),
        end("a", 1, 10, 1, T + 9, "failed"),
        start("a", 1, 11, 2, T + 600),
        end("a", 1, 11, 2, T + 700, "succeeded"),
    ])];
    let fires = [
        row(10, 1, FireState::Failed, "a", Some(T + 3)),
        row(11, 2, FireState::Succeeded, "a", Some(T + 600)),
    ];
    let report = judged(&files, &fires);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!((report.starts, report.ends, report.overlapping_attempts), (2, 2, 0));
}

#[test]
fn two_starts_of_one_attempt_are_a_run_twice_whatever_the_ledger_says() {
    // The ledger's unique key allows one row; the logs show two handlers.
    let files = [
        file(vec![registered("a", 1, T - 5_000), start("a", 1, 10, 1, T + 2)]),
        file(vec![registered("b", 1, T - 5_000), start("b", 1, 10, 1, T + 4)]),
    ];
    let fires = [row(10, 1, FireState::Succeeded, "a", Some(T + 2))];
    let report = judged(&files, &fires);
    assert_eq!(kinds(&report), [RunViolationKind::RunTwice], "{:#?}", report.violations);
}

#[test]
fn a_retry_after_a_success_is_a_run_twice() {
    let files = [file(vec![
        registered("a", 1, T - 5_000),
        start("a", 1, 10, 1, T),
        end("a", 1, 10, 1, T + 5, "succeeded"),
        start("a", 1, 11, 2, T + 500),
    ])];
    let report = judged(&files, &[]);
    assert_eq!(kinds(&report), [RunViolationKind::RunTwice], "{:#?}", report.violations);
}

#[test]
fn a_recovery_of_a_success_the_ledger_never_recorded_is_at_least_once() {
    let mut rerun = start("b", 1, 11, 2, T + 3_000);
    if let RunEvent::Start(s) = &mut rerun {
        s.kind = "recovery".to_owned();
    }
    let files = [
        file(vec![
            registered("a", 1, 0),
            start("a", 1, 10, 1, T),
            end("a", 1, 10, 1, T + 5, "succeeded"),
        ]),
        file(vec![registered("b", 1, 0), rerun]),
    ];
    // The node froze before its success was recorded: recovery re-ran it.
    let mut died = row(10, 1, FireState::Failed, "a", Some(T));
    died.error = Some("node died mid-run; recovered as attempt 2".to_owned());
    let fires = [died, row(11, 2, FireState::Succeeded, "b", Some(T + 3_000))];
    let report = judged(&files, &fires);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(report.rerun_after_unrecorded_success, 1);
    // Had the ledger recorded the success, the re-run is a run twice.
    let fires = [
        row(10, 1, FireState::Succeeded, "a", Some(T)),
        row(11, 2, FireState::Succeeded, "b", Some(T + 3_000)),
    ];
    assert_eq!(kinds(&judged(&files, &fires)), [RunViolationKind::RunTwice]);
}

#[test]
fn a_start_after_the_incarnation_was_retired_is_a_fenced_start() {
    let retire = RunEvent::Retired {
        node: "a".to_owned(),
        incarnation: 1,
        by: "b".to_owned(),
        db_ms: T + 1_000,
        local_ms: T + 1_000,
    };
    // Within the clock slack of the retirement: not judged.
    let close = [
        file(vec![registered("a", 1, 0), start("a", 1, 10, 1, T + 1_050)]),
        file(vec![retire.clone()]),
    ];
    assert!(judged(&close, &[]).violations.is_empty());
    let late = [
        file(vec![registered("a", 1, 0), start("a", 1, 10, 1, T + 1_500)]),
        file(vec![retire]),
    ];
    assert_eq!(kinds(&judged(&late, &[])), [RunViolationKind::FencedStart]);
    // A later registration of the same node id retires the older incarnation.
    let replaced = [
        file(vec![registered("a", 1, 0), start("a", 1, 10, 1, T + 2_000)]),
        file(vec![registered("a", 2, T + 1_000)]),
    ];
    assert_eq!(kinds(&judged(&replaced, &[])), [RunViolationKind::FencedStart]);
}

#[test]
fn a_start_before_the_fire_time_is_early() {
    let files = [file(vec![registered("a", 1, 0), start("a", 1, 10, 1, T - 101)])];
    assert_eq!(kinds(&judged(&files, &[])), [RunViolationKind::Early]);
    // Within the clock slack: a clock estimate lowered by a slower reading.
    let files = [file(vec![registered("a", 1, 0), start("a", 1, 10, 1, T - 2)])];
    assert!(judged(&files, &[]).violations.is_empty());
    // An estimate from a reading whose round trip was long: the start may
    // have been up to that much later, on time.
    let spread = |spread_ms: i64| {
        let mut s = start("a", 1, 10, 1, T - 224);
        if let RunEvent::Start(s) = &mut s {
            s.db_spread_ms = spread_ms;
        }
        [file(vec![registered("a", 1, 0), s])]
    };
    assert!(judged(&spread(130), &[]).violations.is_empty());
    assert_eq!(kinds(&judged(&spread(120), &[])), [RunViolationKind::Early]);
}

#[test]
fn the_ledger_and_the_runs_are_compared_not_trusted() {
    // A success recorded with no handler start on a node that logs.
    let files = [file(vec![registered("a", 1, 0)])];
    let fires = [row(10, 1, FireState::Succeeded, "a", Some(T))];
    assert_eq!(kinds(&judged(&files, &fires)), [RunViolationKind::LedgerMismatch]);
    // The same on a node without a run log: nothing to compare with.
    let unlogged = [row(10, 1, FireState::Succeeded, "z", Some(T))];
    assert!(judged(&files, &unlogged).violations.is_empty());
    // A handler that ran although the ledger says the fire misfired.
    let ran = [file(vec![registered("a", 1, 0), start("a", 1, 10, 1, T + 1)])];
    let misfired = [row(10, 1, FireState::Misfired, "a", None)];
    assert_eq!(kinds(&judged(&ran, &misfired)), [RunViolationKind::LedgerMismatch]);
    // A success recorded for a handler that failed.
    let failed = [file(vec![
        registered("a", 1, 0),
        start("a", 1, 10, 1, T + 1),
        end("a", 1, 10, 1, T + 2, "failed"),
    ])];
    let succeeded = [row(10, 1, FireState::Succeeded, "a", Some(T + 1))];
    assert_eq!(kinds(&judged(&failed, &succeeded)), [RunViolationKind::LedgerMismatch]);
}

#[test]
fn a_recovery_rerun_beside_a_frozen_first_attempt_counts_as_overlapping() {
    let files = [
        file(vec![
            registered("a", 1, 0),
            start("a", 1, 10, 1, T),
            // Frozen, then resumed: it ends after its re-run began.
            end("a", 1, 10, 1, T + 20_000, "succeeded"),
        ]),
        file(vec![registered("b", 1, 0), start("b", 1, 11, 2, T + 12_000)]),
    ];
    let report = judged(&files, &[]);
    assert_eq!(report.overlapping_attempts, 1);
}

#[test]
fn lateness_uses_nearest_ranks() {
    let l = Lateness::of((1..=100).collect());
    assert_eq!((l.count, l.p50, l.p99, l.max), (100, 50, 99, 100));
    assert_eq!(Lateness::of(Vec::new()), Lateness::default());
}
