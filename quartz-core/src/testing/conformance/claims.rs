//! Checks of the poll's side: claims won once, the incarnation fence,
//! compare-and-set decisions on executes, due rows by cursor, backfills,
//! fires waiting under an overlap policy.

use std::collections::HashSet;
use std::sync::Arc;

use super::Env;
use super::fixtures::{
    assert_claimed_already, claim_of, count_fires, every_second, ledger, overlap_claim, overlapping_job, register,
    successes, ticking_fires, ticking_job,
};
use crate::cron::CronExpression;
use crate::misfire::MisfireSettings;
use crate::store::{
    Claim, ExecuteCas, ExecuteSpec, ExecuteState, FireEnd, FireQuery, FireState, JobSpec, NodeState, Outcome,
    PendingClaim, SkippedRecord, StoreError,
};
use crate::trigger::{Fire, Overlap, Schedule, Trigger};
use crate::{Timestamp, Tz};

pub(super) async fn concurrent_claimers_win_each_fire_exactly_once(env: &Env<'_>) {
    const FIRES: usize = 40;
    const CLAIMERS: usize = 6;
    let setup = env.store().await;
    let start = setup.now().await.unwrap();
    let (execute_id, trigger) = ticking_job(&setup, "tick", start).await;
    let initial = crate::trigger::TriggerState::initial(&trigger);
    let fires: Arc<Vec<Fire>> = Arc::new(
        trigger
            .fires_until(&initial, start.checked_add_millis(1000 * FIRES as i64).unwrap())
            .collect(),
    );
    assert_eq!(fires.len(), FIRES);
    let mut tasks = Vec::new();
    for c in 0..CLAIMERS {
        // A handle of its own (its own pool, where the store has one).
        let store = env.store().await;
        let node = register(&store, &format!("claimer-{c}")).await;
        let fires = Arc::clone(&fires);
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            if c % 2 == 0 {
                for fire in fires.iter() {
                    if let Some(id) = store.claim(&claim_of(execute_id, fire, &node)).await.unwrap() {
                        won.push((fire.fire_time, id));
                    }
                }
            } else {
                // Batched: four fires per transaction.
                for chunk in fires.chunks(4) {
                    let claims: Vec<Claim> = chunk.iter().map(|f| claim_of(execute_id, f, &node)).collect();
                    let results = store.claim_batch(&claims).await.unwrap();
                    for (fire, id) in chunk.iter().zip(results) {
                        if let Some(id) = id {
                            won.push((fire.fire_time, id));
                        }
                    }
                }
            }
            won
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let times: HashSet<Timestamp> = all.iter().map(|(t, _)| *t).collect();
    assert_eq!(all.len(), FIRES, "each fire won exactly once: {} wins", all.len());
    assert_eq!(times.len(), FIRES);
    assert_eq!(count_fires(&setup).await, FIRES as i64, "one ledger row per fire");
    let executes = setup.get_job("tick").await.unwrap().unwrap().executes;
    assert_eq!(
        executes[0].fire_state,
        fires.last().unwrap().after,
        "the row ends where the last fire left it"
    );

    // A stale claim (a fire already won) loses, alone or in a batch.
    let node = register(&setup, "late").await;
    assert_claimed_already(&setup, execute_id, &fires, &node).await;
    assert_eq!(count_fires(&setup).await, FIRES as i64, "no second row for any fire");
}

pub(super) async fn a_retired_incarnation_is_fenced(env: &Env<'_>) {
    let store = env.store().await;
    let start = store.now().await.unwrap();
    let (execute_id, fires) = ticking_fires(&store, "fenced", start, 3000).await;
    let old = register(&store, "node-a").await;
    let fire_id = store
        .claim(&claim_of(execute_id, &fires[0], &old))
        .await
        .unwrap()
        .unwrap();
    assert!(store.heartbeat(&old, 0).await.unwrap());

    // Re-registering (a restart) retires the old incarnation.
    let new = register(&store, "node-a").await;
    assert!(new.incarnation > old.incarnation);
    assert!(
        store.mark_running_all(&[fire_id], &old).await.unwrap().is_empty(),
        "stale incarnation refused"
    );
    assert!(!store.heartbeat(&old, 0).await.unwrap());
    assert!(
        store.mark_running_all(&[fire_id], &new).await.unwrap().is_empty(),
        "the new incarnation does not own the old claim"
    );

    // Declared dead: fenced too, and must re-register.
    let b = register(&store, "node-b").await;
    let fire_b = store
        .claim(&claim_of(execute_id, &fires[1], &b))
        .await
        .unwrap()
        .unwrap();
    assert!(!store.retire_node(&b, 60_000).await.unwrap(), "its heartbeat is fresh");
    assert!(store.retire_node(&b, -1).await.unwrap());
    assert!(!store.retire_node(&b, -1).await.unwrap(), "retired once");
    assert!(store.mark_running_all(&[fire_b], &b).await.unwrap().is_empty());
    assert!(!store.heartbeat(&b, 0).await.unwrap());
    let nodes = store.list_nodes().await.unwrap();
    let state_of = |id: &str| nodes.iter().find(|n| n.node_id == id).unwrap().state;
    assert_eq!(
        (state_of("node-a"), state_of("node-b")),
        (NodeState::Live, NodeState::Dead)
    );

    // A live owner runs and finishes its fire.
    let fire_c = store
        .claim(&claim_of(execute_id, &fires[2], &new))
        .await
        .unwrap()
        .unwrap();
    assert!(!store.mark_running_all(&[fire_c], &new).await.unwrap().is_empty());
    assert!(
        store.mark_running_all(&[fire_c], &new).await.unwrap().is_empty(),
        "once"
    );
    assert!(
        store
            .end_fire(fire_c, &new, FireEnd::from(&Outcome::Succeeded))
            .await
            .unwrap()
            .ended()
    );
    assert!(store.leave(&new).await.unwrap());
    assert!(
        !store.heartbeat(&new, 0).await.unwrap(),
        "a node that left must re-register"
    );
}

pub(super) async fn misfire_decisions_are_compare_and_set_and_recorded(env: &Env<'_>) {
    let store = env.store().await;
    let now = store.now().await.unwrap();
    let start = now.checked_add_millis(-60_000).unwrap();
    let cron = Trigger::new(
        Schedule::cron(CronExpression::parse("* * * * * ?").unwrap(), Tz::UTC),
        start,
    )
    .unwrap();
    store
        .create_job(&JobSpec::new("overdue", "noop"), &[ExecuteSpec::new(cron.clone())])
        .await
        .unwrap();
    let executes = store.get_job("overdue").await.unwrap().unwrap().executes;
    let execute = &executes[0];
    let decision = execute
        .trigger
        .on_misfire(&execute.fire_state, now, &MisfireSettings::default())
        .expect("a minute late");
    let skipped = decision.skipped.clone().unwrap();
    let cas = ExecuteCas {
        set_trigger: decision.rescheduled.clone(),
        ..ExecuteCas::from_row(execute, ExecuteState::Waiting, decision.state.clone())
    };
    let record = SkippedRecord {
        from: skipped.from,
        until: skipped.until,
        count: skipped.count,
        state: FireState::Misfired,
        reason: "overdue past the misfire threshold (smart policy: fire once now)".to_owned(),
    };
    assert!(store.update_execute(&cas, std::slice::from_ref(&record)).await.unwrap());
    assert!(
        !store.update_execute(&cas, std::slice::from_ref(&record)).await.unwrap(),
        "decided once"
    );
    let ledger = store.fires(&FireQuery::new()).await.unwrap();
    assert_eq!(ledger.len(), 1, "one row for the whole skipped range");
    assert_eq!(ledger[0].state, FireState::Misfired);
    assert_eq!(
        (ledger[0].fire_time, ledger[0].skipped_until),
        (skipped.from, Some(skipped.until))
    );
    assert_eq!(ledger[0].fire_count, skipped.count);
    assert!(
        ledger[0].finished_at.is_some(),
        "a row written ended is finished: it is not among the fires not ended yet"
    );
    assert!(skipped.count >= 60);
    let executes = store.get_job("overdue").await.unwrap().unwrap().executes;
    assert_eq!(executes[0].fire_state, decision.state);
}

/// A poll's decisions on several rows in one call (on PostgreSQL one
/// statement): each row's compare-and-set alone decides it, a lost one
/// writes nothing, a won one its records and its rescheduled trigger.
pub(super) async fn a_polls_row_decisions_are_written_together(env: &Env<'_>) {
    let store = env.store().await;
    let now = store.now().await.unwrap();
    let start = now.checked_add_millis(-60_000).unwrap();
    let cron = Trigger::new(
        Schedule::cron(CronExpression::parse("* * * * * ?").unwrap(), Tz::UTC),
        start,
    )
    .unwrap();
    let mut updates = Vec::new();
    for name in ["late-a", "late-b", "late-c"] {
        store
            .create_job(&JobSpec::new(name, "noop"), &[ExecuteSpec::new(cron.clone())])
            .await
            .unwrap();
        let execute = store.get_job(name).await.unwrap().unwrap().executes.remove(0);
        let decision = execute
            .trigger
            .on_misfire(&execute.fire_state, now, &MisfireSettings::default())
            .expect("a minute late");
        let skipped = decision.skipped.clone().unwrap();
        let record = SkippedRecord {
            from: skipped.from,
            until: skipped.until,
            count: skipped.count,
            state: FireState::Misfired,
            reason: format!("{name} overdue"),
        };
        let cas = ExecuteCas::from_row(&execute, ExecuteState::Waiting, decision.state.clone());
        updates.push((cas, vec![record]));
    }
    // a: rescheduled from now; b: as decided, with a signature; c: expects
    // a state the row no longer has.
    let restarted = Trigger::new(
        Schedule::cron(CronExpression::parse("* * * * * ?").unwrap(), Tz::UTC),
        now,
    )
    .unwrap();
    updates[0].0.set_trigger = Some(restarted);
    updates[1].0.set_signature = Some(42);
    updates[2].0.expect.next_fire_time = Some(now);
    let won = store.update_executes(&updates).await.unwrap();
    assert_eq!(won, [true, true, false]);
    assert_eq!(
        store.update_executes(&updates[..2]).await.unwrap(),
        [false, false],
        "decided once"
    );
    let ledger = store.fires(&FireQuery::new()).await.unwrap();
    let mut reasons: Vec<&str> = ledger.iter().filter_map(|f| f.error.as_deref()).collect();
    reasons.sort_unstable();
    assert_eq!(reasons, ["late-a overdue", "late-b overdue"], "only the rows that won");
    assert!(
        ledger
            .iter()
            .all(|f| f.state == FireState::Misfired && f.finished_at.is_some())
    );
    let a = store.get_job("late-a").await.unwrap().unwrap().executes.remove(0);
    assert_eq!(a.trigger.start(), now, "the rescheduled trigger is written");
    assert_eq!(a.fire_state, updates[0].0.set);
    let c = store.get_job("late-c").await.unwrap().unwrap().executes.remove(0);
    assert_eq!(c.trigger.start(), start, "a lost row is untouched");
    assert_ne!(c.fire_state, updates[2].0.set);
}

/// A poll reads every due execute once, a page at a time: pages after a
/// cursor hold, in order, what one read without a limit holds, ties of next
/// fire time broken by priority (highest first), then by id, none twice.
pub(super) async fn due_executes_come_a_page_at_a_time_after_a_cursor(env: &Env<'_>) {
    let store = env.store().await;
    let now = store.now().await.unwrap();
    for i in 0..11_i64 {
        // Three fire times, each shared by several executes of mixed priority.
        let start = now.checked_add_millis(1_000 + 100 * (i % 3)).unwrap();
        let spec = ExecuteSpec {
            priority: i32::try_from(i % 2).unwrap(),
            ..every_second(start)
        };
        store
            .create_job(&JobSpec::new(format!("page-{i:02}"), "noop"), &[spec])
            .await
            .unwrap();
    }
    let window = now.checked_add_millis(5_000).unwrap();
    let key = |e: &crate::store::Execute| (e.fire_state.next_fire_time, -e.priority, e.id);
    let whole = store.due_executes(window, None, 100).await.unwrap().executes;
    assert_eq!(whole.len(), 11);
    assert!(whole.windows(2).all(|w| key(&w[0]) < key(&w[1])), "in order: {whole:?}");
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store.due_executes(window, after, 3).await.unwrap();
        assert!(page.executes.len() <= 3);
        after = page.cursor();
        let last = page.executes.len() < 3;
        paged.extend(page.executes);
        if last {
            break;
        }
    }
    let ids = |v: &[crate::store::Execute]| v.iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(&paged),
        ids(&whole),
        "the pages, one after the other, are the whole"
    );
}

pub(super) async fn a_backfill_queues_each_past_fire_time_once(env: &Env<'_>) {
    use crate::store::BackfillFire;
    let store = env.store().await;
    let now = store.now().await.unwrap();
    let start = now.saturating_add_millis(-10_000);
    let job = store
        .create_job(&JobSpec::new("late", "noop"), &[every_second(start)])
        .await
        .unwrap();
    let other = store
        .create_job(&JobSpec::new("other", "noop"), &[every_second(start)])
        .await
        .unwrap();
    let execute = store.get_job("late").await.unwrap().unwrap().executes[0].id;
    let foreign = store.get_job("other").await.unwrap().unwrap().executes[0].id;
    let fires: Vec<BackfillFire> = (0..5)
        .map(|i| BackfillFire {
            execute_id: execute,
            fire_time: start.saturating_add_millis(i * 1000),
            due_at: now.saturating_add_millis(i * 100),
        })
        .collect();
    let done = store.backfill("late", &fires).await.unwrap();
    assert_eq!((done.queued.len(), done.already), (5, 0));
    assert!(done.queued.iter().all(|q| q.attempt == 1 && q.execute_id == execute));
    let mut query = FireQuery::new();
    query.job_id = Some(job.id);
    let rows = store.fires(&query).await.unwrap();
    assert_eq!(rows.len(), 5);
    for f in &rows {
        assert_eq!(f.state, FireState::Pending);
        let i = (f.fire_time.as_millis() - start.as_millis()) / 1000;
        assert_eq!(f.due_at, Some(now.saturating_add_millis(i * 100)), "its pace: {f:?}");
    }
    // Again: every time is in the ledger, pending; nothing queued twice.
    let again = store.backfill("late", &fires).await.unwrap();
    assert_eq!((again.queued.len(), again.already), (0, 5));
    // Another job's trigger, an unknown job: refused, nothing written.
    let stray = [BackfillFire {
        execute_id: foreign,
        ..fires[0]
    }];
    assert!(matches!(
        store.backfill("late", &stray).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.backfill("nobody", &fires).await,
        Err(StoreError::UnknownJob { .. })
    ));
    query.job_id = Some(other.id);
    assert!(store.fires(&query).await.unwrap().is_empty());
    let mut changes = crate::store::ChangeQuery::new();
    changes.target = Some("late".to_owned());
    let log = store.change_log(&changes).await.unwrap();
    assert_eq!(log[0].action, "job.backfill");
    assert!(log[0].detail.contains("0 queued, 5 already"), "{}", log[0].detail);
}

/// Fires that wait under an overlap policy are found by their own trigger
/// among other triggers' waiting fires: `buffer_one` keeps one waiting and
/// skips the rest, `cancel` replaces the one waiting, and a pending fire
/// runs only after the older ones of its trigger, whatever waits elsewhere.
pub(super) async fn fires_waiting_under_an_overlap_policy_are_found_by_their_trigger(env: &Env<'_>) {
    let store = env.store().await;
    // Fire times in the past, so that every waiting fire is due.
    let start = Timestamp::from_millis(store.now().await.unwrap().as_millis() - 60_000);
    let node = register(&store, "node-a").await;
    let policies = [Overlap::BufferAll, Overlap::BufferOne, Overlap::Cancel];
    let mut jobs = Vec::new();
    for (i, policy) in policies.iter().enumerate() {
        jobs.push(overlapping_job(&store, &format!("job-{i}"), start, *policy, 5).await);
    }
    // Each job's first fire runs; its later ones come while it does, the
    // three triggers' claims interleaved.
    let mut first = Vec::new();
    for ((execute_id, fires), policy) in jobs.iter().zip(policies) {
        let won = store
            .claim(&overlap_claim(*execute_id, &fires[0], &node, policy))
            .await
            .unwrap();
        first.push(won.expect("nothing runs yet"));
    }
    for n in 1..5 {
        for ((execute_id, fires), policy) in jobs.iter().zip(policies) {
            let claim = overlap_claim(*execute_id, &fires[n], &node, policy);
            assert_eq!(
                store.claim(&claim).await.unwrap(),
                None,
                "{policy:?} fire {n} does not run now"
            );
        }
    }
    let ledger = ledger(&store).await;
    let states = |execute_id: i64| {
        let mut rows: Vec<_> = ledger.iter().filter(|f| f.execute_id == execute_id).collect();
        rows.sort_by_key(|f| f.fire_time);
        rows.iter().map(|f| f.state).collect::<Vec<_>>()
    };
    use FireState::{Claimed, Pending, Skipped};
    assert_eq!(
        states(jobs[0].0),
        [Claimed, Pending, Pending, Pending, Pending],
        "buffer_all"
    );
    assert_eq!(
        states(jobs[1].0),
        [Claimed, Pending, Skipped, Skipped, Skipped],
        "buffer_one"
    );
    assert_eq!(
        states(jobs[2].0),
        [Claimed, Skipped, Skipped, Skipped, Pending],
        "cancel"
    );
    let replaced = ledger
        .iter()
        .find(|f| f.execute_id == jobs[2].0 && f.fire_time == jobs[2].1[1].fire_time)
        .unwrap();
    assert!(
        replaced.error.as_deref().unwrap_or("").contains("replaced by fire"),
        "{:?}",
        replaced.error
    );

    // While the first fires run, the waiting ones stay.
    let waiting = |execute_id: i64, n: usize| {
        ledger
            .iter()
            .find(|f| {
                f.execute_id == execute_id
                    && f.fire_time == jobs.iter().find(|j| j.0 == execute_id).unwrap().1[n].fire_time
            })
            .unwrap()
            .id
    };
    let all_second = waiting(jobs[0].0, 1);
    assert_eq!(
        store.pending_claim(all_second, &node, false).await.unwrap(),
        PendingClaim::Blocked
    );
    let ends = successes(&first);
    store.mark_running_all(&first, &node).await.unwrap();
    store.end_fires(&node, &ends).await.unwrap();
    // Then they run in the order of their fire times, each trigger's own.
    let all_last = waiting(jobs[0].0, 4);
    assert_eq!(
        store.pending_claim(all_last, &node, false).await.unwrap(),
        PendingClaim::Blocked,
        "three older fires of its trigger wait"
    );
    assert_eq!(
        store.pending_claim(all_second, &node, false).await.unwrap(),
        PendingClaim::Won
    );
    assert_eq!(
        store.pending_claim(waiting(jobs[1].0, 1), &node, false).await.unwrap(),
        PendingClaim::Won,
        "another trigger's waiting fires do not hold it"
    );
    assert_eq!(
        store.pending_claim(waiting(jobs[2].0, 4), &node, false).await.unwrap(),
        PendingClaim::Won
    );
}
