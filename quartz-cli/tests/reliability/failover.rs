//! The suite on a replicated PostgreSQL: a primary and a synchronous
//! standby of the suite's own ([`PgPair`], made with `initdb` and
//! `pg_basebackup` as the `postgres` user), the three node processes on the
//! URL a deployment uses to follow its primary
//! (`postgres://…@primary,standby/db?target_session_attrs=read-write`), their
//! clocks skewed as in every run. Phases: the skew, then the primary killed
//! (`pg_ctl stop -m immediate`, every connection cut mid-statement) and the
//! standby promoted a second later. The same checks as every run: nothing
//! lost or run twice, nothing started by a fenced node, the audit clean;
//! and every node heart-beating on the new primary.
//!
//! The pair needs the PostgreSQL server binaries and root; without them the
//! run says so and skips, and with `CI=true` it fails.

use std::time::Duration;

use quartz_testkit::TestDb;
use quartz_testkit::pg_pair::{PgPair, Replication};

use super::{DEAD_AFTER_MS, Kind, Run, faketime_library, write_results};

const LABEL: &str = "PostgreSQL failover";

pub(super) async fn suite() {
    if !PgPair::can_start("the failover run") {
        return;
    }
    let pair = tokio::task::spawn_blocking(|| PgPair::start(Replication::Synchronous))
        .await
        .unwrap();
    let db = TestDb::on_server(Kind::Postgres, &pair.url());
    let mut run = Run::start(&db, LABEL, faketime_library(), None).await;
    run.baseline().await;
    run.failover(&pair).await;
    let report = run.finish().await;
    write_results(LABEL, &report.markdown);
    println!("{}", report.markdown);
    assert!(
        report.failures.is_empty(),
        "the guarantees did not hold:\n{}",
        report.failures.join("\n")
    );
}

impl Run {
    /// The primary killed, its synchronous standby promoted 1 s later: every
    /// node must follow it (the store probes the URL's hosts when a
    /// heartbeat fails), and what was acknowledged is all there.
    async fn failover(&mut self, pair: &PgPair) {
        let mut phase = self
            .begin("PostgreSQL primary killed (pg_ctl stop -m immediate), its synchronous standby promoted 1 s later");
        let before = self.incarnations().await;
        tokio::task::block_in_place(|| pair.kill_primary());
        let killed = self.now();
        phase.injected = 1;
        self.sleep_until(killed + 1_000).await;
        tokio::task::block_in_place(|| pair.promote_standby());
        phase.lifted = self.now();
        // Every node heart-beating on the new primary.
        let deadline = killed + 30_000;
        let back = loop {
            let now = self.now();
            let members = self.nodes().await;
            let fresh = self.nodes.iter().all(|node| {
                members.iter().any(|m| {
                    m.node_id == node.id
                        && m.state == quartz_core::store::NodeState::Live
                        && now - m.heartbeat_at.as_millis() < DEAD_AFTER_MS / 2
                })
            });
            if fresh {
                break Some(self.now());
            }
            if now > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let Some(back) = back else {
            self.failures
                .push("the nodes were not all heart-beating on the promoted standby 30 s after the kill".to_owned());
            self.end(phase);
            return;
        };
        self.sleep_until(phase.lifted + 6_000).await;
        let after = self.incarnations().await;
        let declared = before.iter().filter(|(id, inc)| after.get(*id) != Some(inc)).count();
        phase.detail = format!(
            "standby promoted {} ms after the kill; every node heart-beating on it {} ms after the kill; nodes \
             declared dead for it: {declared}",
            phase.lifted - killed,
            back - killed
        );
        self.end(phase);
    }
}
