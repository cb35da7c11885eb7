//! What a node tells of itself: its phase, its counters, its snapshot, and
//! what its shutdown did.

use quartz_pool::PoolMetrics;

use crate::store::{Node, NodeRef};

/// Where a node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Polling, claiming and running.
    Running,
    /// Declared dead by the cluster (a long pause); re-registering.
    Fenced,
    /// Shutting down: claiming nothing, finishing running fires.
    ShuttingDown,
    /// Gone.
    Stopped,
}

/// Counters of what a node did since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Polls made.
    pub polls: u64,
    /// Fires this node won.
    pub claimed: u64,
    /// Claims lost to another node (or to a changed row).
    pub lost: u64,
    /// Fires that ran to success.
    pub succeeded: u64,
    /// Fires that failed (error, panic, timeout).
    pub failed: u64,
    /// Fires refused by the pool and recorded as misfired.
    pub rejected: u64,
    /// Misfire decisions this node applied to overdue executes.
    pub misfires: u64,
    /// Fires refused at start: this incarnation had been fenced, or the
    /// fire was unclaimed since its claim (its trigger's schedule edited,
    /// see [`ExecuteCas::recomputes`](crate::store::ExecuteCas::recomputes)).
    pub fenced: u64,
    /// Dead nodes' fires this node took over, re-ran or recorded abandoned.
    pub recovered: u64,
    /// Rows written by hand that this node initialised or recomputed.
    pub recomputed: u64,
    /// Child jobs' fires this node started after their parent succeeded.
    pub chained: u64,
    /// Fires that passed their job's timeout (each also counts as failed once
    /// its code returns).
    pub timed_out: u64,
    /// Async handlers past their timeout that did not return within a
    /// grace when asked to stop, and were dropped (their fires failed).
    pub dropped: u64,
    /// Blocking handlers past their timeout that did not return within a
    /// grace when asked to stop: each still held its pool thread then (a
    /// thread cannot be killed).
    pub held_past_timeout: u64,
    /// Times this node's membership lease ran out (no renewal went through
    /// in time) and it asked its running handlers to stop.
    pub lease_lost: u64,
    /// Ledger rows this node purged under the retention settings.
    pub purged: u64,
}

/// A snapshot of a node.
#[derive(Debug, Clone)]
pub struct NodeStatus {
    /// The cluster.
    pub scheduler: String,
    /// This node's id and current incarnation.
    pub node: NodeRef,
    /// Where it is in its life.
    pub phase: Phase,
    /// The nodes it saw at its last heartbeat.
    pub members: Vec<Node>,
    /// The worker pool (blocking handlers).
    pub pool: PoolMetrics,
    /// Fires of async handlers held: won, and their tasks not returned (at
    /// most [`Settings::async_max`](super::settings::Settings::async_max)).
    pub tasks: usize,
    /// What it did so far.
    pub counters: Counters,
    /// Database time minus this node's clock, in ms.
    pub db_offset_ms: i64,
    /// Fires running now.
    pub running: usize,
    /// Whether it holds its membership lease: a heartbeat the database took
    /// within the lease, counted from when it was sent. A node that does not
    /// may be declared dead; it claims and starts nothing until it renews.
    pub holds_lease: bool,
}

impl NodeStatus {
    /// Whether the node is a live member of its cluster, running and
    /// holding its lease; otherwise, why not, in words (what a readiness
    /// probe answers).
    ///
    /// # Errors
    ///
    /// Why the node is not a live member.
    pub fn live_member(&self) -> Result<(), String> {
        match self.phase {
            Phase::Running if self.holds_lease => Ok(()),
            Phase::Running => Err(format!(
                "node {} has not renewed its membership lease in time (is the database reachable?)",
                self.node.node_id
            )),
            Phase::Fenced => Err(format!(
                "node {} was declared dead by the cluster and is registering again",
                self.node.node_id
            )),
            Phase::ShuttingDown => Err(format!("node {} is shutting down", self.node.node_id)),
            Phase::Stopped => Err(format!("node {} has stopped", self.node.node_id)),
        }
    }
}

/// What a graceful shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownSummary {
    /// Claimed fires given back for another node to run at once.
    pub released: usize,
    /// Fires still running when the grace period ended (cancelled; their ledger
    /// rows are left to the cluster's recovery).
    pub still_running: usize,
    /// Claimed fires not given back: the database did not take them back
    /// in time (a shutdown waits a few seconds for it, whatever the
    /// database does). Recovery fires them once the node is declared dead.
    pub claims_left: usize,
    /// Fires whose handler returned but whose outcome the database did not
    /// take before the node stopped; recovery treats them as running fires
    /// of a dead node.
    pub outcomes_unrecorded: usize,
    /// Whether the database marked the node gone (otherwise it is declared
    /// dead after `dead_after`).
    pub marked_gone: bool,
}
