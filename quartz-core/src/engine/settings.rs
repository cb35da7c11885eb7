//! A node's settings and its strategy, with their defaults (docs/configuration.md's
//! settings table lists them).

use std::time::Duration;

use super::error::SchedulerError;
use crate::misfire::MisfireSettings;
use crate::retention::Retention;

/// Which node tries a fire first. The node a strategy prefers claims a fire a
/// [`Settings::claim_lead`] before its time; every other node may claim it a
/// [`Settings::strategy_grace`] after that, and the compare-and-set alone
/// decides who wins: the strategy only cuts needless races.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Every node tries every fire a claim lead ahead; the first claim wins.
    /// Every claim races on every node: the cost grows with the cluster.
    FirstCome,
    /// The live nodes share the executes by a hash of the execute id.
    IdHash,
    /// As `IdHash`, in proportion to each node's weight (rendezvous hashing:
    /// a node joining or leaving moves only its own share). The default: the
    /// nodes claim without racing, and a node that is gone, or has no room,
    /// leaves its share to the others a strategy grace later, still ahead of
    /// the fire time with the default settings.
    #[default]
    Weighted,
    /// As `Weighted`, with each node's weight divided by one plus how busy it
    /// was at its last heartbeat (fires running or queued on its pool): idle
    /// nodes are offered most executes, without every node herding onto one.
    LeastLoaded,
}

/// A node's settings, with the defaults docs/configuration.md's settings table lists.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How often the node polls for due executes (default 5 s).
    pub poll_interval: Duration,
    /// How far ahead of the database's now a poll looks (default 5 s). The
    /// window is stretched to reach the next poll, so no fire falls between two.
    pub window: Duration,
    /// How long before its time a fire is claimed (default 1 s), so that the
    /// claims of many fires due together are done when their time comes. The
    /// handler still starts at the scheduled time, never before.
    pub claim_lead: Duration,
    /// Whether a claim takes an execute's next fire along with its due one
    /// (default on): the next fire of a plain trigger (no overlap policy,
    /// concurrency limit, blocking job or repeat limit) when its own claim
    /// time comes by the due fire's time, as for a trigger every claim lead
    /// or more often. PostgreSQL and MySQL/MariaDB write the two as one
    /// compare-and-set of the execute (Redis and SQLite claim each fire on
    /// its own whatever this says): at 10,000 fires a second on PostgreSQL,
    /// a sixth to a fifth less database CPU per fire. A fire taken along is
    /// claimed up to a claim lead and one fire ahead of its time, not a claim
    /// lead: a node stopped in that time gives it back to recovery, a
    /// standby lets it run, and a schedule edited by hand unclaims it when
    /// a poll recomputes the row (an edit through the admin surface
    /// reaches the fires claimed already, as without runs). Off, each fire
    /// is claimed on its own, a claim lead ahead.
    pub claim_runs: bool,
    /// How often the node heart-beats and looks for dead nodes' work (default
    /// 2 s).
    pub heartbeat_interval: Duration,
    /// A node whose heartbeat is older than this (database time) is dead
    /// (default 10 s). A node judges others only once it has itself
    /// heart-beaten without a gap for this long, and for twice this long after
    /// a gap of its own (an outage of the database: the others' pools may
    /// reconnect seconds after its own).
    pub dead_after: Duration,
    /// How long any one call of the node to its store may take (default
    /// `None`: half of `dead_after`, 5 s with the defaults). A call the
    /// database has not answered by then fails as a lost answer would, and
    /// the stage that made it goes on (retries, or leaves the work to
    /// recovery); no stage waits longer on a database that stopped
    /// answering, or on a network that drops its packets. At most
    /// `dead_after`.
    pub store_deadline: Option<Duration>,
    /// The misfire threshold and the cap of the ignore policy (default 5 s and
    /// 1,000).
    pub misfire: MisfireSettings,
    /// The most executes read by one query of a poll (default 5,000); a poll
    /// reads as many batches as are due.
    pub batch_size: u32,
    /// The most claims in one transaction (default 256).
    pub claim_batch: usize,
    /// Who tries a fire first (default weighted).
    pub strategy: Strategy,
    /// How long after the preferred node's claim time (a claim lead before
    /// the fire) every other node may claim a fire (default 800 ms: with the
    /// 1 s claim lead, still 200 ms before the fire time). Keep the claim
    /// lead less this well below the misfire threshold.
    pub strategy_grace: Duration,
    /// How long a graceful shutdown waits for running fires (default 30 s).
    pub shutdown_grace: Duration,
    /// Pool threads kept alive (default: the number of cores).
    pub pool_core: usize,
    /// Most pool threads (default 4 x cores).
    pub pool_max: usize,
    /// Pool queue capacity (default 4,096). A node holds at most `pool_max +
    /// pool_queue` fires (won, handler not returned) and claims no more: the
    /// queue is what lets one node take a burst of fires due in the same
    /// instant (4,096 one-second triggers) and start them on time, at about
    /// a kilobyte a fire. While every thread is busy the node claims
    /// nothing, whatever room the queue has.
    pub pool_queue: usize,
    /// How long an idle thread above core lives (default 60 s).
    pub pool_keep_alive: Duration,
    /// The most fires of async handlers this node runs at once (default
    /// 256). Async handlers run as tokio tasks on the node's runtime, not on
    /// pool threads: this bound is theirs, beside the pool's for blocking
    /// handlers, and the node claims no more fires of async handlers than it
    /// leaves room for.
    pub async_max: usize,
    /// The node's id in the cluster (default `host-pid-n`). A node that restarts
    /// with the same id re-registers with a new incarnation.
    pub node_id: Option<String>,
    /// The node's weight for [`Strategy::Weighted`] (default 1).
    pub weight: u32,
    /// How long finished fires, gone nodes and complete triggers are kept, and
    /// how often the cluster purges (default: succeeded fires 24 h, others
    /// 7 days, the newest 10 of each job always; see
    /// [`crate::retention`]).
    pub retention: Retention,
    /// Labels the outcome metric with the job's name too (default off: a
    /// cluster may hold millions of jobs, and every name is a series). Turn
    /// it on only where the jobs are few and known.
    pub metrics_job_label: bool,
    /// A directory for this node's run log (default none: no log). With
    /// one, the node appends a JSON line to a file of its own there for
    /// every handler start and end, and for its registrations and the
    /// incarnations it declares dead: a record of what its handlers really
    /// did, kept apart from the database, that `quartz audit --runs DIR`
    /// checks against the triggers and the ledger ([`crate::runlog`]).
    pub run_log: Option<std::path::PathBuf>,
}

impl Default for Settings {
    fn default() -> Settings {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        Settings {
            poll_interval: Duration::from_secs(5),
            window: Duration::from_secs(5),
            claim_lead: Duration::from_secs(1),
            claim_runs: true,
            heartbeat_interval: Duration::from_secs(2),
            dead_after: Duration::from_secs(10),
            store_deadline: None,
            misfire: MisfireSettings::default(),
            batch_size: 5_000,
            claim_batch: 256,
            strategy: Strategy::Weighted,
            strategy_grace: Duration::from_millis(800),
            shutdown_grace: Duration::from_secs(30),
            pool_core: cores,
            pool_max: 4 * cores,
            pool_queue: 4_096,
            pool_keep_alive: Duration::from_secs(60),
            async_max: 256,
            node_id: None,
            weight: 1,
            retention: Retention::default(),
            metrics_job_label: false,
            run_log: None,
        }
    }
}

impl Settings {
    /// The deadline of each store call: [`Settings::store_deadline`], or
    /// half of `dead_after`.
    pub fn store_deadline(&self) -> Duration {
        self.store_deadline.unwrap_or(self.dead_after / 2)
    }

    /// Checks the settings against each other.
    ///
    /// # Errors
    ///
    /// [`SchedulerError::InvalidSettings`] naming the first setting that is out
    /// of range.
    pub fn validate(&self) -> Result<(), SchedulerError> {
        let bad = |reason: &str| {
            Err(SchedulerError::InvalidSettings {
                reason: reason.to_owned(),
            })
        };
        let positive = [
            ("poll_interval", self.poll_interval),
            ("window", self.window),
            ("heartbeat_interval", self.heartbeat_interval),
            ("dead_after", self.dead_after),
            ("retention.every", self.retention.every),
        ];
        for (name, value) in positive {
            if value.is_zero() {
                return bad(&format!("{name} must be positive"));
            }
        }
        if self.dead_after <= self.heartbeat_interval {
            return bad("dead_after must be longer than heartbeat_interval");
        }
        if let Some(deadline) = self.store_deadline
            && (deadline.is_zero() || deadline > self.dead_after)
        {
            return bad("store_deadline must be positive and at most dead_after");
        }
        if self.misfire.ignore_cap == 0 {
            return bad("the misfire ignore cap must be at least 1");
        }
        if self.batch_size == 0 || self.claim_batch == 0 {
            return bad("batch_size and claim_batch must be at least 1");
        }
        if self.pool_max == 0 || self.pool_core > self.pool_max || self.pool_queue == 0 {
            return bad("the pool needs 0 <= core <= max, max >= 1 and a queue of at least 1");
        }
        if self.async_max == 0 {
            return bad("async_max must be at least 1");
        }
        if let Some(id) = &self.node_id {
            crate::store::check_name("node id", id).map_err(SchedulerError::Invalid)?;
        }
        Ok(())
    }
}
