//! What can go wrong starting or driving a node.

use crate::error::Error;
use crate::store::StoreError;

/// What can go wrong starting or driving a node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// A setting is out of range.
    #[error("invalid settings: {reason}")]
    InvalidSettings {
        /// Which one and why.
        reason: String,
    },
    /// A handler name was registered twice, or is not a valid name, or a
    /// payload schema is not a JSON Schema or names no registered handler.
    #[error("handler {name:?}: {reason}")]
    InvalidHandler {
        /// The handler name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A job names a handler that this node does not have.
    #[error("job {job:?} names handler {handler:?}, which this node does not register (known: {known})")]
    UnknownHandler {
        /// The job.
        job: String,
        /// The handler it names.
        handler: String,
        /// The handlers this node has.
        known: String,
    },
    /// Invalid input.
    #[error(transparent)]
    Invalid(#[from] Error),
    /// A definition refused, the field at fault named.
    #[error(transparent)]
    Rejected(#[from] crate::admin::AdminError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The pool could not be built.
    #[error("the worker pool could not start: {0}")]
    Pool(#[from] quartz_pool::PoolError),
    /// The run log ([`Settings::run_log`](super::settings::Settings::run_log)) could not be created.
    #[error("the run log in {dir} could not be created: {source}")]
    RunLog {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
