//! What travels between the stages: a won fire on its way to its handler
//! ([`RunFire`]), what its handler's lane reports ([`Ran`]), and a pending
//! fire (a retry or a late run) on its way to the backlog ([`PendingFire`]).

use std::sync::Arc;

use std::future::Future;

use super::context::Ctx;
use super::flight::Hold;
use super::handler::Dropper;
use super::handler::{CancelReason, JobResult, RunKind};
use crate::runlog::{RunEnd, RunEvent, RunStart};
use crate::store::{FireRecord, FollowUp, Job, NodeRef, Outcome};
use crate::time::Timestamp;
use crate::trigger::{Trigger, TriggerState};

/// A won fire, on its way to a handler.
#[derive(Debug, Clone)]
pub(super) struct RunFire {
    pub(super) fire_id: i64,
    pub(super) execute_id: i64,
    pub(super) job: Arc<Job>,
    pub(super) trigger: Option<Arc<Trigger>>,
    pub(super) fire_time: Timestamp,
    pub(super) attempt: u32,
    /// Why it runs.
    pub(super) kind: RunKind,
    /// How many of its earlier attempts its handler snoozed: not counted
    /// against the job's attempts.
    pub(super) snoozed: u32,
    pub(super) node: NodeRef,
    /// The claim moved the execute to running (a fixed-delay trigger awaiting
    /// the finish, or a job that disallows concurrency): the state it wrote,
    /// which the release after the run expects.
    pub(super) release: Option<TriggerState>,
    /// Its place in the pool's room, given back when its handler returns or
    /// when it ends without running.
    pub(super) hold: Option<Hold>,
    /// The start its fenced start recorded (database time): its handler
    /// starts after it.
    pub(super) marked_at: Option<Timestamp>,
    /// Enqueued work's own payload, read before its claim (`None`: the
    /// job's).
    pub(super) payload: Option<Arc<str>>,
    /// The trace context of the span that enqueued its work, which its span
    /// links to.
    pub(super) trace_parent: Option<Arc<str>>,
}

impl RunFire {
    /// The misfire threshold that applies to the fire, if one does: a fire
    /// won by a poll, on its first attempt, is misfired when it starts past
    /// it (late runs, retries, recoveries and children are late by design).
    pub(super) fn misfire_limit(&self, threshold_ms: i64) -> Option<i64> {
        (self.attempt == 1 && self.trigger.is_some()).then_some(threshold_ms)
    }

    /// The span of one fire, entered on the pool thread around its handler: a
    /// handler's own log lines carry the job, the trigger (`execute`), the fire
    /// time, the attempt, the fire's ledger id, the node and why it runs
    /// (`run_kind`); once it starts, how late its handler started (`late_ms`,
    /// on the node's estimate of database time), and once it ends, how
    /// (`outcome`: `succeeded`, `failed`, `dropped`). Exported as a trace span
    /// where the subscriber exports spans (`quartz run` with OpenTelemetry).
    /// Enqueued work's fire carries the trace context of the span that
    /// enqueued it (`trace_parent`), and the node's span linker, when it has
    /// one, links the span to it before the span is first entered.
    pub(super) fn span(&self, scheduler: &str, linker: Option<&super::SpanLinker>) -> tracing::Span {
        let span = tracing::info_span!(
            "fire",
            scheduler,
            job = self.job.spec.name.as_str(),
            execute = self.execute_id,
            fire_time = %self.fire_time,
            attempt = self.attempt,
            fire_id = self.fire_id,
            node = self.node.node_id.as_str(),
            run_kind = self.kind.as_str(),
            late_ms = tracing::field::Empty,
            outcome = tracing::field::Empty,
            trace_parent = tracing::field::Empty,
        );
        if let Some(tp) = &self.trace_parent {
            span.record("trace_parent", &**tp);
            if let Some(link) = linker {
                link(&span, tp);
            }
        }
        span
    }
}

/// A handler's result as the outcome the ledger records: `None` when its
/// thread ended without one. A failure of a fire asked to stop because a
/// newer fire of its job replaced it (the cancel overlap policy) or its node
/// lost its lease says why before what the handler returned.
pub(super) fn outcome_of(result: Option<JobResult>, cancelled: Option<CancelReason>) -> Outcome {
    match (result, cancelled) {
        (Some(Ok(())), _) => Outcome::Succeeded,
        (Some(Err(e)), Some(why @ (CancelReason::Overlapped | CancelReason::Fenced))) => Outcome::Failed {
            error: format!("cancelled: {why}; the handler returned: {e}"),
        },
        (Some(Err(e)), _) => Outcome::Failed { error: e.to_string() },
        (None, _) => Outcome::Failed {
            error: "the handler's thread ended without an outcome".to_owned(),
        },
    }
}

/// A handler's run: its outcome, and when it began and ended on the node's
/// estimate of database time.
pub(super) struct Handled {
    pub(super) result: JobResult,
    pub(super) started: Timestamp,
    pub(super) finished: Timestamp,
}

/// What a fire's pool task reports.
pub(super) enum Ran {
    /// The handler ran, with this outcome.
    Done(Handled),
    /// A thread took the fire this many milliseconds after its time, past the
    /// misfire threshold: the handler did not run.
    Late(i64),
    /// A thread took the fire late and found it no longer this incarnation's:
    /// the handler did not run.
    NotOwned,
    /// A thread took the fire late and the database could not confirm its
    /// start: the handler did not run, and the fire goes to its policy.
    Unconfirmed,
}

/// A pending fire, as the node queues it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingFire {
    pub(super) fire_id: i64,
    pub(super) execute_id: i64,
    pub(super) job_id: i64,
    pub(super) fire_time: Timestamp,
    pub(super) attempt: u32,
    pub(super) due_at: Timestamp,
}

impl PendingFire {
    pub(super) fn of(f: &FireRecord) -> PendingFire {
        PendingFire {
            fire_id: f.id,
            execute_id: f.execute_id,
            job_id: f.job_id,
            fire_time: f.fire_time,
            attempt: f.attempt,
            due_at: f.due_at.unwrap_or(f.claimed_at),
        }
    }

    /// The next attempt of `run`, pending as a follow-up said.
    pub(super) fn after(run: &RunFire, follow_up: FollowUp) -> Option<PendingFire> {
        match follow_up {
            FollowUp::Pending { fire_id, due_at } => Some(PendingFire {
                fire_id,
                execute_id: run.execute_id,
                job_id: run.job.id,
                fire_time: run.fire_time,
                attempt: run.attempt + 1,
                due_at,
            }),
            FollowUp::NotOwned | FollowUp::Recorded | FollowUp::Chained(_) => None,
        }
    }
}

/// Calls a fire's handler and witnesses it: the start and the end on the
/// node's estimate of database time, and, when the node keeps a run log, a
/// line for each, the start's written before the handler is called.
pub(super) struct Witness {
    ctx: Arc<Ctx>,
    start: RunStart,
    /// What the handler's start is known to come after, on the database's
    /// clock: the start its fenced start recorded (or confirmed again), or
    /// its fire time.
    floor: Timestamp,
    /// The fire's span: told how late the handler started and how it
    /// ended (exported as a trace where a subscriber exports spans).
    span: tracing::Span,
}

impl Witness {
    pub(super) fn of(ctx: &Arc<Ctx>, run: &RunFire) -> Witness {
        Witness {
            ctx: Arc::clone(ctx),
            start: RunStart {
                node: run.node.node_id.clone(),
                incarnation: run.node.incarnation,
                fire_id: run.fire_id,
                execute_id: run.execute_id,
                job_id: run.job.id,
                job: run.job.spec.name.clone(),
                fire_time: run.fire_time.as_millis(),
                attempt: run.attempt,
                kind: run.kind.as_str().to_owned(),
                local_ms: 0,
                db_ms: 0,
                db_spread_ms: 0,
            },
            floor: run.marked_at.unwrap_or(run.fire_time).max(run.fire_time),
            span: tracing::Span::none(),
        }
    }

    /// The witness, telling `span` the handler's lateness and outcome.
    pub(super) fn in_span(mut self, span: &tracing::Span) -> Witness {
        self.span = span.clone();
        self
    }

    /// The database confirmed the start again, recording `at`: the handler
    /// starts after that.
    pub(super) fn confirmed(&mut self, at: Option<Timestamp>) {
        if let Some(at) = at {
            self.floor = self.floor.max(at);
        }
    }

    /// The node's estimate of database time now, read in the node's
    /// runtime even from a pool thread, so that a test's stepped clock is
    /// the one read.
    /// With the node's own clock, read at the same moment.
    /// And how far behind the database's clock the estimate may be.
    fn now(&self) -> (Timestamp, i64, i64) {
        let _runtime = self.ctx.runtime.enter();
        let clock = &self.ctx.clock;
        (clock.stamp(), clock.local_ms(), clock.spread_ms())
    }

    /// The handler starts now: the start the ledger records, the node's
    /// estimate of database time. That estimate never runs ahead of the
    /// database's clock, and may fall a few milliseconds behind it (a clock
    /// reading is as good as its round trip). The handler is known to start
    /// after its fenced start, which the database recorded on its own
    /// clock, and after its fire time: the ledger records the latest of the
    /// three, so that a start never reads earlier than the claim and start
    /// the same row holds. The run log keeps the estimate as read (its
    /// checker allows for a clock's slack before it calls a start early).
    pub(super) fn started(&mut self) -> Timestamp {
        let (now, local_ms, spread_ms) = self.now();
        if let Some(log) = &self.ctx.run_log {
            self.start.db_ms = now.as_millis();
            self.start.local_ms = local_ms;
            self.start.db_spread_ms = spread_ms;
            log.write(&RunEvent::Start(self.start.clone()));
        }
        let started = now.max(self.floor);
        self.floor = started;
        self.span.record("late_ms", started.as_millis() - self.start.fire_time);
        started
    }

    /// The handler ended now, with `outcome` (`succeeded`, `failed`,
    /// `dropped`).
    pub(super) fn ended(&self, outcome: &str) -> Timestamp {
        self.span.record("outcome", outcome);
        let (now, local_ms, _) = self.now();
        let now = now.max(self.floor);
        if let Some(log) = &self.ctx.run_log {
            let s = &self.start;
            log.write(&RunEvent::End(RunEnd {
                node: s.node.clone(),
                incarnation: s.incarnation,
                fire_id: s.fire_id,
                execute_id: s.execute_id,
                job_id: s.job_id,
                fire_time: s.fire_time,
                attempt: s.attempt,
                outcome: outcome.to_owned(),
                local_ms,
                db_ms: now.as_millis(),
            }));
        }
        now
    }

    /// Runs `call` (the handler) between its start and its end.
    pub(super) fn run(mut self, call: impl FnOnce() -> JobResult) -> Handled {
        let started = self.started();
        let result = call();
        let finished = self.ended(if result.is_ok() { "succeeded" } else { "failed" });
        Handled {
            result,
            started,
            finished,
        }
    }

    /// As [`Self::run`], for an async handler, which `dropper` may drop.
    pub(super) async fn run_async(mut self, call: impl Future<Output = JobResult>, dropper: &Dropper) -> Handled {
        let started = self.started();
        let result = call.await;
        let outcome = match &result {
            _ if dropper.dropped() => "dropped",
            Ok(()) => "succeeded",
            Err(_) => "failed",
        };
        let finished = self.ended(outcome);
        Handled {
            result,
            started,
            finished,
        }
    }
}
