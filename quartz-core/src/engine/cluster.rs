//! Membership: heartbeats, declaring silent nodes dead (on the database's
//! clock, and only once this node has itself been heart-beating without a
//! gap for `dead_after`), and rejoining under a new incarnation when this
//! node was declared dead itself. Each pass ends with recovery
//! ([`super::recovery`]).

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

use tokio::sync::watch;
use tokio::time::Instant;

use super::context::{Ctx, duration_ms};
use super::handler::CancelReason;
use super::queue::FireQueue;
use super::recovery::Recovery;
use super::status::Phase;
use crate::runlog::RunEvent;
use crate::store::{Node, NodeRef, NodeState, StoreError};

/// The cluster stage: membership, then recovery. It runs as three tasks,
/// each owning its state: the heart (this node's heartbeats, and its rejoin
/// when it was declared dead), the judge (declares the silent dead,
/// publishes the membership, runs [`Recovery`]) and the lease watch. The
/// heart tells the judge of its run of heartbeats on a channel.
pub(super) struct Cluster {
    ctx: Arc<Ctx>,
    /// Forgotten when this node was declared dead.
    queue: Arc<FireQueue>,
    recovery: Recovery,
    /// Where the membership as last read is published ([`Ctx::members`]).
    members: watch::Sender<Vec<Node>>,
}

/// This node's run of heartbeats without a gap: (last written, written
/// without a gap since, how long it must have been so before it judges
/// others). A node judges others dead only after it has itself been
/// heart-beating without a gap for `dead_after`: after an outage of the
/// database every heartbeat is stale, and the living need time to write
/// theirs again. After a gap of its own it waits twice that: the others'
/// connection pools were refused meanwhile and back off between attempts
/// (sqlx doubles its wait up to a fifth of the acquire timeout, 2 s by
/// default), so a living node may be back seconds after this one.
#[derive(Debug, Clone, Copy)]
struct Beats {
    last: Instant,
    since: Instant,
    wait: Duration,
}

impl Beats {
    /// The run after a heartbeat written `now`, following `before`.
    fn after(before: Option<Beats>, now: Instant, dead_after: Duration) -> Beats {
        let (since, wait) = match before {
            Some(b) if now.duration_since(b.last) <= dead_after / 2 => (b.since, b.wait),
            // After a gap this node was cut off too, and so may the others have been.
            Some(_) => (now, dead_after * 2),
            None => (now, dead_after),
        };
        Beats { last: now, since, wait }
    }

    /// Whether the run, seen `now`, is long enough to judge others.
    fn steady(&self, now: Instant, dead_after: Duration) -> bool {
        now.duration_since(self.last) <= dead_after / 2 && now.duration_since(self.since) >= self.wait
    }
}

/// The heart: this node's heartbeats and rejoin.
struct Heart {
    ctx: Arc<Ctx>,
    queue: Arc<FireQueue>,
    beats: Option<Beats>,
    /// Where the run of heartbeats is told to the judge.
    told: watch::Sender<Option<Beats>>,
}

/// The judge: the silent declared dead, the membership read and
/// published, then recovery.
struct Judge {
    ctx: Arc<Ctx>,
    recovery: Recovery,
    members: watch::Sender<Vec<Node>>,
    beats: watch::Receiver<Option<Beats>>,
}

impl Cluster {
    pub(super) fn new(
        ctx: Arc<Ctx>,
        queue: Arc<FireQueue>,
        recovery: Recovery,
        members: watch::Sender<Vec<Node>>,
    ) -> Cluster {
        Cluster {
            ctx,
            queue,
            recovery,
            members,
        }
    }

    /// Heart-beats on a loop of its own, and on another judges the silent
    /// and recovers what they left: a slow recovery pass (a slow link, a
    /// busy database) never delays this node's own heartbeat.
    pub(super) async fn run(self) {
        let Cluster {
            ctx,
            queue,
            recovery,
            members,
        } = self;
        let (told, beats) = watch::channel(None);
        let judge = Judge {
            ctx: Arc::clone(&ctx),
            recovery,
            members,
            beats,
        };
        let judge = tokio::spawn(judge.run());
        let lease = tokio::spawn(watch_lease(Arc::clone(&ctx)));
        let mut heart = Heart {
            ctx,
            queue,
            beats: None,
            told,
        };
        heart.run().await;
        let _ = judge.await;
        lease.abort();
    }
}

impl Judge {
    async fn run(mut self) {
        // After the first pass, a part of the interval of this node's own:
        // the orphan sweeps of nodes started together, each a read of every
        // fire not ended, do not fall on the same moment from then on.
        let mut phase = Some(self.ctx.out_of_step("recovery", self.ctx.settings.heartbeat_interval));
        loop {
            if let Err(e) = self.pass().await {
                tracing::warn!(scheduler = self.ctx.scheduler, error = %e, "membership or recovery pass failed; retrying");
            }
            let wait = phase.take().unwrap_or(self.ctx.settings.heartbeat_interval);
            if !self.ctx.pause(wait).await {
                return;
            }
        }
    }

    /// Whether this node has heart-beaten without a gap long enough to
    /// judge others.
    fn steady(&self) -> bool {
        let now = Instant::now();
        self.beats
            .borrow()
            .is_some_and(|b| b.steady(now, self.ctx.settings.dead_after))
    }

    /// Declares the silent dead, reads the membership, then recovers.
    async fn pass(&mut self) -> Result<(), StoreError> {
        let db_now = self.ctx.db_now().await?;
        let members = self.ctx.store.list_nodes().await?;
        // Judged after the reads, which may have waited out an outage of the
        // database: the heartbeats as they are now, not before it.
        let steady = self.steady();
        let mut dead_after = duration_ms(self.ctx.settings.dead_after);
        if crate::mutants::on("dead-too-soon") {
            dead_after /= 2;
        }
        let me = self.ctx.node();
        let mut retired = false;
        for member in &members {
            let silent = db_now.as_millis() - member.heartbeat_at.as_millis();
            if steady && member.state == NodeState::Live && member.node_id != me.node_id && silent > dead_after {
                let theirs = NodeRef {
                    node_id: member.node_id.clone(),
                    incarnation: member.incarnation,
                };
                if self.ctx.store.retire_node(&theirs, dead_after).await? {
                    retired = true;
                    self.ctx.note(|db_ms, local_ms| RunEvent::Retired {
                        node: theirs.node_id.clone(),
                        incarnation: theirs.incarnation,
                        by: me.node_id.clone(),
                        db_ms,
                        local_ms,
                    });
                    tracing::warn!(
                        scheduler = self.ctx.scheduler,
                        node = member.node_id,
                        incarnation = member.incarnation,
                        silent_ms = silent,
                        "node declared dead; its incarnation is retired"
                    );
                }
            }
        }
        let live = members.iter().filter(|m| m.state == NodeState::Live).count();
        self.members.send_replace(members);
        if !self.ctx.stopping() {
            // A pass still in flight while the node shuts down records nothing:
            // the shutdown records the stopped node's gauges last.
            super::metrics::beat(&self.ctx.scheduler, &self.ctx.pool.metrics(), live, self.ctx.phase());
        }
        let scheduler = self.ctx.scheduler.clone();
        self.recovery
            .recover(retired)
            .instrument(tracing::debug_span!("recovery", scheduler))
            .await
    }
}

impl Heart {
    async fn run(&mut self) {
        loop {
            if let Err(e) = self.beat().await {
                tracing::warn!(scheduler = self.ctx.scheduler, error = %e, "heartbeat failed; retrying");
            }
            if !self.ctx.pause(self.ctx.settings.heartbeat_interval).await {
                break;
            }
        }
    }

    /// One heartbeat (a rejoin when this incarnation was declared dead),
    /// and its place in this node's run of heartbeats without a gap.
    async fn beat(&mut self) -> Result<(), StoreError> {
        let node = self.ctx.node();
        let busy = self.ctx.flights.held() + self.ctx.flights.pending_count();
        let sent = self.ctx.clock.mono_ms();
        let alive = self.ctx.store.heartbeat(&node, busy as u64).await?;
        tracing::debug!(
            scheduler = self.ctx.scheduler,
            node = node.node_id,
            ms = self.ctx.clock.mono_ms() - sent,
            "heartbeat"
        );
        if alive {
            if crate::mutants::on("lease-from-answer") {
                self.ctx.renewed(self.ctx.clock.mono_ms());
            } else {
                self.ctx.renewed(sent);
            }
        } else {
            self.rejoin(&node).await?;
        }
        let beats = Beats::after(self.beats, Instant::now(), self.ctx.settings.dead_after);
        self.beats = Some(beats);
        self.told.send_replace(Some(beats));
        Ok(())
    }

    /// This incarnation was declared dead (a long pause): forget everything in
    /// flight (its claims are refused now) and register again.
    async fn rejoin(&self, old: &NodeRef) -> Result<(), StoreError> {
        self.ctx.set_phase(Phase::Fenced);
        tracing::warn!(
            scheduler = self.ctx.scheduler,
            node = old.node_id,
            incarnation = old.incarnation,
            "this node was declared dead; re-registering"
        );
        self.ctx.note(|db_ms, local_ms| RunEvent::Fenced {
            node: old.node_id.clone(),
            incarnation: old.incarnation,
            reason: "declared dead".to_owned(),
            db_ms,
            local_ms,
        });
        self.queue.clear();
        let sent = self.ctx.clock.mono_ms();
        let registered = self.ctx.store.register_node(&self.ctx.registration).await?;
        self.ctx.renewed(sent);
        self.ctx.note(|db_ms, local_ms| RunEvent::Registered {
            node: registered.node_id.clone(),
            incarnation: registered.incarnation,
            db_ms,
            local_ms,
        });
        self.ctx.set_node(NodeRef {
            node_id: registered.node_id,
            incarnation: registered.incarnation,
        });
        self.ctx.set_phase(Phase::Running);
        self.ctx.poll_now.notify_one();
        Ok(())
    }
}

/// Watches this node's membership lease ([`Ctx::lease_ms`]): when it runs
/// out (no renewal the database accepted, counted on the node's monotonic
/// clock from the renewal's send), the node fences itself: it asks every
/// running handler to stop ([`CancelReason::Fenced`]) and, until a renewal
/// goes through, starts only what the database confirms as still its own
/// ([`Ctx::membership_fresh`]). A handler gets
/// [`JobContext::fencing_token`](super::JobContext::fencing_token) to pass
/// to the systems it writes to, for one started before.
async fn watch_lease(ctx: Arc<Ctx>) {
    let mut fenced = false;
    loop {
        let renewed = ctx.renewed_at();
        let left = renewed + ctx.lease_ms() - ctx.clock.mono_ms();
        if left > 0 {
            if fenced {
                fenced = false;
                tracing::info!(
                    scheduler = ctx.scheduler,
                    "membership renewed: the node holds its lease again"
                );
            }
            if !ctx.pause(Duration::from_millis(left.unsigned_abs())).await {
                return;
            }
            continue;
        }
        if !fenced && !ctx.stopping() {
            fenced = true;
            let node = ctx.node();
            let running = ctx.flights.running_count();
            if !crate::mutants::on("fence-keeps-handlers") {
                ctx.flights.cancel_all(CancelReason::Fenced);
            }
            ctx.count(|c| c.lease_lost += 1);
            ctx.note(|db_ms, local_ms| RunEvent::Fenced {
                node: node.node_id.clone(),
                incarnation: node.incarnation,
                reason: "lease ran out".to_owned(),
                db_ms,
                local_ms,
            });
            tracing::error!(
                scheduler = ctx.scheduler,
                node = node.node_id,
                incarnation = node.incarnation,
                lease_ms = ctx.lease_ms(),
                running,
                "membership not renewed within the lease: this node may be declared dead; its running fires are asked to stop"
            );
        }
        // Until a renewal goes through.
        if !ctx.pause(Duration::from_millis(20)).await {
            return;
        }
    }
}
