//! The elastic pool: how a task enters, how workers take it, and how the pool grows,
//! shrinks and stops.
//!
//! Submission follows Java's `ThreadPoolExecutor::execute`, in three steps:
//! 1. fewer than `core` threads: start a thread with the task as its first task;
//! 2. otherwise offer the task to the bounded queue;
//! 3. queue full: start a thread (up to `max`) with the task, or reject it and hand
//!    it back.
//!
//! Workers run their first task, then take from the queue until it is disconnected
//! (shutdown) or until they decide to retire: idle longer than `keep_alive` while
//! the pool is above `core` (or core timeout is allowed), or the pool is above a
//! lowered `max`. A worker retires only by winning a compare-and-set on the thread
//! count, so two workers never both retire the last thread the pool needs.
//!
//! Shutdown drops the only sender of the queue. Workers drain what is queued and exit
//! when they see the disconnect, so no task accepted before shutdown is stranded,
//! and no task is accepted after it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::builder::{Builder, RejectionHandler, validate};
use crate::error::PoolError;
use crate::metrics::{PoolMetrics, ShutdownReport};
use crate::task::{BoxTask, RejectReason, Rejected, Task};

mod stats;
mod worker;

use stats::{Registry, WorkerStats};
use worker::AddError;

/// An elastic pool of OS threads for blocking work, with the semantics of Java's
/// `ThreadPoolExecutor`.
///
/// `core` threads are kept; when all are busy, tasks wait in a bounded queue; only
/// when the queue is full does the pool start more threads, up to `max`; when the
/// queue is full at `max`, the task is rejected and handed back. Threads above
/// `core` exit after `keep_alive` idle. All three can be changed while the pool runs.
///
/// A panicking task is caught and counted; its worker goes on. Dropping the pool
/// starts a shutdown without waiting: queued tasks still run, then the threads
/// exit. Call [`shutdown`](Pool::shutdown) to wait for that with a deadline.
///
/// ```
/// use std::sync::mpsc;
///
/// let pool = quartz_pool::Pool::builder().core(2).max(4).build()?;
/// let (tx, rx) = mpsc::channel();
/// pool.try_submit(move || tx.send(6 * 7).unwrap())
///     .expect("an empty pool accepts a task");
/// assert_eq!(rx.recv().unwrap(), 42);
/// assert!(pool.shutdown(std::time::Duration::from_secs(5)).is_clean());
/// # Ok::<(), quartz_pool::PoolError>(())
/// ```
pub struct Pool {
    shared: Arc<Shared>,
}

/// State shared by the pool handle and every worker.
struct Shared {
    /// The sending half of the task queue; `None` from the moment shutdown begins.
    /// Dropping it disconnects the queue, which is how workers learn to exit once
    /// the queue is drained. Submitters hold the read lock only for a `try_send`.
    sender: RwLock<Option<Sender<BoxTask>>>,
    /// The receiving half: every worker takes from it, and shutdown takes back what
    /// no worker started.
    receiver: Receiver<BoxTask>,
    /// Wake-up tokens. Each token makes one idle worker re-read the settings (after
    /// `core`, `max` or `keep_alive` changed). A token left over because every worker
    /// was busy costs one extra loop later, nothing more.
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
    queue_capacity: usize,

    core: AtomicUsize,
    max: AtomicUsize,
    keep_alive_nanos: AtomicU64,
    allow_core_timeout: AtomicBool,
    /// Serialises the setters, so that `core <= max` holds across concurrent changes.
    config_lock: Mutex<()>,

    /// Worker threads started and not yet retired. Incremented before a thread is
    /// spawned (a reservation, so submitters never overshoot `max`) and decremented
    /// by the compare-and-set with which a worker retires, or when a spawn fails.
    threads: CachePadded<AtomicUsize>,
    /// Submissions refused. Rare, so one shared counter is enough.
    rejected: AtomicU64,
    /// The live workers' own counters, summed by `metrics`. Each worker writes only
    /// its own slot, so the hot path touches no shared cache line.
    registry: Mutex<Registry>,
    /// Signalled (under `exit_lock`) each time a worker exits, for `shutdown`.
    exit_lock: Mutex<()>,
    exit_cv: Condvar,

    thread_name_prefix: String,
    stack_size: Option<usize>,
    rejection_handler: Option<RejectionHandler>,
}

impl Pool {
    /// A builder with the default sizing (see [`Builder`]).
    pub fn builder() -> Builder {
        Builder::default()
    }

    pub(crate) fn from_builder(b: Builder) -> Result<Pool, PoolError> {
        let (sender, receiver) = crossbeam_channel::bounded(b.queue_capacity);
        let (wake_tx, wake_rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            sender: RwLock::new(Some(sender)),
            receiver,
            wake_tx,
            wake_rx,
            queue_capacity: b.queue_capacity,
            core: AtomicUsize::new(b.core),
            max: AtomicUsize::new(b.max),
            keep_alive_nanos: AtomicU64::new(duration_nanos(b.keep_alive)),
            allow_core_timeout: AtomicBool::new(b.allow_core_timeout),
            config_lock: Mutex::new(()),
            threads: CachePadded::new(AtomicUsize::new(0)),
            rejected: AtomicU64::new(0),
            registry: Mutex::new(Registry {
                next_id: 1,
                ..Registry::default()
            }),
            exit_lock: Mutex::new(()),
            exit_cv: Condvar::new(),
            thread_name_prefix: b.thread_name_prefix,
            stack_size: b.stack_size,
            rejection_handler: b.rejection_handler,
        });
        if b.prestart {
            for _ in 0..b.core {
                match Shared::add_worker(&shared, None, b.core) {
                    Ok(()) | Err((_, AddError::AtLimit)) => {}
                    Err((_, AddError::Spawn { name, source })) => {
                        Shared::begin_shutdown(&shared);
                        return Err(PoolError::Spawn { name, source });
                    }
                }
            }
        }
        Ok(Pool { shared })
    }

    /// Submits a task without waiting.
    ///
    /// # Errors
    ///
    /// [`Rejected`], carrying the task back, when the queue is full and the pool
    /// runs `max` threads ([`RejectReason::QueueFull`]), when the pool is shutting
    /// down ([`RejectReason::ShutDown`]), or when a thread was needed and could not
    /// be started ([`RejectReason::SpawnFailed`]). The rejection is counted and
    /// passed to the rejection handler before this returns.
    pub fn try_submit<F>(&self, task: F) -> Result<(), Rejected>
    where
        F: FnOnce() + Send + 'static,
    {
        self.try_resubmit(Task(Box::new(task)))
    }

    /// Offers a task the pool handed back (in a [`Rejected`] or a shutdown's
    /// report) again, as [`try_submit`](Self::try_submit) offers a new one,
    /// without wrapping it: a task refused and offered again any number of
    /// times runs as it was first given. (Wrapped in a new closure each
    /// time, it would nest one call deeper per refusal, and a task refused
    /// thousands of times could overflow the stack of the worker that runs
    /// it.)
    ///
    /// # Errors
    ///
    /// [`Rejected`], carrying the task back, as for [`try_submit`](Self::try_submit).
    pub fn try_resubmit(&self, task: Task) -> Result<(), Rejected> {
        match Shared::offer(&self.shared, task.0) {
            Ok(()) => Ok(()),
            Err((task, reason)) => Err(self.shared.reject(task, reason)),
        }
    }

    /// Submits a task, waiting up to `timeout` for room in the queue when the pool
    /// already runs `max` threads. This is back-pressure for producers that would
    /// rather slow down than handle a rejection.
    ///
    /// # Errors
    ///
    /// [`Rejected`], carrying the task back, when there was still no room after
    /// `timeout` ([`RejectReason::QueueFull`]) or the pool shut down meanwhile
    /// ([`RejectReason::ShutDown`]).
    pub fn submit_timeout<F>(&self, task: F, timeout: Duration) -> Result<(), Rejected>
    where
        F: FnOnce() + Send + 'static,
    {
        let (task, reason) = match Shared::offer(&self.shared, Box::new(task)) {
            Ok(()) => return Ok(()),
            Err(refused) => refused,
        };
        if reason != RejectReason::QueueFull {
            return Err(self.shared.reject(task, reason));
        }
        // A clone of the sender, so that the read lock is not held while waiting
        // and shutdown is not delayed by it. While this clone lives the queue stays
        // connected, so a task it delivers is still drained by the workers.
        let Some(sender) = self.shared.sender.read().clone() else {
            return Err(self.shared.reject(task, RejectReason::ShutDown));
        };
        let result = send_patiently(&sender, task, timeout);
        drop(sender);
        match result {
            Ok(()) => {
                Shared::ensure_a_worker(&self.shared);
                Ok(())
            }
            Err(crossbeam_channel::SendTimeoutError::Timeout(task)) => {
                Err(self.shared.reject(task, RejectReason::QueueFull))
            }
            Err(crossbeam_channel::SendTimeoutError::Disconnected(task)) => {
                Err(self.shared.reject(task, RejectReason::ShutDown))
            }
        }
    }

    /// A snapshot of the pool's threads, queue and counters.
    pub fn metrics(&self) -> PoolMetrics {
        self.shared.metrics()
    }

    /// Changes the core size while the pool runs.
    ///
    /// Raising it starts threads at once for tasks already queued; lowering it lets
    /// the threads above the new core exit after `keep_alive` idle. No task is lost
    /// or run twice either way.
    ///
    /// # Errors
    ///
    /// [`PoolError::InvalidConfig`] when `core` exceeds the current `max`; nothing changes.
    pub fn set_core(&self, core: usize) -> Result<(), PoolError> {
        let s = &self.shared;
        let _config = s.config_lock.lock();
        validate(
            core,
            s.max.load(Ordering::Relaxed),
            s.keep_alive(),
            s.allow_core_timeout.load(Ordering::Relaxed),
        )?;
        let old = s.core.swap(core, Ordering::SeqCst);
        if core > old {
            // As Java does: start up to the difference, but no more threads than
            // there are queued tasks for them.
            let wanted = (core - old).min(s.receiver.len());
            for _ in 0..wanted {
                if Shared::add_worker(s, None, core).is_err() {
                    break;
                }
            }
        } else {
            s.wake_all();
        }
        Ok(())
    }

    /// Changes the maximum size while the pool runs. Lowering it makes threads above
    /// the new maximum exit as soon as they finish their current task.
    ///
    /// # Errors
    ///
    /// [`PoolError::InvalidConfig`] when `max` is zero or below the current `core`;
    /// nothing changes.
    pub fn set_max(&self, max: usize) -> Result<(), PoolError> {
        let s = &self.shared;
        let _config = s.config_lock.lock();
        validate(
            s.core.load(Ordering::Relaxed),
            max,
            s.keep_alive(),
            s.allow_core_timeout.load(Ordering::Relaxed),
        )?;
        let old = s.max.swap(max, Ordering::SeqCst);
        if max < old {
            s.wake_all();
        }
        Ok(())
    }

    /// Changes the keep-alive while the pool runs; idle threads start counting
    /// against the new value at once.
    ///
    /// # Errors
    ///
    /// [`PoolError::InvalidConfig`] when it is zero while core timeout is allowed.
    pub fn set_keep_alive(&self, keep_alive: Duration) -> Result<(), PoolError> {
        let s = &self.shared;
        let _config = s.config_lock.lock();
        validate(
            s.core.load(Ordering::Relaxed),
            s.max.load(Ordering::Relaxed),
            keep_alive,
            s.allow_core_timeout.load(Ordering::Relaxed),
        )?;
        s.keep_alive_nanos.store(duration_nanos(keep_alive), Ordering::SeqCst);
        s.wake_all();
        Ok(())
    }

    /// Allows or forbids core threads to exit after `keep_alive` idle.
    ///
    /// # Errors
    ///
    /// [`PoolError::InvalidConfig`] when allowing it with a zero keep-alive.
    pub fn set_allow_core_timeout(&self, allow: bool) -> Result<(), PoolError> {
        let s = &self.shared;
        let _config = s.config_lock.lock();
        validate(
            s.core.load(Ordering::Relaxed),
            s.max.load(Ordering::Relaxed),
            s.keep_alive(),
            allow,
        )?;
        s.allow_core_timeout.store(allow, Ordering::SeqCst);
        s.wake_all();
        Ok(())
    }

    /// Stops accepting tasks, lets queued and running tasks finish until `grace`
    /// has passed, and reports what did not finish.
    ///
    /// Never blocks longer than `grace`: tasks still running then are left to their
    /// threads (counted in [`ShutdownReport::still_running`]), and queued tasks no
    /// worker started are taken out of the queue and handed back, unrun, in
    /// [`ShutdownReport::not_started`]. Calling it again (or concurrently) is safe
    /// and waits again.
    pub fn shutdown(&self, grace: Duration) -> ShutdownReport {
        let deadline = Instant::now().checked_add(grace);
        let s = &self.shared;
        Shared::begin_shutdown(s);
        let mut guard = s.exit_lock.lock();
        while s.threads.load(Ordering::SeqCst) > 0 {
            match deadline {
                Some(deadline) => {
                    if s.exit_cv.wait_until(&mut guard, deadline).timed_out() {
                        break;
                    }
                }
                None => s.exit_cv.wait(&mut guard),
            }
        }
        drop(guard);
        // Every task is taken off the queue exactly once, by a worker or here.
        let not_started: Vec<Task> = s.receiver.try_iter().map(Task).collect();
        let still_running = s
            .registry
            .lock()
            .workers
            .iter()
            .filter(|w| w.busy.load(Ordering::Relaxed))
            .count();
        if still_running > 0 || !not_started.is_empty() {
            tracing::warn!(
                still_running,
                not_started = not_started.len(),
                "pool shutdown deadline passed with work left"
            );
        }
        ShutdownReport {
            still_running,
            not_started,
        }
    }

    /// True once shutdown has begun; no task is accepted from then on.
    pub fn is_shut_down(&self) -> bool {
        self.shared.sender.read().is_none()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        Shared::begin_shutdown(&self.shared);
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("metrics", &self.metrics()).finish()
    }
}

impl Shared {
    /// The pool's figures: each worker's counts and the exited ones' added up.
    pub(super) fn metrics(&self) -> PoolMetrics {
        let (threads, busy, completed, panicked, largest) = {
            let registry = self.registry.lock();
            let mut busy = 0;
            let mut completed = registry.retired_completed;
            let mut panicked = registry.retired_panicked;
            for w in &registry.workers {
                busy += usize::from(w.busy.load(Ordering::Relaxed));
                completed += w.completed.load(Ordering::Relaxed);
                panicked += w.panicked.load(Ordering::Relaxed);
            }
            (registry.workers.len(), busy, completed, panicked, registry.largest)
        };
        PoolMetrics {
            threads,
            busy,
            idle: threads - busy,
            largest,
            queued: self.receiver.len(),
            queue_capacity: self.queue_capacity,
            completed,
            panicked,
            rejected: self.rejected.load(Ordering::Relaxed),
            core: self.core.load(Ordering::Relaxed),
            max: self.max.load(Ordering::Relaxed),
            keep_alive: self.keep_alive(),
            allow_core_timeout: self.allow_core_timeout.load(Ordering::Relaxed),
        }
    }

    fn keep_alive(&self) -> Duration {
        Duration::from_nanos(self.keep_alive_nanos.load(Ordering::Relaxed))
    }

    /// The three steps of submission; a refusal returns the task with its reason,
    /// not yet counted.
    fn offer(this: &Arc<Shared>, task: BoxTask) -> Result<(), (BoxTask, RejectReason)> {
        // Step 1: below core, a new thread takes the task directly.
        let core = this.core.load(Ordering::Relaxed);
        let task = if this.threads.load(Ordering::Relaxed) < core {
            match Shared::add_worker_with(this, task, core) {
                Ok(()) => return Ok(()),
                Err((task, _)) => task,
            }
        } else {
            task
        };
        // Step 2: the queue.
        let sent = match this.sender.read().as_ref() {
            Some(sender) => sender.try_send(task),
            None => return Err((task, RejectReason::ShutDown)),
        };
        match sent {
            Ok(()) => {
                Shared::ensure_a_worker(this);
                Ok(())
            }
            // Step 3: the queue is full; grow up to max, or refuse.
            Err(TrySendError::Full(task)) => {
                let max = this.max.load(Ordering::Relaxed);
                match Shared::add_worker_with(this, task, max) {
                    Ok(()) => Ok(()),
                    Err((task, AddError::AtLimit)) => Err((task, RejectReason::QueueFull)),
                    Err((task, AddError::Spawn { .. })) => Err((task, RejectReason::SpawnFailed)),
                }
            }
            Err(TrySendError::Disconnected(task)) => Err((task, RejectReason::ShutDown)),
        }
    }

    /// After a task was queued: if no thread is alive (core is zero, or core threads
    /// timed out), start one so the task does not wait for the next submission.
    ///
    /// Pairs with the check in `worker_exit`: the worker decrements `threads` then
    /// looks at the queue, the submitter fills the queue then looks at `threads`;
    /// with a SeqCst fence on both sides, at least one of them sees the other.
    fn ensure_a_worker(this: &Arc<Shared>) {
        fence(Ordering::SeqCst);
        if this.threads.load(Ordering::Relaxed) == 0 {
            let max = this.max.load(Ordering::Relaxed);
            // A failure here leaves the task queued for the next thread that starts.
            let _ = Shared::add_worker(this, None, max);
        }
    }

    /// Counts a rejection, tells the handler, and wraps the task to hand back.
    fn reject(&self, task: BoxTask, reason: RejectReason) -> Rejected {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%reason, "task rejected");
        if let Some(handler) = &self.rejection_handler {
            let metrics = self.metrics();
            handler(reason, &metrics);
        }
        Rejected {
            reason,
            task: Task(task),
        }
    }

    /// Sends one wake-up token per live worker, so idle ones re-read the settings.
    fn wake_all(&self) {
        for _ in 0..self.threads.load(Ordering::SeqCst) {
            // The receiver lives in `self`, so the channel is never disconnected.
            let _ = self.wake_tx.send(());
        }
    }

    /// Drops the queue's sender (once). Idempotent.
    fn begin_shutdown(this: &Arc<Shared>) {
        let sender = this.sender.write().take();
        if sender.is_some() {
            tracing::debug!("pool shutdown begun");
        }
        drop(sender);
    }

    /// Retires the calling worker if the pool has more threads than `limit` and,
    /// when `keep_one` is set, at least one other thread or nothing queued.
    fn try_retire(&self, limit: usize, keep_one: bool) -> bool {
        let mut n = self.threads.load(Ordering::SeqCst);
        loop {
            if n <= limit || (keep_one && n <= 1 && !self.receiver.is_empty()) {
                return false;
            }
            match self
                .threads
                .compare_exchange_weak(n, n - 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(actual) => n = actual,
            }
        }
    }
}

/// Waits for room in a full queue: a few yields first, because a worker usually
/// frees a slot within microseconds, and parking the producer for each slot costs
/// two context switches per task; then a blocking wait for the rest of `timeout`.
fn send_patiently(
    sender: &Sender<BoxTask>,
    mut task: BoxTask,
    timeout: Duration,
) -> Result<(), crossbeam_channel::SendTimeoutError<BoxTask>> {
    const YIELDS: u32 = 64;
    let deadline = Instant::now().checked_add(timeout);
    for _ in 0..YIELDS {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        std::thread::yield_now();
        match sender.try_send(task) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(t)) => task = t,
            Err(TrySendError::Disconnected(t)) => return Err(crossbeam_channel::SendTimeoutError::Disconnected(t)),
        }
    }
    match deadline {
        Some(deadline) => sender.send_timeout(task, deadline.saturating_duration_since(Instant::now())),
        None => sender
            .send(task)
            .map_err(|e| crossbeam_channel::SendTimeoutError::Disconnected(e.0)),
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
