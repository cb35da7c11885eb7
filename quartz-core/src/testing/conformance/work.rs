//! The suite's checks of enqueued work: its pending fire, its payload, its
//! retries, its unique key and its purge.

use std::time::Duration;

use super::Env;
use super::fixtures::{register, succeed_all};
use crate::store::{
    Enqueued, FireEnd, FireQuery, FireState, FollowUp, JobSpec, PendingClaim, StoreError, Work, WorkRun, work_execute,
};

/// The work's ids, when it was queued.
fn queued(enqueued: &Enqueued) -> (i64, i64, crate::Timestamp) {
    match enqueued {
        Enqueued::Queued {
            work_id,
            fire_id,
            due_at,
        } => (*work_id, *fire_id, *due_at),
        other => panic!("expected the work queued, got {other:?}"),
    }
}

/// Enqueued work is a pending fire of its job, due when asked, whose
/// attempts (a retry too) find the work's own payload; bad work and an
/// unknown job are refused with nothing written; the change counter moves.
pub(super) async fn enqueued_work_is_a_pending_fire_with_its_own_payload(env: &Env<'_>) {
    let store = env.store().await;
    let job = store.create_job(&JobSpec::new("mail", "send"), &[]).await.unwrap();
    let node = register(&store, "node-a").await;
    let before = store.changes().await.unwrap();
    let now = store.now().await.unwrap();
    let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let work = Work::new("mail")
        .payload(&serde_json::json!({ "to": "ada" }))
        .unwrap()
        .trace_parent(traced);
    let (work_id, fire_id, due) = queued(&store.enqueue(&work).await.unwrap());
    assert!(
        due >= now && due.as_millis() - now.as_millis() < 60_000,
        "due now: {due} at {now}"
    );
    assert!(store.changes().await.unwrap() > before, "the change counter moves");
    assert_eq!(
        store.work_run(work_id).await.unwrap(),
        WorkRun {
            payload: Some(r#"{"to":"ada"}"#.to_owned()),
            trace_parent: Some(traced.to_owned()),
        },
        "its payload and the trace context of the span that enqueued it"
    );
    let later = Work::new("mail").after(Duration::from_secs(3_600));
    let (later_id, _, later_due) = queued(&store.enqueue(&later).await.unwrap());
    assert!(
        later_due.as_millis() - due.as_millis() >= 3_590_000,
        "an hour later: {later_due}"
    );
    assert_eq!(
        store.work_run(later_id).await.unwrap(),
        WorkRun::default(),
        "the job's own payload, no trace"
    );
    let mut query = FireQuery::new();
    query.job_id = Some(job.id);
    let mut rows = store.fires(&query).await.unwrap();
    rows.sort_by_key(|f| f.id);
    assert_eq!(rows.len(), 2);
    let first = &rows[0];
    assert_eq!(
        (first.id, first.execute_id, first.attempt),
        (fire_id, work_execute(work_id), 1)
    );
    assert_eq!(
        (first.state, first.due_at, first.fire_time),
        (FireState::Pending, Some(due), due)
    );
    assert!(first.enqueued() && !first.by_hand() && !first.by_overlap() && !first.by_backfill());
    let pending = store
        .fires_pending(now.saturating_add_millis(60_000), 100)
        .await
        .unwrap();
    assert_eq!(
        pending.iter().map(|f| f.id).collect::<Vec<_>>(),
        vec![fire_id],
        "only the one due"
    );
    // Claimed and failed with a retry: the next attempt is the same work's.
    assert_eq!(
        store.pending_claim(fire_id, &node, false).await.unwrap(),
        PendingClaim::Won
    );
    store.mark_running_all(&[fire_id], &node).await.unwrap();
    let end = FireEnd::Failed {
        error: "smtp down".to_owned(),
        retry_in: Some(Duration::ZERO),
        ran: None,
    };
    let retry = match store.end_fire(fire_id, &node, end).await.unwrap() {
        FollowUp::Pending { fire_id, .. } => fire_id,
        other => panic!("expected a pending retry, got {other:?}"),
    };
    let rows = store.fires(&query).await.unwrap();
    let retry = rows.iter().find(|f| f.id == retry).unwrap();
    assert_eq!(
        (retry.execute_id, retry.attempt, retry.fire_time),
        (work_execute(work_id), 2, due)
    );
    // Refused, nothing written.
    for bad in [
        Work::new("mail").payload_json("{"),
        Work::new("mail").unique(""),
        Work::new("mail").trace_parent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
    ] {
        assert!(
            matches!(store.enqueue(&bad).await, Err(StoreError::Invalid(_))),
            "{bad:?}"
        );
    }
    assert!(matches!(
        store.enqueue(&Work::new("nobody")).await,
        Err(StoreError::UnknownJob { .. })
    ));
    assert_eq!(store.fires(&query).await.unwrap().len(), 3);
}

/// A unique key is held while its work is pending or running, and for its
/// window after it was enqueued; then it passes to the next work. Work
/// ended and past its window is purged with the complete executes; work
/// still pending is not.
pub(super) async fn a_unique_key_is_held_while_its_work_is_open_or_in_its_window(env: &Env<'_>) {
    let store = env.store().await;
    store.create_job(&JobSpec::new("sync", "sync"), &[]).await.unwrap();
    store.create_job(&JobSpec::new("other", "sync"), &[]).await.unwrap();
    let node = register(&store, "node-a").await;
    let keyed = Work::new("sync").payload_json("1").unique("acct-1");
    let (work_id, fire_id, due) = queued(&store.enqueue(&keyed).await.unwrap());
    let duplicate = store.enqueue(&keyed).await.unwrap();
    assert_eq!(
        duplicate,
        Enqueued::Duplicate {
            key: "acct-1".to_owned(),
            work_id: Some(work_id),
            due_at: Some(due),
        }
    );
    // Another key, and the same key of another job: their own.
    queued(&store.enqueue(&Work::new("sync").unique("acct-2")).await.unwrap());
    queued(&store.enqueue(&Work::new("other").unique("acct-1")).await.unwrap());
    // Running: still held. Ended: free.
    assert_eq!(
        store.pending_claim(fire_id, &node, false).await.unwrap(),
        PendingClaim::Won
    );
    store.mark_running_all(&[fire_id], &node).await.unwrap();
    assert!(!store.enqueue(&keyed).await.unwrap().is_queued(), "held while running");
    assert_eq!(succeed_all(&store, &[fire_id], &node).await, vec![fire_id]);
    let (next_id, next_fire, _) = queued(&store.enqueue(&keyed).await.unwrap());
    assert_ne!(next_id, work_id);
    // With a window: held after its end too.
    let windowed = Work::new("sync").unique_for("acct-3", Duration::from_secs(3_600));
    let (_, windowed_fire, _) = queued(&store.enqueue(&windowed).await.unwrap());
    assert_eq!(
        store.pending_claim(windowed_fire, &node, false).await.unwrap(),
        PendingClaim::Won
    );
    store.mark_running_all(&[windowed_fire], &node).await.unwrap();
    assert_eq!(succeed_all(&store, &[windowed_fire], &node).await, vec![windowed_fire]);
    assert!(
        !store.enqueue(&windowed).await.unwrap().is_queued(),
        "held for its window"
    );
    // The purge: the ended work without a window goes, the pending and
    // the windowed stay.
    let horizon = store.now().await.unwrap().saturating_add_millis(1);
    store.executes_purge(horizon, 1_000).await.unwrap();
    assert_eq!(store.work_run(work_id).await.unwrap(), WorkRun::default(), "purged");
    assert_eq!(
        store.work_run(next_id).await.unwrap().payload.as_deref(),
        Some("1"),
        "pending: kept"
    );
    assert!(
        !store.enqueue(&windowed).await.unwrap().is_queued(),
        "the window outlives the purge"
    );
    let mut query = FireQuery::new();
    query.execute_id = Some(work_execute(next_id));
    let rows = store.fires(&query).await.unwrap();
    assert_eq!((rows[0].id, rows[0].state), (next_fire, FireState::Pending));
    assert!(
        !store.enqueue(&keyed).await.unwrap().is_queued(),
        "the pending work keeps its key"
    );
}
