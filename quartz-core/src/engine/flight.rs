//! What a node holds of its fires in flight, with one owner ([`Flights`]):
//! the fires won and not started, the ones started whose outcome is not
//! recorded, the running fires' cancellation, the pending fires it waits
//! on, and the room each lane of handlers has ([`Room`], one for the pool's
//! threads and queue, one for `async_max` tasks), counting every fire this
//! node holds until its handler returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::{Notify, watch};

use super::fixed::{HashMap, HashSet};
use super::handler::CancelReason;
use crate::store::Job;

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

/// Running fires' cancellation senders, and the fires asked to stop
/// before they run.
#[derive(Debug, Default)]
struct Cancels {
    running: HashMap<i64, watch::Sender<Option<CancelReason>>>,
    asked: HashSet<i64>,
}

/// The jobs a poll read, by id (`None` for one deleted since a fire of it
/// was claimed), as the poller publishes them.
pub(super) type LatestJobs = HashMap<i64, Option<Arc<Job>>>;

/// What a node holds of its fires in flight: every stage reads and writes
/// it through the node's context, and nothing else keeps a fire's place.
#[derive(Debug)]
pub(super) struct Flights {
    /// Won fires not yet started (claimed in the ledger): given back at
    /// shutdown, and never taken for lost by the sweep.
    unstarted: Mutex<HashSet<i64>>,
    /// Fires started (marked running) whose outcome is not recorded yet: a
    /// shutdown waits for them.
    inflight: AtomicUsize,
    /// Running fires' cancellation, and the claimed fires not running yet
    /// that a newer fire of their job asked to stop (the cancel overlap
    /// policy).
    cancels: Mutex<Cancels>,
    /// The fires this node holds for the pool.
    pub(super) room: Arc<Room>,
    /// The fires this node holds for async handlers' tasks.
    pub(super) task_room: Arc<Room>,
    /// The jobs the last poll read, `None` for one deleted, as the poller
    /// publishes them ([`LatestJobs`]): a fire claimed before its job was
    /// edited runs with the edited version, and one claimed before its job
    /// was paused or deleted does not run.
    latest_jobs: watch::Receiver<LatestJobs>,
    /// Jobs with fires claimed and not launched yet, and how many: each poll
    /// reads them too, whether or not their triggers are due.
    awaiting_launch: Mutex<HashMap<i64, usize>>,
    /// How many pending fires (retries, late runs) this node waits on, as
    /// the backlog counts them.
    pending: AtomicUsize,
}

impl Flights {
    /// Nothing in flight; the jobs as `latest_jobs` publishes them.
    pub(super) fn new(latest_jobs: watch::Receiver<LatestJobs>) -> Flights {
        Flights {
            unstarted: Mutex::default(),
            inflight: AtomicUsize::default(),
            cancels: Mutex::default(),
            room: Arc::default(),
            task_room: Arc::default(),
            latest_jobs,
            awaiting_launch: Mutex::default(),
            pending: AtomicUsize::default(),
        }
    }

    /// Fires held (see [`Room`]), in both lanes.
    pub(super) fn held(&self) -> usize {
        self.room.held() + self.task_room.held()
    }

    /// Fires won and not started: known to this node before their claim
    /// commits, so that the sweep for claims it lost track of leaves them
    /// alone.
    pub(super) fn unstarted(&self, ids: impl IntoIterator<Item = i64>) {
        self.unstarted.lock().extend(ids);
    }

    /// Fires started, or given up, since [`Self::unstarted`].
    pub(super) fn not_unstarted(&self, ids: impl IntoIterator<Item = i64>) {
        let mut unstarted = self.unstarted.lock();
        for id in ids {
            unstarted.remove(&id);
        }
    }

    /// Whether this node has fires claimed or running.
    pub(super) fn any_open(&self) -> bool {
        !self.unstarted.lock().is_empty() || !self.cancels.lock().running.is_empty()
    }

    /// Whether a fire is won and not started.
    pub(super) fn is_unstarted(&self, id: i64) -> bool {
        self.unstarted.lock().contains(&id)
    }

    /// Every fire won and not started, forgotten: a shutdown gives them back.
    pub(super) fn take_unstarted(&self) -> HashSet<i64> {
        std::mem::take(&mut *self.unstarted.lock())
    }

    /// `n` fires start: a shutdown waits for their outcomes.
    pub(super) fn started(&self, n: usize) {
        self.inflight.fetch_add(n, Ordering::SeqCst);
    }

    /// `n` started fires ended (recorded, or left to recovery).
    pub(super) fn ended(&self, n: usize) {
        self.inflight.fetch_sub(n, Ordering::SeqCst);
    }

    /// Started fires whose outcome is not recorded yet.
    pub(super) fn in_flight(&self) -> usize {
        self.inflight.load(Ordering::SeqCst)
    }

    /// A fire's handler runs, cancelled through `cancel` (at once when a
    /// newer fire asked it to stop before it started).
    pub(super) fn running(&self, fire_id: i64, cancel: watch::Sender<Option<CancelReason>>) {
        let mut cancels = self.cancels.lock();
        if cancels.asked.remove(&fire_id) {
            let _ = cancel.send(Some(CancelReason::Overlapped));
        }
        cancels.running.insert(fire_id, cancel);
    }

    /// The fires a newer fire of their job asked to stop (the store's whole
    /// list for this node): those running are cancelled, the others when
    /// they start.
    pub(super) fn cancel_asked(&self, fire_ids: &[i64]) {
        let mut cancels = self.cancels.lock();
        let Cancels { running, asked } = &mut *cancels;
        asked.clear();
        for id in fire_ids {
            match running.get(id) {
                Some(cancel) => {
                    if cancel.borrow().is_none() {
                        let _ = cancel.send(Some(CancelReason::Overlapped));
                    }
                }
                None => {
                    asked.insert(*id);
                }
            }
        }
    }

    /// A fire's handler returned.
    pub(super) fn not_running(&self, fire_id: i64) {
        self.cancels.lock().running.remove(&fire_id);
    }

    /// How many handlers run.
    pub(super) fn running_count(&self) -> usize {
        self.cancels.lock().running.len()
    }

    /// Asks every running handler to stop.
    pub(super) fn cancel_all(&self, reason: CancelReason) {
        for cancel in self.cancels.lock().running.values() {
            let _ = cancel.send(Some(reason));
        }
    }

    /// A won fire of job `job_id` waits for its launch: the polls read the
    /// job until then.
    pub(super) fn awaiting(&self, job_id: i64) {
        *self.awaiting_launch.lock().entry(job_id).or_default() += 1;
    }

    /// The jobs with fires waiting for their launch.
    pub(super) fn awaiting_jobs(&self) -> Vec<i64> {
        self.awaiting_launch.lock().keys().copied().collect()
    }

    /// A won fire of job `job_id` launches: the job as the last poll read
    /// it (`Some(None)` when deleted since), if it did.
    pub(super) fn launching(&self, job_id: i64) -> Option<Option<Arc<Job>>> {
        {
            let mut awaiting = self.awaiting_launch.lock();
            if let Some(n) = awaiting.get_mut(&job_id) {
                *n -= 1;
                if *n == 0 {
                    awaiting.remove(&job_id);
                }
            }
        }
        self.latest_job(job_id)
    }

    /// The job as the last poll read it, if it did.
    pub(super) fn latest_job(&self, job_id: i64) -> Option<Option<Arc<Job>>> {
        self.latest_jobs.borrow().get(&job_id).cloned()
    }

    /// The backlog waits on `n` pending fires.
    pub(super) fn set_pending(&self, n: usize) {
        self.pending.store(n, Ordering::Relaxed);
    }

    /// Pending fires this node waits on.
    pub(super) fn pending_count(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
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
