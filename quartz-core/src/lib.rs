//! The core of quartz-rs: jobs, triggers, fire-time computation, misfire policies,
//! the scheduler loop and cluster membership, written against a `Store` trait.
//!
//! Architecture invariant: this crate never names a database driver, and its
//! only IO is through the [`store::Store`] trait and tokio's timers, plus one
//! read of the host's name when a node starts (its row and default id), and,
//! when a node is told to keep one, the appends of its [`runlog`] and the
//! checker's reading of those files. It is handed the database's `now` as a [`Timestamp`]; it never reads the
//! wall clock to make a decision that another node must agree with.
//!
//! Today it holds the time arithmetic: [`cron`], Quartz cron expressions evaluated
//! in IANA time zones, and [`trigger`], the trigger kinds with their validity
//! windows, repeat limits and the fire expansion the claim needs, and [`misfire`],
//! what an overdue trigger does under Quartz's misfire policies, and [`store`],
//! the contract every database backend implements.
//!
//! ```
//! use quartz_core::{cron::CronExpression, Timestamp};
//!
//! let every_ten_seconds = CronExpression::parse("0/10 * * * * ?")?;
//! let after = Timestamp::from_millis(1_767_225_605_000); // 2026-01-01T00:00:05Z
//! let next = every_ten_seconds.next_after(after, chrono_tz::UTC).expect("fires forever");
//! assert_eq!(next.as_millis(), 1_767_225_610_000);
//! # Ok::<(), quartz_core::Error>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admin;
pub mod audit;
pub mod calendar;
pub mod cron;
pub mod engine;
mod error;
#[cfg(any(test, feature = "testing"))]
pub mod memory;
pub mod misfire;
pub mod mutants;
pub mod retention;
pub mod runlog;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod time;
pub mod trigger;

pub use chrono_tz::Tz;
pub use error::{CronField, Error};
pub use time::Timestamp;
