//! The room a lane of handlers has ([`Room`], one for the pool's threads
//! and queue, one for `async_max` tasks; the launch stage keeps both and
//! says which a job's fires take), counting every fire this node holds
//! until its handler returns; and what a fire passes between its hand-over
//! and its handler ([`Gate`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use super::completer::StartAnswer;
use super::node::Inner;
use super::supervise::Ran;
use crate::store::NodeRef;
use crate::time::Timestamp;

/// A fire its lane holds longer than this before its handler starts has
/// its ownership confirmed again, and its start time set to now, before it
/// runs.
pub(super) const START_RECHECK: Duration = Duration::from_millis(100);

/// The room the pool has for fires this node holds.
#[derive(Debug, Default)]
pub(super) struct Room {
    held: AtomicUsize,
    /// Woken when a held fire is let go.
    pub(super) freed: Notify,
}

/// One fire's place in the [`Room`]; clones share it, and the last one
/// dropped gives it back.
#[derive(Debug, Clone)]
pub(super) struct Hold {
    _place: Arc<HoldInner>,
}

#[derive(Debug)]
struct HoldInner(Arc<Room>);

impl Drop for HoldInner {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
        self.0.freed.notify_one();
    }
}

impl Room {
    /// Takes a place.
    pub(super) fn hold(self: &Arc<Self>) -> Hold {
        self.held.fetch_add(1, Ordering::SeqCst);
        Hold {
            _place: Arc::new(HoldInner(Arc::clone(self))),
        }
    }

    /// Fires held: won, and their handlers not returned.
    pub(super) fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// How many more fires fit in `capacity`.
    pub(super) fn left(&self, capacity: usize) -> usize {
        capacity.saturating_sub(self.held())
    }
}

/// What a fire passes between its hand-over and its handler. A fire won by
/// a poll, on its first attempt, is misfired when it is taken past the
/// threshold; one that waited past [`START_RECHECK`] (a busy pool, or this
/// process paused) has its ownership confirmed again, and its start time
/// set to now, before it runs, so that a node declared dead meanwhile runs
/// nothing it lost.
pub(super) struct Gate {
    pub(super) inner: Arc<Inner>,
    pub(super) fire_time: Timestamp,
    pub(super) threshold_ms: Option<i64>,
    pub(super) submitted: std::time::Instant,
    pub(super) fire_id: i64,
    pub(super) owner: NodeRef,
}

/// The answer to a start confirmed again, if the confirmer gave one.
type Confirmed = Result<StartAnswer, oneshot::error::RecvError>;

impl Gate {
    /// On a pool thread.
    pub(super) fn pass_blocking(&self) -> Result<(), Ran> {
        match self.check()? {
            None => Ok(()),
            Some(answer) => self.judge(answer.blocking_recv()),
        }
    }

    /// In a task.
    pub(super) async fn pass(&self) -> Result<(), Ran> {
        match self.check()? {
            None => Ok(()),
            Some(answer) => self.judge(answer.await),
        }
    }

    /// Late now, or waiting for the start to be confirmed again (with the
    /// others waiting at this moment, in one statement: a busy pool asks
    /// no round trip per fire).
    fn check(&self) -> Result<Option<oneshot::Receiver<StartAnswer>>, Ran> {
        let late_ms = self.inner.clock.db_now().as_millis() - self.fire_time.as_millis();
        if self.threshold_ms.is_some_and(|limit| late_ms > limit) {
            return Err(Ran::Late(late_ms));
        }
        if self.submitted.elapsed() <= START_RECHECK {
            return Ok(None);
        }
        Ok(Some(self.inner.recorder.confirm(self.fire_id, self.owner.clone())))
    }

    /// The start confirmed again: judged by the start the ledger recorded.
    fn judge(&self, answer: Confirmed) -> Result<(), Ran> {
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
        let late_ms = started_at.as_millis() - self.fire_time.as_millis();
        if self.threshold_ms.is_some_and(|limit| late_ms > limit) {
            return Err(Ran::Late(late_ms));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_is_given_back_when_its_last_clone_is_dropped() {
        let room = Arc::new(Room::default());
        let a = room.hold();
        let b = room.hold();
        let a2 = a.clone();
        assert_eq!(room.held(), 2);
        assert_eq!(room.left(5), 3);
        drop(a);
        assert_eq!(room.held(), 2, "a clone still holds it");
        drop(a2);
        drop(b);
        assert_eq!(room.held(), 0);
        assert_eq!(room.left(5), 5);
    }
}
