//! The fire queue's unit tests.

use super::*;
use crate::cron::CronExpression;
use crate::store::{JobSpec, JobState};
use crate::trigger::{Schedule, TriggerState};

/// Room without bound in both lanes.
const ANY: [usize; 2] = [usize::MAX, usize::MAX];

fn job(name: &str) -> Arc<Job> {
    Arc::new(Job {
        id: 1,
        scheduler: "s".to_owned(),
        spec: JobSpec::new(name, "noop"),
        state: JobState::Enabled,
        created_at: Timestamp::from_millis(0),
        updated_at: Timestamp::from_millis(0),
        version: 1,
    })
}

/// Queues `fires` of an execute as left to another node first, each
/// claimed at its fire time.
fn push_theirs(q: &FireQueue, execute_id: i64, trigger: &Arc<Trigger>, fires: Vec<Fire>) -> usize {
    q.push_placed(
        execute_id,
        (&job("theirs"), Lane::Pool),
        true,
        trigger,
        (fires, |t| t),
        None,
    )
}

/// A trigger every second from 0, and its first `count` fires.
fn every_second(count: i64) -> (Arc<Trigger>, Vec<Fire>) {
    let cron = CronExpression::parse("* * * * * ?").unwrap();
    let trigger = Trigger::new(Schedule::cron(cron, chrono_tz::UTC), Timestamp::from_millis(0)).unwrap();
    let state = TriggerState {
        prev_fire_time: None,
        next_fire_time: Some(Timestamp::from_millis(0)),
        times_triggered: 0,
        awaiting_finish: false,
        calendar_stamp: 0,
    };
    let fires = trigger
        .fires_until(&state, Timestamp::from_millis(count * 1000))
        .collect();
    (Arc::new(trigger), fires)
}

fn ms(t: i64) -> Timestamp {
    Timestamp::from_millis(t)
}

#[test]
fn fires_come_due_at_their_claim_time_in_fire_time_then_execute_order() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(3);
    let j = job("a");
    assert_eq!(
        q.push(
            7,
            (&j, Lane::Pool),
            &trigger,
            fires.clone(),
            |t| t.saturating_add_millis(-1000),
            None
        ),
        3
    );
    assert_eq!(
        q.push(
            3,
            (&j, Lane::Pool),
            &trigger,
            fires,
            |t| t.saturating_add_millis(-1000),
            None
        ),
        3
    );
    assert_eq!(q.first_claim_at(), Some(ms(-1000)));
    assert!(q.take_due((ms(-1001), 0), 100, 5000, ANY).fires.is_empty());
    let due = q.take_due((ms(0), 0), 100, 5000, ANY);
    let got: Vec<(i64, i64)> = due
        .fires
        .iter()
        .map(|p| (p.fire.fire_time.as_millis(), p.execute_id))
        .collect();
    assert_eq!(got, vec![(0, 3), (0, 7), (1000, 3), (1000, 7)]);
    assert!(q.has_due(ms(1000)));
}

#[test]
fn a_fire_already_queued_is_not_queued_twice() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(2);
    let j = job("a");
    assert_eq!(q.push(1, (&j, Lane::Pool), &trigger, fires.clone(), |t| t, None), 2);
    assert_eq!(q.push(1, (&j, Lane::Pool), &trigger, fires, |t| t, None), 0);
}

#[test]
fn a_forgotten_execute_leaves_only_stale_fires_and_may_be_queued_afresh() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(2);
    let j = job("a");
    q.push(1, (&j, Lane::Pool), &trigger, fires.clone(), |t| t, None);
    q.forget(1);
    assert!(q.take_due((ms(5000), 0), 100, 60_000, ANY).fires.is_empty());
    assert_eq!(q.push(1, (&j, Lane::Pool), &trigger, fires, |t| t, None), 2);
    assert_eq!(q.take_due((ms(5000), 0), 100, 60_000, ANY).fires.len(), 2);
}

#[test]
fn a_first_lost_claim_keeps_the_execute_s_later_fires_and_a_second_forgets_it() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(3);
    let j = job("a");
    q.push(1, (&j, Lane::Pool), &trigger, fires.clone(), |t| t, None);
    let first = q.take_due((ms(1000), 0), 1, 60_000, ANY).fires.remove(0);
    assert!(!q.lost(1, first.epoch), "kept after its first lost claim");
    let second = q.take_due((ms(2000), 0), 1, 60_000, ANY).fires.remove(0);
    assert_eq!(
        second.fire.fire_time, fires[1].fire_time,
        "the next fire is still queued"
    );
    assert!(q.lost(1, second.epoch), "forgotten after the second");
    assert!(
        q.take_due((ms(5000), 0), 100, 60_000, ANY).fires.is_empty(),
        "the rest is stale"
    );
    // Queued afresh by the next poll, it may lose one claim again.
    assert_eq!(q.push(1, (&j, Lane::Pool), &trigger, fires, |t| t, None), 3);
    let fresh = q.take_due((ms(1000), 0), 1, 60_000, ANY).fires.remove(0);
    assert!(!q.lost(1, fresh.epoch));
    assert!(q.lost(1, first.epoch), "a fire of a forgotten epoch keeps nothing");
}

#[test]
fn a_won_last_fire_queues_the_next_and_only_the_last_does() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(2);
    let j = job("a");
    q.push(1, (&j, Lane::Pool), &trigger, fires, |t| t, None);
    let first = q.take_due((ms(0), 0), 1, 60_000, ANY).fires.remove(0);
    assert!(!q.follow(&first, 200), "a later fire is queued already");
    let second = q.take_due((ms(1000), 0), 1, 60_000, ANY).fires.remove(0);
    assert!(q.follow(&second, 200), "the last one queued is followed");
    assert!(!q.follow(&second, 200), "once");
    // The fire after it, from the state the claim wrote, a lead early.
    assert!(q.take_due((ms(1799), 0), 10, 60_000, ANY).fires.is_empty());
    let third = q.take_due((ms(1800), 0), 10, 60_000, ANY).fires.remove(0);
    assert_eq!(third.fire.fire_time, ms(2000));
    assert_eq!(third.fire.before, second.fire.after);
    assert_eq!(third.epoch, second.epoch);
    // A forgotten execute is not followed.
    q.forget(1);
    assert!(!q.follow(&third, 200));
    assert!(q.take_due((ms(9000), 0), 10, 60_000, ANY).fires.is_empty());
}

#[test]
fn a_run_takes_the_fires_in_reach_and_their_queued_copies_go_stale() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(4);
    let j = job("a");
    q.push(
        1,
        (&j, Lane::Pool),
        &trigger,
        fires,
        |t| t.saturating_add_millis(-1000),
        None,
    );
    let first = q.take_due((ms(-1000), 0), 10, 60_000, ANY).fires.remove(0);
    assert_eq!(first.fire.fire_time, ms(0));
    // Up to the first's time plus the lead: the fire at 1,000 and not 2,000.
    let run = q.take_run(&first, ms(1001), 7).expect("a fire follows in reach");
    let times: Vec<_> = run.fires.iter().map(|p| p.fire.fire_time).collect();
    assert_eq!(times, vec![ms(1000)]);
    assert_eq!(
        run.fires[0].fire.before, first.fire.after,
        "it expects what the first leaves"
    );
    assert_eq!(run.fires[0].epoch, first.epoch);
    // The queued copy of the fire taken is stale; the next one is not.
    assert!(q.take_due((ms(0), 0), 10, 60_000, ANY).fires.is_empty());
    let next = q.take_due((ms(1000), 0), 10, 60_000, ANY).fires.remove(0);
    assert_eq!(next.fire.fire_time, ms(2000));
    // The run's last fire is followed when it is the last queued; the first is not.
    assert!(!q.follow(&first, 1000));
    assert!(q.take_run(&next, ms(2000), 0).is_none(), "no room, no run");
    assert!(q.take_run(&next, ms(2000), 7).is_none(), "no fire in reach");
}

#[test]
fn a_run_given_back_leaves_its_copies_claimable_and_the_rest_to_the_poll() {
    // Its copies queued by the poll: claimable again.
    let q = FireQueue::default();
    let (trigger, fires) = every_second(3);
    let j = job("a");
    q.push(1, (&j, Lane::Pool), &trigger, fires.clone(), |t| t, None);
    let first = q.take_due((ms(0), 0), 1, 60_000, ANY).fires.remove(0);
    let run = q.take_run(&first, ms(2001), 7).unwrap();
    assert_eq!(run.fires.len(), 2);
    q.give_back(&run);
    let again: Vec<_> = q
        .take_due((ms(2000), 0), 10, 60_000, ANY)
        .fires
        .iter()
        .map(|p| p.fire.fire_time)
        .collect();
    assert_eq!(again, vec![ms(1000), ms(2000)]);

    // Only its first queued (by a claim's follow): the poll queues the rest.
    let q = FireQueue::default();
    q.push(1, (&j, Lane::Pool), &trigger, fires[..1].to_vec(), |t| t, None);
    let first = q.take_due((ms(0), 0), 1, 60_000, ANY).fires.remove(0);
    let run = q.take_run(&first, ms(1001), 7).unwrap();
    assert_eq!(
        q.push(1, (&j, Lane::Pool), &trigger, fires.clone(), |t| t, None),
        1,
        "past the run"
    );
    q.forget(1);
    q.push(1, (&j, Lane::Pool), &trigger, fires[..1].to_vec(), |t| t, None);
    let first = q.take_due((ms(0), 0), 1, 60_000, ANY).fires.remove(0);
    let run_again = q.take_run(&first, ms(1001), 7).unwrap();
    q.give_back(&run);
    assert_eq!(
        q.push(1, (&j, Lane::Pool), &trigger, fires[..2].to_vec(), |t| t, None),
        0,
        "a run of a forgotten epoch gives nothing back"
    );
    q.give_back(&run_again);
    assert_eq!(
        q.push(1, (&j, Lane::Pool), &trigger, fires, |t| t, None),
        2,
        "the fires after the first"
    );

    // The run's last fire, won, queues the next from the state it leaves.
    let q = FireQueue::default();
    let (trigger, fires) = every_second(1);
    q.push(1, (&j, Lane::Pool), &trigger, fires, |t| t, None);
    let first = q.take_due((ms(0), 0), 1, 60_000, ANY).fires.remove(0);
    let run = q.take_run(&first, ms(1001), 7).unwrap();
    assert!(q.follow(&run.fires[0], 1000));
    let third = q.take_due((ms(1000), 0), 10, 60_000, ANY).fires.remove(0);
    assert_eq!(third.fire.fire_time, ms(2000));
    assert_eq!(third.fire.before, run.fires[0].fire.after);
}

#[test]
fn an_edited_job_requeues_its_fires_with_the_new_version() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(1);
    q.push(1, (&job("a"), Lane::Pool), &trigger, fires.clone(), |t| t, None);
    let edited = job("a-edited");
    assert_eq!(q.push(1, (&edited, Lane::Pool), &trigger, fires, |t| t, None), 1);
    let due = q.take_due((ms(0), 0), 100, 5000, ANY);
    assert_eq!(due.fires.len(), 1, "the old version's fire is stale");
    assert_eq!(due.fires[0].job.spec.name, "a-edited");
}

#[test]
fn a_fire_past_the_threshold_is_left_to_the_misfire_decision_unless_a_policy_runs_it_late() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(2);
    q.push(1, (&job("a"), Lane::Pool), &trigger, fires.clone(), |t| t, None);
    q.push(2, (&job("b"), Lane::Pool), &trigger, fires, |t| t, Some(ms(1000)));
    let due = q.take_due((ms(6001), 0), 100, 5000, ANY);
    assert_eq!(due.late, vec![1, 1]);
    assert_eq!(due.fires.iter().map(|p| p.execute_id).collect::<Vec<_>>(), vec![2, 2]);
    assert!(q.take_due((ms(6001), 0), 100, 5000, ANY).fires.is_empty());
}

#[test]
fn take_due_stops_at_its_limit_and_a_retry_comes_back_at_its_time() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(4);
    q.push(1, (&job("a"), Lane::Pool), &trigger, fires, |t| t, None);
    let first = q.take_due((ms(3000), 0), 3, 5000, ANY).fires;
    assert_eq!(first.len(), 3);
    q.retry_at(first, ms(3100));
    let again = q.take_due((ms(3000), 0), 10, 5000, ANY).fires;
    assert_eq!(again.len(), 1, "only the fire not taken before");
    assert_eq!(q.take_due((ms(3100), 0), 10, 5000, ANY).fires.len(), 3);
}

#[test]
fn a_deferred_fire_comes_back_marked_at_its_own_time() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(2);
    q.push(1, (&job("a"), Lane::Pool), &trigger, fires, |t| t, None);
    let due = q.take_due((ms(1000), 0), 10, 5000, ANY).fires;
    assert!(due.iter().all(|p| !p.deferred));
    q.defer(due, |p| p.fire.fire_time.saturating_add_millis(500));
    assert!(q.take_due((ms(499), 0), 10, 5000, ANY).fires.is_empty());
    let again = q.take_due((ms(500), 0), 10, 5000, ANY).fires;
    assert_eq!(again.len(), 1);
    assert!(again[0].deferred);
}

#[test]
fn a_fire_whose_lane_is_full_stays_queued_and_the_other_lane_is_served() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(3);
    q.push(1, (&job("blocking"), Lane::Pool), &trigger, fires.clone(), |t| t, None);
    q.push(2, (&job("async"), Lane::Task), &trigger, fires, |t| t, None);
    let due = q.take_due((ms(3000), 0), 100, 5000, [0, 2]);
    assert_eq!(
        due.fires.iter().map(|p| p.execute_id).collect::<Vec<_>>(),
        [2, 2],
        "only the lane with room, and only as much as it has"
    );
    assert_eq!(q.first_claim_at_in([0, 1]), Some(ms(2000)), "the async fire left");
    assert_eq!(q.first_claim_at_in([0, 0]), None);
    let due = q.take_due((ms(3000), 0), 100, 5000, [5, 0]);
    assert_eq!(due.fires.len(), 3, "the blocking fires were kept");
}

#[test]
fn a_burst_begins_its_claims_as_early_as_claiming_it_takes() {
    let q = FireQueue::default(); // 250 µs a claim until observed
    let (trigger, _) = every_second(1);
    for id in 0..4_000 {
        let fire = Fire {
            fire_time: ms(10_000),
            ..every_second(1).1[0].clone()
        };
        q.push(
            id,
            (&job("burst"), Lane::Pool),
            &trigger,
            vec![fire],
            |t| t.saturating_add_millis(-1_000),
            None,
        );
    }
    // 4,000 claims take a second: they begin a second before the claim time.
    let ahead = q.claim_ahead(ms(0));
    assert_eq!((ahead.ms, ahead.begin_by), (0, Some(ms(8_000))));
    assert_eq!(q.claim_ahead(ms(8_000)).ms, 1_000, "all due at once");
    let due = q.take_due((ms(8_000), 1_000), 256, 5_000, ANY);
    assert_eq!(due.fires.len(), 256);
    // One fire queued: its claim time, as before.
    let single = FireQueue::default();
    let (trigger, fires) = every_second(1);
    single.push(
        1,
        (&job("one"), Lane::Pool),
        &trigger,
        fires,
        |t| t.saturating_add_millis(5_000),
        None,
    );
    assert_eq!(single.claim_ahead(ms(0)).begin_by, Some(ms(5_000)));
}

#[test]
fn fires_left_to_another_node_neither_pace_the_claims_nor_come_due_before_their_time() {
    let q = FireQueue::default(); // 250 µs a claim until observed
    let (trigger, _) = every_second(1);
    let at_ten = || Fire {
        fire_time: ms(10_000),
        ..every_second(1).1[0].clone()
    };
    let lead = |t: Timestamp| t.saturating_add_millis(-1_000);
    for id in 0..4_000 {
        push_theirs(&q, id, &trigger, vec![at_ten()]);
    }
    for id in 4_000..4_100 {
        q.push(id, (&job("mine"), Lane::Pool), &trigger, vec![at_ten()], lead, None);
    }
    // A hundred fires of its own take 25 ms: the 4,000 left to others do
    // not count.
    let ahead = q.claim_ahead(ms(0));
    assert_eq!(ahead.begin_by, Some(ms(8_975)));
    // Due at their claim time: this node's first, the others' at theirs,
    // however far ahead the claims reach.
    let due = q.take_due((ms(9_000), 5_000), 10_000, 5_000, ANY).fires;
    assert_eq!(due.len(), 100);
    assert!(due.iter().all(|p| !p.deferred && p.execute_id >= 4_000));
    let theirs = q.take_due((ms(10_000), 0), 10_000, 5_000, [3_000, 0]).fires;
    assert_eq!(theirs.len(), 3_000, "bounded by the lane's room");
    assert!(theirs.iter().all(|p| p.deferred));
}

#[test]
fn forgetting_the_fires_left_to_others_keeps_this_nodes_own_and_lets_a_poll_queue_them_again() {
    let q = FireQueue::default();
    let (trigger, fires) = every_second(3);
    for id in 0..10 {
        push_theirs(&q, id, &trigger, fires.clone());
    }
    q.push(10, (&job("mine"), Lane::Pool), &trigger, fires.clone(), |t| t, None);
    assert_eq!(q.forget_deferred(), 30);
    let due = q.take_due((ms(5_000), 0), 100, 60_000, ANY).fires;
    assert_eq!(due.len(), 3, "this node's own stay");
    assert!(due.iter().all(|p| p.execute_id == 10));
    // Forgotten, not remembered as queued: the next poll queues them again.
    assert_eq!(push_theirs(&q, 3, &trigger, fires), 3);
}

/// [`FireQueue::claim_ahead`] as it walked the own fires one by one, in
/// claim-time order: the reference the counts by claim time must agree with.
fn claim_ahead_fire_by_fire(q: &FireQueue, db_now: Timestamp) -> Ahead {
    let state = q.state.lock();
    let mut own: Vec<Timestamp> = [Lane::Pool, Lane::Task]
        .iter()
        .flat_map(|lane| state.lanes[slot(*lane, false)].keys().map(|k| k.0))
        .collect();
    own.sort_unstable();
    let longest = i64::try_from(q.claim_pace.of(own.len()).as_millis()).unwrap();
    let mut ahead = Ahead { ms: 0, begin_by: None };
    for (i, claim_at) in own.into_iter().enumerate() {
        let earliest_begin = claim_at.saturating_add_millis(-longest);
        if earliest_begin > db_now && ahead.begin_by.is_some_and(|b| earliest_begin >= b) {
            break;
        }
        let begin = claim_at.saturating_add_millis(-i64::try_from(q.claim_pace.of(i + 1).as_millis()).unwrap());
        if begin <= db_now {
            ahead.ms = ahead.ms.max(claim_at.as_millis() - db_now.as_millis());
        }
        ahead.begin_by = Some(ahead.begin_by.map_or(begin, |b| b.min(begin)));
    }
    ahead
}

#[test]
fn how_far_claims_reach_counted_by_claim_time_is_what_the_walk_fire_by_fire_found() {
    let q = FireQueue::default();
    let (trigger, _) = every_second(1);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let at = |t: i64| Fire {
        fire_time: ms(t),
        ..every_second(1).1[0].clone()
    };
    for round in 0..300_i64 {
        let id = i64::try_from(next(400)).unwrap();
        let lane = if next(3) == 0 { Lane::Task } else { Lane::Pool };
        let fire_time = 1_000 * i64::try_from(next(8)).unwrap() + 500 * i64::try_from(next(2)).unwrap();
        match next(6) {
            0 => {
                push_theirs(&q, id + 1_000, &trigger, vec![at(fire_time)]);
            }
            1 => {
                let due = q.take_due((ms(round * 20), 300), 1 + next(50) as usize, 5_000, ANY);
                let (back, gone): (Vec<Pending>, Vec<Pending>) =
                    due.fires.into_iter().partition(|p| p.execute_id % 2 == 0);
                q.retry_at(back, ms(round * 20 + 700));
                q.defer(gone, |p| p.fire.fire_time);
            }
            2 => q.forget(id),
            3 if next(10) == 0 => {
                q.forget_deferred();
            }
            _ => {
                q.push(
                    id,
                    (&job("mine"), lane),
                    &trigger,
                    vec![at(fire_time)],
                    |t| t.saturating_add_millis(-1_000),
                    None,
                );
            }
        }
        let counted: usize = q.state.lock().lanes.own_at.values().sum();
        assert_eq!(counted, q.state.lock().lanes.own_len(), "round {round}");
        for now in [-2_000, 0, 1_500, 4_000, 9_000] {
            assert_eq!(
                q.claim_ahead(ms(now)),
                claim_ahead_fire_by_fire(&q, ms(now)),
                "round {round}, now {now}"
            );
        }
    }
    q.clear();
    assert!(q.state.lock().lanes.own_at.is_empty());
}
