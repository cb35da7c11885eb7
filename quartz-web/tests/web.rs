//! The integration suite of `quartz-web`: the HTTP API, the console (over
//! a socket and in a browser), access control, the OpenAPI document and
//! `deploy/`, one module a file of this folder.
//!
//! The files are modules of one test binary, so that `cargo test` runs
//! their tests side by side instead of one file after another waiting on
//! its slowest test (the browser's). Run one file's tests by its module:
//! `cargo test -p quartz-web --test web browser::`. `metrics.rs` stays a
//! binary of its own: it installs the process-wide Prometheus recorder.

#![allow(clippy::unwrap_used)]

mod http;
mod webdriver;

mod access;
mod api;
mod browser;
mod console;
mod deploy;
mod openapi;
mod probes;
