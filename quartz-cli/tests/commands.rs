//! The `quartz` binary as a user runs it, one module a file of this folder:
//! its commands and their output (`cli.rs`, `cron_next.rs`), and failover
//! of real node processes (`cluster.rs`).
//!
//! The files are modules of one test binary, so that `cargo test` runs
//! their tests side by side instead of one file after another. Run one
//! file's tests by its module: `cargo test -p quartz-cli --test commands
//! cluster::`. The reliability suite (`reliability.rs`) stays a binary of
//! its own: it stops the database servers under its cluster, which no
//! other test may run beside.

#![allow(clippy::unwrap_used)]

// The shared test kit, as `crate::common` for the modules' macros.
use quartz_testkit as common;

mod cli;
mod cluster;
mod cron_next;
mod otel;
