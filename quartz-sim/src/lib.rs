//! The whole quartz-rs cluster in one deterministic simulation.
//!
//! A seed decides everything: the jobs (every kind of schedule, misfire
//! and overlap policy, limits, retries, timeouts, failures, run times that
//! outlast their interval, zoned cron triggers across daylight-saving
//! changes), the nodes' clocks (offsets and drift), and what happens to the
//! cluster: a node's link to the store cut both ways or one way, a node
//! frozen, crashed and restarted (a new incarnation), the store restarting,
//! calls that fail, stall or lose their answers, fires by hand, pauses,
//! schedules edited and jobs deleted.
//! The nodes are the real engine ([`quartz_core::engine`]) on the in-memory
//! store ([`quartz_testkit::memory`]), each behind a simulated link
//! ([`link`]), on one thread and tokio's paused clock: time moves only when
//! every task waits, so a simulated hour passes in a fraction of a second,
//! and one seed gives the same run, bit for bit, every time (the engine
//! reads no clock but the runtime's, breaks no tie by chance and orders
//! its maps the same on every run).
//!
//! The oracles are the ones a real cluster is judged by: the run log
//! checker ([`quartz_core::runlog::check`]) on the nodes' own logs (lost,
//! run twice, started by a fenced node, early, late, or disagreeing with
//! the ledger), and the handlers' runs in real time against their jobs'
//! overlap policies and concurrency limits ([`witness`]).
//!
//! ```no_run
//! use quartz_sim::{Options, run_seed};
//!
//! let options = Options { nodes: 3, minutes: 30, keep_trace: false };
//! let report = run_seed(&options, 42);
//! assert!(report.violations.is_empty(), "{:#?}", report.violations);
//! // The same seed, the same run.
//! assert_eq!(report.trace, run_seed(&options, 42).trace);
//! ```

mod handler;
pub mod link;
pub mod rng;
mod sim;
pub mod witness;
pub mod workload;

pub use sim::{CLUSTER, Options, SeedReport, run_seed};
