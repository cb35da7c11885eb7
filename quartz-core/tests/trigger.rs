//! Triggers: first fire, fire times after an instant, validity windows, repeat
//! limits, and the expansion of a row's state into the fires of a window.

#![allow(clippy::unwrap_used)]

use quartz_core::cron::{CronExpression, parse_time_zone};
use quartz_core::trigger::{Fire, MAX_INTERVAL_MILLIS, NextFire, Schedule, Trigger, TriggerState};
use quartz_core::{Error, Timestamp};

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;

fn ts(offset_ms: i64) -> Timestamp {
    Timestamp::from_millis(T0 + offset_ms)
}

fn times(fires: &[Fire]) -> Vec<i64> {
    fires.iter().map(|f| f.fire_time.as_millis() - T0).collect()
}

fn expand(trigger: &Trigger, state: &TriggerState, until_offset: i64) -> Vec<Fire> {
    trigger.fires_until(state, ts(until_offset)).collect()
}

#[test]
fn a_row_firing_every_second_appears_five_times_in_a_five_second_window_each_chained_to_the_last() {
    let trigger = Trigger::new(Schedule::fixed_rate_millis(1000).unwrap(), ts(0)).unwrap();
    let fires = expand(&trigger, &TriggerState::initial(&trigger), 5000);
    assert_eq!(times(&fires), [0, 1000, 2000, 3000, 4000]);
    for (i, fire) in fires.iter().enumerate() {
        // The compare-and-set expects the row to hold this fire as its next...
        assert_eq!(fire.before.next_fire_time, Some(fire.fire_time));
        // ...and leaves it as prev, with the following fire as next.
        assert_eq!(fire.after.prev_fire_time, Some(fire.fire_time));
        assert_eq!(fire.after.next_fire_time, Some(ts(1000 * (i as i64 + 1))));
        assert_eq!(fire.after.times_triggered, i as u64 + 1);
        if let Some(following) = fires.get(i + 1) {
            assert_eq!(
                following.before, fire.after,
                "each fire starts where the last left the row"
            );
        }
    }
    assert_eq!(fires[0].before.prev_fire_time, None);
}

#[test]
fn expanding_in_two_windows_gives_the_same_fires_as_one() {
    let cron = CronExpression::parse("*/3 * * * * ?").unwrap();
    let trigger = Trigger::new(Schedule::cron(cron, parse_time_zone("Europe/London").unwrap()), ts(500)).unwrap();
    let whole = expand(&trigger, &TriggerState::initial(&trigger), 30_000);
    let first = expand(&trigger, &TriggerState::initial(&trigger), 14_000);
    let second = expand(&trigger, &first.last().unwrap().after, 30_000);
    assert_eq!([first, second].concat(), whole);
    assert_eq!(
        times(&whole),
        [3000, 6000, 9000, 12000, 15000, 18000, 21000, 24000, 27000]
    );
}

#[test]
fn a_cron_trigger_fires_at_its_start_when_the_start_matches() {
    let cron = CronExpression::parse("0 * * * * ?").unwrap();
    let trigger = Trigger::new(Schedule::cron(cron, chrono_tz::UTC), ts(0)).unwrap();
    assert_eq!(trigger.first_fire_time(), Some(ts(0)));
    assert_eq!(trigger.fire_time_after(ts(0)), Some(ts(60_000)));
}

#[test]
fn the_end_is_inclusive_and_completes_the_trigger() {
    let trigger = Trigger::new(Schedule::fixed_rate_millis(1000).unwrap(), ts(0))
        .unwrap()
        .with_end(ts(3000))
        .unwrap();
    let fires = expand(&trigger, &TriggerState::initial(&trigger), 60_000);
    assert_eq!(times(&fires), [0, 1000, 2000, 3000]);
    assert_eq!(fires.last().unwrap().next, NextFire::Done);
    assert_eq!(fires.last().unwrap().after.next_fire_time, None);
    assert_eq!(trigger.fire_time_after(ts(3000)), None);
}

#[test]
fn a_repeat_limit_counts_every_fire() {
    let trigger = Trigger::new(Schedule::fixed_rate_millis(250).unwrap(), ts(0))
        .unwrap()
        .with_repeat_limit(3)
        .unwrap();
    let fires = expand(&trigger, &TriggerState::initial(&trigger), 60_000);
    assert_eq!(times(&fires), [0, 250, 500]);
    assert_eq!(fires[2].next, NextFire::Done);
    // A row that has already fired twice has one fire left.
    let state = TriggerState {
        prev_fire_time: Some(ts(250)),
        next_fire_time: Some(ts(500)),
        times_triggered: 2,
        awaiting_finish: false,
        calendar_stamp: 0,
    };
    assert_eq!(times(&expand(&trigger, &state, 60_000)), [500]);
}

#[test]
fn fixed_rate_keeps_its_phase_from_the_start() {
    let trigger = Trigger::new(Schedule::fixed_rate_millis(1000).unwrap(), ts(0)).unwrap();
    assert_eq!(trigger.fire_time_after(ts(2500)), Some(ts(3000)));
    assert_eq!(trigger.fire_time_after(ts(3000)), Some(ts(4000)));
    assert_eq!(trigger.fire_time_after(ts(-5000)), Some(ts(0)));
}

#[test]
fn fixed_delay_waits_for_the_finish_of_each_run() {
    let trigger = Trigger::new(Schedule::fixed_delay_millis(2000).unwrap(), ts(0)).unwrap();
    let fires = expand(&trigger, &TriggerState::initial(&trigger), 60_000);
    assert_eq!(times(&fires), [0], "one fire, then the row waits");
    assert_eq!(fires[0].next, NextFire::AfterFinish);
    assert!(fires[0].after.awaiting_finish);
    assert_eq!(expand(&trigger, &fires[0].after, 60_000), []);
    // The run finished at 700 ms: next fire 2 s later.
    let next = trigger.next_after_finish(ts(700)).unwrap();
    assert_eq!(next, ts(2700));
    let resumed = TriggerState {
        next_fire_time: Some(next),
        awaiting_finish: false,
        ..fires[0].after.clone()
    };
    assert_eq!(times(&expand(&trigger, &resumed, 60_000)), [2700]);
}

#[test]
fn a_once_trigger_fires_once() {
    let trigger = Trigger::new(Schedule::Once, ts(1234)).unwrap();
    let fires = expand(&trigger, &TriggerState::initial(&trigger), 60_000);
    assert_eq!(times(&fires), [1234]);
    assert_eq!(fires[0].next, NextFire::Done);
    assert_eq!(
        expand(&trigger, &TriggerState::initial(&trigger), 1234),
        [],
        "until is exclusive"
    );
}

#[test]
fn a_cron_trigger_whose_years_are_past_has_no_fire() {
    let cron = CronExpression::parse("0 0 0 1 1 ? 2020").unwrap();
    let trigger = Trigger::new(Schedule::cron(cron, chrono_tz::UTC), ts(0)).unwrap();
    assert_eq!(trigger.first_fire_time(), None);
    assert_eq!(expand(&trigger, &TriggerState::initial(&trigger), i64::MAX / 2), []);
}

#[test]
fn contradictory_or_out_of_range_triggers_are_refused() {
    for ms in [0, -1, MAX_INTERVAL_MILLIS + 1, i64::MIN] {
        assert!(
            matches!(Schedule::fixed_rate_millis(ms), Err(Error::InvalidTrigger { .. })),
            "{ms}"
        );
        assert!(
            matches!(Schedule::fixed_delay_millis(ms), Err(Error::InvalidTrigger { .. })),
            "{ms}"
        );
        assert!(matches!(
            Trigger::new(Schedule::FixedRate { interval_ms: ms }, ts(0)),
            Err(Error::InvalidTrigger { .. })
        ));
    }
    let trigger = Trigger::new(Schedule::Once, ts(1000)).unwrap();
    let err = trigger.clone().with_end(ts(999)).unwrap_err();
    assert!(err.to_string().contains("before start"), "{err}");
    assert!(matches!(
        trigger.with_repeat_limit(0),
        Err(Error::InvalidTrigger { .. })
    ));
}

/// A weekend calendar in Paris, for the fixed-delay and once triggers (the
/// cron and fixed-rate ones are checked against Quartz itself in
/// `calendar_quartz_cases.rs`).
fn weekends() -> std::sync::Arc<quartz_core::calendar::Calendar> {
    use chrono::Weekday;
    use quartz_core::calendar::{Calendar, CalendarKind};
    let days = [Weekday::Sat, Weekday::Sun].into_iter().collect();
    std::sync::Arc::new(Calendar::new(CalendarKind::Weekly(days), chrono_tz::Europe::Paris))
}

fn at(rfc3339: &str) -> Timestamp {
    Timestamp::from_millis(
        chrono::DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis(),
    )
}

#[test]
fn a_fixed_delay_after_an_excluded_time_waits_for_the_first_included_instant() {
    let friday = at("2026-12-04T20:00:00+01:00");
    let trigger = Trigger::after_each(std::time::Duration::from_secs(3_600), friday)
        .unwrap()
        .with_calendar("weekends")
        .unwrap()
        .with_calendar_read(weekends());
    // A run finishing at 23:30 on Friday: one hour later is Saturday, so the
    // next fire is Monday's first instant in Paris.
    let next = trigger.next_after_finish(at("2026-12-04T23:30:00+01:00"));
    assert_eq!(next, Some(at("2026-12-07T00:00:00+01:00")));
    assert_eq!(
        trigger.next_after_finish(at("2026-12-04T21:00:00+01:00")),
        Some(at("2026-12-04T22:00:00+01:00")),
        "an included time is kept"
    );
    let ending = trigger.clone().with_end(at("2026-12-06T12:00:00+01:00")).unwrap();
    assert_eq!(
        ending.next_after_finish(at("2026-12-04T23:30:00+01:00")),
        None,
        "no included instant before the end"
    );
}

#[test]
fn a_once_trigger_at_an_excluded_time_never_fires_and_an_unread_calendar_gives_no_time() {
    let saturday = at("2026-12-05T10:00:00+01:00");
    let once = Trigger::once(saturday).with_calendar("weekends").unwrap();
    assert_eq!(once.first_fire_time(), None, "the calendar is not read yet");
    assert!(!once.calendar_includes(saturday));
    let once = once.with_calendar_read(weekends());
    assert_eq!(once.first_fire_time(), None, "as in Quartz: excluded, so no fire");
    let monday = Trigger::once(at("2026-12-07T10:00:00+01:00"))
        .with_calendar("weekends")
        .unwrap()
        .with_calendar_read(weekends());
    assert_eq!(monday.first_fire_time(), Some(at("2026-12-07T10:00:00+01:00")));
    assert!(matches!(
        Trigger::once(saturday).with_calendar(" "),
        Err(Error::InvalidTrigger { .. })
    ));
}

#[test]
fn a_dst_choice_belongs_to_cron_triggers_and_moves_their_fire_times() {
    use quartz_core::cron::{DstChoice, RepeatedTime, SkippedTime};
    let both = DstChoice {
        skipped: SkippedTime::Shift,
        repeated: RepeatedTime::Both,
    };
    let start = Timestamp::from_millis(1_793_491_200_000); // 2026-11-01T00:00:00Z
    let every = Trigger::every(std::time::Duration::from_secs(1), start).unwrap();
    assert!(
        every
            .clone()
            .with_dst(both)
            .unwrap_err()
            .to_string()
            .contains("cron triggers only")
    );
    assert_eq!(every.with_dst(DstChoice::QUARTZ).unwrap().dst(), DstChoice::QUARTZ);

    let cron = Trigger::cron("0 30 1 * * ?", "America/New_York", start)
        .unwrap()
        .with_dst(both)
        .unwrap();
    let fires: Vec<i64> = cron
        .fires_until(&TriggerState::initial(&cron), Timestamp::from_millis(1_793_577_600_000))
        .map(|f| f.fire_time.as_millis())
        .collect();
    // 01:30 EDT and 01:30 EST on 1 November.
    assert_eq!(fires, [1_793_511_000_000, 1_793_514_600_000]);
    // Stored and read back as columns, the choice stays, and so does the signature.
    let columns = quartz_core::store::TriggerColumns::from_trigger(&cron);
    assert_eq!(
        (columns.dst_skipped.as_deref(), columns.dst_repeated.as_deref()),
        (Some("shift"), Some("both"))
    );
    assert_eq!(columns.to_trigger().unwrap().dst(), both);
    let quartz = quartz_core::store::TriggerColumns::from_trigger(&cron.clone().with_dst(DstChoice::QUARTZ).unwrap());
    assert_ne!(
        columns.signature(),
        quartz.signature(),
        "a changed choice is a changed schedule"
    );
    assert_eq!((quartz.dst_skipped, quartz.dst_repeated), (None, None));
}

/// A cron calendar excluding every second of 2026 and 2027: a per-second
/// trigger behind it has its first fire time at 2028's first second, about
/// 63 million excluded seconds away.
fn closed_until_2028() -> std::sync::Arc<quartz_core::calendar::Calendar> {
    use quartz_core::calendar::{Calendar, CalendarKind};
    let expr = CronExpression::parse("* * * * * ? 2026-2027").unwrap();
    std::sync::Arc::new(Calendar::new(CalendarKind::Cron(expr), chrono_tz::UTC))
}

#[test]
fn a_calendar_that_excludes_almost_every_time_costs_a_search_bounded_steps_and_resumes_from_its_checkpoint() {
    use quartz_core::trigger::CALENDAR_SEARCH_STEPS;
    let trigger = Trigger::cron("* * * * * ?", "UTC", ts(0))
        .unwrap()
        .with_calendar("closed")
        .unwrap()
        .with_calendar_read(closed_until_2028());
    // One search stops at a checkpoint: an excluded time, its steps' worth
    // of seconds ahead, not the fire time 63 million seconds away.
    let first = trigger.first_fire_time().unwrap();
    assert!(trigger.is_checkpoint(first), "{first} is a checkpoint");
    assert!(!trigger.calendar_includes(first));
    let steps = i64::from(CALENDAR_SEARCH_STEPS);
    assert!(
        (ts(0).as_millis()..=ts(1000 * (steps + 1)).as_millis()).contains(&first.as_millis()),
        "{first} lies within the search's steps"
    );
    // Resuming from each checkpoint moves forward and never fires meanwhile:
    // the expansion of a row holding a checkpoint yields nothing.
    let state = TriggerState {
        next_fire_time: Some(first),
        ..TriggerState::initial(&trigger)
    };
    assert!(
        expand(&trigger, &state, i64::MAX / 4).is_empty(),
        "a checkpoint is not fired"
    );
    let second = trigger.fire_time_after(first).unwrap();
    assert!(trigger.is_checkpoint(second) && second > first);
    // Resumed from a checkpoint near the end of the closed range, the search
    // finds the first included time.
    let near = at("2027-12-31T23:59:00Z");
    assert_eq!(trigger.fire_time_after(near), Some(at("2028-01-01T00:00:00Z")));
    assert!(!trigger.is_checkpoint(at("2028-01-01T00:00:00Z")));
    // A trigger without a calendar has no checkpoints.
    let plain = Trigger::cron("* * * * * ?", "UTC", ts(0)).unwrap();
    assert!(!plain.is_checkpoint(ts(0)));
}
