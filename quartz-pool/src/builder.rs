//! Building a pool: the default sizing and the validated settings.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::PoolError;
use crate::metrics::PoolMetrics;
use crate::pool::Pool;
use crate::task::RejectReason;

/// How long a thread above core waits idle before it exits, unless overridden.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(60);

/// How many tasks the queue holds, unless overridden.
pub const DEFAULT_QUEUE_CAPACITY: usize = 256;

/// The default maximum is this many threads per core.
pub const DEFAULT_MAX_PER_CORE: usize = 4;

/// The prefix of worker thread names, unless overridden: workers are `quartz-worker-1`,
/// `quartz-worker-2`, and so on, numbered per pool in the order they start.
pub const DEFAULT_THREAD_NAME_PREFIX: &str = "quartz-worker";

/// Called on the submitting thread each time the pool refuses a task, before the
/// task is handed back to the caller.
pub type RejectionHandler = Arc<dyn Fn(RejectReason, &PoolMetrics) + Send + Sync + 'static>;

/// Settings for a [`Pool`], validated by [`build`](Builder::build).
///
/// The defaults follow the scheduler's design: `core` = the number of cores the
/// process may use, `max` = 4 × that, a queue of 256 tasks, a keep-alive of 60 s,
/// core threads kept forever.
///
/// ```
/// use std::time::Duration;
///
/// let pool = quartz_pool::Pool::builder()
///     .core(2)
///     .max(8)
///     .queue_capacity(64)
///     .keep_alive(Duration::from_secs(30))
///     .build()?;
/// # Ok::<(), quartz_pool::PoolError>(())
/// ```
#[derive(Clone)]
pub struct Builder {
    pub(crate) core: usize,
    pub(crate) max: usize,
    pub(crate) queue_capacity: usize,
    pub(crate) keep_alive: Duration,
    pub(crate) allow_core_timeout: bool,
    pub(crate) prestart: bool,
    pub(crate) thread_name_prefix: String,
    pub(crate) stack_size: Option<usize>,
    pub(crate) rejection_handler: Option<RejectionHandler>,
}

impl Default for Builder {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Builder {
            core: cores,
            max: cores * DEFAULT_MAX_PER_CORE,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            keep_alive: DEFAULT_KEEP_ALIVE,
            allow_core_timeout: false,
            prestart: false,
            thread_name_prefix: DEFAULT_THREAD_NAME_PREFIX.to_owned(),
            stack_size: None,
            rejection_handler: None,
        }
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("core", &self.core)
            .field("max", &self.max)
            .field("queue_capacity", &self.queue_capacity)
            .field("keep_alive", &self.keep_alive)
            .field("allow_core_timeout", &self.allow_core_timeout)
            .field("prestart", &self.prestart)
            .field("thread_name_prefix", &self.thread_name_prefix)
            .field("stack_size", &self.stack_size)
            .field("rejection_handler", &self.rejection_handler.is_some())
            .finish()
    }
}

impl Builder {
    /// Threads kept even when idle (unless [`allow_core_timeout`](Self::allow_core_timeout)).
    /// A task submitted while fewer than `core` threads run starts a new thread.
    pub fn core(mut self, core: usize) -> Self {
        self.core = core;
        self
    }

    /// The most threads the pool runs. Threads above `core` start only when the
    /// queue is full. Must be at least 1 and at least `core`.
    pub fn max(mut self, max: usize) -> Self {
        self.max = max;
        self
    }

    /// How many tasks wait in the queue before the pool grows past `core`.
    /// Zero makes every submission a direct hand-off to an idle thread.
    pub fn queue_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = capacity;
        self
    }

    /// How long a thread above `core` may stay idle before it exits.
    pub fn keep_alive(mut self, keep_alive: Duration) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// Whether core threads also exit after `keep_alive` idle (the pool then
    /// shrinks to zero threads and grows again on demand). Needs a keep-alive above zero.
    pub fn allow_core_timeout(mut self, allow: bool) -> Self {
        self.allow_core_timeout = allow;
        self
    }

    /// Starts all core threads when the pool is built, instead of on the first tasks.
    pub fn prestart_core_threads(mut self, prestart: bool) -> Self {
        self.prestart = prestart;
        self
    }

    /// The prefix of worker thread names; workers are named `{prefix}-{n}`.
    pub fn thread_name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.thread_name_prefix = prefix.into();
        self
    }

    /// The stack size of worker threads, in bytes; the platform's default if unset.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// A function told of every rejection (on the submitting thread, never under a
    /// pool lock), in addition to the task being handed back to the caller.
    pub fn rejection_handler<F>(mut self, handler: F) -> Self
    where
        F: Fn(RejectReason, &PoolMetrics) + Send + Sync + 'static,
    {
        self.rejection_handler = Some(Arc::new(handler));
        self
    }

    /// Checks the settings and starts the pool.
    ///
    /// # Errors
    ///
    /// [`PoolError::InvalidConfig`] when `max` is zero, `core` exceeds `max`, or core
    /// timeout is allowed with a zero keep-alive; [`PoolError::Spawn`] when core
    /// threads were to be prestarted and the operating system refused one.
    pub fn build(self) -> Result<Pool, PoolError> {
        validate(self.core, self.max, self.keep_alive, self.allow_core_timeout)?;
        Pool::from_builder(self)
    }
}

/// The one rule set for sizes, shared by the builder and the live setters.
pub(crate) fn validate(
    core: usize,
    max: usize,
    keep_alive: Duration,
    allow_core_timeout: bool,
) -> Result<(), PoolError> {
    if max == 0 {
        return Err(PoolError::InvalidConfig {
            reason: "max must be at least 1".to_owned(),
        });
    }
    if core > max {
        return Err(PoolError::InvalidConfig {
            reason: format!("core ({core}) must not exceed max ({max})"),
        });
    }
    if allow_core_timeout && keep_alive.is_zero() {
        return Err(PoolError::InvalidConfig {
            reason: "core threads may time out only with a keep-alive above zero".to_owned(),
        });
    }
    Ok(())
}
