//! The pool's counters: each worker counts in its own slot (written only by
//! that worker), the registry keeps the living workers and what the exited
//! ones counted, and `metrics` adds them up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::Shared;
use crate::metrics::PoolMetrics;

/// The workers alive now and the counts of those that have exited.
#[derive(Default)]
pub(super) struct Registry {
    pub(super) workers: Vec<Arc<WorkerStats>>,
    /// Tasks completed by workers that have exited.
    pub(super) retired_completed: u64,
    /// Tasks that panicked on workers that have exited.
    pub(super) retired_panicked: u64,
    /// The most workers alive at once.
    pub(super) largest: usize,
    /// The number the next worker's name carries.
    pub(super) next_id: usize,
}

/// One worker's counters. Written only by that worker (plain loads and stores, no
/// read-modify-write), read by `metrics`.
#[derive(Default)]
pub(super) struct WorkerStats {
    pub(super) busy: AtomicBool,
    pub(super) completed: AtomicU64,
    pub(super) panicked: AtomicU64,
}

impl Shared {
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
}
