//! The core of quartz-rs: jobs, triggers, fire-time computation, misfire policies,
//! the scheduler loop and cluster membership, written against a `Store` trait.
//!
//! Architecture invariant: this crate does no IO and never names a database
//! driver. It is handed the database's `now`; it never reads the wall clock to make
//! a decision that another node must agree with.
//!
//! Status: this crate is being built. The time arithmetic (cron, triggers, misfire
//! math), the `Store` contract and the engine arrive in that order; until then it
//! exports nothing.
