//! A node frozen inside one of the store's transactions (a pause, a stopped
//! process, a network that drops its packets) holds its row locks for about
//! a second, not until it wakes: the node that declares it dead takes the
//! lock of its row, and would otherwise wait for as long as it sleeps.
//! PostgreSQL and MariaDB end a session idle in a transaction; MySQL has no
//! such limit.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::time::{Duration, Instant};

use common::{Kind, TestDb};

const S: &str = "locks";

async fn a_node_frozen_in_a_transaction_holds_its_locks_a_second(db: &TestDb) {
    let frozen = db.store().await.scoped(S);
    let judge = db.store().await.scoped(S);
    let node = common::register_node(&frozen, "frozen").await;

    // The frozen node's transaction holds its own row, as a start of its
    // fires does on MySQL, and sends nothing more.
    let mut tx = frozen.as_sql().unwrap().pool().begin().await.unwrap();
    sqlx::query("SELECT node_id FROM quartz_node WHERE node_id = 'frozen' FOR UPDATE")
        .execute(&mut *tx)
        .await
        .unwrap();

    let asked = Instant::now();
    let retired = tokio::time::timeout(Duration::from_secs(10), judge.retire_node(&node, 0)).await;
    let waited = asked.elapsed();
    assert!(
        matches!(retired, Ok(Ok(true))),
        "declared dead while its transaction sleeps: {retired:?} after {waited:?}"
    );
    assert!(
        waited >= Duration::from_millis(500),
        "the lock was held first: {waited:?}"
    );
    println!(
        "{:?}: the frozen transaction's lock was freed after {waited:?}",
        db.kind
    );

    // Its session is gone: what it sends on waking fails, and nothing of its
    // transaction is kept.
    let woke = sqlx::query("UPDATE quartz_node SET busy = 7 WHERE node_id = 'frozen'")
        .execute(&mut *tx)
        .await;
    assert!(woke.is_err(), "the frozen transaction went on: {woke:?}");
    drop(tx);
    let members = judge.list_nodes().await.unwrap();
    let row = members.iter().find(|m| m.node_id == "frozen").unwrap();
    assert_eq!(row.busy, 0, "{row:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    common::run(Kind::Postgres, |db| {
        Box::pin(a_node_frozen_in_a_transaction_holds_its_locks_a_second(db))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    common::run(Kind::MySql, |db| {
        Box::pin(a_node_frozen_in_a_transaction_holds_its_locks_a_second(db))
    })
    .await;
}
