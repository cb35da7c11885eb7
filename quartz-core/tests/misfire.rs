//! Misfire policies, case by case against Quartz's documented behaviour of
//! `CronTrigger.updateAfterMisfire` and `SimpleTrigger.updateAfterMisfire`, and
//! the ledger invariant: every missed time either runs or is in the skipped range.

#![allow(clippy::unwrap_used)]

use quartz_core::cron::CronExpression;
use quartz_core::misfire::{MAX_COUNTED_SKIPS, MisfireDecision, MisfirePolicy, MisfireSettings};
use quartz_core::trigger::{NextFire, Schedule, Trigger, TriggerState};
use quartz_core::{Error, Timestamp, Tz};

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;
const MIN: i64 = 60_000;

fn ts(offset_ms: i64) -> Timestamp {
    Timestamp::from_millis(T0 + offset_ms)
}

fn off(t: Timestamp) -> i64 {
    t.as_millis() - T0
}

fn cron(expr: &str) -> Trigger {
    Trigger::new(Schedule::cron(CronExpression::parse(expr).unwrap(), Tz::UTC), ts(0)).unwrap()
}

fn every_minute(limit: Option<u64>) -> Trigger {
    let t = Trigger::new(Schedule::fixed_rate_millis(MIN).unwrap(), ts(0)).unwrap();
    match limit {
        Some(l) => t.with_repeat_limit(l).unwrap(),
        None => t,
    }
}

fn with(trigger: Trigger, policy: MisfirePolicy) -> Trigger {
    trigger.with_misfire_policy(policy).unwrap()
}

/// The state of a trigger that last fired at `prev` (its `fired`-th fire) and is
/// due at `next`.
fn state(prev: Option<i64>, next: i64, fired: u64) -> TriggerState {
    TriggerState {
        prev_fire_time: prev.map(ts),
        next_fire_time: Some(ts(next)),
        times_triggered: fired,
        awaiting_finish: false,
        calendar_stamp: 0,
    }
}

fn decide(trigger: &Trigger, state: &TriggerState, now: i64) -> MisfireDecision {
    let decision = trigger.on_misfire(state, ts(now), &MisfireSettings::default()).unwrap();
    assert_ledger_covers_every_missed_time(trigger, state, ts(now), &decision);
    decision
}

/// Every time the trigger was scheduled to fire in `[overdue, now]` either runs
/// or lies in the skipped range, and the skipped count is the number of
/// scheduled times in that range.
fn assert_ledger_covers_every_missed_time(
    trigger: &Trigger,
    before: &TriggerState,
    now: Timestamp,
    decision: &MisfireDecision,
) {
    assert_ne!(decision.applied, MisfirePolicy::Smart);
    let overdue = before.next_fire_time.unwrap();
    let missed: Vec<Timestamp> = std::iter::successors(Some(overdue), |t| trigger.fire_time_after(*t))
        .take_while(|t| *t <= now)
        .take(10_000)
        .collect();
    let in_skipped = |t: Timestamp| decision.skipped.as_ref().is_some_and(|s| s.from <= t && t < s.until);
    let left = trigger.repeat_limit().map(|l| l - before.times_triggered);
    for (i, t) in missed.iter().enumerate() {
        let beyond_limit = left.is_some_and(|left| i as u64 >= left);
        assert!(
            beyond_limit || in_skipped(*t) || decision.runs.contains(t),
            "missed time {} neither runs nor is recorded skipped: {decision:?}",
            off(*t)
        );
        assert!(
            !(in_skipped(*t) && decision.runs.contains(t)),
            "{} both runs and is skipped",
            off(*t)
        );
    }
    if let Some(skipped) = &decision.skipped
        && skipped.count_exact
        && missed.len() < 10_000
    {
        let inside = std::iter::successors(Some(skipped.from), |t| trigger.fire_time_after(*t))
            .take_while(|t| *t < skipped.until)
            .count();
        assert_eq!(skipped.count, inside as u64, "skipped count of {decision:?}");
    }
    if let Some(&first) = decision.runs.first() {
        assert_eq!(
            decision.state.next_fire_time,
            Some(first),
            "the row's next fire is the first run"
        );
    }
    for pair in decision.runs.windows(2) {
        assert!(pair[0] < pair[1], "runs in order");
    }
}

/// The fire times the row produces from its new state, up to `until`.
fn following(trigger: &Trigger, decision: &MisfireDecision, until: i64) -> Vec<i64> {
    let trigger = decision.rescheduled.as_ref().unwrap_or(trigger);
    trigger
        .fires_until(&decision.state, ts(until))
        .map(|f| off(f.fire_time))
        .collect()
}

// ---- when a trigger has misfired ----

#[test]
fn a_trigger_is_misfired_only_once_its_next_fire_is_at_least_the_threshold_old() {
    let trigger = cron("0 * * * * ?");
    let due = state(None, MIN, 0);
    let settings = MisfireSettings::default(); // 5 s
    assert!(trigger.on_misfire(&due, ts(MIN + 4_999), &settings).is_none());
    assert!(
        trigger.on_misfire(&due, ts(MIN + 5_000), &settings).is_some(),
        "Quartz: next <= now - threshold"
    );
    assert!(
        trigger.on_misfire(&due, ts(MIN - 10_000), &settings).is_none(),
        "not yet due"
    );
    let waiting = TriggerState {
        awaiting_finish: true,
        next_fire_time: None,
        ..due.clone()
    };
    assert!(trigger.on_misfire(&waiting, ts(10 * MIN), &settings).is_none());
    let done = TriggerState {
        next_fire_time: None,
        ..due
    };
    assert!(trigger.on_misfire(&done, ts(10 * MIN), &settings).is_none());
}

// ---- cron ----

#[test]
fn cron_smart_fires_once_now_then_resumes_at_the_next_time_after_now() {
    let trigger = cron("0 * * * * ?");
    let d = decide(&trigger, &state(Some(0), MIN, 1), 10 * MIN + 30_000);
    assert_eq!(d.applied, MisfirePolicy::FireNow);
    assert_eq!(d.runs, [ts(10 * MIN + 30_000)]);
    assert_eq!(
        d.state,
        state(Some(0), 10 * MIN + 30_000, 1),
        "times triggered unchanged"
    );
    let skipped = d.skipped.as_ref().unwrap();
    assert_eq!(
        (off(skipped.from), off(skipped.until), skipped.count),
        (MIN, 10 * MIN + 30_000, 10)
    );
    assert!(skipped.count_exact);
    assert_eq!(
        following(&trigger, &d, 13 * MIN),
        [10 * MIN + 30_000, 11 * MIN, 12 * MIN]
    );
    assert_eq!(d.rescheduled, None);
}

#[test]
fn cron_fire_now_is_the_same_as_smart() {
    let smart = cron("0 * * * * ?");
    let fire_now = with(cron("0 * * * * ?"), MisfirePolicy::FireNow);
    let overdue = state(None, MIN, 0);
    assert_eq!(decide(&smart, &overdue, 5 * MIN), decide(&fire_now, &overdue, 5 * MIN));
}

#[test]
fn cron_fire_now_on_a_cron_time_counts_it_as_the_run_not_as_skipped() {
    let trigger = cron("0 * * * * ?");
    let d = decide(&trigger, &state(None, MIN, 0), 5 * MIN);
    assert_eq!(d.runs, [ts(5 * MIN)]);
    assert_eq!(d.skipped.unwrap().count, 4, "01, 02, 03, 04; 05 is the run");
}

#[test]
fn cron_do_nothing_skips_every_missed_time_and_waits_for_the_next() {
    let trigger = with(cron("0 * * * * ?"), MisfirePolicy::DoNothing);
    let d = decide(&trigger, &state(Some(0), MIN, 1), 10 * MIN + 30_000);
    assert_eq!(d.applied, MisfirePolicy::DoNothing);
    assert!(d.runs.is_empty());
    assert_eq!(d.state, state(Some(0), 11 * MIN, 1));
    let skipped = d.skipped.unwrap();
    assert_eq!(
        (off(skipped.from), off(skipped.until), skipped.count),
        (MIN, 11 * MIN, 10)
    );
}

#[test]
fn cron_do_nothing_past_the_end_completes_the_trigger() {
    let trigger = with(
        cron("0 * * * * ?").with_end(ts(5 * MIN)).unwrap(),
        MisfirePolicy::DoNothing,
    );
    let d = decide(&trigger, &state(None, MIN, 0), 10 * MIN);
    assert_eq!(d.state.next_fire_time, None);
    assert_eq!(d.skipped.unwrap().count, 5, "01 to 05, the end being inclusive");
}

#[test]
fn cron_fire_now_fires_even_past_the_end_as_quartz_does() {
    let trigger = cron("0 * * * * ?").with_end(ts(5 * MIN)).unwrap();
    let d = decide(&trigger, &state(None, MIN, 0), 10 * MIN);
    assert_eq!(d.runs, [ts(10 * MIN)]);
    assert_eq!(following(&trigger, &d, 20 * MIN), [10 * MIN], "then it is complete");
}

#[test]
fn cron_ignore_fires_every_missed_time_in_order_then_carries_on() {
    let trigger = with(cron("0 * * * * ?"), MisfirePolicy::IgnoreMisfires);
    let overdue = state(Some(0), MIN, 1);
    let d = decide(&trigger, &overdue, 4 * MIN + 30_000);
    assert_eq!(d.applied, MisfirePolicy::IgnoreMisfires);
    assert_eq!(d.runs, [ts(MIN), ts(2 * MIN), ts(3 * MIN), ts(4 * MIN)]);
    assert_eq!(
        d.state, overdue,
        "the row is left as it is; the fire path fires each late"
    );
    assert_eq!(d.skipped, None);
    assert_eq!(
        following(&trigger, &d, 6 * MIN),
        [MIN, 2 * MIN, 3 * MIN, 4 * MIN, 5 * MIN]
    );
}

#[test]
fn cron_ignore_beyond_the_cap_skips_the_oldest_and_runs_the_most_recent() {
    let trigger = with(cron("0 * * * * ?"), MisfirePolicy::IgnoreMisfires);
    let settings = MisfireSettings {
        ignore_cap: 3,
        ..MisfireSettings::default()
    };
    let overdue = state(Some(0), MIN, 1);
    let now = ts(10 * MIN + 30_000);
    let d = trigger.on_misfire(&overdue, now, &settings).unwrap();
    assert_ledger_covers_every_missed_time(&trigger, &overdue, now, &d);
    assert_eq!(d.runs, [ts(8 * MIN), ts(9 * MIN), ts(10 * MIN)]);
    assert_eq!(
        d.state,
        state(Some(7 * MIN), 8 * MIN, 1),
        "resumes at the first kept time"
    );
    let skipped = d.skipped.unwrap();
    assert_eq!(
        (off(skipped.from), off(skipped.until), skipped.count),
        (MIN, 8 * MIN, 7)
    );
}

#[test]
fn a_year_of_missed_seconds_is_decided_quickly_with_a_bounded_count() {
    let trigger = with(cron("* * * * * ?"), MisfirePolicy::IgnoreMisfires);
    let settings = MisfireSettings {
        ignore_cap: 10,
        ..MisfireSettings::default()
    };
    let overdue = state(None, 1000, 0);
    let now = ts(365 * 86_400_000 + 500);
    let d = trigger.on_misfire(&overdue, now, &settings).unwrap();
    let expected: Vec<Timestamp> = (0..10).map(|i| ts(365 * 86_400_000 - 9_000 + i * 1000)).collect();
    assert_eq!(d.runs, expected);
    let skipped = d.skipped.unwrap();
    assert_eq!(skipped.until, expected[0]);
    assert_eq!((skipped.count, skipped.count_exact), (MAX_COUNTED_SKIPS, false));

    let do_nothing = with(cron("* * * * * ?"), MisfirePolicy::DoNothing);
    let d = do_nothing.on_misfire(&overdue, now, &settings).unwrap();
    assert_eq!(d.state.next_fire_time, Some(ts(365 * 86_400_000 + 1000)));
    assert!(!d.skipped.unwrap().count_exact);
}

#[test]
fn ignore_on_a_sparse_schedule_after_a_long_outage_finds_the_latest_times() {
    // Every second of the first minute of each hour: dense bursts, long gaps.
    let trigger = with(cron("* 0 * * * ?"), MisfirePolicy::IgnoreMisfires);
    let settings = MisfireSettings {
        ignore_cap: 100,
        ..MisfireSettings::default()
    };
    let overdue = state(None, 0, 0);
    let now = ts(30 * 86_400_000 + 30 * MIN);
    let d = trigger.on_misfire(&overdue, now, &settings).unwrap();
    let hour = 30 * 86_400_000;
    let mut expected: Vec<i64> = (20..60).map(|s| hour - 3_600_000 + s * 1000).collect();
    expected.extend((0..60).map(|s| hour + s * 1000));
    assert_eq!(d.runs.iter().map(|t| off(*t)).collect::<Vec<_>>(), expected);
    assert_eq!(d.state.prev_fire_time, Some(ts(hour - 3_600_000 + 19_000)));
    let skipped = d.skipped.unwrap();
    assert_eq!((skipped.count, skipped.count_exact), (30 * 24 * 60 - 40, true));
}

#[test]
fn cron_refuses_the_simple_trigger_policies() {
    for policy in [
        MisfirePolicy::RescheduleNowWithExistingCount,
        MisfirePolicy::RescheduleNowWithRemainingCount,
        MisfirePolicy::RescheduleNextWithExistingCount,
        MisfirePolicy::RescheduleNextWithRemainingCount,
    ] {
        let err = cron("0 * * * * ?").with_misfire_policy(policy).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidTrigger { reason } if reason.contains("cron")),
            "{err}"
        );
    }
}

// ---- fixed rate and once: Quartz's SimpleTrigger ----

#[test]
fn simple_smart_with_no_repeat_fires_now() {
    let once = Trigger::new(Schedule::Once, ts(MIN)).unwrap();
    let d = decide(&once, &TriggerState::initial(&once), 10 * MIN);
    assert_eq!(d.applied, MisfirePolicy::FireNow);
    assert_eq!(d.runs, [ts(10 * MIN)]);
    assert_eq!(d.skipped.clone().unwrap().count, 1);
    assert_eq!(following(&once, &d, 20 * MIN), [10 * MIN], "once, then complete");

    let limit_one = every_minute(Some(1));
    let d = decide(&limit_one, &TriggerState::initial(&limit_one), 10 * MIN);
    assert_eq!(d.applied, MisfirePolicy::FireNow);
    assert_eq!(following(&limit_one, &d, 20 * MIN), [10 * MIN]);
}

#[test]
fn simple_smart_repeating_forever_reschedules_next_with_remaining_count() {
    let trigger = every_minute(None);
    let d = decide(&trigger, &state(Some(0), MIN, 1), 10 * MIN + 30_000);
    assert_eq!(d.applied, MisfirePolicy::RescheduleNextWithRemainingCount);
    assert!(d.runs.is_empty());
    // Missed 01..10: ten fires counted as if they had run.
    assert_eq!(d.state, state(Some(0), 11 * MIN, 11));
    assert_eq!(d.skipped.unwrap().count, 10);
    assert_eq!(d.rescheduled, None);
}

#[test]
fn simple_smart_with_a_repeat_limit_reschedules_now_with_existing_count() {
    // 10 fires in all, 3 done, due at 03, found at 10:30.
    let trigger = every_minute(Some(10));
    let d = decide(&trigger, &state(Some(2 * MIN), 3 * MIN, 3), 10 * MIN + 30_000);
    assert_eq!(d.applied, MisfirePolicy::RescheduleNowWithExistingCount);
    assert_eq!(d.runs, [ts(10 * MIN + 30_000)]);
    let restarted = d.rescheduled.clone().unwrap();
    assert_eq!(restarted.start(), ts(10 * MIN + 30_000), "the start is forgotten");
    assert_eq!(restarted.repeat_limit(), Some(7), "the 7 fires left");
    assert_eq!(d.state.times_triggered, 0);
    let fires = following(&trigger, &d, 100 * MIN);
    assert_eq!(fires.len(), 7);
    assert_eq!(fires[6], 16 * MIN + 30_000, "on the new grid");
    assert_eq!(
        d.skipped.unwrap().count,
        7,
        "03 to 09, the last time of the original grid"
    );
}

#[test]
fn simple_fire_now_on_a_repeating_trigger_reschedules_now_with_remaining_count() {
    let trigger = with(every_minute(Some(10)), MisfirePolicy::FireNow);
    let d = decide(&trigger, &state(Some(2 * MIN), 3 * MIN, 3), 10 * MIN + 30_000);
    assert_eq!(d.applied, MisfirePolicy::RescheduleNowWithRemainingCount);
    // Quartz: missed = (now - next) / interval = 7; left = 10 - (3 + 7) -> 0 -> 1.
    assert_eq!(d.rescheduled.clone().unwrap().repeat_limit(), Some(1));
    assert_eq!(following(&trigger, &d, 100 * MIN), [10 * MIN + 30_000]);

    let unlimited = with(every_minute(None), MisfirePolicy::FireNow);
    let d = decide(&unlimited, &state(Some(2 * MIN), 3 * MIN, 3), 10 * MIN + 30_000);
    assert_eq!(d.applied, MisfirePolicy::RescheduleNowWithRemainingCount);
    assert_eq!(d.rescheduled.clone().unwrap().repeat_limit(), None);
    assert_eq!(
        d.state.times_triggered, 3,
        "an unlimited trigger keeps its count, as in Quartz"
    );
    assert_eq!(
        following(&unlimited, &d, 12 * MIN + 31_000),
        [10 * MIN + 30_000, 11 * MIN + 30_000, 12 * MIN + 30_000]
    );
}

#[test]
fn simple_reschedule_now_with_remaining_count_counts_whole_intervals_missed() {
    let trigger = with(every_minute(Some(20)), MisfirePolicy::RescheduleNowWithRemainingCount);
    // Due at 03 (3 done), found at 06:30: missed (6:30 - 3:00) / 1:00 = 3.
    let d = decide(&trigger, &state(Some(2 * MIN), 3 * MIN, 3), 6 * MIN + 30_000);
    assert_eq!(d.rescheduled.clone().unwrap().repeat_limit(), Some(14));
    assert_eq!(d.state.times_triggered, 0);
    assert_eq!(d.skipped.unwrap().count, 4, "03, 04, 05, 06 did not run at their time");
}

#[test]
fn simple_reschedule_now_with_existing_count_keeps_the_fires_left() {
    let trigger = with(every_minute(Some(5)), MisfirePolicy::RescheduleNowWithExistingCount);
    let d = decide(&trigger, &state(Some(MIN), 2 * MIN, 2), 30 * MIN);
    assert_eq!(d.rescheduled.clone().unwrap().repeat_limit(), Some(3));
    assert_eq!(following(&trigger, &d, 100 * MIN), [30 * MIN, 31 * MIN, 32 * MIN]);
    assert_eq!(d.skipped.unwrap().count, 3, "02, 03, 04: the grid's last time is 04");
}

#[test]
fn simple_reschedule_now_past_the_end_completes() {
    let trigger = with(
        every_minute(None).with_end(ts(5 * MIN)).unwrap(),
        MisfirePolicy::RescheduleNowWithExistingCount,
    );
    let d = decide(&trigger, &state(Some(0), MIN, 1), 10 * MIN);
    assert_eq!(d.state.next_fire_time, None);
    assert!(d.runs.is_empty());
    assert_eq!(d.rescheduled, None);
    assert_eq!(d.skipped.unwrap().count, 5, "01 to 05");
}

#[test]
fn simple_reschedule_now_keeps_the_end() {
    let trigger = with(
        every_minute(None).with_end(ts(12 * MIN)).unwrap(),
        MisfirePolicy::RescheduleNowWithExistingCount,
    );
    let d = decide(&trigger, &state(Some(0), MIN, 1), 10 * MIN + 30_000);
    assert_eq!(
        following(&trigger, &d, 100 * MIN),
        [10 * MIN + 30_000, 11 * MIN + 30_000]
    );
}

#[test]
fn simple_reschedule_next_with_existing_count_ends_where_the_original_schedule_ends() {
    // 10 fires on the grid 00..09; 3 done; found at 06:30.
    let trigger = with(every_minute(Some(10)), MisfirePolicy::RescheduleNextWithExistingCount);
    let d = decide(&trigger, &state(Some(2 * MIN), 3 * MIN, 3), 6 * MIN + 30_000);
    assert_eq!(d.state, state(Some(2 * MIN), 7 * MIN, 3), "count unchanged");
    assert_eq!(d.skipped.clone().unwrap().count, 4);
    assert_eq!(following(&trigger, &d, 100 * MIN), [7 * MIN, 8 * MIN, 9 * MIN]);

    // Found after the last grid time: straight to complete (Quartz's warning).
    let d = decide(&trigger, &state(Some(2 * MIN), 3 * MIN, 3), 20 * MIN);
    assert_eq!(d.state.next_fire_time, None);
    assert_eq!(d.skipped.unwrap().count, 7, "03 to 09");
}

#[test]
fn simple_reschedule_next_with_remaining_count_counts_the_missed_as_fired() {
    let trigger = with(every_minute(Some(10)), MisfirePolicy::RescheduleNextWithRemainingCount);
    let d = decide(&trigger, &state(Some(2 * MIN), 3 * MIN, 3), 6 * MIN + 30_000);
    assert_eq!(d.state, state(Some(2 * MIN), 7 * MIN, 7), "03..06 counted");
    let fires: Vec<_> = trigger.fires_until(&d.state, ts(100 * MIN)).collect();
    assert_eq!(fires.last().unwrap().after.times_triggered, 10);
    assert_eq!(fires.last().unwrap().next, NextFire::Done);
}

#[test]
fn simple_reschedule_next_on_a_once_trigger_completes() {
    for policy in [
        MisfirePolicy::RescheduleNextWithExistingCount,
        MisfirePolicy::RescheduleNextWithRemainingCount,
    ] {
        let once = with(Trigger::new(Schedule::Once, ts(MIN)).unwrap(), policy);
        let d = decide(&once, &TriggerState::initial(&once), 10 * MIN);
        assert_eq!(d.state.next_fire_time, None, "{policy}");
        assert_eq!(d.skipped.unwrap().count, 1);
    }
}

#[test]
fn simple_ignore_fires_the_missed_times_up_to_the_repeat_limit() {
    let trigger = with(every_minute(Some(5)), MisfirePolicy::IgnoreMisfires);
    let overdue = state(Some(MIN), 2 * MIN, 2);
    let d = decide(&trigger, &overdue, 30 * MIN);
    assert_eq!(d.runs, [ts(2 * MIN), ts(3 * MIN), ts(4 * MIN)]);
    assert_eq!(d.state, overdue);
    assert_eq!(following(&trigger, &d, 100 * MIN), [2 * MIN, 3 * MIN, 4 * MIN]);
}

#[test]
fn simple_triggers_refuse_do_nothing() {
    for trigger in [every_minute(None), Trigger::new(Schedule::Once, ts(0)).unwrap()] {
        let err = trigger.with_misfire_policy(MisfirePolicy::DoNothing).unwrap_err();
        assert!(err.to_string().contains("do_nothing"), "{err}");
    }
}

// ---- fixed delay ----

#[test]
fn fixed_delay_smart_fires_now_and_do_nothing_waits_one_delay() {
    let trigger = Trigger::new(Schedule::fixed_delay_millis(MIN).unwrap(), ts(0)).unwrap();
    let overdue = state(Some(0), 2 * MIN, 1);
    let d = decide(&trigger, &overdue, 10 * MIN);
    assert_eq!(d.applied, MisfirePolicy::FireNow);
    assert_eq!(d.runs, [ts(10 * MIN)]);
    assert_eq!(d.skipped.unwrap().count, 1);

    let do_nothing = with(trigger.clone(), MisfirePolicy::DoNothing);
    let d = decide(&do_nothing, &overdue, 10 * MIN);
    assert_eq!(d.state, state(Some(0), 11 * MIN, 1));
    assert!(d.runs.is_empty());

    let ignore = with(trigger, MisfirePolicy::IgnoreMisfires);
    let d = decide(&ignore, &overdue, 10 * MIN);
    assert_eq!(d.runs, [ts(2 * MIN)]);
    assert_eq!(d.state, overdue);
}

// ---- names ----

#[test]
fn policies_round_trip_through_their_names_and_unknown_names_are_refused() {
    for policy in MisfirePolicy::ALL {
        assert_eq!(policy.as_str().parse::<MisfirePolicy>().unwrap(), policy);
        assert_eq!(policy.to_string(), policy.as_str());
    }
    assert_eq!("Fire-Now".parse::<MisfirePolicy>().unwrap(), MisfirePolicy::FireNow);
    let err = "fire_later".parse::<MisfirePolicy>().unwrap_err();
    assert!(err.to_string().contains("fire_later") && err.to_string().contains("do_nothing"));
}

// ---- every policy, random triggers and outages ----

mod properties {
    use super::*;
    use proptest::prelude::*;

    const EXPRESSIONS: [&str; 5] = [
        "*/30 * * * * ?",
        "0/7 * * * * ?",
        "0 0/5 * * * ?",
        "15 10 9-17 ? * MON-FRI",
        "0 0 0 L * ?",
    ];

    fn trigger_strategy() -> impl Strategy<Value = Trigger> {
        let cron = (0..EXPRESSIONS.len(), 0..4usize).prop_map(|(i, p)| {
            let policy = [
                MisfirePolicy::Smart,
                MisfirePolicy::FireNow,
                MisfirePolicy::DoNothing,
                MisfirePolicy::IgnoreMisfires,
            ][p];
            with(cron(EXPRESSIONS[i]), policy)
        });
        let fixed_rate = (1i64..120_000, proptest::option::of(1u64..50), 0..7usize).prop_map(|(interval, limit, p)| {
            let trigger = Trigger::new(Schedule::fixed_rate_millis(interval).unwrap(), ts(0)).unwrap();
            let trigger = match limit {
                Some(limit) => trigger.with_repeat_limit(limit).unwrap(),
                None => trigger,
            };
            let policy = [
                MisfirePolicy::Smart,
                MisfirePolicy::FireNow,
                MisfirePolicy::IgnoreMisfires,
                MisfirePolicy::RescheduleNowWithExistingCount,
                MisfirePolicy::RescheduleNowWithRemainingCount,
                MisfirePolicy::RescheduleNextWithExistingCount,
                MisfirePolicy::RescheduleNextWithRemainingCount,
            ][p];
            with(trigger, policy)
        });
        prop_oneof![cron, fixed_rate]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever the policy: every missed time runs or is recorded skipped, the
        /// row is left due no earlier than now unless it runs now, and the
        /// decision is not itself misfired again (except the ignore policy, whose
        /// late runs the fire path takes).
        #[test]
        fn every_missed_time_is_accounted_for(
            trigger in trigger_strategy(),
            fires_before in 0usize..5,
            outage_ms in 5_000i64..86_400_000,
        ) {
            let start = TriggerState::initial(&trigger);
            let until = ts(40 * 86_400_000);
            let before = trigger
                .fires_until(&start, until)
                .take(fires_before)
                .last()
                .map_or(start, |f| f.after);
            let Some(overdue) = before.next_fire_time else { return Ok(()) };
            let now = overdue.checked_add_millis(outage_ms).unwrap();
            let decision = trigger.on_misfire(&before, now, &MisfireSettings::default()).unwrap();
            assert_ledger_covers_every_missed_time(&trigger, &before, now, &decision);
            if decision.runs.is_empty() {
                prop_assert!(decision.state.next_fire_time.is_none_or(|next| next > now));
            } else if decision.applied != MisfirePolicy::IgnoreMisfires {
                prop_assert_eq!(&decision.runs, &vec![now]);
                let trigger = decision.rescheduled.as_ref().unwrap_or(&trigger);
                let fires: Vec<_> = trigger.fires_until(&decision.state, now.checked_add_millis(1).unwrap()).collect();
                prop_assert_eq!(fires.len(), 1, "exactly the one fire now");
            }
        }
    }
}
