//! What the pool reports about itself: a metrics snapshot and the outcome of a shutdown.

use std::time::Duration;

use crate::task::Task;

/// A point-in-time view of the pool, from [`Pool::metrics`](crate::Pool::metrics).
///
/// Counters are read one after another without stopping the workers, so under load
/// the fields are each exact but not taken at the same instant (`busy` may already
/// include a task whose `completed` increment is not yet visible).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolMetrics {
    /// Worker threads alive now.
    pub threads: usize,
    /// Workers running a task now.
    pub busy: usize,
    /// Workers waiting for a task now (`threads - busy`).
    pub idle: usize,
    /// The most worker threads alive at once since the pool was built.
    pub largest: usize,
    /// Tasks waiting in the queue.
    pub queued: usize,
    /// How many tasks the queue holds at most.
    pub queue_capacity: usize,
    /// Tasks that returned normally.
    pub completed: u64,
    /// Tasks that panicked; each panic was caught and its worker went on.
    pub panicked: u64,
    /// Submissions refused (queue full at max, shut down, or no thread could start).
    pub rejected: u64,
    /// The current core size.
    pub core: usize,
    /// The current maximum size.
    pub max: usize,
    /// The current keep-alive.
    pub keep_alive: Duration,
    /// Whether core threads also exit after `keep_alive` idle.
    pub allow_core_timeout: bool,
}

/// What [`Pool::shutdown`](crate::Pool::shutdown) left behind.
#[derive(Debug)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Tasks still running when the deadline passed. Their threads are left to
    /// finish on their own; nothing waits for them.
    pub still_running: usize,
    /// Tasks that were queued but never started, handed back in queue order.
    pub not_started: Vec<Task>,
}

impl ShutdownReport {
    /// True when every accepted task finished (or panicked) before the deadline
    /// and every worker thread has exited.
    pub fn is_clean(&self) -> bool {
        self.still_running == 0 && self.not_started.is_empty()
    }
}
