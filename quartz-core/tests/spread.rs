//! Jitter and the catch-up window, on the trigger alone: jittered fire times
//! stay in order, each within its scheduled time's slot, the same from any
//! instant they are asked from; a catch-up window skips what is older than
//! it whatever the policy, and every missed time still either runs or is
//! recorded.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;
use quartz_core::calendar::CalendarDefinition;
use quartz_core::misfire::{MisfireDecision, MisfirePolicy, MisfireSettings};
use quartz_core::trigger::{Jitter, Schedule, Trigger, TriggerState};
use quartz_core::{Timestamp, Tz};

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;
const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;

fn ts(offset_ms: i64) -> Timestamp {
    Timestamp::from_millis(T0 + offset_ms)
}

fn cron(expr: &str) -> Trigger {
    Trigger::cron(expr, "UTC", ts(0)).unwrap()
}

fn jitter(max_ms: u64, seed: i64) -> Jitter {
    Jitter::new(Duration::from_millis(max_ms), seed).unwrap()
}

/// The trigger's fire times from its first, by stepping fire to fire.
fn stepped(trigger: &Trigger, until: Timestamp) -> Vec<Timestamp> {
    std::iter::successors(trigger.first_fire_time(), |t| trigger.fire_time_after(*t))
        .take_while(|t| *t < until)
        .collect()
}

#[test]
fn ten_thousand_midnight_jobs_spread_over_the_jitter() {
    let mut at_midnight = Vec::new();
    for job in 0..10_000 {
        let trigger = cron("0 0 0 * * ?").with_jitter(jitter(600_000, Jitter::seed_of(&format!("job-{job}"), 0)));
        let first = trigger.first_fire_time().unwrap();
        assert!((ts(0)..ts(600_000)).contains(&first), "within ten minutes: {first}");
        at_midnight.push(first.as_millis() - T0);
    }
    // Spread evenly: every minute of the ten holds about a tenth.
    let mut per_minute = [0u32; 10];
    for ms in &at_midnight {
        per_minute[usize::try_from(ms / MIN).unwrap()] += 1;
    }
    for n in per_minute {
        assert!((850..1150).contains(&n), "{per_minute:?}");
    }
    // The same definition, the same times.
    let again = cron("0 0 0 * * ?").with_jitter(jitter(600_000, Jitter::seed_of("job-7", 0)));
    assert_eq!(again.first_fire_time().unwrap().as_millis() - T0, at_midnight[7]);
}

#[test]
fn a_jitter_wider_than_the_interval_keeps_fires_in_their_slots() {
    // Every second, jitter up to an hour: each fire before the next second.
    let trigger = cron("* * * * * ?").with_jitter(jitter(HOUR as u64, 42));
    let times = stepped(&trigger, ts(60_000));
    assert_eq!(times.len(), 60);
    for (i, t) in times.iter().enumerate() {
        let slot = ts(i64::try_from(i).unwrap() * 1000);
        assert!(slot <= *t && *t < slot.saturating_add_millis(1000), "{i}: {t}");
    }
    assert!(
        times.iter().filter(|t| t.as_millis() % 1000 != 0).count() > 50,
        "jittered"
    );
}

#[test]
fn a_fixed_rate_limit_still_counts_every_fire() {
    let trigger = Trigger::every(Duration::from_secs(10), ts(0))
        .unwrap()
        .with_repeat_limit(5)
        .unwrap()
        .with_jitter(jitter(4_000, 9));
    let state = TriggerState::initial(&trigger);
    let fires: Vec<_> = trigger.fires_until(&state, ts(HOUR)).collect();
    assert_eq!(fires.len(), 5);
    for (i, f) in fires.iter().enumerate() {
        let slot = i64::try_from(i).unwrap() * 10_000;
        assert!((ts(slot)..ts(slot + 4_000)).contains(&f.fire_time), "{f:?}");
    }
}

#[test]
fn jitter_never_moves_a_fire_past_the_end_or_into_an_excluded_time() {
    let trigger = Trigger::every(Duration::from_secs(1), ts(0))
        .unwrap()
        .with_end(ts(10_000))
        .unwrap()
        .with_jitter(jitter(5_000, 3));
    let times = stepped(&trigger, ts(HOUR));
    assert_eq!(times.len(), 11, "{times:?}");
    assert_eq!(*times.last().unwrap(), ts(10_000), "the last fire stays at the end");

    // A calendar that excludes every second but the first of each minute:
    // a jittered time it excludes stays at the scheduled time.
    let quiet: CalendarDefinition =
        serde_json::from_value(serde_json::json!({"kind": "cron", "cron": "1-59 * * * * ?"})).unwrap();
    let trigger = cron("0 */10 * * * ?")
        .with_calendar("quiet")
        .unwrap()
        .with_calendar_read(std::sync::Arc::new(quiet.calendar(None).unwrap()))
        .with_jitter(jitter(300_000, 5));
    let times = stepped(&trigger, ts(24 * HOUR));
    assert_eq!(times.len(), 144);
    for t in times {
        assert!(trigger.calendar_includes(t) && !trigger.is_checkpoint(t), "{t}");
        assert!(t.as_millis() % 60_000 < 1000, "in second 0 of a minute: {t}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Asked from any instant, the next fire time is the first of the
    /// stepped sequence after it: no fire is skipped and none invented,
    /// whatever the instant (a misfire's now, an audit's start).
    #[test]
    fn the_next_fire_time_from_any_instant_is_the_stepped_one(
        max_ms in 1u64..20_000,
        seed in any::<i64>(),
        pick in 0usize..4,
        probes in proptest::collection::vec(0i64..120_000, 1..20),
    ) {
        let schedule = ["*/3 * * * * ?", "0/7 * * * * ?", "0 * * * * ?", "1,2,3,30 * * * * ?"][pick];
        let trigger = cron(schedule).with_jitter(jitter(max_ms, seed));
        let times = stepped(&trigger, ts(200_000));
        for pair in times.windows(2) {
            prop_assert!(pair[0] < pair[1]);
        }
        for p in probes {
            let at = ts(p);
            let expected = times.iter().copied().find(|t| *t > at);
            prop_assert_eq!(trigger.fire_time_after(at), expected, "after {}", p);
        }
    }
}

fn decide(trigger: &Trigger, state: &TriggerState, now: i64) -> MisfireDecision {
    let decision = trigger.on_misfire(state, ts(now), &MisfireSettings::default()).unwrap();
    // Every missed time runs or lies in a recorded range; the ranges'
    // counts are their times.
    let overdue = state.next_fire_time.unwrap();
    let ranges: Vec<_> = [&decision.beyond_window, &decision.skipped]
        .into_iter()
        .flatten()
        .collect();
    for t in std::iter::successors(Some(overdue), |t| trigger.fire_time_after(*t)).take_while(|t| *t <= ts(now)) {
        let recorded = ranges.iter().filter(|r| r.from <= t && t < r.until).count();
        let runs = usize::from(decision.runs.contains(&t));
        assert_eq!(recorded + runs, 1, "missed time {t}: {decision:?}");
    }
    for r in ranges {
        let inside = std::iter::successors(Some(r.from), |t| trigger.fire_time_after(*t))
            .take_while(|t| *t < r.until)
            .count();
        assert_eq!(r.count, inside as u64, "{r:?}");
    }
    decision
}

fn overdue_at(next: i64) -> TriggerState {
    TriggerState {
        prev_fire_time: None,
        next_fire_time: Some(ts(next)),
        times_triggered: 0,
        awaiting_finish: false,
        calendar_stamp: 0,
    }
}

#[test]
fn a_week_down_replays_only_the_window() {
    // Every minute, ignore misfires (run every missed time), a window of an
    // hour: a week away replays the last hour's sixty, not ten thousand.
    let trigger = cron("0 * * * * ?")
        .with_misfire_policy(MisfirePolicy::IgnoreMisfires)
        .unwrap()
        .with_catch_up(Duration::from_millis(HOUR as u64))
        .unwrap();
    let now = 7 * 24 * HOUR + 30_000;
    let d = decide(&trigger, &overdue_at(0), now);
    assert_eq!(d.applied, MisfirePolicy::IgnoreMisfires);
    assert_eq!(d.runs.len(), 60, "{:?}", d.runs.first());
    assert_eq!(d.runs[0], ts(7 * 24 * HOUR - HOUR + MIN));
    let beyond = d.beyond_window.as_ref().unwrap();
    assert_eq!(
        (beyond.from, beyond.until, beyond.count),
        (ts(0), d.runs[0], 7 * 24 * 60 - 59)
    );
    assert_eq!(d.skipped, None);

    // Fire now: one run now, the window's missed times skipped by the policy.
    let fire_now = cron("0 * * * * ?")
        .with_catch_up(Duration::from_millis(HOUR as u64))
        .unwrap();
    let d = decide(&fire_now, &overdue_at(0), now);
    assert_eq!((d.applied, d.runs.clone()), (MisfirePolicy::FireNow, vec![ts(now)]));
    assert_eq!(d.skipped.as_ref().unwrap().count, 60);
    assert_eq!(d.beyond_window.as_ref().unwrap().count, 7 * 24 * 60 - 59);
}

#[test]
fn a_window_shorter_than_the_threshold_never_catches_up() {
    // A window of a second: a misfire (at least 5 s late) is always beyond
    // it, so the trigger skips to its next time, whatever the policy.
    for policy in [MisfirePolicy::FireNow, MisfirePolicy::IgnoreMisfires] {
        let trigger = cron("0 * * * * ?")
            .with_misfire_policy(policy)
            .unwrap()
            .with_catch_up(Duration::from_secs(1))
            .unwrap();
        let d = decide(&trigger, &overdue_at(0), 10 * MIN + 30_000);
        assert!(d.runs.is_empty(), "{d:?}");
        assert_eq!(d.state.next_fire_time, Some(ts(11 * MIN)));
        assert_eq!(d.beyond_window.as_ref().unwrap().count, 11);
    }
    // Fixed rate: the same; once: complete.
    let rate = Trigger::every(Duration::from_secs(60), ts(0))
        .unwrap()
        .with_catch_up(Duration::from_secs(1))
        .unwrap();
    let d = decide(&rate, &overdue_at(0), 10 * MIN + 30_000);
    assert_eq!((d.runs.len(), d.state.next_fire_time), (0, Some(ts(11 * MIN))));
    let once = Trigger::once(ts(0)).with_catch_up(Duration::from_secs(1)).unwrap();
    let d = decide(&once, &overdue_at(0), HOUR);
    assert_eq!((d.runs.len(), d.state.next_fire_time), (0, None));
    assert_eq!(d.beyond_window.as_ref().unwrap().count, 1);
    // Fixed delay: one delay after now.
    let delay = Trigger::after_each(Duration::from_secs(30), ts(0))
        .unwrap()
        .with_catch_up(Duration::from_secs(1))
        .unwrap();
    let d = delay
        .on_misfire(&overdue_at(0), ts(HOUR), &MisfireSettings::default())
        .unwrap();
    assert_eq!((d.runs.len(), d.state.next_fire_time), (0, Some(ts(HOUR + 30_000))));
}

#[test]
fn a_misfire_within_the_window_is_the_policy_s_alone() {
    let trigger = cron("0 * * * * ?")
        .with_catch_up(Duration::from_millis(HOUR as u64))
        .unwrap();
    let d = decide(&trigger, &overdue_at(0), 10 * MIN + 30_000);
    assert_eq!(d.beyond_window, None);
    assert_eq!(d.runs, vec![ts(10 * MIN + 30_000)]);
    // And jitter with a window: the same accounting.
    let jittered = cron("0 * * * * ?")
        .with_jitter(jitter(50_000, 11))
        .with_catch_up(Duration::from_millis(10 * MIN as u64))
        .unwrap();
    let first = jittered.first_fire_time().unwrap().as_millis() - T0;
    let d = decide(&jittered, &overdue_at(first), 2 * HOUR);
    assert!(d.beyond_window.is_some());
    assert_eq!(
        Schedule::cron(
            quartz_core::cron::CronExpression::parse("0 * * * * ?").unwrap(),
            Tz::UTC
        ),
        *jittered.schedule(),
        "the jitter leaves the schedule as written"
    );
}
