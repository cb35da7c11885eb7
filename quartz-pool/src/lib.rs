//! An elastic OS-thread pool for blocking job code, with the semantics of Java's
//! `ThreadPoolExecutor`, which the Quartz family of schedulers relies on.
//!
//! - `core` threads are kept; when all are busy, tasks wait in a bounded queue;
//!   only when the queue is full does the pool start more threads, up to `max`.
//! - When the queue is full at `max`, the task is **rejected and handed back** in a
//!   [`Rejected`], and the optional rejection handler is told. Nothing is dropped
//!   silently.
//! - Threads above `core` exit after `keep_alive` idle (core threads too, if
//!   allowed); `core`, `max` and `keep_alive` can change while the pool runs.
//! - A panicking task is caught, counted and logged; its worker goes on.
//! - [`Pool::shutdown`] stops intake, lets queued and running tasks finish until
//!   a deadline, and reports (and hands back) what did not.
//!
//! The pool knows nothing of jobs or schedulers: the scheduler hands it closures
//! and routes its rejections to the misfire handler.
//!
//! # Default sizing
//!
//! `core` = the cores this process may use ([`std::thread::available_parallelism`]),
//! `max` = 4 × core, a queue of [`DEFAULT_QUEUE_CAPACITY`] tasks, a keep-alive of
//! [`DEFAULT_KEEP_ALIVE`]; workers are named `quartz-worker-1`, `quartz-worker-2`, …
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use quartz_pool::{Pool, RejectReason};
//!
//! let pool = Pool::builder()
//!     .core(1)
//!     .max(2)
//!     .queue_capacity(16)
//!     .rejection_handler(|reason, metrics| {
//!         eprintln!("rejected ({reason}); {} threads busy", metrics.busy)
//!     })
//!     .build()?;
//!
//! let mut ran_here = 0;
//! for i in 0..100 {
//!     if let Err(rejected) = pool.try_submit(move || println!("task {i}")) {
//!         assert_eq!(rejected.reason, RejectReason::QueueFull);
//!         rejected.into_task().run(); // the caller runs it instead
//!         ran_here += 1;
//!     }
//! }
//! let report = pool.shutdown(Duration::from_secs(5));
//! assert!(report.is_clean());
//! assert_eq!(pool.metrics().completed + ran_here, 100);
//! # Ok::<(), quartz_pool::PoolError>(())
//! ```

mod builder;
mod error;
mod metrics;
mod pool;
mod task;

pub use builder::{
    Builder, DEFAULT_KEEP_ALIVE, DEFAULT_MAX_PER_CORE, DEFAULT_QUEUE_CAPACITY, DEFAULT_THREAD_NAME_PREFIX,
    RejectionHandler,
};
pub use error::PoolError;
pub use metrics::{PoolMetrics, ShutdownReport};
pub use pool::Pool;
pub use task::{RejectReason, Rejected, Task};
