//! quartz-rs: a clustered, database-backed job scheduler for Rust services.
//!
//! Jobs and their triggers are rows in a database the service already runs
//! (PostgreSQL, MySQL/MariaDB, or embedded SQLite); every instance of the service
//! embeds a scheduler node, and each fire runs once across the cluster, on time,
//! through crashes, pauses and clocks that disagree.
//!
//! This facade re-exports the parts a user needs. Today that is the elastic worker
//! pool, [`pool`]; the triggers, stores and engine follow.
//!
//! ```
//! let pool = quartz::pool::Pool::builder().core(1).max(2).build()?;
//! pool.try_submit(|| println!("runs on a quartz-worker thread")).expect("accepted");
//! assert!(pool.shutdown(std::time::Duration::from_secs(5)).is_clean());
//! # Ok::<(), quartz::pool::PoolError>(())
//! ```

pub use quartz_pool as pool;

/// The README's Rust examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
