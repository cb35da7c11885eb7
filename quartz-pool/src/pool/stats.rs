//! The pool's counters: each worker counts in its own slot (written only by
//! that worker), the registry keeps the living workers and what the exited
//! ones counted, and the pool's `metrics` adds them up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

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
