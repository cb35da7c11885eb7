//! What a store hands back: nodes, jobs, executes and ledger rows, their
//! states and their names in the database.

use std::fmt;

use super::{JobSpec, MANUAL_EXECUTE};
use crate::error::Error;
use crate::time::Timestamp;
use crate::trigger::{Trigger, TriggerState};

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
    /// How long its heartbeat may be silent before its peers declare it
    /// dead, as it registered it (`None` for a node registered before it
    /// was recorded).
    pub dead_after: Option<std::time::Duration>,
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
    /// Moved on by every change of its definition or state through the
    /// store (1 when created): what a write with an expected version
    /// compares.
    pub version: i64,
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
    /// A retry waiting out its backoff, or a late run a misfire policy
    /// promised: claimable by any node from its `due_at`.
    Pending,
}

impl FireState {
    /// Whether a fire in this state has ended (it is none of claimed,
    /// running, pending): its row has a finish time, and the ledger's index
    /// of fires not ended leaves it out.
    pub fn is_ended(self) -> bool {
        !matches!(self, FireState::Claimed | FireState::Running | FireState::Pending)
    }
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
    Pending = "pending",
});

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
    /// to be recomputed. See [`TriggerColumns::signature`](super::TriggerColumns::signature).
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

impl DueBatch {
    /// Where the next page of due executes begins: after this batch's last
    /// execute with a next fire time (none when it has none).
    pub fn cursor(&self) -> Option<DueCursor> {
        self.executes.iter().rev().find_map(|e| {
            e.fire_state.next_fire_time.map(|next_fire_time| DueCursor {
                next_fire_time,
                priority: e.priority,
                execute_id: e.id,
            })
        })
    }
}

/// The last execute of a page of due executes
/// ([`ScheduleStore::due_executes`](super::ScheduleStore::due_executes)):
/// the next page holds the executes after it in the store's order (next
/// fire time, then priority, highest first, then id), so that a poll reads
/// every due execute once, however many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueCursor {
    /// Its next fire time.
    pub next_fire_time: Timestamp,
    /// Its priority.
    pub priority: i32,
    /// Its id.
    pub execute_id: i64,
}

/// The outcome of a finished fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned success.
    Succeeded,
    /// The handler failed, panicked or timed out.
    Failed {
        /// What happened (cut to [`MAX_ERROR_BYTES`](super::MAX_ERROR_BYTES)).
        error: String,
    },
}

/// When a fire's handler ran, on its node's estimate of database time
/// (which never runs ahead of the database's clock): what the ledger
/// records as the fire's `started_at` and `finished_at` with its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandlerSpan {
    /// The handler was called.
    pub started_at: Timestamp,
    /// The handler returned (or was given up on).
    pub finished_at: Timestamp,
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
    /// For a pending fire (a retry or a late run): from when it may run.
    pub due_at: Option<Timestamp>,
    /// The error, for failed, misfired, skipped and abandoned fires.
    pub error: Option<String>,
    /// For a skipped range: its end (exclusive).
    pub skipped_until: Option<Timestamp>,
    /// For a skipped range: how many fire times it holds (1 for a single fire).
    pub fire_count: u64,
}

impl FireRecord {
    /// Fired by hand ("fire now"), not by a trigger.
    pub fn by_hand(&self) -> bool {
        self.execute_id == MANUAL_EXECUTE
    }

    /// A fire of work enqueued from code ([`Work`](super::Work)).
    pub fn enqueued(&self) -> bool {
        self.execute_id < MANUAL_EXECUTE
    }

    /// A past fire time a backfill queued: a trigger's first attempt that
    /// was pending, due after its fire time.
    pub fn by_backfill(&self) -> bool {
        self.execute_id > MANUAL_EXECUTE && self.attempt == 1 && self.due_at.is_some_and(|due| due != self.fire_time)
    }

    /// A fire that waited for room: for its job's running fire under an
    /// overlap policy (buffer one, buffer all, cancel), or for its
    /// concurrency key (see [`waited_for_room`]).
    pub fn by_overlap(&self) -> bool {
        waited_for_room(self.execute_id, self.attempt, self.fire_time, self.due_at)
    }
}

/// The one rule for a fire that waited for room under an overlap policy or
/// a concurrency limit: a trigger's first attempt (not one by hand nor
/// enqueued work, whose execute ids are not positive) that was
/// pending, due at its own fire time (a backfill's is due after it).
pub fn waited_for_room(execute_id: i64, attempt: u32, fire_time: Timestamp, due_at: Option<Timestamp>) -> bool {
    execute_id > MANUAL_EXECUTE && attempt == 1 && due_at == Some(fire_time)
}

/// A child job's fire, written when its parent's fire succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainedFire {
    /// The ledger row's id.
    pub fire_id: i64,
    /// The child job.
    pub job_id: i64,
    /// `None`: claimed by the parent's node, to run at once. `Some(due)`: a
    /// child that disallows concurrency or shares a concurrency limit waits
    /// for room as a trigger's fire does: its row is pending, due at the
    /// fire time, and claimed exclusively like any pending fire, so that a
    /// running fire of the child, or a full limit, holds it back.
    pub waits_from: Option<Timestamp>,
}

/// A history query: newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireQuery {
    /// Only this job's fires (by name).
    pub job: Option<String>,
    /// Only the fires of the job of this id (a job deleted since among
    /// them).
    pub job_id: Option<i64>,
    /// Only the fires of this execute (one trigger of a job, and the
    /// chained fires of its fire times).
    pub execute_id: Option<i64>,
    /// Only fires whose error contains this text (case-insensitive).
    pub error_contains: Option<String>,
    /// Only fires claimed by this node.
    pub node_id: Option<String>,
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

impl Default for FireQuery {
    fn default() -> FireQuery {
        FireQuery::new()
    }
}

impl FireQuery {
    /// The newest 100 fires of a scheduler.
    pub fn new() -> FireQuery {
        FireQuery {
            job: None,
            job_id: None,
            execute_id: None,
            error_contains: None,
            node_id: None,
            state: None,
            since: None,
            until: None,
            before_id: None,
            limit: 100,
        }
    }
}

/// What recording a fire's end did ([`FireStore::end_fires`](super::FireStore::end_fires)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowUp {
    /// Nothing: the fire is no longer this incarnation's.
    NotOwned,
    /// The end is recorded, and nothing follows it (for a misfire or
    /// failure that asked for a next attempt: one exists already).
    Recorded,
    /// The success is recorded and the job's chain started: the children's
    /// fires, claimed by this node (none when the job has no children).
    Chained(Vec<ChainedFire>),
    /// The end is recorded, and the next attempt is pending: any node may
    /// claim it from `due_at`.
    Pending {
        /// The pending attempt's ledger row.
        fire_id: i64,
        /// From when it may run (database time).
        due_at: Timestamp,
    },
}

/// How a claim of a pending fire went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingClaim {
    /// This node won it.
    Won,
    /// Its job disallows concurrency and a fire of it is open: try again later.
    Blocked,
    /// It is no longer pending (another node claimed it).
    Gone,
}

/// A page of a scheduler's jobs, by name: filtered, searched, and paged by
/// key (the last name of the previous page), so that a page costs the same
/// however many jobs there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobQuery {
    /// Only jobs whose name contains this text (case-insensitive on
    /// PostgreSQL's `LOWER`, MySQL's collation and SQLite's ASCII folding).
    pub search: Option<String>,
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Only jobs run by this handler.
    pub handler: Option<String>,
    /// Only jobs whose name sorts after this (the last name of the previous
    /// page).
    pub after: Option<String>,
    /// The most rows.
    pub limit: u32,
}

impl Default for JobQuery {
    fn default() -> JobQuery {
        JobQuery::new()
    }
}

impl JobQuery {
    /// The first 100 jobs of a scheduler, by name.
    pub fn new() -> JobQuery {
        JobQuery {
            search: None,
            state: None,
            handler: None,
            after: None,
            limit: 100,
        }
    }
}

/// What a change did, as the change log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeAction {
    /// A job was created with its triggers.
    JobCreate,
    /// A job's definition (and perhaps its triggers) was replaced.
    JobEdit,
    /// A job was paused.
    JobPause,
    /// A job was resumed.
    JobResume,
    /// A job was fired now, once, by hand (a pending fire).
    JobTrigger,
    /// Triggers were added to a job.
    JobAddTriggers,
    /// A job and its triggers were deleted.
    JobDelete,
    /// A calendar was added or replaced (the triggers that use it
    /// recomputed).
    CalendarPut,
    /// A calendar was deleted.
    CalendarDelete,
    /// A finished fire was retried by hand (a new attempt, pending).
    FireRetry,
    /// The whole scheduler was put on standby: no fire claimed until it
    /// resumes.
    SchedulerPause,
    /// The scheduler was taken off standby.
    SchedulerResume,
    /// A job's fire times over a past range were queued to run (pending).
    JobBackfill,
}

names!(ChangeAction {
    JobCreate = "job.create",
    JobEdit = "job.edit",
    JobPause = "job.pause",
    JobResume = "job.resume",
    JobTrigger = "job.trigger",
    JobAddTriggers = "job.add_triggers",
    JobDelete = "job.delete",
    CalendarPut = "calendar.put",
    CalendarDelete = "calendar.delete",
    FireRetry = "fire.retry",
    SchedulerPause = "scheduler.pause",
    SchedulerResume = "scheduler.resume",
    JobBackfill = "job.backfill",
});
