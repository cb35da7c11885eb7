//! quartz-rs: a clustered, database-backed job scheduler for Rust services.
//!
//! Jobs and their triggers are rows in a database the service already runs
//! (PostgreSQL, MySQL/MariaDB, or embedded SQLite); every instance of the service
//! embeds a scheduler node, and each fire runs once across the cluster, on time,
//! through crashes, pauses and clocks that disagree.
//!
//! This facade re-exports the parts a user needs: [`cron`], [`trigger`] and
//! [`misfire`] (the time arithmetic), [`store`] (the store contract and its
//! implementation on SQLite, PostgreSQL and MySQL/MariaDB) and [`pool`] (the
//! elastic worker pool). The engine follows.
//!
//! ```
//! let pool = quartz::pool::Pool::builder().core(1).max(2).build()?;
//! pool.try_submit(|| println!("runs on a quartz-worker thread")).expect("accepted");
//! assert!(pool.shutdown(std::time::Duration::from_secs(5)).is_clean());
//! # Ok::<(), quartz::pool::PoolError>(())
//! ```

pub use quartz_core::{Error, Timestamp, Tz, cron, misfire, trigger};
pub use quartz_pool as pool;

/// The store: the contract ([`Store`](store::Store)) and [`SqlStore`](store::SqlStore), its implementation on
/// SQLite, PostgreSQL and MySQL/MariaDB.
pub mod store {
    pub use quartz_core::store::*;
    pub use quartz_store::*;
}

/// The README's Rust examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
