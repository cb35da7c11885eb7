//! The dispatcher: claims queued fires when their claim time comes, as many
//! as their lane has room for and no more (back-pressure, as Quartz's
//! scheduler thread waits for free threads before it acquires triggers):
//! the pool's threads and queue for blocking handlers, `async_max` tasks
//! for async ones.
//! Fires it leaves for lack of room stay open: to another node a strategy
//! grace later, or to this node as soon as a handler returns. Fires due
//! together are claimed by one call; a claim that did not go through (a
//! database error) is tried again shortly, not left to the next poll.

use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument as _;

use super::context::{Ctx, duration_ms, sleep_until_or_forever};
use super::handler::RunKind;
use super::launch::Launcher;
use super::queue::{FireQueue, Pending};
use super::run::RunFire;
use super::strategy::tries_first;
use crate::store::{Claim, ExecuteState, NodeRef};
use crate::time::Timestamp;
use crate::trigger::{NextFire, Overlap};

/// How long after a failed claim its fires are tried again.
const CLAIM_RETRY_MS: i64 = 50;
/// A claim that tried at least this many fires left to another node, and
/// won none of them, says the nodes preferred for them are keeping up: the
/// rest of the fires left to others are dropped until the next poll.
const PROBE_MIN: usize = 16;

/// The dispatcher stage: it takes fires from the queue the poller fills and
/// hands the won ones to the launcher.
pub(super) struct Dispatcher {
    ctx: Arc<Ctx>,
    queue: Arc<FireQueue>,
    launcher: Arc<Launcher>,
}

impl Dispatcher {
    pub(super) fn new(ctx: Arc<Ctx>, queue: Arc<FireQueue>, launcher: Arc<Launcher>) -> Dispatcher {
        Dispatcher { ctx, queue, launcher }
    }

    pub(super) async fn run(self: Arc<Self>) {
        let mut stop = self.ctx.stop_signal();
        loop {
            if self.ctx.stopping() {
                return;
            }
            let db_now = self.ctx.clock.db_now();
            // The room of each lane: the pool for blocking handlers, tasks
            // for async ones. A fire whose lane is full stays queued.
            // On standby no lane has room: nothing is claimed.
            let rooms = if self.ctx.on_standby() {
                [0, 0]
            } else {
                self.ctx.rooms()
            };
            // A burst begins its claims early enough to end them in time.
            let ahead = self.queue.claim_ahead(db_now);
            if rooms != [0, 0] && self.queue.has_due(db_now.saturating_add_millis(ahead.ms)) {
                let due = self.queue.take_due(
                    (db_now, ahead.ms),
                    self.ctx.settings.claim_batch,
                    self.ctx.settings.misfire.threshold_ms(),
                    rooms,
                );
                if !due.late.is_empty() {
                    self.ctx.poll_now.notify_one();
                }
                let progressed = !due.fires.is_empty() || !due.late.is_empty();
                let mine = self.first_or_defer(due.fires);
                if !mine.is_empty() {
                    let span = tracing::debug_span!("claim", scheduler = self.ctx.scheduler, fires = mine.len());
                    self.claim_all(mine).instrument(span).await;
                }
                if progressed {
                    continue;
                }
            }
            // Without room, only a handler returning (or new fires) wakes it;
            // with room in one lane, the first fire of that lane too, or the
            // moment a burst must begin its claims.
            let wake = if rooms == [0, 0] {
                None
            } else {
                let first = self.queue.first_claim_at_in(rooms);
                let begin = ahead.begin_by.filter(|b| *b > db_now);
                [first, begin]
                    .into_iter()
                    .flatten()
                    .min()
                    .map(|t| self.ctx.clock.instant_of(t))
            };
            tokio::select! {
                () = sleep_until_or_forever(wake) => {}
                () = self.queue.changed.notified() => {}
                () = self.ctx.flights.room.freed.notified() => {}
                () = self.ctx.flights.task_room.freed.notified() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    /// The fires this node claims now: those the strategy prefers it for
    /// (asked on the membership as it is now), and those another node was
    /// preferred for and left open a strategy grace long. The rest go back
    /// to the queue until then.
    fn first_or_defer(&self, fires: Vec<Pending>) -> Vec<Pending> {
        // Asked of the membership once for all of them.
        let me = self.ctx.node().node_id;
        let members = self.ctx.members.read();
        let (mine, theirs): (Vec<Pending>, Vec<Pending>) = fires
            .into_iter()
            .partition(|p| p.deferred || tries_first(self.ctx.settings.strategy, &members, &me, p.execute_id));
        drop(members);
        tracing::debug!(
            scheduler = self.ctx.scheduler,
            mine = mine.len(),
            theirs = theirs.len(),
            room = ?self.ctx.rooms(),
            "due"
        );
        if !theirs.is_empty() {
            let wait = duration_ms(self.ctx.settings.strategy_grace) - duration_ms(self.ctx.settings.claim_lead);
            self.queue
                .defer(theirs, |p| p.fire.fire_time.saturating_add_millis(wait));
        }
        mine
    }

    /// Claims fires due together in one call, then hands the won ones to
    /// the launch stage by fire time. A won plain fire that was the last
    /// queued of its execute queues the next ([`FireQueue::follow`]). A
    /// lost claim forgets its execute (another node won it, or the row
    /// changed: the next poll reads it afresh), except the first lost
    /// claim of a fire this node was preferred for, whose execute keeps
    /// its later fires ([`FireQueue::lost`]).
    async fn claim_all(self: &Arc<Self>, due: Vec<Pending>) {
        let node = self.ctx.node();
        let claims: Vec<Claim> = due.iter().map(|p| claim_of(p, &node)).collect();
        // Held from before the claim: nothing else takes this room meanwhile.
        let holds: Vec<_> = due.iter().map(|p| self.ctx.hold(&p.job)).collect();
        let asked = std::time::Instant::now();
        let won = match self.ctx.store.claim_batch(&claims).await {
            Ok(won) => {
                self.queue.claim_pace.observe(asked.elapsed(), claims.len());
                won
            }
            Err(e) => {
                tracing::warn!(scheduler = self.ctx.scheduler, fires = due.len(), error = %e,
                    "claims failed; trying them again shortly");
                let at = self.ctx.clock.db_now().saturating_add_millis(CLAIM_RETRY_MS);
                self.queue.retry_at(due, at);
                return;
            }
        };
        let lead = duration_ms(self.ctx.settings.claim_lead);
        let mut starts: BTreeMap<Timestamp, Vec<RunFire>> = BTreeMap::new();
        let mut lost = 0;
        let mut held = false;
        // Fires another node was preferred for, tried after its grace.
        let (mut deferred, mut deferred_won) = (0, 0);
        for (((pending, claim), fire_id), hold) in due.into_iter().zip(claims).zip(won).zip(holds) {
            if pending.deferred {
                deferred += 1;
                deferred_won += usize::from(fire_id.is_some());
            }
            // Under an overlap policy or a limit the row may move on
            // otherwise than by the claim (the fire recorded skipped or
            // pending).
            let moved_on = claim.overlap.is_some() || pending.job.spec.limit.is_some();
            // A plain fire's claim moves the row to its after-state and
            // nothing else: the queue's next fires of it hold. A trigger
            // with a repeat limit ends by its count, which the row, not the
            // queue, has right.
            let plain =
                !moved_on && claim.cas.set_state == ExecuteState::Waiting && pending.trigger.repeat_limit().is_none();
            let Some(fire_id) = fire_id else {
                lost += 1;
                // Polled again now, for its next fires and the pending one.
                held |= moved_on;
                // A fire left to another node first was taken by it: so
                // will its next ones be.
                if !plain || pending.deferred {
                    self.queue.forget(pending.execute_id);
                } else {
                    self.queue.lost(pending.execute_id, pending.epoch);
                }
                continue;
            };
            if plain && !pending.late_ok {
                self.queue.follow(&pending, lead);
            }
            self.ctx.flights.awaiting(pending.job.id);
            let release = (claim.cas.set_state == ExecuteState::Running).then(|| claim.cas.set.clone());
            starts.entry(pending.fire.fire_time).or_default().push(RunFire {
                fire_id,
                execute_id: pending.execute_id,
                job: pending.job,
                trigger: Some(pending.trigger),
                fire_time: pending.fire.fire_time,
                attempt: 1,
                kind: RunKind::Scheduled,
                node: node.clone(),
                release,
                hold: Some(hold),
            });
        }
        if held {
            self.ctx.poll_now.notify_one();
        }
        if deferred >= PROBE_MIN && deferred_won == 0 {
            // Every poll queues the executes the strategy prefers other
            // nodes for, a grace after their claim time: a node that keeps
            // up has won them by then. Without this, each node lost one
            // second of every other node's share after each of its polls
            // (226,935 lost claims beside 600,000 won in a minute at 10,000
            // fires a second on three nodes). A node that falls behind
            // loses no such batch: its fires are taken as before.
            let dropped = self.queue.forget_deferred();
            tracing::debug!(
                scheduler = self.ctx.scheduler,
                tried = deferred,
                dropped,
                "others keep up"
            );
        }
        let won_count: u64 = starts.values().map(|v| v.len() as u64).sum();
        tracing::debug!(scheduler = self.ctx.scheduler, won = won_count, lost, "claims");
        self.ctx.count(|c| {
            c.claimed += won_count;
            c.lost += lost;
        });
        for (fire_time, runs) in starts {
            self.launcher.launch_at(fire_time, runs);
        }
    }
}

/// The claim of a queued fire: a compare-and-set from the state it expects
/// to the state it leaves. A job that disallows concurrency, its trigger
/// without an overlap policy, is blocked while the fire runs, and refused
/// while another execute of the job runs: one fire of the job at a time. A
/// trigger with an overlap policy other than allow is never blocked: the
/// store applies the policy when the claim finds a fire of the job open.
///
/// A job with a concurrency limit always claims this way (the store counts
/// its key's open fires under the key's lock); a fire that finds the key
/// full waits as a pending fire, or is skipped under skip. Such a job's
/// trigger is never blocked while a fire runs: a fire it holds back is
/// recorded instead.
fn claim_of(pending: &Pending, node: &NodeRef) -> Claim {
    let mut claim = Claim::for_fire(pending.execute_id, &pending.fire, node);
    let limited = pending.job.spec.limit.is_some();
    match Overlap::effective(pending.trigger.overlap(), pending.job.spec.allow_concurrent) {
        Some(Overlap::Allow) if limited => {
            claim.exclusive = true;
            claim.overlap = Some(Overlap::Allow);
        }
        Some(Overlap::Allow) => {}
        None => {
            claim.exclusive = true;
            if matches!(pending.fire.next, NextFire::At(_)) && !limited {
                claim.cas.set_state = ExecuteState::Running;
            }
        }
        Some(policy) => {
            claim.exclusive = true;
            claim.overlap = Some(policy);
        }
    }
    claim
}
