//! What a node's stages share ([`Ctx`]): the store, the settings, the
//! handlers, the pool, the clock, the node's incarnation and phase, its
//! stop signal, the membership as last read, its counters, and what it
//! holds of fires in flight ([`Flights`]). Each stage is a type of its own
//! file that keeps its own state and holds the context; the node
//! ([`super::node`]) only wires them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use quartz_pool::Pool;
use tokio::sync::{Notify, mpsc, watch};

use super::clock::Clock;
use super::fixed::HashMap;
use super::flight::{Flights, Hold};
use super::handler::{Handler, Lane, States};
use super::misfires::Misfired;
use super::settings::Settings;
use super::status::{Counters, Phase};
use crate::runlog::{RunEvent, RunLog};
use crate::store::{
    ExecuteCas, ExecuteState, FireEnd, Job, Node, NodeRef, NodeRegistration, Outcome, SharedStore, StoreError,
};
use crate::time::Timestamp;
use crate::trigger::{Trigger, TriggerState};

/// How many times recording an outcome is tried before it is left to
/// recovery, once the node is stopping; while it runs, it tries until the
/// database takes it (a fire marked running stays so until its end is
/// recorded, and nothing else would end it while its node lives).
pub(super) const FINISH_TRIES: u32 = 5;

/// The wait before the next try at recording a fire's end, after `tries`
/// failures: doubling from 200 ms, at most 2 s.
pub(super) fn finish_backoff(tries: u32) -> Duration {
    Duration::from_millis((100u64 << tries.min(5)).min(2_000))
}

/// The most orphaned fires or executes one recovery pass handles.
pub(super) const RECOVERY_BATCH: u32 = 200;

/// How often a start, or a start's confirmation, waiting for the node's
/// lease ([`Ctx::membership_fresh`]) looks again.
pub(super) const LEASE_WAIT: Duration = Duration::from_millis(20);

/// What a node's stages share.
pub(super) struct Ctx {
    pub(super) store: SharedStore,
    pub(super) scheduler: String,
    pub(super) settings: Settings,
    pub(super) handlers: HashMap<String, Handler>,
    /// What the handlers share ([`JobContext::state`](super::JobContext::state)).
    pub(super) states: States,
    pub(super) pool: Arc<Pool>,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) clock: Clock,
    pub(super) registration: NodeRegistration,
    /// This node's incarnation and phase, as the cluster stage (a rejoin)
    /// and the node (its shutdown) set them.
    standing: watch::Sender<Standing>,
    /// Set once: stop claiming and starting fires.
    stop: watch::Sender<bool>,
    /// Asks the poller for a poll now.
    pub(super) poll_now: Notify,
    /// The scheduler's nodes as last read (the strategy asks them), as the
    /// cluster stage publishes them.
    pub(super) members: watch::Receiver<Vec<Node>>,
    counters: Tally,
    /// Where what misfired goes, for the poller's one line a poll.
    misfires: mpsc::UnboundedSender<Misfired>,
    /// What the node holds of its fires in flight.
    pub(super) flights: Flights,
    /// When, on the node's monotonic clock ([`Clock::mono_ms`]), it last
    /// sent a heartbeat or registration that the database accepted.
    renewed_ms: AtomicI64,
    /// The scheduler is on standby, as this node last read it (at start,
    /// then at every change): claim nothing.
    standby: AtomicBool,
    /// Where the node's handlers' runs are witnessed, if anywhere
    /// ([`Settings::run_log`]).
    pub(super) run_log: Option<RunLog>,
    /// Links a fire's span to the span that enqueued its work.
    pub(super) span_linker: Option<super::SpanLinker>,
}

/// What a node starts its context from.
pub(super) struct Parts {
    pub(super) store: SharedStore,
    pub(super) scheduler: String,
    pub(super) settings: Settings,
    pub(super) handlers: HashMap<String, Handler>,
    pub(super) states: States,
    pub(super) pool: Pool,
    pub(super) clock: Clock,
    pub(super) registration: NodeRegistration,
    pub(super) node: Node,
    /// The membership as the cluster stage publishes it.
    pub(super) members: watch::Receiver<Vec<Node>>,
    /// When its registration was sent, on its monotonic clock.
    pub(super) registered_at: i64,
    /// Whether the scheduler was on standby when the node started.
    pub(super) standby: bool,
    /// Its run log, if it keeps one.
    pub(super) run_log: Option<RunLog>,
    /// Where what misfired goes (the poller reads it).
    pub(super) misfires: mpsc::UnboundedSender<Misfired>,
    /// The jobs as the poller publishes them.
    pub(super) latest_jobs: watch::Receiver<super::flight::LatestJobs>,
    /// Links a fire's span to the span that enqueued its work.
    pub(super) span_linker: Option<super::SpanLinker>,
}

impl Ctx {
    pub(super) fn new(parts: Parts) -> Ctx {
        let me = NodeRef {
            node_id: parts.node.node_id.clone(),
            incarnation: parts.node.incarnation,
        };
        Ctx {
            store: parts.store,
            scheduler: parts.scheduler,
            settings: parts.settings,
            handlers: parts.handlers,
            states: parts.states,
            pool: Arc::new(parts.pool),
            runtime: tokio::runtime::Handle::current(),
            clock: parts.clock,
            registration: parts.registration,
            standing: watch::channel(Standing {
                node: me,
                phase: Phase::Running,
            })
            .0,
            stop: watch::channel(false).0,
            poll_now: Notify::new(),
            members: parts.members,
            counters: Tally::default(),
            misfires: parts.misfires,
            flights: Flights::new(parts.latest_jobs),
            renewed_ms: AtomicI64::new(parts.registered_at),
            standby: AtomicBool::new(parts.standby),
            run_log: parts.run_log,
            span_linker: parts.span_linker,
        }
    }

    /// Writes a line to the run log, if the node keeps one: `event` is
    /// given the node's estimate of database time and its own clock.
    pub(super) fn note(&self, event: impl FnOnce(i64, i64) -> RunEvent) {
        if let Some(log) = &self.run_log {
            log.write(&event(self.clock.db_now().as_millis(), self.clock.local_ms()));
        }
    }

    /// Whether the scheduler is on standby, as this node last read it.
    pub(super) fn on_standby(&self) -> bool {
        self.standby.load(Ordering::Relaxed)
    }

    /// The scheduler's standby as just read (`since`: since when, or
    /// `None`); a resume asks for a poll at once.
    pub(super) fn standby_read(&self, since: Option<Timestamp>) {
        let on = since.is_some();
        if self.standby.swap(on, Ordering::Relaxed) != on {
            match since {
                Some(since) => tracing::info!(scheduler = self.scheduler, %since,
                    "the scheduler is on standby: no fire is claimed until it resumes"),
                None => tracing::info!(scheduler = self.scheduler, "the scheduler resumed"),
            }
            self.poll_now.notify_one();
        }
    }

    /// The database accepted this node's heartbeat or registration sent at
    /// `sent` ([`Clock::mono_ms`]): its lease runs from then.
    pub(super) fn renewed(&self, sent: i64) {
        self.renewed_ms.fetch_max(sent, Ordering::Relaxed);
    }

    /// When the last accepted renewal was sent ([`Clock::mono_ms`]).
    pub(super) fn renewed_at(&self) -> i64 {
        self.renewed_ms.load(Ordering::Relaxed)
    }

    /// The node's membership lease: three quarters of `dead_after`.
    /// Another node may declare this one dead once its heartbeat is
    /// `dead_after` old (by the database's clock, from the heartbeat's
    /// commit, which comes after its send); counted here on the node's own
    /// monotonic clock from the send of the last renewal the database
    /// accepted, a lease that has run out leaves a quarter of `dead_after`
    /// before that can happen (for the clocks' rates, and for the handlers
    /// to hear they must stop). Half, as it was, fenced every node of a
    /// test cluster (`dead_after` 1.5 s) whenever a loaded database held
    /// their heartbeats 0.8 s, stopping handlers no one could yet take
    /// over.
    pub(super) fn lease_ms(&self) -> i64 {
        duration_ms(self.settings.dead_after) * 3 / 4
    }

    /// Whether this node holds its lease: it renewed its membership within
    /// [`Ctx::lease_ms`]. While it does, a fire the database marked running
    /// for this incarnation may start without asking it again. Past it (a
    /// network that drops packets, a stalled connection, a database that
    /// stopped answering), the node assumes it may be declared dead, runs
    /// nothing the database has not confirmed as still its own, and asks
    /// its running handlers to stop ([`super::cluster`]'s lease watch).
    pub(super) fn membership_fresh(&self) -> bool {
        self.clock.mono_ms() - self.renewed_at() < self.lease_ms()
    }

    /// Whether this node holds its lease ([`Ctx::membership_fresh`]) as
    /// `owner`, the incarnation a fire was started under: a node declared
    /// dead and registered again holds its lease as its new incarnation
    /// only, and a fire its old one started must be confirmed by the
    /// database (which refuses it) before it runs.
    pub(super) fn holds_lease_as(&self, owner: &NodeRef) -> bool {
        self.membership_fresh() && self.is_current(owner)
    }

    /// Whether `owner` is this node's current incarnation.
    pub(super) fn is_current(&self, owner: &NodeRef) -> bool {
        self.standing.borrow().node.incarnation == owner.incarnation
    }

    /// This node's id and current incarnation.
    pub(super) fn node(&self) -> NodeRef {
        self.standing.borrow().node.clone()
    }

    /// A part of `period`, the same for this incarnation and `what` every
    /// time, different from node to node: how long a periodic task of this
    /// node waits once, after its first round, so that nodes started
    /// together do not run it in step (three nodes' polls, or orphan sweeps,
    /// at the same moment made the database's busiest seconds).
    pub(super) fn out_of_step(&self, what: &str, period: Duration) -> Duration {
        part_of(period, what, &self.node())
    }

    /// This node registered again, under a new incarnation.
    pub(super) fn set_node(&self, node: NodeRef) {
        self.standing.send_modify(|s| s.node = node);
    }

    pub(super) fn phase(&self) -> Phase {
        self.standing.borrow().phase
    }

    pub(super) fn set_phase(&self, phase: Phase) {
        self.standing.send_modify(|s| s.phase = phase);
    }

    /// Moves to shutting down; `false` when the node is stopping already.
    pub(super) fn begin_shutdown(&self) -> bool {
        self.standing.send_if_modified(|s| {
            if matches!(s.phase, Phase::ShuttingDown | Phase::Stopped) {
                return false;
            }
            s.phase = Phase::ShuttingDown;
            true
        })
    }

    pub(super) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Stops claiming and starting fires, for good.
    pub(super) fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// The stop signal, for a task that waits on it.
    pub(super) fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Waits until the node stops.
    pub(super) async fn stopped(&self) {
        let _ = self.stop.subscribe().wait_for(|s| *s).await;
    }

    /// Updates the node's counters, and records what was added as metrics.
    pub(super) fn count(&self, f: impl FnOnce(&mut Counters)) {
        let mut added = Counters::default();
        f(&mut added);
        self.counters.add(&added);
        super::metrics::counted(&self.scheduler, &added);
    }

    /// A handler's outcome counted, as a metric by handler (and job, when
    /// the settings ask), and a failure logged.
    pub(super) fn outcome_seen(&self, run: &super::run::RunFire, outcome: &Outcome) {
        let succeeded = *outcome == Outcome::Succeeded;
        self.count(|c| {
            if succeeded {
                c.succeeded += 1;
            } else {
                c.failed += 1;
            }
        });
        let job = self.settings.metrics_job_label.then_some(run.job.spec.name.as_str());
        let what = if succeeded { "succeeded" } else { "failed" };
        super::metrics::outcome(&self.scheduler, &run.job.spec.handler, job, what);
        if let Outcome::Failed { error } = outcome {
            tracing::warn!(
                scheduler = self.scheduler,
                job = run.job.spec.name,
                fire_id = run.fire_id,
                attempt = run.attempt,
                error,
                "fire failed"
            );
        }
    }

    pub(super) fn counters(&self) -> Counters {
        self.counters.read()
    }

    /// Reads the database clock and corrects the node's offset to it.
    pub(super) async fn db_now(&self) -> Result<Timestamp, StoreError> {
        let asked = self.clock.local_ms();
        let now = self.store.now().await?;
        self.clock.observe(now, asked);
        Ok(now)
    }

    /// The jobs with these ids, by id.
    pub(super) async fn jobs(&self, ids: impl Iterator<Item = i64>) -> Result<HashMap<i64, Arc<Job>>, StoreError> {
        let ids: Vec<i64> = ids.collect();
        let jobs = self.store.jobs_by_id(&ids).await?;
        Ok(jobs.into_iter().map(|j| (j.id, Arc::new(j))).collect())
    }

    /// Waits for `d`, or until the node stops; `false` when it stopped.
    pub(super) async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            biased;
            () = self.stopped() => false,
            () = tokio::time::sleep(d) => !self.stopping(),
        }
    }

    /// Gives a claimed, unstarted fire back, for any node to take at once;
    /// whether it was still this incarnation's to give.
    pub(super) async fn give_back_fire(&self, fire_id: i64, node: &NodeRef) -> Result<bool, StoreError> {
        Ok(self.store.end_fire(fire_id, node, FireEnd::Released).await?.ended())
    }

    /// The lane a job's fires run in: a task for an async handler, the pool
    /// otherwise.
    pub(super) fn lane_of(&self, job: &Job) -> Lane {
        match self.handlers.get(&job.spec.handler) {
            Some(handler) if handler.is_async() => Lane::Task,
            _ => Lane::Pool,
        }
    }

    /// The room a lane has. The pool's: its threads and queue, less what
    /// this node holds; none while every thread is busy (a queued fire would
    /// wait for a thread that long handlers may hold past its time). The
    /// tasks': `async_max` less the fires held for them.
    pub(super) fn room_in(&self, lane: Lane) -> usize {
        match lane {
            Lane::Pool if self.pool.metrics().busy >= self.settings.pool_max => 0,
            Lane::Pool => self
                .flights
                .room
                .left(self.settings.pool_max + self.settings.pool_queue),
            Lane::Task => self.flights.task_room.left(self.settings.async_max),
        }
    }

    /// The room of each lane, by [`Lane`] as index.
    pub(super) fn rooms(&self) -> [usize; 2] {
        [self.room_in(Lane::Pool), self.room_in(Lane::Task)]
    }

    /// The room for a fire of the job with this id: its lane's when the last
    /// poll read the job, else the room of either.
    pub(super) fn room_for_job(&self, job_id: i64) -> usize {
        let lane = match self.flights.latest_job(job_id) {
            Some(Some(job)) => Some(self.lane_of(&job)),
            _ => None,
        };
        lane.map_or_else(|| self.rooms().into_iter().sum(), |lane| self.room_in(lane))
    }

    /// A place in the room of a job's lane, for a fire of it.
    pub(super) fn hold(&self, job: &Job) -> Hold {
        match self.lane_of(job) {
            Lane::Pool => self.flights.room.hold(),
            Lane::Task => self.flights.task_room.hold(),
        }
    }

    /// `fires` fire times of `job` misfired, handled by `policy`: said in
    /// the poll's one line.
    pub(super) fn misfired(&self, job: &str, policy: &'static str, fires: u64) {
        let _ = self.misfires.send(Misfired {
            job: job.to_owned(),
            policy,
            fires,
        });
    }
}

/// This node's incarnation and phase.
#[derive(Debug)]
struct Standing {
    node: NodeRef,
    phase: Phase,
}

macro_rules! tally {
    ($($field:ident),* $(,)?) => {
        /// The node's [`Counters`], a cell each: every stage adds to them
        /// at once, none waits for another.
        #[derive(Debug, Default)]
        struct Tally {
            $($field: AtomicU64,)*
        }

        impl Tally {
            fn add(&self, added: &Counters) {
                $(if added.$field > 0 {
                    self.$field.fetch_add(added.$field, Ordering::Relaxed);
                })*
            }

            fn read(&self) -> Counters {
                Counters {
                    $($field: self.$field.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

tally!(
    polls,
    claimed,
    lost,
    succeeded,
    failed,
    rejected,
    misfires,
    fenced,
    recovered,
    recomputed,
    chained,
    timed_out,
    dropped,
    held_past_timeout,
    lease_lost,
    purged,
);

/// The release of an execute a fire held in the running state (a fixed-delay
/// trigger awaiting its finish, or a job that disallows concurrency): back to
/// waiting, or complete when nothing follows; a fixed-delay trigger's next fire
/// is one delay after `now`.
pub(super) fn release_cas(
    execute_id: i64,
    trigger: &Trigger,
    held: &TriggerState,
    owner: Option<NodeRef>,
    now: Timestamp,
) -> ExecuteCas {
    let next = if held.awaiting_finish {
        trigger.next_after_finish(now)
    } else {
        held.next_fire_time
    };
    ExecuteCas {
        execute_id,
        expect_state: ExecuteState::Running,
        expect: held.clone(),
        expect_owner: owner,
        set_state: waiting_or_complete(next),
        set: TriggerState {
            next_fire_time: next,
            awaiting_finish: false,
            ..held.clone()
        },
        set_owner: None,
        set_trigger: None,
        set_signature: None,
    }
}

/// Waiting when a fire follows, complete otherwise.
pub(super) fn waiting_or_complete(next: Option<Timestamp>) -> ExecuteState {
    if next.is_some() {
        ExecuteState::Waiting
    } else {
        ExecuteState::Complete
    }
}

/// The first fire time at or after `now` of a row whose schedule is new or was
/// edited (a repeat limit already reached completes it).
pub(super) fn first_at_or_after(trigger: &Trigger, state: &TriggerState, now: Timestamp) -> Option<Timestamp> {
    trigger.first_at_or_after(state, now)
}

pub(super) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// [`Ctx::out_of_step`]: a part of `period` in 1,024ths, from `what` and
/// the node's incarnation, hashed as the strategy hashes node ids (the
/// same part on every run).
fn part_of(period: Duration, what: &str, node: &NodeRef) -> Duration {
    use super::strategy::{fnv, mix};
    let h = mix(fnv(what.as_bytes()) ^ fnv(node.node_id.as_bytes()) ^ node.incarnation.cast_unsigned());
    period.mul_f64((h % 1024) as f64 / 1024.0)
}

pub(super) async fn sleep_until_or_forever(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fixed::HashSet;

    #[test]
    fn nodes_started_together_take_parts_of_a_period_of_their_own() {
        let period = Duration::from_secs(5);
        let node = |i: i64| NodeRef {
            node_id: format!("node-{}", i % 3),
            incarnation: 1_795_768_308_289 + i,
        };
        let parts: Vec<Duration> = (0..30).map(|i| part_of(period, "poll", &node(i))).collect();
        assert!(parts.iter().all(|p| *p < period), "{parts:?}");
        assert_eq!(parts[7], part_of(period, "poll", &node(7)), "the same every time");
        let distinct: HashSet<Duration> = parts.iter().copied().collect();
        assert!(distinct.len() >= 25, "nodes in step: {parts:?}");
        // Spread over the period, not bunched at one end.
        let early = parts.iter().filter(|p| **p < period / 2).count();
        assert!((5..=25).contains(&early), "{parts:?}");
        assert_ne!(part_of(period, "poll", &node(1)), part_of(period, "recovery", &node(1)));
    }
}
