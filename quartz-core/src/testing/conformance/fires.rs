//! Checks of a fire after its claim: starts and ends fenced and batched,
//! the handler's run recorded, fires that never ran; nodes registering.

use std::collections::HashMap;
use std::sync::Arc;

use super::Env;
use super::fixtures::{claimed_fires, ledger, register, succeed_all, wait_until};
use crate::Timestamp;
use crate::store::{FireEnd, FireRecord, FireState, FollowUp, HandlerSpan, NodeRegistration};

/// Batched starts and successes: fenced like their one-fire forms, and the ids
/// they return are exactly the fires they moved (more than one statement's
/// worth included).
pub(super) async fn fires_start_and_succeed_in_batches_fenced(env: &Env<'_>) {
    let store = env.store().await;
    let start = store.now().await.unwrap();
    let node = register(&store, "batcher").await;
    let other = register(&store, "other").await;
    let ids = claimed_fires(&store, "batch", 70, start, &node).await;
    // Another incarnation starts none of them.
    assert!(store.mark_running_all(&ids, &other).await.unwrap().is_empty());
    let mut started = store.mark_running_all(&ids[..69], &node).await.unwrap();
    started.sort_unstable();
    assert_eq!(started.iter().map(|s| s.0).collect::<Vec<_>>(), ids[..69].to_vec());
    // Each with the start time the ledger recorded.
    let recorded: HashMap<i64, Option<Timestamp>> = ledger(&store).await.iter().map(|f| (f.id, f.started_at)).collect();
    for (id, at) in &started {
        assert_eq!(recorded[id], Some(*at), "fire {id}");
    }
    // A start confirmed again moves the start time to now and says so; only
    // the owner's, and only of a running fire.
    let confirmed = store.confirm_starts(&[ids[0], ids[69]], &node).await.unwrap();
    assert_eq!(confirmed.len(), 1, "not the unstarted one: {confirmed:?}");
    assert!(
        confirmed[0].0 == ids[0] && confirmed[0].1 >= started[0].1,
        "{confirmed:?}"
    );
    assert!(store.confirm_starts(&[ids[0]], &other).await.unwrap().is_empty());
    assert!(
        store.mark_running_all(&ids[..3], &node).await.unwrap().is_empty(),
        "once"
    );
    // Success only for running fires of this incarnation.
    assert!(succeed_all(&store, &ids, &other).await.is_empty());
    let mut done = succeed_all(&store, &ids, &node).await;
    done.sort_unstable();
    assert_eq!(done, ids[..69].to_vec(), "the unstarted one is not recorded");
    let rows = ledger(&store).await;
    let succeeded = rows.iter().filter(|f| f.state == FireState::Succeeded).count();
    assert_eq!(succeeded, 69);
    assert!(
        rows.iter()
            .all(|f| f.state != FireState::Succeeded || f.finished_at.is_some())
    );
    // A running fire of an incarnation declared dead is confirmed no more.
    assert_eq!(store.mark_running_all(&ids[69..], &node).await.unwrap().len(), 1);
    assert_eq!(store.confirm_starts(&ids[69..], &node).await.unwrap().len(), 1);
    assert!(store.retire_node(&node, -1).await.unwrap());
    assert!(
        store.confirm_starts(&ids[69..], &node).await.unwrap().is_empty(),
        "fenced by liveness"
    );
}

/// The start and finish a fire's end records are its handler's, as its
/// node saw them, in every form of end (a batch of successes, more than one
/// statement's worth, a success alone, one that starts a chain, a failure
/// with its retry); an end that does not know them keeps the fenced
/// start's time and finishes now.
pub(super) async fn a_fires_end_records_when_its_handler_ran(env: &Env<'_>) {
    let store = env.store().await;
    let start = store.now().await.unwrap();
    let node = register(&store, "witness").await;
    let ids = claimed_fires(&store, "ran", 72, start, &node).await;
    let started: HashMap<i64, Timestamp> = store.mark_running_all(&ids, &node).await.unwrap().into_iter().collect();
    assert_eq!(started.len(), 72);
    // Each its own start and finish, after the fenced start.
    let span = |i: usize| {
        let at = started[&ids[i]].as_millis() + 7 + i as i64;
        HandlerSpan {
            started_at: Timestamp::from_millis(at),
            finished_at: Timestamp::from_millis(at + 100 + i as i64),
        }
    };
    let mut ends: Vec<(i64, FireEnd)> = (0..68)
        .map(|i| {
            let ran = (i != 5).then(|| span(i));
            (ids[i], FireEnd::Succeeded { chain: false, ran })
        })
        .collect();
    let done = store.end_fires(&node, &ends).await.unwrap();
    assert!(done.iter().all(|d| *d == FollowUp::Recorded), "{done:?}");
    ends.clear();
    ends.push((
        ids[68],
        FireEnd::Succeeded {
            chain: false,
            ran: Some(span(68)),
        },
    ));
    ends.push((
        ids[69],
        FireEnd::Succeeded {
            chain: true,
            ran: Some(span(69)),
        },
    ));
    ends.push((
        ids[70],
        FireEnd::Failed {
            error: "boom".to_owned(),
            retry_in: Some(std::time::Duration::from_secs(60)),
            ran: Some(span(70)),
        },
    ));
    ends.push((
        ids[71],
        FireEnd::Failed {
            error: "boom".to_owned(),
            retry_in: None,
            ran: Some(span(71)),
        },
    ));
    let done = store.end_fires(&node, &ends).await.unwrap();
    assert!(done.iter().all(FollowUp::ended), "{done:?}");
    let rows: HashMap<i64, FireRecord> = ledger(&store).await.into_iter().map(|f| (f.id, f)).collect();
    let after = store.now().await.unwrap();
    for (i, id) in ids.iter().enumerate() {
        let row = &rows[id];
        if i == 5 {
            assert_eq!(
                row.started_at,
                Some(started[id]),
                "unknown: the fenced start's time stays"
            );
            let finished = row.finished_at.expect("finished");
            assert!(finished >= start && finished <= after, "finished now: {row:?}");
            continue;
        }
        let ran = span(i);
        assert_eq!(
            (row.started_at, row.finished_at),
            (Some(ran.started_at), Some(ran.finished_at)),
            "fire {i}: {row:?}"
        );
    }
}

/// A fire whose handler never ran: misfired when claimed or marked running
/// (a thread took it past the threshold), failed when claimed (no node has
/// its handler); fenced by incarnation, and with no start time either way.
pub(super) async fn fires_that_never_ran_are_recorded_without_a_start(env: &Env<'_>) {
    let store = env.store().await;
    let start = store.now().await.unwrap();
    let node = register(&store, "recorder").await;
    let other = register(&store, "stranger").await;
    let ids = claimed_fires(&store, "unrun", 3, start, &node).await;
    // Marked running, then found late: misfired, its start cleared.
    let started = store.mark_running_all(&ids[..1], &node).await.unwrap();
    assert_eq!(started.iter().map(|s| s.0).collect::<Vec<_>>(), vec![ids[0]]);
    assert!(
        !store
            .end_fire(ids[0], &other, FireEnd::misfired("late"))
            .await
            .unwrap()
            .ended(),
        "fenced"
    );
    assert!(
        store
            .end_fire(ids[0], &node, FireEnd::misfired("late"))
            .await
            .unwrap()
            .ended()
    );
    // Claimed: misfired (refused by the pool) or failed (no handler).
    assert!(
        store
            .end_fire(ids[1], &node, FireEnd::misfired("refused"))
            .await
            .unwrap()
            .ended()
    );
    assert!(
        !store
            .end_fire(
                ids[2],
                &other,
                FireEnd::Refused {
                    reason: "no handler".to_owned()
                }
            )
            .await
            .unwrap()
            .ended(),
        "fenced"
    );
    assert!(
        store
            .end_fire(
                ids[2],
                &node,
                FireEnd::Refused {
                    reason: "no handler".to_owned()
                }
            )
            .await
            .unwrap()
            .ended()
    );
    assert!(
        !store
            .end_fire(
                ids[2],
                &node,
                FireEnd::Refused {
                    reason: "again".to_owned()
                }
            )
            .await
            .unwrap()
            .ended(),
        "once"
    );
    let rows = ledger(&store).await;
    let state = |id: i64| rows.iter().find(|f| f.id == id).unwrap();
    assert_eq!(state(ids[0]).state, FireState::Misfired);
    assert_eq!(state(ids[1]).state, FireState::Misfired);
    assert_eq!(state(ids[2]).state, FireState::Failed);
    assert_eq!(state(ids[2]).error.as_deref(), Some("no handler"));
    for id in ids {
        assert_eq!(state(id).started_at, None);
        assert!(state(id).finished_at.is_some());
    }
}

/// Nodes starting at the same moment, on connections of their own: every
/// registration succeeds, new ids and returning ones alike (on MySQL their
/// transactions deadlock on gap locks, and are tried again).
pub(super) async fn nodes_registering_together_all_register(env: &Env<'_>) {
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(env.store().await);
    }
    // Each node's incarnation by round: the first is the database's now,
    // each return one more.
    let mut last: Vec<Option<i64>> = vec![None; stores.len()];
    for _round in 1..=3 {
        let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
        let tasks: Vec<_> = stores
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, store)| {
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    register(&store, &format!("together-{i}")).await
                })
            })
            .collect();
        for (i, task) in tasks.into_iter().enumerate() {
            let incarnation = task.await.unwrap().incarnation;
            if let Some(before) = last[i] {
                assert_eq!(incarnation, before + 1, "node {i} returns with the next incarnation");
            }
            last[i] = Some(incarnation);
        }
    }
    assert_eq!(stores[0].list_nodes().await.unwrap().len(), 8);
}

/// A node row the retention purged: the node that comes back with the same
/// id gets an incarnation newer than every one it had, so a stale process of
/// the old incarnation stays fenced.
pub(super) async fn a_node_purged_and_back_is_newer_than_before(env: &Env<'_>) {
    let store = env.store().await;
    let first = register(&store, "returning").await;
    let second = register(&store, "returning").await;
    assert!(second.incarnation > first.incarnation);
    assert!(store.leave(&second).await.unwrap());
    let later = store.now().await.unwrap().saturating_add_millis(1_000);
    assert_eq!(store.nodes_purge(later).await.unwrap(), 1);
    assert!(store.list_nodes().await.unwrap().is_empty());
    // A new row's incarnation is the database clock in milliseconds: newer
    // than the old ones once the clock has passed them, as it has long
    // before a retention purge (a node is purged hours after it left). Two
    // registrations within a millisecond here would not be.
    wait_until(
        std::time::Duration::from_secs(5),
        "the clock to pass the last incarnation",
        || {
            let store = store.clone();
            async move { store.now().await.unwrap().as_millis() > second.incarnation }
        },
    )
    .await;
    let back = register(&store, "returning").await;
    assert!(back.incarnation > second.incarnation, "{back:?} after {second:?}");
    assert!(
        !store.heartbeat(&second, 0).await.unwrap(),
        "the old incarnation is fenced"
    );
}

/// The payload schemas a node publishes are read back by node, live nodes
/// only: a node that registers again without them publishes none, one that
/// left is not listed.
pub(super) async fn a_nodes_payload_schemas_are_read_back_while_it_lives(env: &Env<'_>) {
    let store = env.store().await;
    let schema = serde_json::json!({
        "type": "object",
        "properties": { "to": { "type": "string" } },
        "required": ["to"],
    });
    let with = |node_id: &str, schemas: crate::store::PayloadSchemas| NodeRegistration {
        node_id: node_id.to_owned(),
        host: "test-host".to_owned(),
        pid: std::process::id(),
        weight: 1,
        handlers: vec!["mail".to_owned(), "plain".to_owned()],
        dead_after: None,
        payload_schemas: schemas,
    };
    let published: crate::store::PayloadSchemas = [("mail".to_owned(), schema.clone())].into_iter().collect();
    assert!(store.payload_schemas().await.unwrap().is_empty(), "none before");
    let a = store.register_node(&with("schema-a", published.clone())).await.unwrap();
    store
        .register_node(&with("schema-b", Default::default()))
        .await
        .unwrap();
    assert_eq!(
        store.payload_schemas().await.unwrap(),
        vec![("schema-a".to_owned(), published.clone())],
        "the node that published one, as it published it"
    );
    let b = store.register_node(&with("schema-b", published.clone())).await.unwrap();
    let a2 = store
        .register_node(&with("schema-a", Default::default()))
        .await
        .unwrap();
    assert!(a2.incarnation > a.incarnation);
    assert_eq!(
        store.payload_schemas().await.unwrap(),
        vec![("schema-b".to_owned(), published.clone())],
        "registering again replaces what was published"
    );
    let b_ref = crate::store::NodeRef {
        node_id: b.node_id.clone(),
        incarnation: b.incarnation,
    };
    assert!(store.leave(&b_ref).await.unwrap());
    assert!(
        store.payload_schemas().await.unwrap().is_empty(),
        "a node gone publishes nothing"
    );
}
