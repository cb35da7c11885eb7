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
use super::fixed::HashMap;
use super::flight::Hold;
use super::handler::RunKind;
use super::launch_handle::Launch;
use super::queue::{FireQueue, Pending, Run};
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
/// The most fires of one execute one claim takes (a run: the due fire and
/// the one taken along). Two already halve the execute's writes; more would
/// claim a trigger that fires more often than its claim lead up to two
/// claim leads ahead (the ledger's open rows, and what an edit by hand or a
/// stopped node meets, grow with it) for a smaller saving each.
const RUN_MAX: usize = 2;
/// The most of this incarnation's claimed, unstarted fires read back after
/// a failed claim batch: more than a node holds room for.
const READ_BACK_MAX: u32 = 20_000;

/// The dispatcher stage: it takes fires from the queue the poller fills and
/// hands the won ones to the launcher.
pub(super) struct Dispatcher {
    ctx: Arc<Ctx>,
    queue: Arc<FireQueue>,
    launcher: Launch,
    /// Fires won in a run and not yet placed: each takes its place in its
    /// lane's room at its own claim time, as its own claim would have
    /// ([`Self::place_due`]), keyed by that time.
    unplaced: BTreeMap<(Timestamp, i64), RunFire>,
}

impl Dispatcher {
    pub(super) fn new(ctx: Arc<Ctx>, queue: Arc<FireQueue>, launcher: Launch) -> Dispatcher {
        Dispatcher {
            ctx,
            queue,
            launcher,
            unplaced: BTreeMap::new(),
        }
    }

    pub(super) async fn run(mut self) {
        let mut stop = self.ctx.stop_signal();
        loop {
            if self.ctx.stopping() {
                return;
            }
            let db_now = self.ctx.clock.db_now();
            self.place_due(db_now);
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
            // moment a burst must begin its claims; and the time of the
            // first fire won in a run to take its place.
            let place = self.unplaced.keys().next().map(|k| k.0);
            let wake = if rooms == [0, 0] {
                place
            } else {
                let first = self.queue.first_claim_at_in(rooms);
                let begin = ahead.begin_by.filter(|b| *b > db_now);
                [first, begin, place].into_iter().flatten().min()
            }
            .map(|t| self.ctx.clock.instant_of(t));
            tokio::select! {
                biased;
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
        let members = self.ctx.members.borrow();
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
    /// the launch stage by fire time. A plain fire ([`plain`]) takes its
    /// execute's next fires due for their claim before its own time along
    /// into its claim ([`FireQueue::take_run`]), as far as its lane has
    /// room: one compare-and-set moves the row past the whole run. A won
    /// plain fire that was the last queued or taken of its execute queues
    /// the next ([`FireQueue::follow`]). A lost claim forgets its execute
    /// (another node won it, or the row changed: the next poll reads it
    /// afresh), except the first lost claim of a fire this node was
    /// preferred for, whose execute keeps its later fires
    /// ([`FireQueue::lost`]).
    async fn claim_all(&mut self, due: Vec<Pending>) {
        let node = self.ctx.node();
        // Held from before the claim: nothing else takes this room meanwhile.
        let held_first: Vec<_> = due.iter().map(|p| self.ctx.hold(&p.job)).collect();
        let queued = due.len();
        let (mut claiming, mut claims, mut runs) = self.with_runs(due, held_first, &node);
        let asked = tokio::time::Instant::now();
        let won = match self.ctx.store.claim_batch(&claims).await {
            Ok(won) => {
                // Paced by the fires taken from the queue, each with the
                // run it takes along: what the queue's depth says of the
                // next claims' time.
                self.queue.claim_pace.observe(asked.elapsed(), queued);
                won
            }
            Err(e) => {
                tracing::warn!(scheduler = self.ctx.scheduler, fires = claims.len(), error = %e,
                    "claims failed; reading back which went through, trying the others again shortly");
                let committed = self.committed_claims(&claims, &node).await;
                let mut retried = Vec::new();
                let mut kept = Vec::new();
                for (c, claim) in claiming.into_iter().zip(claims) {
                    match committed.get(&(c.pending.execute_id, c.pending.fire.fire_time)) {
                        Some(&fire_id) => kept.push(((c, claim), Some(fire_id))),
                        None => retried.push(c),
                    }
                }
                let firsts: Vec<Pending> = retried
                    .into_iter()
                    .filter(|c| c.hold.is_some())
                    .map(|c| c.pending)
                    .collect();
                for first in &firsts {
                    if let Some(run) = runs.remove(&first.execute_id) {
                        self.queue.give_back(&run);
                    }
                }
                let at = self.ctx.clock.db_now().saturating_add_millis(CLAIM_RETRY_MS);
                self.queue.retry_at(firsts, at);
                if kept.is_empty() {
                    return;
                }
                let (pairs, won): (Vec<_>, Vec<_>) = kept.into_iter().unzip();
                (claiming, claims) = pairs.into_iter().unzip();
                won
            }
        };
        let lead = duration_ms(self.ctx.settings.claim_lead);
        let mut starts: BTreeMap<Timestamp, Vec<RunFire>> = BTreeMap::new();
        let mut lost = 0;
        let mut held = false;
        // Fires won in runs, placed at their own claim time (the
        // dispatcher's next turn sleeps until the first one's).
        let mut won_along = 0;
        // Fires another node was preferred for, tried after its grace.
        let (mut deferred, mut deferred_won) = (0, 0);
        for ((claiming, claim), fire_id) in claiming.into_iter().zip(claims).zip(won) {
            let Claiming { pending, hold } = claiming;
            let taken = hold.is_none();
            if pending.deferred {
                deferred += 1;
                deferred_won += usize::from(fire_id.is_some());
            }
            let (moved_on, plain) = plain(&pending, &claim);
            let Some(fire_id) = fire_id else {
                lost += 1;
                // A fire taken along is lost with its run's first, whose
                // loss says what to do; alone (a fire the ledger holds
                // already), the row moved past it all the same.
                if taken {
                    continue;
                }
                if let Some(run) = runs.remove(&pending.execute_id) {
                    self.queue.give_back(&run);
                }
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
            let run = RunFire {
                fire_id,
                execute_id: pending.execute_id,
                job: pending.job,
                trigger: Some(pending.trigger),
                fire_time: pending.fire.fire_time,
                attempt: 1,
                kind: RunKind::Scheduled,
                node: node.clone(),
                release,
                hold,
                marked_at: None,
                payload: None,
                trace_parent: None,
                snoozed: 0,
            };
            if taken {
                // Known as won and not started from now, as every won fire.
                self.ctx.flights.unstarted([fire_id]);
                let place_at = run.fire_time.saturating_add_millis(-lead);
                self.unplaced.insert((place_at, fire_id), run);
                won_along += 1;
                continue;
            }
            starts.entry(run.fire_time).or_default().push(run);
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
        let won_count: u64 = starts.values().map(|v| v.len() as u64).sum::<u64>() + won_along;
        tracing::debug!(
            scheduler = self.ctx.scheduler,
            node = node.node_id,
            won = won_count,
            lost,
            ms = duration_ms(asked.elapsed()),
            "claims"
        );
        self.ctx.count(|c| {
            c.claimed += won_count;
            c.lost += lost;
        });
        for (fire_time, runs) in starts {
            self.launcher.launch_at(fire_time, runs);
        }
    }

    /// The claims of a batch whose call failed that went through all the
    /// same, by execute and fire time: an exclusive claim commits in a
    /// transaction of its own, and the call's answer may be lost after any
    /// of them (past the store's deadline, a connection cut). Such a fire is
    /// this incarnation's, and no try again can win it (its row moved on);
    /// taken as lost, it would wait for the sweep for lost claims, which
    /// records it misfired. Read from the fires this incarnation claimed and
    /// has not started; none when that read fails too (the sweep remains).
    async fn committed_claims(&self, claims: &[Claim], node: &NodeRef) -> HashMap<(i64, Timestamp), i64> {
        let Some(latest) = claims.iter().map(|c| c.fire_time).max() else {
            return HashMap::default();
        };
        let asked: super::fixed::HashSet<(i64, Timestamp)> =
            claims.iter().map(|c| (c.cas.execute_id, c.fire_time)).collect();
        // Claimed before the latest fire time, or before now for fires
        // claimed late.
        let before = latest.max(self.ctx.clock.db_now()).saturating_add_millis(1_000);
        match self.ctx.store.claimed_by(node, before, READ_BACK_MAX).await {
            Ok(fires) => fires
                .into_iter()
                .filter(|f| asked.contains(&(f.execute_id, f.fire_time)) && !self.ctx.flights.is_unstarted(f.id))
                .map(|f| ((f.execute_id, f.fire_time), f.id))
                .collect(),
            Err(e) => {
                tracing::warn!(scheduler = self.ctx.scheduler, error = %e,
                    "could not read back the claims of a failed batch; the sweep for lost claims takes any that went through");
                HashMap::default()
            }
        }
    }

    /// Fires won in a run whose own claim time has come take their place in
    /// their lane's room and go to the launch stage, as their own claims
    /// would have then. A run is only taken while its lane has room for it
    /// ([`Self::with_runs`]); a lane full again by its fires' time (handlers
    /// that took longer than their trigger's interval) holds them past its
    /// room, and the pool runs them as threads come free, or records them
    /// misfired for their policy past the threshold, as any fire it cannot
    /// take in time.
    fn place_due(&mut self, db_now: Timestamp) {
        if self.unplaced.keys().next().is_none_or(|k| k.0 > db_now) {
            return;
        }
        let later = self.unplaced.split_off(&(db_now.saturating_add_millis(1), i64::MIN));
        let due: Vec<RunFire> = std::mem::replace(&mut self.unplaced, later).into_values().collect();
        let mut starts: BTreeMap<Timestamp, Vec<RunFire>> = BTreeMap::new();
        for mut run in due {
            run.hold = Some(self.ctx.hold(&run.job));
            starts.entry(run.fire_time).or_default().push(run);
        }
        for (fire_time, runs) in starts {
            self.launcher.launch_at(fire_time, runs);
        }
    }

    /// The fires due, each with its place in its lane's room, and the runs
    /// their claims take along ([`FireQueue::take_run`]), in the one claim
    /// order of every node (by fire time, then by execute). A run is taken
    /// with [`Settings::claim_runs`](super::Settings::claim_runs) on a
    /// store that writes it as one compare-and-set
    /// ([`Store::claims_runs_at_once`](crate::store::Store::claims_runs_at_once)),
    /// for a plain fire of this node's own, on time, alone of its execute in
    /// the batch, for the execute's next fires whose claim time comes
    /// before the fire's own time (those a claim lead reaches), at most
    /// [`RUN_MAX`] in all, and no more than the lane has room left for after
    /// the batch's own fires (a lane without room, its threads all busy,
    /// takes none). A fire taken along takes no place in the room now: it
    /// takes one at its own claim time ([`Self::place_due`]), so that a run
    /// holds the room no longer than claims of its fires one by one would
    /// (at 10,000 fires a second on three nodes, runs that took their
    /// places at once held two seconds of fires against a room of 4,104 a
    /// node, and the claims they left without room came after their time).
    fn with_runs(
        &self,
        due: Vec<Pending>,
        holds: Vec<Hold>,
        node: &NodeRef,
    ) -> (Vec<Claiming>, Vec<Claim>, HashMap<i64, Run>) {
        let lead = duration_ms(self.ctx.settings.claim_lead);
        let runs_at_once = self.ctx.settings.claim_runs && self.ctx.store.claims_runs_at_once();
        // Without runs (turned off, or a store that claims each fire on its
        // own), nothing is counted or read for them.
        let mut alone: HashMap<i64, usize> = HashMap::default();
        let mut rooms = [0, 0];
        if runs_at_once {
            for p in &due {
                *alone.entry(p.execute_id).or_default() += 1;
            }
            // The room left after the batch's own fires: runs take as many.
            rooms = self.ctx.rooms();
        }
        let mut runs = HashMap::default();
        let mut claiming = Vec::with_capacity(due.len());
        for (pending, hold) in due.into_iter().zip(holds) {
            let claim = claim_of(&pending, node);
            let candidate = runs_at_once
                && !pending.deferred
                && !pending.late_ok
                && alone.get(&pending.execute_id) == Some(&1)
                && plain(&pending, &claim).1;
            let room = &mut rooms[pending.lane as usize];
            let run = candidate
                .then(|| {
                    let until = pending.fire.fire_time.saturating_add_millis(lead.saturating_add(1));
                    self.queue.take_run(&pending, until, (*room).min(RUN_MAX - 1))
                })
                .flatten();
            if let Some(mut run) = run {
                *room -= run.fires.len();
                claiming.extend(std::mem::take(&mut run.fires).into_iter().map(|p| {
                    let claim = claim_of(&p, node);
                    (Claiming { pending: p, hold: None }, claim)
                }));
                runs.insert(pending.execute_id, run);
            }
            claiming.push((
                Claiming {
                    pending,
                    hold: Some(hold),
                },
                claim,
            ));
        }
        // The queue gave the due fires in that order already.
        if !runs.is_empty() {
            claiming.sort_by_key(|(c, _)| (c.pending.fire.fire_time, c.pending.execute_id));
        }
        let (claiming, claims) = claiming.into_iter().unzip();
        (claiming, claims, runs)
    }
}

/// A fire on its way to its claim, with its place in its lane's room; a
/// fire taken along into its execute's run has none yet (it takes it at
/// its own claim time, [`Dispatcher::place_due`]).
struct Claiming {
    pending: Pending,
    hold: Option<Hold>,
}

/// Whether the claim of a fire may move the row otherwise than to the
/// fire's after-state (under an overlap policy or a limit the fire may be
/// recorded skipped or pending), and whether it is plain: it moves the row
/// to that after-state and nothing else, so the queue's next fires of it
/// hold. A trigger with a repeat limit ends by its count, which the row,
/// not the queue, has right.
fn plain(pending: &Pending, claim: &Claim) -> (bool, bool) {
    let moved_on = claim.overlap.is_some() || pending.job.spec.limit.is_some();
    let plain = !moved_on && claim.cas.set_state == ExecuteState::Waiting && pending.trigger.repeat_limit().is_none();
    (moved_on, plain)
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
