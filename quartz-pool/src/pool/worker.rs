//! A worker thread: how it starts (below the pool's limit, with a first
//! task or none), its first task, then the queue until the pool shuts
//! down or the worker wins the compare-and-set that retires it; each task
//! run with its panic caught and counted in the worker's own slot.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::Instant;

use crossbeam_channel::TryRecvError;
use crossbeam_utils::Backoff;
use parking_lot::Mutex;

use super::{Shared, WorkerStats};
use crate::task::BoxTask;

/// What ended a worker's loop.
enum Exit {
    /// The queue is disconnected and empty: the pool shut down. `threads` is still
    /// counting this worker.
    ShutDown,
    /// The worker won the compare-and-set that retired it; `threads` no longer
    /// counts it.
    Retired,
}

/// Why `add_worker` started no thread.
pub(super) enum AddError {
    /// The pool already has `limit` threads.
    AtLimit,
    /// The operating system refused the thread.
    Spawn {
        /// The name the thread would have had.
        name: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl Shared {
    /// `add_worker` with a first task, handing that task back on failure.
    pub(super) fn add_worker_with(this: &Arc<Shared>, task: BoxTask, limit: usize) -> Result<(), (BoxTask, AddError)> {
        Shared::add_worker(this, Some(task), limit).map_err(|(task, error)| {
            // `add_worker` returns the first task it was given, and it was given one.
            let task = task.expect("add_worker hands back the task it was given");
            (task, error)
        })
    }

    /// Reserves a thread below `limit` and starts it, with `first` as its first task.
    pub(super) fn add_worker(
        this: &Arc<Shared>,
        first: Option<BoxTask>,
        limit: usize,
    ) -> Result<(), (Option<BoxTask>, AddError)> {
        let mut n = this.threads.load(Ordering::Relaxed);
        loop {
            if n >= limit {
                return Err((first, AddError::AtLimit));
            }
            match this
                .threads
                .compare_exchange_weak(n, n + 1, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => n = actual,
            }
        }
        let stats = Arc::new(WorkerStats::default());
        let name = {
            let mut registry = this.registry.lock();
            let id = registry.next_id;
            registry.next_id += 1;
            registry.workers.push(Arc::clone(&stats));
            registry.largest = registry.largest.max(registry.workers.len());
            format!("{}-{id}", this.thread_name_prefix)
        };
        let mut builder = std::thread::Builder::new().name(name.clone());
        if let Some(bytes) = this.stack_size {
            builder = builder.stack_size(bytes);
        }
        // The first task travels through a slot rather than the closure, so that a
        // failed spawn can hand it back.
        let slot = Arc::new(Mutex::new(first));
        let worker_slot = Arc::clone(&slot);
        let worker_shared = Arc::clone(this);
        let worker_stats = Arc::clone(&stats);
        match builder.spawn(move || {
            let first = worker_slot.lock().take();
            drop(worker_slot);
            worker_main(&worker_shared, &worker_stats, first);
        }) {
            Ok(_) => {
                tracing::debug!(worker = %name, "worker started");
                Ok(())
            }
            Err(source) => {
                tracing::error!(worker = %name, error = %source, "could not start worker thread");
                this.registry.lock().workers.retain(|w| !Arc::ptr_eq(w, &stats));
                this.threads.fetch_sub(1, Ordering::SeqCst);
                let first = slot.lock().take();
                Err((first, AddError::Spawn { name, source }))
            }
        }
    }
}

/// One worker thread, from its first task to its exit.
fn worker_main(shared: &Arc<Shared>, stats: &WorkerStats, first: Option<BoxTask>) {
    if let Some(task) = first {
        run_task(stats, task);
    }
    let exit = worker_loop(shared, stats);
    worker_exit(shared, stats, exit);
}

fn worker_loop(shared: &Shared, stats: &WorkerStats) -> Exit {
    let receiver = &shared.receiver;
    // When this worker last became idle; `None` while it is taking tasks.
    let mut idle_since: Option<Instant> = None;
    loop {
        // A lowered max: threads above it leave between tasks.
        if shared.try_retire(shared.max.load(Ordering::Relaxed), false) {
            return Exit::Retired;
        }

        // Busy: take queued work without blocking. An empty queue is retried with
        // a short backoff before parking, because under a stream of small tasks the
        // next one usually arrives within microseconds, and parking costs two
        // context switches.
        let backoff = Backoff::new();
        loop {
            match receiver.try_recv() {
                Ok(task) => {
                    idle_since = None;
                    run_task(stats, task);
                    if shared.try_retire(shared.max.load(Ordering::Relaxed), false) {
                        return Exit::Retired;
                    }
                    backoff.reset();
                }
                Err(TryRecvError::Disconnected) => return Exit::ShutDown,
                Err(TryRecvError::Empty) if backoff.is_completed() => break,
                Err(TryRecvError::Empty) => backoff.snooze(),
            }
        }

        // Idle: wait for a task, a wake-up token, or the end of keep-alive.
        let now = Instant::now();
        let since = *idle_since.get_or_insert(now);
        let allow_core_timeout = shared.allow_core_timeout.load(Ordering::Relaxed);
        let core = shared.core.load(Ordering::Relaxed);
        let timed = allow_core_timeout || shared.threads.load(Ordering::Relaxed) > core;
        let received = if timed {
            let idle_deadline = since + shared.keep_alive();
            if now >= idle_deadline {
                let limit = if allow_core_timeout { 0 } else { core };
                if shared.try_retire(limit, true) {
                    return Exit::Retired;
                }
                // Still needed: start a fresh keep-alive period.
                idle_since = Some(now);
                continue;
            }
            crossbeam_channel::select! {
                recv(receiver) -> task => task,
                recv(shared.wake_rx) -> _ => continue,
                default(idle_deadline - now) => continue,
            }
        } else {
            crossbeam_channel::select! {
                recv(receiver) -> task => task,
                recv(shared.wake_rx) -> _ => continue,
            }
        };
        match received {
            Ok(task) => {
                idle_since = None;
                run_task(stats, task);
            }
            Err(_) => return Exit::ShutDown,
        }
    }
}

/// Runs one task with its panic caught, keeping this worker's counters.
fn run_task(stats: &WorkerStats, task: BoxTask) {
    stats.busy.store(true, Ordering::Relaxed);
    let outcome = panic::catch_unwind(AssertUnwindSafe(task));
    stats.busy.store(false, Ordering::Relaxed);
    // Only this worker writes its counters, so a load and a store suffice.
    match outcome {
        Ok(()) => stats
            .completed
            .store(stats.completed.load(Ordering::Relaxed) + 1, Ordering::Relaxed),
        Err(payload) => {
            stats
                .panicked
                .store(stats.panicked.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            let worker = std::thread::current();
            tracing::error!(worker = worker.name().unwrap_or("?"), panic = %message, "task panicked; worker continues");
        }
    }
}

/// Bookkeeping when a worker leaves: fold its counters into the totals, release
/// its thread count, and replace it if that left queued work with no thread.
fn worker_exit(shared: &Arc<Shared>, stats: &WorkerStats, exit: Exit) {
    {
        let mut registry = shared.registry.lock();
        registry.retired_completed += stats.completed.load(Ordering::Relaxed);
        registry.retired_panicked += stats.panicked.load(Ordering::Relaxed);
        registry.workers.retain(|w| !std::ptr::eq(Arc::as_ptr(w), stats));
    }
    let shut_down = match exit {
        Exit::ShutDown => {
            shared.threads.fetch_sub(1, Ordering::SeqCst);
            true
        }
        Exit::Retired => false,
    };
    tracing::debug!(
        worker = std::thread::current().name().unwrap_or("?"),
        shut_down,
        "worker exited"
    );
    if !shut_down {
        // Pairs with `ensure_a_worker`: see there.
        fence(Ordering::SeqCst);
        if shared.threads.load(Ordering::Relaxed) == 0 && !shared.receiver.is_empty() {
            let max = shared.max.load(Ordering::Relaxed);
            let _ = Shared::add_worker(shared, None, max);
        }
    }
    let _guard = shared.exit_lock.lock();
    shared.exit_cv.notify_all();
}
