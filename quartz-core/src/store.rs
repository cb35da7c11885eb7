//! The store contract: everything the scheduler keeps, behind one trait.
//!
//! [`Store`] is implemented in `quartz-store` for SQLite, PostgreSQL and
//! MySQL/MariaDB; this crate never names a driver. Each method is one short
//! transaction. Times are epoch milliseconds of the **database's** clock
//! ([`Store::now`]), the only clock the cluster uses.
//!
//! The claim ([`Store::claim`]) is the heart: one compare-and-set on the execute
//! row's `(state, prev_fire_time, next_fire_time)` and, in the same transaction,
//! the insert of the fire's ledger row, whose unique key on
//! `(execute_id, fire_time, attempt)` makes a second claim of the same fire
//! impossible by construction.
//!
//! The row formats shared by every backend live here too: [`TriggerColumns`]
//! (a [`Trigger`] as the execute row's columns) and the state names.

use std::fmt;
use std::future::Future;

use crate::error::Error;
use crate::misfire::MisfirePolicy;
use crate::time::Timestamp;
use crate::trigger::{Fire, NextFire, Schedule, Trigger, TriggerState};

/// The longest job name, handler name or scheduler name, in bytes.
pub const MAX_NAME_BYTES: usize = 200;
/// The largest job payload (JSON text), in bytes: 1 MiB.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
/// The longest description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4_000;
/// The longest error text kept in the ledger, in bytes (longer text is cut).
pub const MAX_ERROR_BYTES: usize = 8_000;
/// The most attempts a retry policy may ask for.
pub const MAX_ATTEMPTS: u32 = 100;

/// The most fires one call of [`Store::mark_running_all`] or
/// [`Store::succeed_all`] changes atomically. Callers that must know, after
/// an error, that none of the fires changed pass at most this many.
pub const FIRES_PER_BATCH: usize = 64;

/// How long after a change made through the store (a job added, edited,
/// paused, resumed, triggered or deleted) every live node has seen it, in
/// milliseconds. A new trigger's first fire time is never earlier than this
/// after the change (see [`Trigger::visible_from`]).
pub const CHANGE_VISIBILITY_MS: i64 = 250;

/// How far in the past a new trigger's first fire time may be and still count
/// as "now" (moved to [`CHANGE_VISIBILITY_MS`] ahead) rather than as a start
/// in the past, which Quartz's misfire policy handles; the default misfire
/// threshold.
pub const START_NOW_GRACE_MS: i64 = 5_000;

/// What a store call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Input refused at the boundary; nothing was stored.
    #[error(transparent)]
    Invalid(#[from] Error),
    /// A job of that name already exists in the scheduler.
    #[error("a job named {name:?} already exists in scheduler {scheduler:?}")]
    DuplicateJob {
        /// The scheduler (cluster) name.
        scheduler: String,
        /// The job name.
        name: String,
    },
    /// No job of that name exists in the scheduler.
    #[error("no job named {name:?} in scheduler {scheduler:?}")]
    UnknownJob {
        /// The scheduler (cluster) name.
        scheduler: String,
        /// The job name.
        name: String,
    },
    /// A database URL that names no supported backend or cannot be parsed.
    #[error("invalid database URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, its password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The database could not be reached, or the connection was lost; the call
    /// may be retried.
    #[error("database unavailable: {reason}")]
    Unavailable {
        /// What the driver said.
        reason: String,
    },
    /// The schema could not be created or upgraded.
    #[error("migration failed: {reason}")]
    Migration {
        /// What went wrong.
        reason: String,
    },
    /// The database rolled the transaction back to break a deadlock or a
    /// serialization conflict with another transaction; nothing of it was
    /// stored and the call may be retried.
    #[error("database conflict (the transaction was rolled back): {reason}")]
    Conflict {
        /// What the driver said.
        reason: String,
    },
    /// Any other database error.
    #[error("database error: {reason}")]
    Database {
        /// What the driver said.
        reason: String,
    },
}

/// A node's registration, as it registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRegistration {
    /// The scheduler (cluster) the node belongs to.
    pub scheduler: String,
    /// The node's id, unique in the scheduler and stable across restarts.
    pub node_id: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its weight for the weight strategy (at least 1).
    pub weight: u32,
    /// The handlers it runs, so that operators and the CLI can see which jobs
    /// some live node can run.
    pub handlers: Vec<String>,
}

/// A node's liveness state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// Heart-beating.
    Live,
    /// Declared dead; its incarnation is retired.
    Dead,
    /// Left the cluster gracefully.
    Gone,
}

/// A member of the cluster, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The scheduler (cluster) name.
    pub scheduler: String,
    /// The node's id.
    pub node_id: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Weight.
    pub weight: u32,
    /// Live, dead or gone.
    pub state: NodeState,
    /// Which registration of the node this is; a new one retires the old.
    pub incarnation: i64,
    /// When it registered (database time).
    pub registered_at: Timestamp,
    /// Its last heartbeat (database time).
    pub heartbeat_at: Timestamp,
    /// Fires running or queued on its pool at its last heartbeat.
    pub busy: u64,
    /// The handlers it runs (as it registered them).
    pub handlers: Vec<String>,
}

/// How a failed fire is retried: up to `max_attempts` attempts in all, each
/// `backoff_ms` after the last failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, 1 (no retry) to [`MAX_ATTEMPTS`].
    pub max_attempts: u32,
    /// Milliseconds between a failure and the next attempt.
    pub backoff_ms: i64,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            backoff_ms: 0,
        }
    }
}

/// A job as its creator defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// Unique in the scheduler; 1 to [`MAX_NAME_BYTES`] bytes, no control characters.
    pub name: String,
    /// The handler that runs it, by name.
    pub handler: String,
    /// The handler's input, JSON text (at most [`MAX_PAYLOAD_BYTES`]).
    pub payload: String,
    /// Free text.
    pub description: String,
    /// Re-run a fire whose node died mid-run (at-least-once); otherwise such a
    /// fire is recorded abandoned (at-most-once).
    pub requests_recovery: bool,
    /// Whether fires of the job may overlap.
    pub allow_concurrent: bool,
    /// A run longer than this is cancelled and recorded failed.
    pub timeout_ms: Option<i64>,
    /// How failures are retried.
    pub retry: RetryPolicy,
    /// Run after this job (by name) succeeds, instead of on triggers of its own.
    pub parent: Option<String>,
}

impl JobSpec {
    /// A job with defaults: payload `null`, no description, no recovery,
    /// concurrent fires allowed, no timeout, no retry, no parent.
    pub fn new(name: impl Into<String>, handler: impl Into<String>) -> JobSpec {
        JobSpec {
            name: name.into(),
            handler: handler.into(),
            payload: "null".to_owned(),
            description: String::new(),
            requests_recovery: false,
            allow_concurrent: true,
            timeout_ms: None,
            retry: RetryPolicy::default(),
            parent: None,
        }
    }

    /// Checks every field; stores call this before writing anything.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidJob`] naming the field and the problem.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |reason: String| Err(Error::InvalidJob { reason });
        check_name("job name", &self.name)?;
        check_name("handler name", &self.handler)?;
        if let Some(parent) = &self.parent {
            check_name("parent job name", parent)?;
            if parent == &self.name {
                return invalid(format!("job {:?} cannot be its own parent", self.name));
            }
        }
        if self.payload.len() > MAX_PAYLOAD_BYTES {
            return invalid(format!(
                "payload is {} bytes; the most is {MAX_PAYLOAD_BYTES}",
                self.payload.len()
            ));
        }
        // Decoded whole, as handlers and tools will: this also bounds its
        // nesting (128 levels), which a skimming parser would not.
        if let Err(e) = serde_json::from_str::<serde_json::Value>(&self.payload) {
            if e.to_string().contains("recursion limit") {
                return invalid("payload is nested deeper than 128 levels".to_owned());
            }
            return invalid(format!("payload is not valid JSON: {e}"));
        }
        if self.description.len() > MAX_DESCRIPTION_BYTES {
            return invalid(format!(
                "description is {} bytes; the most is {MAX_DESCRIPTION_BYTES}",
                self.description.len()
            ));
        }
        if let Some(timeout) = self.timeout_ms
            && !(1..=crate::trigger::MAX_INTERVAL_MILLIS).contains(&timeout)
        {
            return invalid(format!("timeout must be between 1 ms and 100 years, got {timeout} ms"));
        }
        if !(1..=MAX_ATTEMPTS).contains(&self.retry.max_attempts) {
            return invalid(format!(
                "retry attempts must be between 1 and {MAX_ATTEMPTS}, got {}",
                self.retry.max_attempts
            ));
        }
        if !(0..=crate::trigger::MAX_INTERVAL_MILLIS).contains(&self.retry.backoff_ms) {
            return invalid(format!(
                "retry backoff must be between 0 and 100 years, got {} ms",
                self.retry.backoff_ms
            ));
        }
        Ok(())
    }
}

/// Checks a name: 1 to [`MAX_NAME_BYTES`] bytes, no control characters, no
/// leading or trailing whitespace.
///
/// # Errors
///
/// [`Error::InvalidJob`] saying which name and why.
pub fn check_name(what: &str, name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "is empty".to_owned()
    } else if name.len() > MAX_NAME_BYTES {
        format!("is {} bytes; the most is {MAX_NAME_BYTES}", name.len())
    } else if name.chars().any(char::is_control) {
        "contains a control character".to_owned()
    } else if name.trim() != name {
        "starts or ends with whitespace".to_owned()
    } else {
        return Ok(());
    };
    Err(Error::InvalidJob {
        reason: format!("{what} {name:?} {reason}"),
    })
}

/// Whether a job fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Its triggers fire.
    Enabled,
    /// Its triggers are held.
    Paused,
}

/// A stored job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Its id.
    pub id: i64,
    /// The scheduler (cluster) name.
    pub scheduler: String,
    /// Its definition.
    pub spec: JobSpec,
    /// Enabled or paused.
    pub state: JobState,
    /// Created (database time).
    pub created_at: Timestamp,
    /// Last changed (database time).
    pub updated_at: Timestamp,
}

/// The state of an execute (a trigger row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecuteState {
    /// Fires at its `next_fire_time` (or is initialised first, when that is
    /// empty).
    Waiting,
    /// A fire of it runs and the next waits for it: a fixed-delay trigger, or a
    /// job that disallows concurrent fires. `node_id` says whose.
    Running,
    /// Held with its job.
    Paused,
    /// Has no further fire.
    Complete,
    /// Could not be understood; its `error` says why. Not polled again.
    Error,
}

/// Where a fire stands in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FireState {
    /// Won by a node, not started.
    Claimed,
    /// Its handler runs.
    Running,
    /// Ran and succeeded.
    Succeeded,
    /// Ran and failed (or its node died mid-run and it was re-run).
    Failed,
    /// Not run at its time, by the misfire policy.
    Misfired,
    /// Not run because the trigger's policy skipped it.
    Skipped,
    /// Its node died mid-run and the job does not request recovery.
    Abandoned,
}

macro_rules! names {
    ($ty:ty { $($variant:ident = $name:literal),* $(,)? }) => {
        impl $ty {
            /// The name stored in the database.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $name),* }
            }

            /// The state of a stored name.
            ///
            /// # Errors
            ///
            /// [`Error::InvalidJob`] for a name that is not one of the states.
            pub fn parse(name: &str) -> Result<Self, Error> {
                match name {
                    $($name => Ok(Self::$variant),)*
                    other => Err(Error::InvalidJob {
                        reason: format!(concat!("unknown ", stringify!($ty), " {:?}"), other),
                    }),
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

names!(NodeState { Live = "live", Dead = "dead", Gone = "gone" });
names!(JobState { Enabled = "enabled", Paused = "paused" });
names!(ExecuteState {
    Waiting = "waiting",
    Running = "running",
    Paused = "paused",
    Complete = "complete",
    Error = "error",
});
names!(FireState {
    Claimed = "claimed",
    Running = "running",
    Succeeded = "succeeded",
    Failed = "failed",
    Misfired = "misfired",
    Skipped = "skipped",
    Abandoned = "abandoned",
});

/// A trigger of a job, as its creator defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteSpec {
    /// When it fires.
    pub trigger: Trigger,
    /// Higher fires first among fires due at the same instant.
    pub priority: i32,
}

impl ExecuteSpec {
    /// A trigger with priority 0.
    pub fn new(trigger: Trigger) -> ExecuteSpec {
        ExecuteSpec { trigger, priority: 0 }
    }
}

/// A stored execute (trigger row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execute {
    /// Its id.
    pub id: i64,
    /// The job it fires.
    pub job_id: i64,
    /// The scheduler (cluster) name.
    pub scheduler: String,
    /// The trigger.
    pub trigger: Trigger,
    /// Its priority.
    pub priority: i32,
    /// Its state.
    pub state: ExecuteState,
    /// Where it stands: the columns the claim compares and sets.
    pub fire_state: TriggerState,
    /// The node (incarnation) that owns it while [`ExecuteState::Running`], or
    /// that last claimed it.
    pub owner: Option<NodeRef>,
    /// Why it is in [`ExecuteState::Error`].
    pub error: Option<String>,
    /// The schedule columns no longer match the signature its fire times were
    /// computed from (a row inserted or edited by hand): its next fire time is
    /// to be recomputed. See [`TriggerColumns::signature`].
    pub schedule_changed: bool,
}

/// One incarnation of a node: who owns an execute or a fire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeRef {
    /// The node's id.
    pub node_id: String,
    /// Its incarnation.
    pub incarnation: i64,
}

/// A job with its triggers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDetail {
    /// The job.
    pub job: Job,
    /// Its executes, by id.
    pub executes: Vec<Execute>,
    /// Its execute rows that cannot be decoded (written by hand), with why.
    pub broken: Vec<RejectedRow>,
}

/// An execute row that could not be decoded; the store has marked it
/// [`ExecuteState::Error`] so it is not polled again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRow {
    /// The row's id.
    pub execute_id: i64,
    /// Why it could not be decoded.
    pub reason: String,
}

/// One poll's worth of due executes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueBatch {
    /// Executes due, in order of next fire time (then priority, highest first).
    pub executes: Vec<Execute>,
    /// Rows that could not be decoded, now marked as errors.
    pub rejected: Vec<RejectedRow>,
}

/// A trigger as the execute row's columns, the format every backend shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerColumns {
    /// `cron`, `fixed_rate`, `fixed_delay` or `once`.
    pub kind: String,
    /// The cron expression (cron only).
    pub cron_expression: Option<String>,
    /// The IANA zone (cron only).
    pub time_zone: Option<String>,
    /// The interval or delay (fixed rate and fixed delay).
    pub interval_ms: Option<i64>,
    /// Start of the validity window.
    pub start_time: i64,
    /// End of the validity window, inclusive.
    pub end_time: Option<i64>,
    /// Most fires in all.
    pub repeat_limit: Option<i64>,
    /// The misfire policy's name.
    pub misfire_policy: String,
}

impl TriggerColumns {
    /// The columns of a trigger.
    pub fn from_trigger(trigger: &Trigger) -> TriggerColumns {
        let (kind, cron_expression, time_zone, interval_ms) = match trigger.schedule() {
            Schedule::Cron { expr, zone } => (
                "cron",
                Some(expr.as_str().to_owned()),
                Some(zone.name().to_owned()),
                None,
            ),
            Schedule::FixedRate { interval_ms } => ("fixed_rate", None, None, Some(*interval_ms)),
            Schedule::FixedDelay { delay_ms } => ("fixed_delay", None, None, Some(*delay_ms)),
            Schedule::Once => ("once", None, None, None),
        };
        TriggerColumns {
            kind: kind.to_owned(),
            cron_expression,
            time_zone,
            interval_ms,
            start_time: trigger.start().as_millis(),
            end_time: trigger.end().map(Timestamp::as_millis),
            repeat_limit: trigger.repeat_limit().map(|l| i64::try_from(l).unwrap_or(i64::MAX)),
            misfire_policy: trigger.misfire_policy().as_str().to_owned(),
        }
    }

    /// A stable 64-bit signature of the schedule columns (kind, expression,
    /// zone, interval, window and repeat limit; not the misfire policy). The
    /// row keeps the signature its fire times were computed from, so that a
    /// schedule edited with plain SQL is noticed and recomputed once.
    pub fn signature(&self) -> i64 {
        // FNV-1a: stable across builds and platforms, unlike std's hasher.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |bytes: &[u8]| {
            for b in bytes.iter().chain([0xff_u8].iter()) {
                hash ^= u64::from(*b);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        let num = |n: Option<i64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
        feed(self.kind.as_bytes());
        feed(self.cron_expression.as_deref().unwrap_or("-").as_bytes());
        feed(self.time_zone.as_deref().unwrap_or("-").as_bytes());
        feed(num(self.interval_ms).as_bytes());
        feed(self.start_time.to_string().as_bytes());
        feed(num(self.end_time).as_bytes());
        feed(num(self.repeat_limit).as_bytes());
        i64::from_ne_bytes(hash.to_ne_bytes())
    }

    /// The trigger the columns describe, validated as if it were new.
    ///
    /// # Errors
    ///
    /// The error a trigger built from these values would get: an unknown kind,
    /// a missing or invalid expression, zone or interval, an end before the
    /// start, a policy that does not apply.
    pub fn to_trigger(&self) -> Result<Trigger, Error> {
        let missing = |what: &str| Error::InvalidTrigger {
            reason: format!("a {} trigger needs {what}", self.kind),
        };
        let schedule = match self.kind.as_str() {
            "cron" => {
                let expr = self
                    .cron_expression
                    .as_deref()
                    .ok_or_else(|| missing("a cron expression"))?;
                let zone = self.time_zone.as_deref().unwrap_or("UTC");
                Schedule::cron(
                    crate::cron::CronExpression::parse(expr)?,
                    crate::cron::parse_time_zone(zone)?,
                )
            }
            "fixed_rate" => Schedule::fixed_rate_millis(self.interval_ms.ok_or_else(|| missing("an interval"))?)?,
            "fixed_delay" => Schedule::fixed_delay_millis(self.interval_ms.ok_or_else(|| missing("a delay"))?)?,
            "once" => Schedule::Once,
            other => {
                return Err(Error::InvalidTrigger {
                    reason: format!("unknown trigger kind {other:?} (expected cron, fixed_rate, fixed_delay or once)"),
                });
            }
        };
        let mut trigger = Trigger::new(schedule, Timestamp::from_millis(self.start_time))?;
        if let Some(end) = self.end_time {
            trigger = trigger.with_end(Timestamp::from_millis(end))?;
        }
        if let Some(limit) = self.repeat_limit {
            let limit = u64::try_from(limit).map_err(|_| Error::InvalidTrigger {
                reason: format!("a repeat limit must be at least 1, got {limit}"),
            })?;
            trigger = trigger.with_repeat_limit(limit)?;
        }
        trigger.with_misfire_policy(self.misfire_policy.parse::<MisfirePolicy>()?)
    }
}

/// The compare-and-set of an execute row: if it still holds `expect`, it takes
/// `set`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteCas {
    /// The row.
    pub execute_id: i64,
    /// The state it must be in.
    pub expect_state: ExecuteState,
    /// The fire times it must hold (`times_triggered` and `awaiting_finish` are
    /// not compared).
    pub expect: TriggerState,
    /// When set, the owner it must have.
    pub expect_owner: Option<NodeRef>,
    /// The state it takes.
    pub set_state: ExecuteState,
    /// The fire times and count it takes.
    pub set: TriggerState,
    /// The owner it takes (`None` clears it).
    pub set_owner: Option<NodeRef>,
    /// A restarted trigger (a misfire policy's reschedule): its start and repeat
    /// limit are written too, with its signature.
    pub set_trigger: Option<Trigger>,
    /// When set, the schedule signature the row takes (a recomputed row);
    /// otherwise it keeps its own.
    pub set_signature: Option<i64>,
}

/// A ledger row recording fires that did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRecord {
    /// The first scheduled time (the row's `fire_time`).
    pub from: Timestamp,
    /// The end of the range, exclusive.
    pub until: Timestamp,
    /// How many scheduled times the range holds.
    pub count: u64,
    /// [`FireState::Misfired`] or [`FireState::Skipped`].
    pub state: FireState,
    /// Why.
    pub reason: String,
}

/// A claim: win one fire of an execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The execute's compare-and-set.
    pub cas: ExecuteCas,
    /// The scheduled fire time.
    pub fire_time: Timestamp,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The claiming node's incarnation.
    pub node: NodeRef,
    /// The job disallows concurrency: the claim is lost while any fire of the
    /// job is claimed or running. Such claims are serialised on the job's row.
    pub exclusive: bool,
}

impl Claim {
    /// The claim of one fire of an expansion ([`Trigger::fires_until`]) by
    /// `node`: the row must be waiting and hold `fire.before`; it takes
    /// `fire.after`, owned by `node`, and stays waiting, or becomes running (a
    /// fixed-delay trigger awaiting the finish) or complete (no further fire).
    pub fn for_fire(execute_id: i64, fire: &Fire, node: &NodeRef) -> Claim {
        let set_state = match fire.next {
            NextFire::At(_) => ExecuteState::Waiting,
            NextFire::AfterFinish => ExecuteState::Running,
            NextFire::Done => ExecuteState::Complete,
        };
        Claim {
            cas: ExecuteCas {
                execute_id,
                expect_state: ExecuteState::Waiting,
                expect: fire.before.clone(),
                expect_owner: None,
                set_state,
                set: fire.after.clone(),
                set_owner: Some(node.clone()),
                set_trigger: None,
                set_signature: None,
            },
            fire_time: fire.fire_time,
            attempt: 1,
            node: node.clone(),
            exclusive: false,
        }
    }
}

/// The outcome of a finished fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned success.
    Succeeded,
    /// The handler failed, panicked or timed out.
    Failed {
        /// What happened (cut to [`MAX_ERROR_BYTES`]).
        error: String,
    },
}

/// A row of the fire ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireRecord {
    /// Its id.
    pub id: i64,
    /// The execute it fired.
    pub execute_id: i64,
    /// The job.
    pub job_id: i64,
    /// The scheduled fire time (for a skipped range, its first time).
    pub fire_time: Timestamp,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The node that claimed it; `None` when released for any node to take or
    /// recorded without a run (a skipped range).
    pub owner: Option<NodeRef>,
    /// Where it stands.
    pub state: FireState,
    /// When it was claimed or recorded (database time).
    pub claimed_at: Timestamp,
    /// When its handler started.
    pub started_at: Option<Timestamp>,
    /// When it finished: for a fire that timed out, when its code really
    /// returned.
    pub finished_at: Option<Timestamp>,
    /// When it passed its job's timeout (it stays running until its code
    /// returns).
    pub timed_out_at: Option<Timestamp>,
    /// The error, for failed, misfired, skipped and abandoned fires.
    pub error: Option<String>,
    /// For a skipped range: its end (exclusive).
    pub skipped_until: Option<Timestamp>,
    /// For a skipped range: how many fire times it holds (1 for a single fire).
    pub fire_count: u64,
}

/// A child job's fire claimed when its parent's fire succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainedFire {
    /// The ledger row's id.
    pub fire_id: i64,
    /// The child job.
    pub job_id: i64,
}

/// A history query: newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireQuery {
    /// The scheduler (cluster) name.
    pub scheduler: String,
    /// Only this job's fires.
    pub job: Option<String>,
    /// Only fires in this state.
    pub state: Option<FireState>,
    /// Only fires scheduled at or after this.
    pub since: Option<Timestamp>,
    /// Only fires scheduled before this.
    pub until: Option<Timestamp>,
    /// Only fires with an id below this (the last id of the previous page).
    pub before_id: Option<i64>,
    /// The most rows.
    pub limit: u32,
}

impl FireQuery {
    /// The newest 100 fires of a scheduler.
    pub fn new(scheduler: impl Into<String>) -> FireQuery {
        FireQuery {
            scheduler: scheduler.into(),
            job: None,
            state: None,
            since: None,
            until: None,
            before_id: None,
            limit: 100,
        }
    }
}

/// Everything the scheduler keeps. See the [module docs](self).
///
/// Every method is one transaction; compare-and-set methods return whether this
/// caller won. Implementations are cheap to clone and shared across tasks.
pub trait Store: Send + Sync + 'static {
    /// The database's clock.
    fn now(&self) -> impl Future<Output = Result<Timestamp, StoreError>> + Send;

    // ---- nodes ----

    /// Registers a node, or re-registers it with a new incarnation (which
    /// retires the old one), live, heart-beating now.
    fn register_node(&self, node: &NodeRegistration) -> impl Future<Output = Result<Node, StoreError>> + Send;

    /// Records a heartbeat with how busy the node is (fires running or queued
    /// on its pool); `false` when this incarnation is no longer live (it was
    /// declared dead or replaced) and must re-register.
    fn heartbeat(
        &self,
        scheduler: &str,
        node: &NodeRef,
        busy: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Every node the scheduler has seen.
    fn list_nodes(&self, scheduler: &str) -> impl Future<Output = Result<Vec<Node>, StoreError>> + Send;

    /// Declares a node dead, if it is still live in that incarnation and its
    /// heartbeat is older than `dead_after_ms` (database time). `true` when this
    /// caller retired it.
    fn retire_node(
        &self,
        scheduler: &str,
        node: &NodeRef,
        dead_after_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Marks a node gone (a graceful leave), if still live in that incarnation.
    fn leave(&self, scheduler: &str, node: &NodeRef) -> impl Future<Output = Result<bool, StoreError>> + Send;

    // ---- jobs and executes ----

    /// Creates a job with its triggers, each initialised to its first fire time.
    /// Validates everything first; on any error nothing is stored.
    fn create_job(
        &self,
        scheduler: &str,
        job: &JobSpec,
        executes: &[ExecuteSpec],
    ) -> impl Future<Output = Result<Job, StoreError>> + Send;

    /// A job and its executes, by name. Execute rows that cannot be decoded
    /// are listed apart with the reason, not as an error of the whole call.
    fn get_job(
        &self,
        scheduler: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<JobDetail>, StoreError>> + Send;

    /// The jobs with these ids (those that still exist), in any order.
    fn jobs_by_id(&self, scheduler: &str, ids: &[i64]) -> impl Future<Output = Result<Vec<Job>, StoreError>> + Send;

    /// Every job of the scheduler, by name.
    fn list_jobs(&self, scheduler: &str) -> impl Future<Output = Result<Vec<Job>, StoreError>> + Send;

    /// Replaces a job's definition (its name may change); when `executes` is
    /// given, its triggers are replaced too and start afresh.
    fn update_job(
        &self,
        scheduler: &str,
        name: &str,
        job: &JobSpec,
        executes: Option<&[ExecuteSpec]>,
    ) -> impl Future<Output = Result<Job, StoreError>> + Send;

    /// Pauses (`true`) or resumes a job and its waiting executes.
    fn set_paused(
        &self,
        scheduler: &str,
        name: &str,
        paused: bool,
    ) -> impl Future<Output = Result<Job, StoreError>> + Send;

    /// Adds executes to a job, leaving its others as they are (a one-off
    /// "fire now" is a [`Schedule::Once`]
    /// execute at the database's now). A paused job's new executes are paused.
    fn add_executes(
        &self,
        scheduler: &str,
        name: &str,
        executes: &[ExecuteSpec],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes a job and its executes; its ledger rows stay as history.
    fn delete_job(&self, scheduler: &str, name: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Executes in the waiting state whose next fire time is before `before`
    /// (or empty: rows written by hand that need initialising), in time order,
    /// at most `limit`. Rows that cannot be decoded are marked as errors and
    /// reported; the rest are served.
    fn due_executes(
        &self,
        scheduler: &str,
        before: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<DueBatch, StoreError>> + Send;

    /// Executes in the running state owned by a node that is not live (or by
    /// no node), at most `limit`.
    fn orphaned_executes(
        &self,
        scheduler: &str,
        limit: u32,
    ) -> impl Future<Output = Result<DueBatch, StoreError>> + Send;

    /// A compare-and-set on an execute row and, if it wins, the insert of the
    /// ledger records (skipped ranges) in the same transaction.
    fn update_execute(
        &self,
        cas: &ExecuteCas,
        records: &[SkippedRecord],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    // ---- the claim ----

    /// Wins a fire: the execute's compare-and-set and the insert of its ledger
    /// row, in one transaction. `Some(fire id)` when this caller won.
    fn claim(&self, claim: &Claim) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

    /// Many claims, with the same guarantee for each; the result says, claim
    /// by claim, which were won. The claims share one transaction, except
    /// those of jobs that disallow concurrency, which take one each: such a
    /// claim that fails after others were stored counts as not won, so that
    /// an `Err` always means that no claim was stored.
    fn claim_batch(&self, claims: &[Claim]) -> impl Future<Output = Result<Vec<Option<i64>>, StoreError>> + Send;

    // ---- the fire lifecycle ----

    /// Marks a claimed fire running, fenced: refused (`false`) unless it is
    /// still claimed by this node's incarnation and that incarnation is live.
    fn mark_running(&self, fire_id: i64, node: &NodeRef) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Marks claimed fires running, fenced as [`Store::mark_running`], in a
    /// few statements for many fires (fires due at the same instant start
    /// together); returns the ids that were started. Up to
    /// [`FIRES_PER_BATCH`] fires change atomically: an error then means none
    /// was started.
    fn mark_running_all(
        &self,
        fire_ids: &[i64],
        node: &NodeRef,
    ) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// For a fire marked running that waited for a thread: confirms, fenced
    /// as [`Store::mark_running`], that it is still running under this live
    /// incarnation, and sets its start time to now. `false`: not this
    /// node's any more; it must not run.
    fn confirm_start(&self, fire_id: i64, node: &NodeRef) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records the success of many running fires of this node's incarnation
    /// in a few statements; returns the ids recorded (a fire no longer this
    /// incarnation's is left out). Up to [`FIRES_PER_BATCH`] fires change
    /// atomically.
    fn succeed_all(
        &self,
        fire_ids: &[i64],
        node: &NodeRef,
    ) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// Records the outcome of a running fire of this node's incarnation.
    fn finish(
        &self,
        fire_id: i64,
        node: &NodeRef,
        outcome: &Outcome,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records the success of a running fire of this node's incarnation and,
    /// in the same transaction, starts its job's chain: one fire of each child
    /// job (a job whose parent is this fire's job) under the same execute and
    /// fire time, attempt 1, claimed by this node, or recorded skipped when
    /// the child is paused. The unique key holds chains to one fire per child
    /// and parent fire, so a cycle of jobs ends where it would repeat.
    ///
    /// `None` when the fire is not this incarnation's to finish; otherwise
    /// the children's claimed fires (none when the job has no children).
    fn succeed_and_chain(
        &self,
        fire_id: i64,
        node: &NodeRef,
    ) -> impl Future<Output = Result<Option<Vec<ChainedFire>>, StoreError>> + Send;

    /// The ids of the scheduler's jobs that have at least one child job.
    fn chain_parents(&self, scheduler: &str) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// Records a fire of this incarnation whose handler did not start as
    /// misfired, with the reason: claimed (the pool refused it), or marked
    /// running but found past the threshold when a thread took it. Its start
    /// time is cleared.
    fn misfire_claimed(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records a claimed fire as skipped without running it (its job was
    /// paused or deleted after the claim), with the reason. Fenced like a
    /// start; `true` when recorded.
    fn skip_claimed(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records a claimed fire as failed without running it (no live node has
    /// its handler), with the reason.
    fn fail_claimed(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Gives up a claimed, unstarted fire so that any node may take it at once
    /// (a graceful shutdown).
    fn release_fire(&self, fire_id: i64, node: &NodeRef) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Fires claimed or running whose owner is not a live incarnation (a dead
    /// node's, or released), at most `limit`, oldest first.
    fn orphaned_fires(
        &self,
        scheduler: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<FireRecord>, StoreError>> + Send;

    /// Fires claimed by this incarnation and scheduled before `before`,
    /// oldest first, at most `limit` (read through the index of open fires:
    /// the ledger's size does not count).
    fn claimed_by(
        &self,
        scheduler: &str,
        node: &NodeRef,
        before: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<FireRecord>, StoreError>> + Send;

    /// Takes over an orphaned claimed fire, by compare-and-set on its owner.
    fn take_over(&self, fire: &FireRecord, node: &NodeRef) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// An orphaned running fire whose job requests recovery: recorded failed
    /// ("node died mid-run") and its next attempt claimed by this node, in one
    /// transaction. `Some(new fire id)` when this caller won.
    fn rerun(&self, fire: &FireRecord, node: &NodeRef) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

    /// An orphaned running fire whose job does not request recovery: recorded
    /// abandoned. `true` when this caller won.
    fn abandon(&self, fire: &FireRecord) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// A new attempt of a failed fire (a retry), claimed by this node.
    /// `Some(new fire id)` unless that attempt exists already.
    fn claim_attempt(
        &self,
        fire: &FireRecord,
        node: &NodeRef,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

    /// Records that a running fire passed its job's timeout: `timed_out_at`
    /// and the error are set, and the fire stays running until its code
    /// returns (then [`finish`](Self::finish) records it failed). Fenced like
    /// a finish; `true` when recorded.
    fn fire_time_out(
        &self,
        fire_id: i64,
        node: &NodeRef,
        error: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    // ---- history ----

    /// Ledger rows, newest first.
    fn fires(&self, query: &FireQuery) -> impl Future<Output = Result<Vec<FireRecord>, StoreError>> + Send;

    // ---- changes ----

    /// The scheduler's change counter, which every change made through the
    /// store bumps in its own transaction (0 before the first).
    fn changes(&self, scheduler: &str) -> impl Future<Output = Result<i64, StoreError>> + Send;

    /// Waits until the change counter differs from `seen`, or `max_wait`
    /// passes, and returns it: on PostgreSQL woken by `LISTEN`/`NOTIFY`, on
    /// the others by reading the counter every few dozen milliseconds, so that
    /// every node sees a change within [`CHANGE_VISIBILITY_MS`].
    fn change_wait(
        &self,
        scheduler: &str,
        seen: i64,
        max_wait: std::time::Duration,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send;

    // ---- retention ----

    /// Wins this scheduler's purge turn, by compare-and-set on when the last
    /// purge began: `true` for one caller per `every_ms` (database time).
    fn purge_turn(&self, scheduler: &str, every_ms: i64) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The fire time before which succeeded fires may have been purged: the
    /// audit checks only after it.
    fn purge_horizon(&self, scheduler: &str) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;

    /// Moves the purge horizon to `before` (never back).
    fn purge_horizon_advance(
        &self,
        scheduler: &str,
        before: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes at most `limit` fires in `state` (a finished state) scheduled
    /// before `before`, keeping each job's newest `keep_last` fires; returns
    /// how many it deleted.
    fn fires_purge(
        &self,
        scheduler: &str,
        state: FireState,
        before: Timestamp,
        keep_last: u32,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes the rows of nodes dead or gone whose last heartbeat is before
    /// `before`, unless a fire or an execute still names their incarnation.
    fn nodes_purge(&self, scheduler: &str, before: Timestamp) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes at most `limit` complete executes last changed before `before`
    /// that no open fire names.
    fn executes_purge(
        &self,
        scheduler: &str,
        before: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}
