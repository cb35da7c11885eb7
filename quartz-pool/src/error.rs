//! The pool's one error type.

/// Errors from building or reconfiguring a [`Pool`](crate::Pool).
///
/// A refused task is not an error of this kind: it comes back as a
/// [`Rejected`](crate::Rejected), carrying the task.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The requested sizes contradict each other (`core` above `max`, `max` zero, or
    /// core timeout with a zero keep-alive). Nothing was changed.
    #[error("invalid pool configuration: {reason}")]
    InvalidConfig {
        /// Which rule the settings broke.
        reason: String,
    },
    /// The operating system refused to start a worker thread.
    #[error("could not start worker thread {name}")]
    Spawn {
        /// The name the thread would have had.
        name: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}
