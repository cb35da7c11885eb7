//! B1's tally of a run's fire times, on ledgers written by hand.

use super::*;
use quartz_core::store::FireRecord;

fn row(execute_id: i64, fire_time: i64, attempt: u32, state: FireState, fire_count: u64) -> FireRecord {
    FireRecord {
        id: 0,
        execute_id,
        job_id: execute_id,
        fire_time: Timestamp::from_millis(fire_time),
        attempt,
        owner: None,
        state,
        claimed_at: Timestamp::from_millis(fire_time),
        started_at: None,
        finished_at: None,
        timed_out_at: None,
        due_at: None,
        error: None,
        skipped_until: None,
        fire_count,
    }
}

#[test]
fn every_expected_fire_time_is_in_one_class_and_the_classes_add_up() {
    let expected: std::collections::HashSet<(i64, i64)> = (0..6).map(|i| (1, i * 1_000)).collect();
    let rows = [
        row(1, 0, 1, FireState::Succeeded, 1),
        row(1, 0, 1, FireState::Succeeded, 1), // run twice
        row(1, 1_000, 1, FireState::Misfired, 1),
        row(1, 1_000, 2, FireState::Succeeded, 1), // its policy's late run
        row(1, 2_000, 1, FireState::Misfired, 2),  // 2 s and 3 s, not run
        row(1, 9_000, 1, FireState::Succeeded, 1), // outside the run
    ];
    let t = Tally::of(&expected, &rows, 1_000);
    assert_eq!(
        (t.on_time, t.late_by_policy, t.misfired, t.missing, t.duplicated),
        (1, 1, 2, 2, 1)
    );
    assert_eq!(t.on_time + t.late_by_policy + t.misfired + t.missing, t.expected);
    // A range recorded "1 or more" after a long outage covers every
    // time up to its end.
    let mut range = row(1, 4_000, 1, FireState::Misfired, 1);
    range.skipped_until = Some(Timestamp::from_millis(6_000));
    // One that starts off the grid (a policy that fired at once moved
    // it) covers the grid's times inside it.
    let mut moved = row(1, 1_500, 1, FireState::Misfired, 1);
    moved.skipped_until = Some(Timestamp::from_millis(2_500));
    let rows = [row(1, 0, 1, FireState::Succeeded, 1), range, moved];
    let t = Tally::of(&expected, &rows, 1_000);
    assert_eq!(
        (t.misfired, t.missing),
        (3, 2),
        "2, 4 and 5 s covered; 1 and 3 s missing"
    );
    assert_eq!(t.on_time + t.late_by_policy + t.misfired + t.missing, t.expected);
}
