//! The fire queue: the fires a poll expanded, each waiting for its claim time,
//! and what the node remembers of the executes they belong to.
//!
//! The queue is a cache of the database, never its truth: a lost claim or a
//! changed row makes the node forget the execute (its queued fires become
//! stale by their epoch), and the next poll expands it afresh; a won claim
//! of an execute's last queued fire queues the next from the state the
//! claim wrote ([`FireQueue::follow`]). One lock holds both the fires and
//! the executes they belong to.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::fixed::HashMap;
use super::handler::Lane;
use super::pace::Pace;
use crate::store::Job;
use crate::time::Timestamp;
use crate::trigger::{Fire, Trigger};

/// A fire waiting for its claim.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub(super) execute_id: i64,
    pub(super) job: Arc<Job>,
    pub(super) trigger: Arc<Trigger>,
    pub(super) fire: Fire,
    /// The execute's tracking epoch when this was queued; a mismatch means the
    /// execute was forgotten (a claim lost, a row changed) and this is stale.
    pub(super) epoch: u64,
    /// A misfire policy's run: claimed however late it is.
    pub(super) late_ok: bool,
    /// Left by the strategy to its preferred node, and due for this one now.
    pub(super) deferred: bool,
    /// The lane its handler runs in, and whose room its claim takes.
    pub(super) lane: Lane,
}

/// A queued fire's place: its claim time, then the order it was queued in.
type Key = (Timestamp, u64);

#[path = "queue_lanes.rs"]
mod lanes;
use lanes::{Lanes, lane_of, slot};

/// What the node remembers of an execute it has queued fires of.
#[derive(Debug, Clone)]
struct Track {
    epoch: u64,
    /// The latest fire time queued.
    horizon: Timestamp,
    /// The job as its queued fires carry it: an edit seen by a poll requeues
    /// them with the new version.
    job: Arc<Job>,
    /// A claim of its fires was lost since it was queued (see
    /// [`FireQueue::lost`]).
    lost_one: bool,
    /// The latest fire time taken into a claim along with an earlier fire
    /// ([`FireQueue::take_run`]): a queued fire at or before it is stale.
    taken_to: Timestamp,
}

/// What [`FireQueue::take_due`] found.
#[derive(Debug, Default)]
pub(super) struct Due {
    /// Fires to claim now, in the one lock order of every node: by fire time,
    /// then by execute.
    pub(super) fires: Vec<Pending>,
    /// Executes with a fire already past the misfire threshold: forgotten,
    /// for the next poll's misfire decision.
    pub(super) late: Vec<i64>,
}

/// The fires waiting for their claim, by claim time.
#[derive(Debug, Default)]
pub(super) struct FireQueue {
    state: Mutex<Queued>,
    seq: AtomicU64,
    /// Woken when a fire is queued.
    pub(super) changed: Notify,
    /// The claim's cost per fire: how far ahead a deep queue's claims begin.
    pub(super) claim_pace: Pace,
}

/// What the queue holds: the fires by lane and claim time, and what it
/// remembers of their executes.
#[derive(Debug, Default)]
struct Queued {
    lanes: Lanes,
    tracked: HashMap<i64, Track>,
}

/// How far the claims must reach ahead of now ([`FireQueue::claim_ahead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ahead {
    /// Fires whose claim time is up to this many milliseconds away are due
    /// now: claiming every fire queued before them, at the claim's pace,
    /// would otherwise end past their claim time.
    pub(super) ms: i64,
    /// When claiming must begin next, at the latest.
    pub(super) begin_by: Option<Timestamp>,
}

/// An execute's next fires taken into the claim of its first due fire
/// ([`FireQueue::take_run`]), with what [`FireQueue::give_back`] restores
/// when that claim is not won.
#[derive(Debug)]
pub(super) struct Run {
    /// The fires taken along, in order (the claim takes them out).
    pub(super) fires: Vec<Pending>,
    /// The last one's time.
    last: Timestamp,
    execute_id: i64,
    epoch: u64,
    taken_before: Timestamp,
    horizon_before: Timestamp,
    horizon_set: Timestamp,
}

impl FireQueue {
    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// [`Self::push_placed`] as this node's own fires.
    #[cfg(test)]
    pub(super) fn push(
        &self,
        execute_id: i64,
        placed: (&Arc<Job>, Lane),
        trigger: &Arc<Trigger>,
        fires: Vec<Fire>,
        claim_at: impl Fn(Timestamp) -> Timestamp,
        late_ok_until: Option<Timestamp>,
    ) -> usize {
        self.push_placed(execute_id, placed, false, trigger, (fires, claim_at), late_ok_until)
    }

    /// Queues `fires` of an execute that are past what is queued of it
    /// already, in `lane`, each at the claim time `claim_at` gives, as this
    /// node's own or, when `deferred`, as left to another node first; the
    /// ones at or before `late_ok_until` are claimed however late they are
    /// (a misfire policy's runs). A job edited since the execute's fires
    /// were queued makes those stale first. Returns how many were queued.
    pub(super) fn push_placed(
        &self,
        execute_id: i64,
        (job, lane): (&Arc<Job>, Lane),
        deferred: bool,
        trigger: &Arc<Trigger>,
        (fires, claim_at): (Vec<Fire>, impl Fn(Timestamp) -> Timestamp),
        late_ok_until: Option<Timestamp>,
    ) -> usize {
        let mut state = self.state.lock();
        let Queued { lanes, tracked } = &mut *state;
        let fresh = || Track {
            epoch: self.next_seq(),
            horizon: Timestamp::from_millis(i64::MIN),
            job: Arc::clone(job),
            lost_one: false,
            taken_to: Timestamp::from_millis(i64::MIN),
        };
        let track = tracked.entry(execute_id).or_insert_with(fresh);
        if track.job.spec != job.spec || track.job.state != job.state {
            *track = fresh();
        }
        self.insert(
            (lanes, track),
            (execute_id, job, lane),
            deferred,
            trigger,
            (fires, claim_at),
            late_ok_until,
        )
    }

    /// Queues the fire that follows `won`, a fire of this node's own just
    /// won, when `won` was the last fire queued of its execute: due
    /// `lead_ms` before its time, as this node's own (the dispatcher asks
    /// the strategy again at its claim). The claim moved the row to
    /// `won`'s after-state, so the next fire from it is the one a poll
    /// would read; the execute is not left without a queued fire when the
    /// next poll comes late (at 10,000 fires a second on Redis, a poll took
    /// 1–4 s, and the fires past the last poll's window were claimed after
    /// their time). Returns whether a fire was queued.
    pub(super) fn follow(&self, won: &Pending, lead_ms: i64) -> bool {
        let mut state = self.state.lock();
        let Queued { lanes, tracked } = &mut *state;
        let Some(track) = tracked.get_mut(&won.execute_id) else {
            return false;
        };
        // Forgotten or queued afresh since, or a later fire queued already.
        if track.epoch != won.epoch || track.horizon != won.fire.fire_time {
            return false;
        }
        let next: Vec<Fire> = won
            .trigger
            .fires_until(&won.fire.after, Timestamp::from_millis(i64::MAX))
            .take(1)
            .collect();
        let placed = (won.execute_id, &won.job, won.lane);
        let claim_at = |t: Timestamp| t.saturating_add_millis(-lead_ms);
        self.insert((lanes, track), placed, false, &won.trigger, (next, claim_at), None) > 0
    }

    /// Takes the fires of `first`'s execute that follow it up to `until`
    /// (at most `max` of them) into `first`'s claim: one compare-and-set
    /// moves the execute's row past all of them, where a claim each moved it
    /// once per fire (a run halves the execute writes of a trigger due every
    /// claim lead). They come from `first`'s after-state, as
    /// [`Self::follow`]'s do; a queued copy of one becomes stale, and no
    /// poll queues them again. `None` when the execute was forgotten or
    /// queued afresh since `first` was queued, or no fire follows in time.
    pub(super) fn take_run(&self, first: &Pending, until: Timestamp, max: usize) -> Option<Run> {
        if max == 0 {
            return None;
        }
        let mut state = self.state.lock();
        let track = state.tracked.get_mut(&first.execute_id)?;
        if track.epoch != first.epoch {
            return None;
        }
        let fires: Vec<Pending> = first
            .trigger
            .fires_until(&first.fire.after, until)
            .take(max)
            .map(|fire| Pending {
                fire,
                deferred: false,
                late_ok: false,
                ..first.clone()
            })
            .collect();
        let last = fires.last()?.fire.fire_time;
        let run = Run {
            fires,
            last,
            execute_id: first.execute_id,
            epoch: first.epoch,
            taken_before: track.taken_to,
            horizon_before: track.horizon,
            horizon_set: track.horizon.max(last),
        };
        track.taken_to = last;
        track.horizon = run.horizon_set;
        Some(run)
    }

    /// Undoes [`Self::take_run`] for a claim that was not won (lost, or
    /// not answered): the queued copies of its fires are claimable again,
    /// and a poll queues the fires no copy of which is queued.
    pub(super) fn give_back(&self, run: &Run) {
        let mut state = self.state.lock();
        let Some(track) = state.tracked.get_mut(&run.execute_id) else {
            return;
        };
        if track.epoch != run.epoch {
            return;
        }
        if track.taken_to == run.last {
            track.taken_to = run.taken_before;
        }
        if track.horizon == run.horizon_set {
            track.horizon = run.horizon_before;
        }
    }

    /// Inserts the fires of `track`'s execute past its horizon into `lanes`
    /// (the caller holds the lock), and wakes the dispatcher when any was.
    fn insert(
        &self,
        (lanes, track): (&mut Lanes, &mut Track),
        (execute_id, job, lane): (i64, &Arc<Job>, Lane),
        deferred: bool,
        trigger: &Arc<Trigger>,
        (fires, claim_at): (Vec<Fire>, impl Fn(Timestamp) -> Timestamp),
        late_ok_until: Option<Timestamp>,
    ) -> usize {
        let at = slot(lane, deferred);
        let mut added = 0;
        for fire in fires {
            if fire.fire_time <= track.horizon {
                continue;
            }
            track.horizon = fire.fire_time;
            let key = (claim_at(fire.fire_time), self.next_seq());
            let late_ok = late_ok_until.is_some_and(|t| fire.fire_time <= t);
            lanes.insert(
                at,
                key,
                Pending {
                    execute_id,
                    job: Arc::clone(job),
                    trigger: Arc::clone(trigger),
                    fire,
                    epoch: track.epoch,
                    late_ok,
                    deferred,
                    lane,
                },
            );
            added += 1;
        }
        if added > 0 {
            self.changed.notify_one();
        }
        added
    }

    /// Puts back fires whose claim did not go through (a database error), to
    /// be tried again at `at`; stale ones are dropped.
    pub(super) fn retry_at(&self, fires: Vec<Pending>, at: Timestamp) {
        self.put_back(fires, |_| at);
    }

    /// Puts back fires the strategy leaves to another node first, each due
    /// for this node at the time `at` gives.
    pub(super) fn defer(&self, fires: Vec<Pending>, at: impl Fn(&Pending) -> Timestamp) {
        let fires = fires.into_iter().map(|p| Pending { deferred: true, ..p }).collect();
        self.put_back(fires, at);
    }

    fn put_back(&self, fires: Vec<Pending>, at: impl Fn(&Pending) -> Timestamp) {
        let mut state = self.state.lock();
        let Queued { lanes, tracked } = &mut *state;
        for pending in fires {
            if tracked
                .get(&pending.execute_id)
                .is_some_and(|t| t.epoch == pending.epoch)
            {
                lanes.insert(
                    slot(pending.lane, pending.deferred),
                    (at(&pending), self.next_seq()),
                    pending,
                );
            }
        }
        drop(state);
        self.changed.notify_one();
    }

    /// A claim of one of this node's own fires of an execute was lost: the
    /// fire is gone from the queue, and the execute's later fires stay
    /// queued the first time, the execute is forgotten the second. A node
    /// that came to its claims late loses them to a node that took them a
    /// strategy grace later, which moved the row as this node would have:
    /// its next fires are still this node's to claim, at their time. Had
    /// the node forgotten the execute, nobody would claim its fires until
    /// its next poll, seconds later (at 10,000 fires a second, a third of a
    /// node's share was claimed up to 4 s late so). A row changed otherwise (a trigger edited,
    /// a misfire decided) loses the next claim too, and is then forgotten
    /// and read afresh by the next poll, as before. (The dispatcher forgets
    /// at once what a lost claim may have moved on otherwise: fires left to
    /// another node, overlap policies, limits, a job that disallows
    /// concurrent fires, a trigger that ends by its count.) Returns whether
    /// the execute was forgotten.
    pub(super) fn lost(&self, execute_id: i64, epoch: u64) -> bool {
        let tracked = &mut self.state.lock().tracked;
        match tracked.get_mut(&execute_id) {
            Some(track) if track.epoch == epoch && !track.lost_one => {
                track.lost_one = true;
                false
            }
            Some(track) if track.epoch == epoch => {
                tracked.remove(&execute_id);
                true
            }
            // Forgotten or queued afresh since: nothing to keep.
            _ => true,
        }
    }

    /// Forgets an execute: its queued fires become stale.
    pub(super) fn forget(&self, execute_id: i64) {
        self.state.lock().tracked.remove(&execute_id);
    }

    /// Forgets every execute with fires left to another node: its queued
    /// fires become stale, and the next poll expands it afresh. Returns how
    /// many fires were dropped.
    pub(super) fn forget_deferred(&self) -> usize {
        let mut state = self.state.lock();
        let Queued { lanes, tracked } = &mut *state;
        let mut dropped = 0;
        for lane in [Lane::Pool, Lane::Task] {
            for (_, pending) in lanes.take_deferred(lane) {
                tracked.remove(&pending.execute_id);
                dropped += 1;
            }
        }
        dropped
    }

    /// Forgets everything (a rejoin, a shutdown).
    pub(super) fn clear(&self) {
        let mut state = self.state.lock();
        state.tracked.clear();
        state.lanes.clear();
    }

    /// The earliest claim time queued.
    pub(super) fn first_claim_at(&self) -> Option<Timestamp> {
        self.first_claim_at_in([1, 1])
    }

    /// Takes at most `limit` queued fires whose claim time has come, dropping
    /// stale ones; a fire more than `threshold_ms` past its time (and not a
    /// policy's late run) is not claimed: its execute is reported late.
    /// Each fire takes a place in its lane's `room` ([`Lane`] as index); a
    /// lane without room is not read, and its fires stay queued.
    pub(super) fn take_due(
        &self,
        (db_now, ahead_ms): (Timestamp, i64),
        limit: usize,
        threshold_ms: i64,
        room: [usize; 2],
    ) -> Due {
        let mut state = self.state.lock();
        let Queued { lanes, tracked } = &mut *state;
        let until = db_now.saturating_add_millis(ahead_ms.max(0));
        let is_late = |p: &Pending| !p.late_ok && db_now.as_millis() - p.fire.fire_time.as_millis() > threshold_ms;
        // Each slot's first fires, as many as its lane's room and the limit
        // take (a late one takes no place: it is not claimed).
        let mut picked: Vec<(Key, usize)> = Vec::new();
        for at in 0..lanes.slots.len() {
            let mut places = room[lane_of(at) as usize].min(limit);
            let mut stale = Vec::new();
            // A fire left to another node waits for its own claim time.
            let until = if at == slot(lane_of(at), true) { db_now } else { until };
            for (key, pending) in lanes[at].range(..=(until, u64::MAX)) {
                if places == 0 {
                    break;
                }
                if tracked
                    .get(&pending.execute_id)
                    .is_none_or(|t| t.epoch != pending.epoch || pending.fire.fire_time <= t.taken_to)
                {
                    stale.push(*key);
                    continue;
                }
                if !is_late(pending) {
                    places -= 1;
                }
                picked.push((*key, at));
            }
            for key in stale {
                lanes.remove(at, &key);
            }
        }
        // The first of every slot by claim time, up to the limit and each
        // lane's room.
        picked.sort_unstable_by_key(|(key, _)| *key);
        let mut places = room.map(|r| r.min(limit));
        let mut due = Due::default();
        for (key, at) in picked {
            if due.fires.len() >= limit {
                break;
            }
            let lane = lane_of(at) as usize;
            let late = lanes[at].get(&key).is_some_and(is_late);
            if !late && places[lane] == 0 {
                continue;
            }
            let Some(pending) = lanes.remove(at, &key) else {
                continue;
            };
            if late {
                due.late.push(pending.execute_id);
            } else {
                places[lane] -= 1;
                due.fires.push(pending);
            }
        }
        for id in &due.late {
            tracked.remove(id);
        }
        drop(state);
        // One lock order on every node: by time, then by row. Claims of the same
        // rows in different orders by two nodes would deadlock.
        due.fires.sort_by_key(|p| (p.fire.fire_time, p.execute_id));
        due
    }

    /// The first claim time of a queued fire whose lane has room.
    pub(super) fn first_claim_at_in(&self, room: [usize; 2]) -> Option<Timestamp> {
        let state = self.state.lock();
        state
            .lanes
            .slots
            .iter()
            .enumerate()
            .filter(|(at, _)| room[lane_of(*at) as usize] > 0)
            .filter_map(|(_, queue)| queue.keys().next().map(|k| k.0))
            .min()
    }

    /// How far ahead of `db_now` claims must reach so that, claiming the
    /// queue in order at the claim's pace, every fire is claimed by its
    /// claim time: a burst of fires due together begins its claims as many
    /// claims' time earlier. Fires another node was preferred for wait for
    /// their own time and are neither counted nor walked.
    pub(super) fn claim_ahead(&self, db_now: Timestamp) -> Ahead {
        let state = self.state.lock();
        let lanes = &state.lanes;
        let mut ahead = Ahead { ms: 0, begin_by: None };
        // No fire's claims take longer than the whole queue's.
        let longest = i64::try_from(self.claim_pace.of(lanes.own_len()).as_millis()).unwrap_or(i64::MAX);
        let mut fires = 0;
        // The fires of one claim time at once: the last of them begins
        // earliest (the most fires before it); and where the walk would
        // stop among them, none of the rest would change the answer.
        for (&claim_at, &count) in &lanes.own_at {
            // Every later fire begins after both now and the earliest
            // beginning found: none changes the answer.
            let earliest_begin = claim_at.saturating_add_millis(-longest);
            if earliest_begin > db_now && ahead.begin_by.is_some_and(|b| earliest_begin >= b) {
                break;
            }
            fires += count;
            let takes = i64::try_from(self.claim_pace.of(fires).as_millis()).unwrap_or(i64::MAX);
            let begin = claim_at.saturating_add_millis(-takes);
            if begin <= db_now {
                ahead.ms = ahead.ms.max(claim_at.as_millis() - db_now.as_millis());
            }
            ahead.begin_by = Some(ahead.begin_by.map_or(begin, |b| b.min(begin)));
        }
        ahead
    }

    /// Whether any queued fire's claim time has come.
    pub(super) fn has_due(&self, db_now: Timestamp) -> bool {
        self.first_claim_at().is_some_and(|t| t <= db_now)
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
