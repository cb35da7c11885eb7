//! The launch stage's tests.

use super::*;
use crate::engine::handler::{Handler, RunKind};
use crate::engine::launch_handle::Launch;
use crate::engine::node::test_context;
use crate::engine::recorder::{Lease, Recorder};
use crate::memory::MemoryStore;
use crate::store::{Claim, ExecuteSpec, FireState, JobSpec, Store as _};
use crate::trigger::{Schedule, Trigger, TriggerState};

/// The launcher alone, with the runner and recorder behind it, on the
/// in-memory store and the paused clock: no poller, dispatcher or
/// cluster stage. A fire handed to it for a time two seconds ahead is
/// marked running a start lead before that time, and its handler
/// starts at the time, not before; its success reaches the ledger.
#[tokio::test(start_paused = true)]
async fn a_won_fire_is_marked_running_ahead_and_its_handler_starts_at_its_time() {
    let store = MemoryStore::new();
    let scoped = store.scoped("launcher");
    let now = scoped.now().await.unwrap();
    let start = Timestamp::from_millis((now.as_millis() / 1_000 + 2) * 1_000);
    let trigger = Trigger::new(Schedule::fixed_rate_millis(1_000).unwrap(), start).unwrap();
    let job = scoped
        .create_job(&JobSpec::new("timed", "at"), &[ExecuteSpec::new(trigger)])
        .await
        .unwrap();
    let execute = scoped.get_job("timed").await.unwrap().unwrap().executes.remove(0);
    let (began_tx, mut began) = mpsc::unbounded_channel();
    let clock = store.clone();
    let handler = Handler::asynchronous(move |_| {
        let _ = began_tx.send(clock.clock());
        async { Ok(()) }
    });
    let ctx = test_context(scoped.clone(), "launcher", ("at", handler)).await;
    let node = ctx.node();
    let fire = execute
        .trigger
        .fires_until(&TriggerState::initial(&execute.trigger), start.saturating_add_millis(1))
        .next()
        .unwrap();
    let fire_id = scoped
        .claim(&Claim::for_fire(execute.id, &fire, &node))
        .await
        .unwrap()
        .expect("claimed");
    let lease: Lease = Arc::new(|| true);
    let recorder = Arc::new(Recorder::start(
        ctx.store.clone(),
        ctx.scheduler.clone(),
        ctx.stop_signal(),
        lease,
        tokio::sync::watch::channel(Default::default()).1,
    ));
    let (pending, _pending_rx) = mpsc::unbounded_channel();
    let (launch, inbox) = Launch::new(Arc::clone(&ctx));
    let runner = Arc::new(Runner::new(Arc::clone(&ctx), recorder, pending, launch.clone()));
    tokio::spawn(Launcher::new(Arc::clone(&ctx), runner, inbox).run());
    let job = Arc::new(job);
    launch.launch(RunFire {
        fire_id,
        execute_id: execute.id,
        hold: Some(ctx.hold(&job)),
        job,
        trigger: Some(Arc::new(execute.trigger.clone())),
        fire_time: start,
        attempt: 1,
        kind: RunKind::Scheduled,
        node: node.clone(),
        release: None,
        marked_at: None,
        payload: None,
        trace_parent: None,
        snoozed: 0,
    });
    let state = |id: i64| {
        let scoped = scoped.clone();
        async move {
            let query = crate::store::FireQuery {
                before_id: Some(id + 1),
                limit: 1,
                ..crate::store::FireQuery::new()
            };
            scoped.fires(&query).await.unwrap().remove(0)
        }
    };
    // A moment before its time: marked running, its handler not begun.
    tokio::time::sleep(ctx.clock.instant_of(start.saturating_add_millis(-2)) - tokio::time::Instant::now()).await;
    assert_eq!(state(fire_id).await.state, FireState::Running);
    assert!(began.try_recv().is_err(), "the handler began before its time");
    let at = began.recv().await.expect("the handler began");
    assert!(
        at >= start && at.as_millis() <= start.as_millis() + 5,
        "began at {at:?}, its time {start:?}"
    );
    for _ in 0..100 {
        if state(fire_id).await.state == FireState::Succeeded {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let row = state(fire_id).await;
    assert_eq!(row.state, FireState::Succeeded, "{row:?}");
    assert!(row.started_at.is_some_and(|t| t >= start), "{row:?}");
}

#[test]
fn the_start_lead_is_twice_the_smoothed_statement_time_plus_a_margin_within_bounds() {
    assert_eq!(start_lead(0), START_LEAD_MIN);
    assert_eq!(start_lead(10_000), Duration::from_millis(23));
    assert_eq!(start_lead(10_000_000), START_LEAD_MAX);
}
