//! What travels through the pool: a boxed task, and a rejection that hands it back.

use std::fmt;

/// The type-erased closure a worker runs.
pub(crate) type BoxTask = Box<dyn FnOnce() + Send + 'static>;

/// A task the pool did not run: handed back by a rejection or by [`Pool::shutdown`].
///
/// Nothing is lost: the caller may [`run`](Task::run) it itself (the "caller runs"
/// policy), offer it again later ([`Pool::try_resubmit`]), or drop it, which runs
/// the destructors of everything the closure captured (a completion guard, a
/// channel sender) as usual.
///
/// [`Pool::shutdown`]: crate::Pool::shutdown
/// [`Pool::try_resubmit`]: crate::Pool::try_resubmit
pub struct Task(pub(crate) BoxTask);

impl Task {
    /// Runs the task on the calling thread.
    pub fn run(self) {
        (self.0)()
    }
}

impl fmt::Debug for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Task { .. }")
    }
}

/// Why the pool refused a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// The queue was full and the pool already ran `max` threads.
    QueueFull,
    /// The pool is shutting down or has shut down; it accepts nothing new.
    ShutDown,
    /// The queue was full and the operating system refused to start another thread.
    SpawnFailed,
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RejectReason::QueueFull => "queue full at max threads",
            RejectReason::ShutDown => "pool is shut down",
            RejectReason::SpawnFailed => "queue full and no thread could be started",
        })
    }
}

/// A refused submission, carrying the task back to the caller.
///
/// Returned by [`Pool::try_submit`] and [`Pool::submit_timeout`]. The rejection has
/// already been counted in [`PoolMetrics::rejected`] and passed to the pool's
/// rejection handler, if it has one.
///
/// [`Pool::try_submit`]: crate::Pool::try_submit
/// [`Pool::submit_timeout`]: crate::Pool::submit_timeout
/// [`PoolMetrics::rejected`]: crate::PoolMetrics::rejected
#[derive(Debug, thiserror::Error)]
#[error("task rejected: {reason}")]
pub struct Rejected {
    /// Why the pool refused the task.
    pub reason: RejectReason,
    /// The task itself, unrun.
    pub task: Task,
}

impl Rejected {
    /// Takes the task back, to run it elsewhere or drop it.
    pub fn into_task(self) -> Task {
        self.task
    }
}
