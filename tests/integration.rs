//! The integration suite of the `quartz` facade: the engine, the cluster
//! and the admin surface against real databases, one module a file of this
//! folder (see `tests/README.md`).
//!
//! The files are modules of one test binary, not a binary each, so that
//! `cargo test` runs their tests side by side (four at a time, from
//! `.cargo/config.toml`) instead of one file after another waiting on its
//! slowest test, and links one binary instead of sixteen. Run one file's
//! tests by its module: `cargo test --test integration engine::`.
//!
//! `metrics.rs` and `spans.rs` stay binaries of their own: each installs a
//! process-wide recorder or subscriber that every node of the process
//! would write to.

#![allow(clippy::unwrap_used)]

// The shared test kit, as `crate::common` for the modules' macros.
use quartz_testkit as common;

mod admin;
mod beyond_quartz;
mod calendars;
mod engine;
mod enqueue;
mod failover;
mod faults;
mod health;
mod history;
mod lifecycle;
mod overlap;
mod own_pool;
mod partition;
mod paused;
mod redis_cluster;
mod typed;
mod versions;
