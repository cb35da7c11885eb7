//! The suite on a replicated PostgreSQL: a primary and a synchronous
//! standby of the suite's own ([`PgPair`], made with `initdb` and
//! `pg_basebackup` as the `postgres` user), the three node processes on the
//! URL a deployment uses to follow its primary
//! (`postgres://…@primary,standby/db?target_session_attrs=read-write`), their
//! clocks skewed as in every run. Two runs, one after the other, each on a
//! pair of its own: in the first the primary is killed (`pg_ctl stop -m
//! immediate`, every connection cut mid-statement) and the standby promoted
//! a second later; in the second the standby is promoted while the old
//! primary stays up and reachable, first among the URL's hosts, answering
//! as a primary while every commit on it waits for the standby that left
//! it. The same checks as every run: nothing lost or run twice, nothing
//! started by a fenced node, the audit clean; and every node heart-beating
//! on the new primary.
//!
//! The pair needs the PostgreSQL server binaries and root; without them the
//! run says so and skips, and with `CI=true` it fails.

use std::time::Duration;

use quartz_testkit::TestDb;
use quartz_testkit::pg_pair::{PgPair, Replication};

use super::{DEAD_AFTER_MS, Kind, NODES, Run, faketime_library, took, write_results};

/// What becomes of the old primary.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OldPrimary {
    /// Killed a second before the promotion.
    Killed,
    /// Left up and reachable.
    LeftUp,
}

pub(super) async fn suite() {
    if !PgPair::can_start("the failover run") {
        return;
    }
    let mut failures = Vec::new();
    for (label, old) in [
        ("PostgreSQL failover", OldPrimary::Killed),
        ("PostgreSQL failover, old primary up", OldPrimary::LeftUp),
    ] {
        let pair = tokio::task::spawn_blocking(|| PgPair::start(Replication::Synchronous))
            .await
            .unwrap();
        let db = TestDb::on_server(Kind::Postgres, &pair.url());
        let mut run = Run::start(&db, label, faketime_library(), None, false).await;
        run.baseline().await;
        run.failover(&pair, old).await;
        let report = run.finish().await;
        write_results(label, &report.markdown);
        println!("{}", report.markdown);
        failures.extend(report.failures.into_iter().map(|f| format!("{label}: {f}")));
    }
    assert!(
        failures.is_empty(),
        "the guarantees did not hold:\n{}",
        failures.join("\n")
    );
}

impl Run {
    /// The primary killed, its synchronous standby promoted 1 s later; or
    /// the standby promoted with the old primary left up, its commits
    /// waiting for the standby that left it: every node must follow the
    /// new primary (the store probes the URL's hosts, with a commit, when a
    /// heartbeat fails), and what was acknowledged is all there.
    async fn failover(&mut self, pair: &PgPair, old: OldPrimary) {
        let mut phase = self.begin(match old {
            OldPrimary::Killed => {
                "PostgreSQL primary killed (pg_ctl stop -m immediate), its synchronous standby promoted 1 s later"
            }
            OldPrimary::LeftUp => {
                "PostgreSQL standby promoted, the old primary left up and first among the hosts (its commits wait \
                 for the standby that left it), SIGTERM meanwhile"
            }
        });
        let before = self.incarnations().await;
        if old == OldPrimary::Killed {
            tokio::task::block_in_place(|| pair.kill_primary());
        }
        let killed = self.now();
        phase.injected = 1;
        if old == OldPrimary::Killed {
            self.sleep_until(killed + 1_000).await;
        }
        tokio::task::block_in_place(|| pair.promote_standby());
        phase.lifted = self.now();
        // With the old primary up, a node asked to stop while its
        // connections wait on it must still end within its grace; it is
        // started again, and must find the new primary.
        let mut stopped = None;
        if old == OldPrimary::LeftUp {
            let i = usize::try_from(self.rng.below(NODES as u64)).unwrap();
            let exit = self.terminate(i, "the old primary held its commits").await;
            stopped = Some((self.nodes[i].id.clone(), exit));
            let _ = self.nodes[i].child.take().map(|mut c| c.wait());
            self.spawn(i);
        }
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
                        // Written on the new primary: the old one, left
                        // up, commits nothing after the promotion.
                        && m.heartbeat_at.as_millis() > phase.lifted + 500
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
        // The node stopped and started again has a new incarnation of its own.
        let restarted = stopped.as_ref().map(|(id, _)| id.clone());
        let declared = before
            .iter()
            .filter(|(id, inc)| Some(*id) != restarted.as_ref() && after.get(*id) != Some(inc))
            .count();
        phase.detail = match old {
            OldPrimary::Killed => format!(
                "standby promoted {} ms after the kill; every node heart-beating on it {} ms after the kill; nodes \
                 declared dead for it: {declared}",
                phase.lifted - killed,
                back - killed
            ),
            OldPrimary::LeftUp => {
                let up = tokio::task::block_in_place(|| pair.psql(pair.ports.0, "SELECT 'up'"));
                if up != "up" {
                    self.failures.push(format!(
                        "the old primary was not up through the run (it answered {up:?})"
                    ));
                }
                let (id, exit) = stopped.unwrap_or_default();
                format!(
                    "every node heart-beating on the new primary {} ms after the promotion, the old primary up; \
                     {id} ended {} after SIGTERM right after the promotion; nodes declared dead for it: {declared}",
                    back - phase.lifted,
                    took(exit)
                )
            }
        };
        self.end(phase);
    }
}
