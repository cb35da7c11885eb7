//! A node on the in-memory store under tokio's paused time: the engine's
//! own logic on a clock the test steps, without a database or the wall
//! clock (issue 32 builds its stage tests on this).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use quartz::prelude::*;
use quartz::store::ExecuteSpec;
use quartz::store::{FireState, NodeState, Store};
use quartz::trigger::{Schedule, Trigger};
use quartz_testkit::memory::MemoryStore;
use quartz_testkit::wait_until;

const CLUSTER: &str = "paused";

/// A minute of a one-second trigger passes in the test's own time: every
/// fire time from the first runs once, on time by the store's clock, and
/// the audit finds nothing.
#[tokio::test(start_paused = true)]
async fn a_minute_of_fires_on_a_stepped_clock() {
    let (ran, claims) = a_minute_of_fires(false).await;
    assert_eq!(claims, ran, "a claim a fire");
}

/// With `claim_runs`, the same minute, each claim taking the next fire
/// along (due for its claim, a lead of a second before its time, by the
/// first one's time): a claim every two fires, at one instant for both,
/// and each fire still on time.
#[tokio::test(start_paused = true)]
async fn a_minute_of_fires_claimed_in_runs() {
    let (ran, claims) = a_minute_of_fires(true).await;
    assert!(claims <= ran / 2 + 1, "{claims} claims for {ran} fires");
}

/// A node on `store` on the paused clock with a handler `tick` that notes
/// the scheduled time of each fire it runs.
async fn ticking_node(store: &MemoryStore, settings: Settings) -> (Scheduler, Arc<Mutex<Vec<Timestamp>>>) {
    let seen: Arc<Mutex<Vec<Timestamp>>> = Arc::default();
    let s = Arc::clone(&seen);
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(settings)
        .stepped_clock()
        .handler("tick", move |ctx| {
            s.lock().push(ctx.scheduled_fire_time());
            Ok(())
        })
        .start(store.clone())
        .await
        .unwrap();
    (node, seen)
}

/// A minute of a one-second trigger on one node (see the tests above):
/// how many fires ran, and at how many instants they were claimed.
async fn a_minute_of_fires(claim_runs: bool) -> (usize, usize) {
    let store = MemoryStore::new();
    let (node, seen) = ticking_node(
        &store,
        Settings {
            claim_runs,
            ..quartz_testkit::fast_settings()
        },
    )
    .await;
    let job = JobDefinition::new("tick", "tick").with_trigger(TriggerDefinition::every(Duration::from_secs(1)));
    node.admin().job_add(&job).await.unwrap();
    let from = store.now().await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let until = store.now().await.unwrap();
    node.shutdown().await;

    let mut times = seen.lock().clone();
    times.sort_unstable(); // two pool threads may record out of order
    assert!(
        times.windows(2).all(|w| w[1].as_millis() - w[0].as_millis() == 1_000),
        "{times:?}"
    );
    assert!(times.len() >= 58, "a fire a second for a minute: {}", times.len());
    let store = store.scoped(CLUSTER);
    let rows = quartz_testkit::ledger(&quartz::store::AnyStore::from(store.clone()), CLUSTER).await;
    let (ran, given_back): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.state == FireState::Succeeded);
    assert_eq!(ran.len(), times.len());
    let claims: std::collections::BTreeSet<_> = ran.iter().map(|r| r.claimed_at).collect();
    let counts = (ran.len(), claims.len());
    for r in ran {
        let late = r.started_at.unwrap().as_millis() - r.fire_time.as_millis();
        assert!(
            (0..1_000).contains(&late),
            "started on time by the store's clock: {r:?}"
        );
    }
    // Won ahead of their time and given back at the shutdown, for any node.
    assert!(
        given_back
            .iter()
            .all(|r| r.state == FireState::Claimed && r.owner.is_none() && r.fire_time >= until),
        "{given_back:?}"
    );
    let params = quartz::audit::AuditParams {
        since: from,
        until,
        misfire_threshold: quartz_testkit::fast_settings().misfire.threshold,
    };
    let report = quartz::audit::audit(&*store, &params).await.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(report.fire_times_checked >= 58);
    // A range ending exactly at a fire time that ran: that time is not in
    // the range (the ledger is read before `until`), so it is not missing.
    let until = times[30];
    let report = quartz::audit::audit(&*store, &quartz::audit::AuditParams { until, ..params })
        .await
        .unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.fire_times_checked, 30, "the fire times before {until}");
    counts
}

/// Async handlers run as tokio tasks with their own bound, not on pool
/// threads: with one pool thread and room for four tasks, eight fires due
/// together run four at a time (never more, and never one at a time), a
/// blocking handler's fire due with them runs on the pool meanwhile, and a
/// panicking task fails its own fire only.
#[tokio::test(start_paused = true)]
async fn async_handlers_run_as_tasks_within_their_own_bound() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let store = MemoryStore::new();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let blocking_ran = Arc::new(AtomicUsize::new(0));
    let (r, m, b) = (Arc::clone(&running), Arc::clone(&most), Arc::clone(&blocking_ran));
    let settings = quartz::engine::Settings {
        pool_core: 1,
        pool_max: 1,
        async_max: 4,
        ..quartz_testkit::fast_settings()
    };
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(settings)
        .stepped_clock()
        .async_handler("wait", move |_ctx| {
            let (running, most) = (Arc::clone(&r), Arc::clone(&m));
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .async_handler("boom", |_ctx| async { panic!("the task fails") })
        .handler("block", move |_ctx| {
            b.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .start(store.clone())
        .await
        .unwrap();
    let at = store.now().await.unwrap().saturating_add_millis(3_000);
    let admin = node.admin();
    for i in 0..8 {
        let job = JobDefinition::new(format!("wait-{i}"), "wait").with_trigger(TriggerDefinition::once(at));
        admin.job_add(&job).await.unwrap();
    }
    for (name, handler) in [("boom", "boom"), ("block", "block")] {
        let job = JobDefinition::new(name, handler).with_trigger(TriggerDefinition::once(at));
        admin.job_add(&job).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    let status = node.status();
    node.shutdown().await;

    assert_eq!(
        most.load(Ordering::SeqCst),
        4,
        "four tasks at once: their bound, not the pool's one thread"
    );
    assert_eq!(
        blocking_ran.load(Ordering::SeqCst),
        1,
        "the pool's lane ran beside them"
    );
    assert_eq!(status.tasks, 0, "every task returned its place");
    let store = store.scoped(CLUSTER);
    let rows = quartz_testkit::ledger(&quartz::store::AnyStore::from(store.clone()), CLUSTER).await;
    let ended = |state: FireState| rows.iter().filter(|r| r.state == state).count();
    assert_eq!(ended(FireState::Succeeded), 9, "{rows:?}");
    let failed: Vec<_> = rows.iter().filter(|r| r.state == FireState::Failed).collect();
    assert_eq!(failed.len(), 1, "{rows:?}");
    assert!(
        failed[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("handler panicked: the task fails")),
        "{failed:?}"
    );
}

/// After an outage of the database every heartbeat is stale, and the
/// living come back one by one: a node's pool backs off between refused
/// connections, so a living node may write its next heartbeat seconds after
/// another. A node that was cut off itself judges the others only after
/// twice `dead_after` of its own heartbeats: one back 1.3 `dead_after` late
/// keeps its incarnation; one that never comes back is still declared dead.
#[tokio::test(start_paused = true)]
async fn the_living_are_not_declared_dead_for_coming_back_late_after_an_outage() {
    use quartz_testkit::faults::{Fault, Faults, FaultyStore};
    let store = MemoryStore::new();
    let settings = quartz_testkit::fast_settings();
    let dead_after = settings.dead_after;
    let mut nodes = Vec::new();
    let mut outages = Vec::new();
    for _ in 0..4 {
        let outage = Faults::scripted();
        outage.set_enabled(false);
        outage.always("heartbeat", Fault::Error);
        // The clock and the membership are read slowly, as a call waits for
        // a connection while the database is away and answers once it is
        // back.
        outage.always("now", Fault::Delay(dead_after));
        outage.always("list_nodes", Fault::Delay(dead_after));
        let node = SchedulerBuilder::new(CLUSTER)
            .settings(settings.clone())
            .stepped_clock()
            .start(FaultyStore::new(store.clone(), Arc::clone(&outage)))
            .await
            .unwrap();
        nodes.push(node);
        outages.push(outage);
    }
    let scoped = store.scoped(CLUSTER);
    let incarnations = || async {
        let members = scoped.list_nodes().await.unwrap();
        nodes
            .iter()
            .map(|n| {
                let id = n.node().node_id;
                members
                    .iter()
                    .find(|m| m.node_id == id)
                    .map(|m| (m.incarnation, m.state))
                    .unwrap()
            })
            .collect::<Vec<_>>()
    };
    tokio::time::sleep(dead_after * 2).await;
    let before = incarnations().await;
    assert!(before.iter().all(|(_, s)| *s == NodeState::Live), "{before:?}");

    // Every heartbeat refused for longer than dead_after.
    outages.iter().for_each(|o| o.set_enabled(true));
    tokio::time::sleep(dead_after + Duration::from_millis(500)).await;
    // Two nodes back at once, the third 1.3 dead_after after them, the
    // fourth never.
    outages[0].set_enabled(false);
    outages[1].set_enabled(false);
    tokio::time::sleep(dead_after.mul_f64(1.3)).await;
    outages[2].set_enabled(false);
    tokio::time::sleep(dead_after * 2).await;
    let after = incarnations().await;
    assert_eq!(after[..3], before[..3], "the late node kept its incarnation");
    assert_ne!(after[3], before[3], "the node that never came back was declared dead");
    assert_eq!(after[3].1, NodeState::Dead, "{after:?}");
    for node in nodes {
        node.shutdown().await;
    }
}

/// A node whose heartbeats stop answering and whose confirmations of its
/// starts fail (a network that drops packets on some of its connections)
/// while its start statements still go through. Once its membership was
/// last renewed its lease (three quarters of `dead_after`) ago, it may be declared dead at any
/// moment: it runs nothing the database has not confirmed as still its own,
/// so nothing at all here, although the database still takes its starts
/// until the others declare it dead.
#[tokio::test(start_paused = true)]
async fn a_node_that_cannot_renew_its_membership_runs_nothing_unconfirmed() {
    use quartz_testkit::faults::{Fault, Faults, FaultyStore};
    let store = MemoryStore::new();
    let settings = quartz_testkit::fast_settings();
    let runs: Arc<Mutex<Vec<(usize, String, Timestamp)>>> = Arc::default();
    let silence = Faults::scripted();
    silence.set_enabled(false);
    silence.always("heartbeat", Fault::Delay(Duration::from_secs(3_600)));
    silence.always("confirm_starts", Fault::Error);
    let mut nodes = Vec::new();
    for index in 0..3 {
        let runs = Arc::clone(&runs);
        let builder = SchedulerBuilder::new(CLUSTER)
            .settings(settings.clone())
            .stepped_clock()
            .handler("note", move |ctx| {
                runs.lock()
                    .push((index, ctx.job_name().to_owned(), ctx.scheduled_fire_time()));
                Ok(())
            });
        let node = if index == 0 {
            builder
                .start(FaultyStore::new(store.clone(), Arc::clone(&silence)))
                .await
        } else {
            builder.start(store.clone()).await
        };
        nodes.push(node.unwrap());
    }
    // Fire times spread over each second, 33 ms apart.
    let admin = nodes[1].admin();
    let base = store.now().await.unwrap().saturating_add_millis(1_000);
    for i in 0..30 {
        let trigger = TriggerDefinition::every(Duration::from_secs(1)).starting(base.saturating_add_millis(i * 33));
        let job = JobDefinition::new(format!("job-{i:02}"), "note").with_trigger(trigger);
        admin.job_add(&job).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before = nodes[0].node();
    silence.set_enabled(true);
    let silent_from = store.now().await.unwrap();
    wait_until(Duration::from_secs(10), "the silent node declared dead", || async {
        let members = store.scoped(CLUSTER).list_nodes().await.unwrap();
        members
            .iter()
            .any(|m| m.node_id == before.node_id && m.incarnation == before.incarnation && m.state == NodeState::Dead)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = runs.lock().clone();
    // Its last heartbeat was sent before the silence: its lease (three
    // quarters of dead_after) after it, nothing more runs there.
    let fresh_until =
        silent_from.saturating_add_millis(i64::try_from(settings.dead_after.as_millis() * 3 / 4).unwrap());
    let late: Vec<_> = runs
        .iter()
        .filter(|(node, _, at)| *node == 0 && *at > fresh_until)
        .collect();
    assert!(late.is_empty(), "silent since {silent_from}, it ran: {late:?}");
    let ran = |node: usize, from: Timestamp| runs.iter().filter(|r| r.0 == node && r.2 >= from).count();
    // Its share is the weighted strategy's (a hash of its id): some of 90.
    assert!(ran(0, base) > 0, "the node ran fires before its silence");
    assert!(ran(1, fresh_until) + ran(2, fresh_until) >= 30, "the others ran on");
    for node in nodes.drain(1..) {
        node.shutdown().await;
    }
}

/// Overlap policies and a concurrency limit on the in-memory store, on a
/// stepped clock: a job every second whose runs take 2.5 s skips the fires
/// due meanwhile, and three jobs of one key with a limit of one never run
/// two fires at once, the fires held back waiting their turn.
#[tokio::test(start_paused = true)]
async fn overlap_and_a_limit_on_a_stepped_clock() {
    use quartz::store::{ConcurrencyLimit, FireRecord};
    use quartz::trigger::Overlap;

    let store = MemoryStore::new();
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(quartz_testkit::fast_settings())
        .stepped_clock()
        .async_handler("slow", |ctx: JobContext| async move {
            let ms = if ctx.job_name() == "skip" { 2_500 } else { 1_500 };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(())
        })
        .start(store.clone())
        .await
        .unwrap();
    let every = || TriggerDefinition::every(Duration::from_secs(1)).repeating(6);
    let skip = JobDefinition::new("skip", "slow").with_trigger(every().overlap(Overlap::Skip));
    node.admin().job_add(&skip).await.unwrap();
    for i in 0..3 {
        let job = JobDefinition::new(format!("limited-{i}"), "slow")
            .with_limit(ConcurrencyLimit::new(1, "one-at-a-time"))
            .with_trigger(every());
        node.admin().job_add(&job).await.unwrap();
    }
    let from = store.now().await.unwrap();
    let scoped = quartz::store::AnyStore::from(store.scoped(CLUSTER));
    wait_until(Duration::from_secs(120), "every fire ended", || async {
        let rows = quartz_testkit::ledger(&scoped, CLUSTER).await;
        rows.len() == 24 && rows.iter().all(|f| f.state.is_ended())
    })
    .await;
    let until = store.now().await.unwrap();
    node.shutdown().await;
    let rows = quartz_testkit::ledger(&scoped, CLUSTER).await;
    let names: std::collections::HashMap<i64, String> = scoped
        .list_jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.id, j.spec.name))
        .collect();
    let (skipping, limited): (Vec<&FireRecord>, Vec<&FireRecord>) =
        rows.iter().partition(|f| names[&f.job_id] == "skip");
    assert!(
        skipping
            .iter()
            .any(|f| f.state == FireState::Skipped
                && f.error.as_deref().unwrap_or_default().contains("overlap policy skip")),
        "{skipping:#?}"
    );
    assert!(limited.iter().all(|f| f.state == FireState::Succeeded), "{limited:#?}");
    let mut runs: Vec<(Timestamp, Timestamp)> = limited
        .iter()
        .map(|f| (f.started_at.unwrap(), f.finished_at.unwrap()))
        .collect();
    runs.sort_unstable();
    assert!(runs.windows(2).all(|w| w[1].0 >= w[0].1), "one at a time: {runs:?}");
    assert!(limited.iter().any(|f| f.by_overlap()), "some waited their turn");
    let params = quartz::audit::AuditParams {
        since: from,
        until,
        misfire_threshold: quartz_testkit::fast_settings().misfire.threshold,
    };
    let report = quartz::audit::audit(&*scoped, &params).await.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// A start statement that takes 300 ms longer than the node measures (on
/// the paused clock the delay passes in the test's time, not the wall time
/// the node times its statements by, as work met by another node's poll in
/// the same second passes outside the average): the first fire after it
/// begins starts late, and the node begins the next starts earlier by what
/// that one fell short, so they are recorded on time.
#[tokio::test(start_paused = true)]
async fn starts_that_ended_late_begin_earlier_from_then_on() {
    use quartz_testkit::faults::Fault;

    let (store, faults, node) = ticking_with_fault("mark_running_all", Fault::Delay(Duration::from_millis(300))).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let slow_from = store.now().await.unwrap();
    faults.set_enabled(true);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let slow_until = store.now().await.unwrap();
    node.shutdown().await;

    let store = store.scoped(CLUSTER);
    let rows = quartz_testkit::ledger(&quartz::store::AnyStore::from(store), CLUSTER).await;
    let mut late: Vec<(i64, i64)> = rows
        .iter()
        .filter(|r| r.state == FireState::Succeeded && r.fire_time > slow_from && r.fire_time < slow_until)
        .map(|r| {
            let late = r.started_at.unwrap().as_millis() - r.fire_time.as_millis();
            (r.fire_time.as_millis() - slow_from.as_millis(), late)
        })
        .collect();
    late.sort_unstable();
    assert!(late.len() >= 8, "a fire a second: {late:?}");
    assert!(faults.injected().delays >= 8, "{:?}", faults.injected());
    // The first start or two of the slow statements end late, at most by
    // the delay; every one after them is on time.
    assert!(late.iter().all(|&(_, ms)| (0..=300).contains(&ms)), "{late:?}");
    assert!(
        late[..2].iter().any(|&(_, ms)| ms > 0),
        "the delay made a start late: {late:?}"
    );
    assert!(late[3..].iter().all(|&(_, ms)| ms == 0), "on time after it: {late:?}");
}

/// A poll that takes seconds longer than the one before it (a loaded
/// server) reads the due executes past the window the last poll reached:
/// the fires in between are still claimed at their time, each won fire
/// queuing the next, so none starts late.
#[tokio::test(start_paused = true)]
async fn fires_past_a_slow_polls_window_are_claimed_at_their_time() {
    use quartz_testkit::faults::Fault;

    let (store, faults, node) = ticking_with_fault("due_executes", Fault::Delay(Duration::from_millis(2_500))).await;
    // Polls that take no time, then polls that each take 2.5 s, then
    // quick ones again: each change of pace outruns the window once.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let from = store.now().await.unwrap();
    faults.set_enabled(true);
    tokio::time::sleep(Duration::from_secs(10)).await;
    faults.set_enabled(false);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let until = store.now().await.unwrap();
    node.shutdown().await;

    assert!(faults.injected().delays >= 3, "{:?}", faults.injected());
    let store = store.scoped(CLUSTER);
    let rows = quartz_testkit::ledger(&quartz::store::AnyStore::from(store), CLUSTER).await;
    let mut late: Vec<(i64, FireState, Option<i64>)> = rows
        .iter()
        .filter(|r| r.fire_time > from && r.fire_time < until)
        .map(|r| {
            let late = r.started_at.map(|s| s.as_millis() - r.fire_time.as_millis());
            (r.fire_time.as_millis() - from.as_millis(), r.state, late)
        })
        .collect();
    late.sort_unstable_by_key(|r| r.0);
    assert!(late.len() >= 14, "a fire a second: {late:?}");
    assert!(
        late.iter()
            .all(|&(_, state, ms)| state == FireState::Succeeded && ms == Some(0)),
        "every fire ran at its time: {late:?}"
    );
}

/// Claims that commit and lose their answer (past the store's deadline, a
/// connection cut as it answered): the node reads back which of them went
/// through and runs those at their time, as its own; taken as lost, each
/// waited for the sweep for lost claims, which recorded it misfired
/// seconds later.
#[tokio::test(start_paused = true)]
async fn claims_whose_answer_was_lost_run_at_their_time() {
    use quartz_testkit::faults::Fault;

    let (store, faults, node) = ticking_with_fault("claim_batch", Fault::LostAnswer).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let from = store.now().await.unwrap();
    faults.set_enabled(true);
    tokio::time::sleep(Duration::from_secs(8)).await;
    faults.set_enabled(false);
    let until = store.now().await.unwrap();
    // Past the sweep for lost claims (threshold and dead_after).
    tokio::time::sleep(Duration::from_secs(6)).await;
    node.shutdown().await;

    assert!(faults.injected().lost_answers >= 3, "{:?}", faults.injected());
    let store = store.scoped(CLUSTER);
    let rows = quartz_testkit::ledger(&quartz::store::AnyStore::from(store), CLUSTER).await;
    let mut runs: Vec<(i64, FireState, u32, Option<i64>)> = rows
        .iter()
        .filter(|r| r.fire_time > from && r.fire_time < until)
        .map(|r| {
            let late = r.started_at.map(|s| s.as_millis() - r.fire_time.as_millis());
            (r.fire_time.as_millis() - from.as_millis(), r.state, r.attempt, late)
        })
        .collect();
    runs.sort_unstable_by_key(|r| (r.0, r.2));
    assert!(runs.len() >= 7, "a fire a second: {runs:?}");
    assert!(
        runs.iter()
            .all(|&(_, state, attempt, ms)| state == FireState::Succeeded && attempt == 1 && ms == Some(0)),
        "every fire ran once, at its time: {runs:?}"
    );
}

/// A node on the in-memory store with a one-second trigger, every call of
/// `method` given `fault` once the test enables the faults.
async fn ticking_with_fault(
    method: &'static str,
    fault: quartz_testkit::faults::Fault,
) -> (MemoryStore, Arc<quartz_testkit::faults::Faults>, Scheduler) {
    use quartz_testkit::faults::{Faults, FaultyStore};

    let store = MemoryStore::new();
    let faults = Faults::scripted();
    faults.always(method, fault);
    faults.set_enabled(false);
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(quartz_testkit::fast_settings())
        .stepped_clock()
        .handler("tick", |_| Ok(()))
        .start(FaultyStore::new(store.clone(), Arc::clone(&faults)))
        .await
        .unwrap();
    let job = JobDefinition::new("tick", "tick").with_trigger(TriggerDefinition::every(Duration::from_secs(1)));
    node.admin().job_add(&job).await.unwrap();
    (store, faults, node)
}

/// A schedule edited by hand (every second to every two) while its next
/// fire is claimed ahead: the poll that recomputes the row unclaims that
/// fire (it does not run, and its claim is gone from the ledger), and every
/// fire from then on runs on the new schedule.
#[tokio::test(start_paused = true)]
async fn a_schedule_edited_by_hand_unclaims_the_fire_claimed_ahead_on_the_old_one() {
    let store = MemoryStore::new();
    let (node, seen) = ticking_node(&store, quartz_testkit::fast_settings()).await;
    let now = store.now().await.unwrap().as_millis();
    let s0 = (now / 1_000 + 2) * 1_000;
    let every_second = Trigger::new(Schedule::fixed_rate_millis(1_000).unwrap(), Timestamp::from_millis(s0)).unwrap();
    node.add_job(&JobDefinition::of_specs(
        &JobSpec::new("tick", "tick"),
        &[ExecuteSpec::new(every_second)],
    ))
    .await
    .unwrap();
    let sleep_until = |at: i64| {
        let store = store.clone();
        async move {
            let now = store.now().await.unwrap().as_millis();
            tokio::time::sleep(Duration::from_millis(u64::try_from(at - now).unwrap_or(0))).await;
        }
    };
    // 100 ms past the fire at s0 + 6 s: the one at s0 + 7 s is claimed (a
    // claim lead ahead at least), and is not a time of the new schedule.
    sleep_until(s0 + 6_100).await;
    let scoped = store.scoped(CLUSTER);
    let any = quartz::store::AnyStore::from(scoped.clone());
    let id = scoped.get_job("tick").await.unwrap().unwrap().executes[0].id;
    let old = Timestamp::from_millis(s0 + 7_000);
    let claimed = quartz_testkit::ledger(&any, CLUSTER).await;
    assert!(
        claimed
            .iter()
            .any(|r| r.fire_time == old && r.state == FireState::Claimed),
        "claimed ahead: {claimed:?}"
    );
    assert!(store.edit_execute(id, &[("interval_ms", Some("2000".to_owned()))]));
    sleep_until(s0 + 12_000).await;
    node.shutdown().await;

    let rows = quartz_testkit::ledger(&any, CLUSTER).await;
    assert!(rows.iter().all(|r| r.fire_time != old), "unclaimed: {rows:?}");
    let after: Vec<i64> = seen
        .lock()
        .iter()
        .map(|t| t.as_millis() - s0)
        .filter(|&t| t > 6_100)
        .collect();
    assert!(after.len() >= 2, "fires on the new schedule: {after:?}");
    assert!(
        after.iter().all(|t| t % 2_000 == 0),
        "only the new schedule's times ran: {after:?}"
    );
}

/// A handler's error steers its fire: `no_retry` and `cancel` end it at
/// the first attempt whatever the job's retries, `retry_after` waits what
/// it asked instead of the backoff, `snooze` runs again after its wait
/// without the attempt counting against the policy's, and a plain error is
/// retried by the policy; each recorded with what it asked.
#[tokio::test(start_paused = true)]
async fn a_handlers_error_steers_its_retries() {
    use quartz::engine::Steer;
    let store = MemoryStore::new();
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(quartz_testkit::fast_settings())
        .stepped_clock()
        .handler("steer", |ctx| {
            let asked: String = ctx.payload()?;
            Err(match asked.as_str() {
                "no-retry" => Steer::no_retry("the account is closed").into(),
                "cancel" => Steer::cancel("superseded").into(),
                "later" => Steer::retry_after(Duration::from_secs(600), "429 from the bank").into(),
                "snooze" if ctx.attempt() <= 2 => Steer::snooze(Duration::from_secs(60), "not ready").into(),
                "snooze" => "failed once ready".into(),
                _ => "plain failure".into(),
            })
        })
        .start(store.clone())
        .await
        .unwrap();
    let start = store.now().await.unwrap().saturating_add_millis(2_000);
    for asked in ["no-retry", "cancel", "later", "plain", "snooze"] {
        let job = JobDefinition::new(asked, "steer")
            .with_payload(asked)
            .unwrap()
            .with_retry(RetryPolicy::fixed(3, Duration::from_secs(1)))
            .with_trigger(TriggerDefinition::once(start));
        node.admin().job_add(&job).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1_300)).await;
    node.shutdown().await;
    let rows = quartz_testkit::ledger(&quartz::store::AnyStore::from(store.scoped(CLUSTER)), CLUSTER).await;
    let of = |name: &str| -> Vec<quartz::store::FireRecord> {
        let mut v: Vec<_> = rows
            .iter()
            .filter(|r| r.error.as_deref().is_some_and(|e| e.contains(name)))
            .cloned()
            .collect();
        v.sort_by_key(|r| r.attempt);
        v
    };
    let closed = of("the account is closed");
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert!(closed[0].error.as_deref().unwrap().starts_with("no retry: "));
    let superseded = of("superseded");
    assert_eq!(superseded.len(), 1, "{superseded:?}");
    assert!(
        superseded[0]
            .error
            .as_deref()
            .unwrap()
            .starts_with("cancelled by the handler: ")
    );
    let later = of("429 from the bank");
    assert_eq!(later.len(), 3, "every attempt the policy has: {later:?}");
    for pair in later.windows(2) {
        let waited = pair[1].started_at.unwrap().as_millis() - pair[0].finished_at.unwrap().as_millis();
        assert!((600_000..610_000).contains(&waited), "waited {waited} ms, asked 600 s");
    }
    assert!(later[0].error.as_deref().unwrap().starts_with("retry after 10 min: "));
    let plain = of("plain failure");
    assert_eq!(plain.len(), 3, "{plain:?}");
    for pair in plain.windows(2) {
        let waited = pair[1].started_at.unwrap().as_millis() - pair[0].finished_at.unwrap().as_millis();
        assert!(waited < 10_000, "the policy's 1 s backoff: {waited} ms");
    }
    // Two snoozes a minute apart, then the policy's three attempts.
    let snoozed = of("not ready");
    assert_eq!(snoozed.len(), 2, "{snoozed:?}");
    assert!(snoozed[0].error.as_deref().unwrap().starts_with("snoozed for 1 min: "));
    let waited = snoozed[1].started_at.unwrap().as_millis() - snoozed[0].finished_at.unwrap().as_millis();
    assert!((60_000..70_000).contains(&waited), "waited {waited} ms, asked 60 s");
    let ready = of("failed once ready");
    assert_eq!(
        ready.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        vec![3, 4, 5],
        "the snoozes did not count: {ready:?}"
    );
    assert!(rows.iter().all(|r| r.state == FireState::Failed), "{rows:?}");
}
