//! Tests of a service that embeds the scheduler, with the `testing`
//! feature: no database, no wall clock, no unpublished crate.
//!
//! - [`TestContext`] builds the [`JobContext`](crate::engine::JobContext)
//!   a node would give a handler, so that one handler is called alone, as a
//!   plain function.
//! - [`MemoryStore`] is the whole store contract in memory, and
//!   [`SchedulerBuilder::stepped_clock`](crate::engine::SchedulerBuilder::stepped_clock)
//!   runs a node on tokio's paused clock over it: a test steps the clock (a
//!   day of fires in milliseconds) and sees what the node did in the ledger.
//! - [`conformance`] is the store conformance suite, a function any store
//!   runs: the one this project's SQL, Redis and in-memory stores pass.
//!
//! A handler's unit test:
//!
//! ```
//! use quartz_core::engine::{JobContext, JobResult};
//! use quartz_core::testing::TestContext;
//!
//! fn greet(ctx: JobContext) -> JobResult {
//!     let name: String = ctx.payload()?;
//!     if name.is_empty() {
//!         return Err("no one to greet".into());
//!     }
//!     Ok(())
//! }
//!
//! assert!(greet(TestContext::new("greeter").payload(&"Ada").build()).is_ok());
//! assert!(greet(TestContext::new("greeter").payload(&"").build()).is_err());
//! assert!(greet(TestContext::new("greeter").payload_json("42").build()).is_err());
//! ```

pub mod conformance;

pub use crate::engine::test_context::{CancelHandle, TestContext};
pub use crate::memory::MemoryStore;
