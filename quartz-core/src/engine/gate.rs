//! What a fire passes between its hand-over to a lane and its handler
//! ([`Gate`]): not too late, and, after a long wait for a thread, still
//! this incarnation's.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::context::{Ctx, duration_ms};
use super::recorder::{Recorder, StartAnswer};
use super::run::Ran;
use crate::store::NodeRef;
use crate::time::Timestamp;

/// A fire its lane holds longer than this before its handler starts has
/// its ownership confirmed again, and its start time set to now, before it
/// runs, unless the node holds its lease when the fire is taken.
pub(super) const START_RECHECK: Duration = Duration::from_millis(100);

/// What a fire passes between its hand-over and its handler. A fire won by
/// a poll, on its first attempt, is misfired when it is taken past the
/// threshold. One taken when this node has not renewed its membership
/// within its lease (this process paused, a network that drops its
/// heartbeats), or by an incarnation that is no longer the node's, has its
/// ownership confirmed again, and its start time set to now, before it
/// runs, so that a node declared dead meanwhile runs nothing it lost, even
/// before the database could tell it so; so has one handed over outside the
/// lease that waited past [`START_RECHECK`]. A fire that only waited for a
/// thread of a busy pool, in the lease, runs without asking.
pub(super) struct Gate {
    pub(super) ctx: Arc<Ctx>,
    pub(super) recorder: Arc<Recorder>,
    pub(super) fire_time: Timestamp,
    pub(super) threshold_ms: Option<i64>,
    /// When it was handed over, on the node's monotonic clock
    /// ([`super::clock::Clock::mono_ms`]: a test's stepped clock).
    pub(super) submitted_ms: i64,
    /// Whether the node's membership was fresh when the fire was handed
    /// over ([`Ctx::membership_fresh`], read on the runtime, whose clock a
    /// test may step).
    pub(super) member: bool,
    pub(super) fire_id: i64,
    pub(super) owner: NodeRef,
}

/// The answer to a start confirmed again, if the confirmer gave one.
type Confirmed = Result<StartAnswer, oneshot::error::RecvError>;

impl Gate {
    /// On a pool thread: `Ok` with the start the database recorded when it
    /// confirmed it again, if it did.
    pub(super) fn pass_blocking(&self) -> Result<Option<Timestamp>, Ran> {
        match self.check()? {
            None => Ok(None),
            Some(answer) => self.judge(answer.blocking_recv()).map(Some),
        }
    }

    /// In a task, as [`Self::pass_blocking`].
    pub(super) async fn pass(&self) -> Result<Option<Timestamp>, Ran> {
        match self.check()? {
            None => Ok(None),
            Some(answer) => self.judge(answer.await).map(Some),
        }
    }

    /// Late now, or waiting for the start to be confirmed again (with the
    /// others waiting at this moment, in one statement: a busy pool asks
    /// no round trip per fire).
    fn check(&self) -> Result<Option<oneshot::Receiver<StartAnswer>>, Ran> {
        let late_ms = self.ctx.clock.db_now().as_millis() - self.fire_time.as_millis();
        if self.threshold_ms.is_some_and(|limit| late_ms > limit) {
            return Err(Ran::Late(late_ms));
        }
        // An incarnation that is no longer the node's (declared dead, and
        // the node registered again since the hand-over) runs nothing the
        // database has not confirmed.
        if !self.ctx.is_current(&self.owner) {
            return Ok(Some(self.recorder.confirm(self.fire_id, self.owner.clone())));
        }
        // Taken soon after a hand-over in the lease, or in the lease now:
        // the database declares a node dead only a quarter of `dead_after`
        // past the lease's end, so a fire it marked running for this
        // incarnation is still its own. A fire that waited in a busy pool
        // needs no round trip (asked on the pool thread, one fire at a
        // time, 8 threads could confirm 8 fires a round trip: a pool that
        // fell 100 ms behind then took seconds per second's fires, and fell
        // further). Its handler's real start is what the ledger keeps, at
        // its end.
        let quick = self.ctx.clock.mono_ms() - self.submitted_ms <= duration_ms(START_RECHECK) && self.member;
        if quick || self.ctx.membership_fresh() {
            return Ok(None);
        }
        Ok(Some(self.recorder.confirm(self.fire_id, self.owner.clone())))
    }

    /// The start confirmed again: judged by the start the ledger recorded,
    /// which it returns.
    fn judge(&self, answer: Confirmed) -> Result<Timestamp, Ran> {
        let started_at = match answer {
            Ok(Ok(Some(at))) => at,
            Ok(Ok(None)) => {
                tracing::warn!(
                    fire_id = self.fire_id,
                    "fire not run: this incarnation no longer owns it"
                );
                return Err(Ran::NotOwned);
            }
            Ok(Err(_)) | Err(_) => return Err(Ran::Unconfirmed),
        };
        // Recorded at the statement's time; its commit, and the handler
        // after it, may come much later (a database whose commits hang):
        // judged by now too, on the node's estimate, which never runs ahead.
        let judged_at = started_at.max(self.ctx.clock.db_now());
        let late_ms = judged_at.as_millis() - self.fire_time.as_millis();
        if self.threshold_ms.is_some_and(|limit| late_ms > limit) {
            return Err(Ran::Late(late_ms));
        }
        Ok(started_at)
    }
}
