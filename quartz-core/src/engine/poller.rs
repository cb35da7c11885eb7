//! The poller: every poll interval (or at once when a change is signalled),
//! the executes due within the window, with their jobs; each expanded into
//! its fire times inside the window ([`super::queue`]). Rows written by hand
//! are initialised or recomputed here, once, by compare-and-set; overdue rows
//! go to their misfire policy, decided in bulk and written together.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::Instrument as _;

use super::backlog::PENDING_BATCH;
use super::context::{Ctx, RECOVERY_BATCH, duration_ms, waiting_or_complete};
use super::fixed::{HashMap, HashSet};
use super::flight::LatestJobs;
use super::misfires::{MisfireReport, Misfired};
use super::queue::FireQueue;
use super::row_write::{Decision, RowWrite, WriteKind, recompute};
use super::run::PendingFire;
use super::status::Phase;
use super::strategy::tries_first;
use crate::misfire::MisfireDecision;
use crate::store::{
    Claim, DueBatch, Execute, ExecuteCas, ExecuteState, FireEnd, FireState, Job, JobState, SkippedRecord, StoreError,
};
use crate::time::Timestamp;
use crate::trigger::{Fire, NextFire, Overlap, Trigger, TriggerState};

/// How long the poller waits before the next poll when a batch came back full.
const FULL_BATCH_REPOLL: Duration = Duration::from_millis(50);
/// The most batches of due executes one poll reads; past them (more than
/// `POLL_BATCHES * batch_size` executes due within the window), the next
/// poll comes at once.
const POLL_BATCHES: usize = 8;
/// How many due executes a poll expands between two yields to the runtime.
const YIELD_EVERY: usize = 64;
/// How far past the next poll a poll looks, for the time a poll takes.
const WINDOW_SLACK_MS: i64 = 500;

/// The poller stage: it fills the queue the dispatcher takes from, and
/// hands the pending fires it finds to the backlog.
pub(super) struct Poller {
    ctx: Arc<Ctx>,
    queue: Arc<FireQueue>,
    /// Where the pending fires a poll finds go (the backlog).
    pending: mpsc::UnboundedSender<PendingFire>,
    /// Where the jobs whose successes start chains are published (the
    /// recorder reads them).
    parents: watch::Sender<HashSet<i64>>,
    /// Where the jobs a poll read are published (the launch stage runs a
    /// claimed fire with its job as last read).
    latest_jobs: watch::Sender<LatestJobs>,
    /// What the stages say misfired, summed up in one line a poll.
    misfires: MisfireReport,
    /// Jobs whose handler this node lacks, said once each.
    warned: HashSet<String>,
    /// How long the last poll took (the window reaches past the next poll
    /// by twice that).
    took: Duration,
}

impl Poller {
    pub(super) fn new(
        ctx: Arc<Ctx>,
        queue: Arc<FireQueue>,
        pending: mpsc::UnboundedSender<PendingFire>,
        parents: watch::Sender<HashSet<i64>>,
        misfires: mpsc::UnboundedReceiver<Misfired>,
        latest_jobs: watch::Sender<LatestJobs>,
    ) -> Poller {
        Poller {
            ctx,
            queue,
            pending,
            parents,
            misfires: MisfireReport::new(misfires),
            latest_jobs,
            warned: HashSet::default(),
            took: Duration::ZERO,
        }
    }

    pub(super) async fn run(mut self) {
        let mut stop = self.ctx.stop_signal();
        // After the first poll, a part of the interval of this node's own:
        // nodes started together poll out of step from then on.
        let mut phase = Some(self.ctx.out_of_step("poll", self.ctx.settings.poll_interval));
        loop {
            if self.ctx.stopping() {
                return;
            }
            let began = tokio::time::Instant::now();
            let span = tracing::debug_span!("poll", scheduler = self.ctx.scheduler);
            let polled = self.poll().instrument(span).await;
            self.took = began.elapsed();
            self.misfires.say(&self.ctx.scheduler);
            let full = match polled {
                Ok((full, rows)) => {
                    super::metrics::polled(&self.ctx.scheduler, began.elapsed(), rows);
                    full
                }
                Err(e) => {
                    tracing::warn!(scheduler = self.ctx.scheduler, error = %e, "poll failed; retrying at the next tick");
                    false
                }
            };
            let wait = if full {
                FULL_BATCH_REPOLL
            } else {
                phase.take().unwrap_or(self.ctx.settings.poll_interval)
            };
            let asked = tokio::select! {
                biased;
                () = tokio::time::sleep(wait) => false,
                () = self.ctx.poll_now.notified() => true,
                _ = stop.wait_for(|s| *s) => return,
            };
            // Asked to poll again now: not sooner than a short gap after
            // the last poll began. A claim refused without moving its row (a
            // job that disallows concurrency, under a limit, while a fire of
            // it runs) asks for a poll at once, which finds the same fire
            // due and is refused again: without the gap, a hot loop of polls
            // and claims until the running fire ends (the simulator found
            // it, where time stood still).
            let since = began.elapsed();
            if asked && since < FULL_BATCH_REPOLL {
                tokio::time::sleep(FULL_BATCH_REPOLL - since).await;
            }
        }
    }

    /// One poll: `true` when a batch came back full and more may be due, and
    /// how many due executes it read.
    pub(super) async fn poll(&mut self) -> Result<(bool, usize), StoreError> {
        if self.ctx.phase() != Phase::Running {
            return Ok((false, 0));
        }
        if self.ctx.on_standby() {
            // Nothing is queued, and no misfire decided, until the
            // scheduler resumes: then each overdue trigger's policy decides.
            self.queue.clear();
            return Ok((false, 0));
        }
        let db_now = self.ctx.db_now().await?;
        self.ctx.count(|c| c.polls += 1);
        // A fire must be queued before its claim time: the window reaches
        // past the next poll by the claim lead, and by twice what a poll
        // takes (at least the slack).
        let took = i64::try_from(self.took.as_millis()).unwrap_or(i64::MAX / 4);
        let reach = duration_ms(self.ctx.settings.window).max(
            duration_ms(self.ctx.settings.poll_interval)
                + duration_ms(self.ctx.settings.claim_lead)
                + WINDOW_SLACK_MS.max(2 * took),
        );
        let horizon = db_now.saturating_add_millis(reach);
        // Every due execute once, a batch at a time: a poll that read only
        // its first batch again and again would pay for it many times over.
        let mut batch = DueBatch::default();
        let mut full = false;
        let mut after = None;
        for _ in 0..POLL_BATCHES {
            let page = self
                .ctx
                .store
                .due_executes(horizon, after, self.ctx.settings.batch_size)
                .await?;
            full = page.executes.len() + page.rejected.len() >= self.ctx.settings.batch_size as usize;
            after = page.cursor();
            batch.executes.extend(page.executes);
            batch.rejected.extend(page.rejected);
            if !full || after.is_none() {
                break;
            }
        }
        for rejected in &batch.rejected {
            tracing::error!(
                scheduler = self.ctx.scheduler,
                execute_id = rejected.execute_id,
                reason = rejected.reason,
                "execute row cannot be understood: marked as an error and skipped"
            );
        }
        // A row moved by another node between two pages comes back in a
        // later one: only its latest copy counts.
        dedup_latest(&mut batch.executes);
        let parents = self.ctx.store.chain_parents().await?;
        self.parents.send_replace(parents.into_iter().collect());
        let executes = batch.executes.len();
        let jobs = self.read_jobs(&batch.executes).await?;
        let mut writes = Vec::new();
        for (i, execute) in batch.executes.into_iter().enumerate() {
            // Thousands of rows are expanded a poll: the runtime's other
            // tasks (the starts of fires due now) run in between.
            if i % YIELD_EVERY == YIELD_EVERY - 1 {
                tokio::task::yield_now().await;
            }
            let Some(job) = jobs.get(&execute.job_id) else {
                continue; // deleted since
            };
            if self.ctx.stopping() {
                break;
            }
            if !self.ctx.handlers.contains_key(&job.spec.handler) && job.state != JobState::Paused {
                self.unhandled(&execute, job, db_now).await?;
                continue;
            }
            match self.decide(execute, job, db_now) {
                Decision::Queue(execute) => {
                    let trigger = Arc::new(execute.trigger);
                    self.enqueue(execute.id, job, trigger, &execute.fire_state, horizon, None);
                }
                Decision::Write(write) => writes.push(write),
            }
        }
        let decided = writes.len();
        self.write_decisions(writes, db_now, horizon).await?;
        for fire in self.ctx.store.fires_pending(horizon, PENDING_BATCH).await? {
            let _ = self.pending.send(PendingFire::of(&fire));
        }
        tracing::debug!(scheduler = self.ctx.scheduler, executes, decided, full, "polled");
        Ok((full, executes))
    }

    /// Queues the fires of an execute before `horizon` that are not queued yet.
    /// Fires at or before `late_ok_until` are claimed however late they are
    /// (a misfire policy's runs).
    pub(super) fn enqueue(
        &self,
        execute_id: i64,
        job: &Arc<Job>,
        trigger: Arc<Trigger>,
        state: &TriggerState,
        horizon: Timestamp,
        late_ok_until: Option<Timestamp>,
    ) {
        let overlap = Overlap::effective(trigger.overlap(), job.spec.allow_concurrent);
        let blocks = overlap.is_none();
        let fires: Vec<Fire> = trigger
            .fires_until(state, horizon)
            // A job that disallows concurrency blocks its execute until the run
            // finishes: only its next fire can be claimed.
            .take(if blocks { 1 } else { usize::MAX })
            .collect();
        if fires.is_empty() {
            return;
        }
        // Due a claim lead ahead when the strategy prefers this node (asked
        // on the membership as it is now, and again by the dispatcher at
        // the claim); a strategy grace later when it prefers another.
        // Under an overlap policy or a concurrency limit the claim decides
        // whether the fire runs, waits or is skipped from what runs at the
        // claim: claimed at its time, not a claim lead before.
        let lead = if overlap.is_some_and(|o| o != Overlap::Allow) || job.spec.limit.is_some() {
            0
        } else {
            duration_ms(self.ctx.settings.claim_lead)
        };
        let placed = (job, self.ctx.lane_of(job));
        let me = self.ctx.node().node_id;
        let theirs = !tries_first(self.ctx.settings.strategy, &self.ctx.members.borrow(), &me, execute_id);
        let wait = if theirs {
            duration_ms(self.ctx.settings.strategy_grace) - lead
        } else {
            -lead
        };
        let claim_at = |t: Timestamp| t.saturating_add_millis(wait);
        self.queue
            .push_placed(execute_id, placed, theirs, &trigger, (fires, claim_at), late_ok_until);
    }

    /// The jobs of the polled executes, and of fires claimed and not launched
    /// yet (so that a pause or delete since their claim is seen), by id; the
    /// launch stage keeps them as the latest versions.
    async fn read_jobs(&self, executes: &[Execute]) -> Result<HashMap<i64, Arc<Job>>, StoreError> {
        let awaiting = self.ctx.flights.awaiting_jobs();
        let jobs = self
            .ctx
            .jobs(executes.iter().map(|e| e.job_id).chain(awaiting.iter().copied()))
            .await?;
        let mut latest: LatestJobs = jobs.iter().map(|(id, job)| (*id, Some(Arc::clone(job)))).collect();
        for id in awaiting {
            latest.entry(id).or_insert(None);
        }
        self.latest_jobs.send_replace(latest);
        Ok(jobs)
    }

    /// What a poll does with one due execute: queue its fires, or first move
    /// its row (paused, initialised or recomputed, or overdue), which is
    /// written with the others' in one transaction.
    fn decide(&self, execute: Execute, job: &Arc<Job>, db_now: Timestamp) -> Decision {
        if job.state == JobState::Paused {
            // Paused after this row was read, or written waiting by hand.
            let cas = ExecuteCas::from_row(&execute, ExecuteState::Paused, execute.fire_state.clone());
            return Decision::Write(RowWrite {
                cas,
                records: Vec::new(),
                job: Arc::clone(job),
                then: None,
                kind: WriteKind::Paused,
            });
        }
        // A next fire time its calendar excludes is a checkpoint (a search
        // that passed over its bounded number of excluded runs stopped
        // there, see `Trigger::fire_time_after`) or was computed under the
        // calendar as it was (a fixed-delay row released by a node that had
        // not seen the change): recomputed too (see `recompute`), by a
        // bounded search, so that such a row costs a poll bounded work.
        let excluded = execute
            .fire_state
            .next_fire_time
            .is_some_and(|t| !execute.trigger.calendar_includes(t));
        if execute.schedule_changed
            || excluded
            || (execute.fire_state.next_fire_time.is_none() && !execute.fire_state.awaiting_finish)
        {
            return Decision::Write(recompute(execute, job, db_now));
        }
        match execute
            .trigger
            .on_misfire(&execute.fire_state, db_now, &self.ctx.settings.misfire)
        {
            Some(decision) => Decision::Write(self.overdue(execute, job, db_now, decision)),
            None => Decision::Queue(execute),
        }
    }

    /// An overdue row: the misfire policy's decision, as a row write with the
    /// ledger records of the skipped range.
    fn overdue(&self, execute: Execute, job: &Arc<Job>, db_now: Timestamp, decision: MisfireDecision) -> RowWrite {
        let late_ms = execute
            .fire_state
            .next_fire_time
            .map_or(0, |t| db_now.as_millis() - t.as_millis());
        let catch_up_ms = execute.trigger.catch_up().map_or(0, crate::store::millis_of);
        let beyond = decision.beyond_window.iter().map(|s| SkippedRecord {
            from: s.from,
            until: s.until,
            count: s.count,
            state: FireState::Misfired,
            reason: format!(
                "misfired: found {late_ms} ms late; {}{} missed times older than the trigger's catch-up window \
                 ({catch_up_ms} ms) skipped whatever the policy",
                s.count,
                if s.count_exact { "" } else { " or more" }
            ),
        });
        let records: Vec<SkippedRecord> = beyond
            .chain(decision.skipped.iter().map(|s| SkippedRecord {
                from: s.from,
                until: s.until,
                count: s.count,
                state: FireState::Misfired,
                reason: format!(
                    "misfired: found {late_ms} ms late (threshold {} ms); policy {} ran {} of the missed times, \
                     skipped {}{}",
                    self.ctx.settings.misfire.threshold_ms(),
                    decision.applied,
                    decision.runs.len(),
                    s.count,
                    if s.count_exact { "" } else { " or more" }
                ),
            }))
            .collect();
        let set_state = waiting_or_complete(decision.state.next_fire_time);
        let mut cas = ExecuteCas::from_row(&execute, set_state, decision.state.clone());
        cas.set_trigger.clone_from(&decision.rescheduled);
        let trigger = Arc::new(decision.rescheduled.clone().unwrap_or(execute.trigger));
        RowWrite {
            cas,
            records,
            job: Arc::clone(job),
            then: (set_state == ExecuteState::Waiting).then(|| (trigger, decision.state.clone())),
            kind: WriteKind::Misfire(Box::new(decision)),
        }
    }

    /// Writes a poll's row decisions in one transaction, then queues the
    /// fires of the rows it moved (a misfire policy's runs are claimed
    /// however late they are).
    async fn write_decisions(
        &self,
        writes: Vec<RowWrite>,
        db_now: Timestamp,
        horizon: Timestamp,
    ) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        for w in &writes {
            self.queue.forget(w.cas.execute_id);
        }
        let updates: Vec<(ExecuteCas, Vec<SkippedRecord>)> =
            writes.iter().map(|w| (w.cas.clone(), w.records.clone())).collect();
        let won = self.ctx.store.update_executes(&updates).await?;
        for (write, won) in writes.into_iter().zip(won) {
            if !won {
                continue;
            }
            self.log_write(&write);
            if let Some((trigger, state)) = &write.then {
                let trigger = Arc::clone(trigger);
                self.enqueue(write.cas.execute_id, &write.job, trigger, state, horizon, Some(db_now));
            }
        }
        Ok(())
    }

    fn log_write(&self, write: &RowWrite) {
        let job = &write.job.spec.name;
        let execute_id = write.cas.execute_id;
        match &write.kind {
            WriteKind::Paused => {}
            WriteKind::Recomputed => {
                self.ctx.count(|c| c.recomputed += 1);
                tracing::info!(scheduler = self.ctx.scheduler, job, execute_id,
                    next_fire_time = ?write.cas.set.next_fire_time, "execute's next fire time computed from its schedule");
            }
            WriteKind::Misfire(decision) => {
                self.ctx.count(|c| c.misfires += 1);
                super::metrics::misfire(&self.ctx.scheduler, decision.applied.to_string());
                let skipped = [&decision.skipped, &decision.beyond_window]
                    .iter()
                    .filter_map(|s| s.as_ref())
                    .map(|s| s.count)
                    .sum::<u64>();
                tracing::debug!(
                    scheduler = self.ctx.scheduler,
                    job,
                    execute_id,
                    policy = %decision.applied,
                    runs = decision.runs.len(),
                    skipped,
                    "misfire handled"
                );
                let fires = (decision.runs.len() as u64 + skipped).max(1);
                self.ctx.misfired(job, decision.applied.as_str(), fires);
            }
        }
    }

    /// An execute whose job's handler this node lacks: left to the nodes that
    /// have it; but a fire still unclaimed past the misfire threshold (no live
    /// node has the handler) is claimed and recorded failed, saying so.
    pub(super) async fn unhandled(
        &mut self,
        execute: &Execute,
        job: &Arc<Job>,
        db_now: Timestamp,
    ) -> Result<(), StoreError> {
        if self.warned.insert(job.spec.name.clone()) {
            tracing::warn!(
                scheduler = self.ctx.scheduler,
                job = job.spec.name,
                handler = job.spec.handler,
                "this node has no such handler; leaving the job to nodes that have it"
            );
        }
        let cutoff = Timestamp::from_millis(db_now.as_millis() - self.ctx.settings.misfire.threshold_ms());
        // A fixed-delay fire waits for a finish that never comes: left alone.
        let fires: Vec<Fire> = execute
            .trigger
            .fires_until(&execute.fire_state, cutoff)
            .filter(|f| !matches!(f.next, NextFire::AfterFinish))
            .take(RECOVERY_BATCH as usize)
            .collect();
        if fires.is_empty() {
            return Ok(()); // the usual case: not overdue, others may have it
        }
        let node = self.ctx.node();
        let mut known: Vec<&str> = self.ctx.handlers.keys().map(String::as_str).collect();
        known.sort_unstable();
        let error = format!(
            "no live node ran handler {:?} within the misfire threshold (this node has: {})",
            job.spec.handler,
            known.join(", ")
        );
        for fire in fires {
            let Some(fire_id) = self.ctx.store.claim(&Claim::for_fire(execute.id, &fire, &node)).await? else {
                break; // another node moved the row
            };
            if self
                .ctx
                .store
                .end_fire(fire_id, &node, FireEnd::Refused { reason: error.clone() })
                .await
                .map(|f| f.ended())?
            {
                self.ctx.count(|c| c.failed += 1);
            }
        }
        Ok(())
    }
}

/// Keeps the last copy of each execute, in order.
fn dedup_latest(executes: &mut Vec<Execute>) {
    let mut seen = super::fixed::HashSet::with_capacity_and_hasher(executes.len(), super::fixed::Fixed::default());
    let mut latest: Vec<Execute> = executes.drain(..).rev().filter(|e| seen.insert(e.id)).collect();
    latest.reverse();
    *executes = latest;
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cron::CronExpression;
    use crate::trigger::Schedule;

    fn execute(id: i64, next_ms: i64) -> Execute {
        let cron = CronExpression::parse("* * * * * ?").unwrap();
        let trigger = Trigger::new(Schedule::cron(cron, chrono_tz::UTC), Timestamp::from_millis(0)).unwrap();
        Execute {
            id,
            job_id: 1,
            scheduler: "s".to_owned(),
            fire_state: TriggerState {
                next_fire_time: Some(Timestamp::from_millis(next_ms)),
                ..TriggerState::initial(&trigger)
            },
            trigger,
            priority: 0,
            state: ExecuteState::Waiting,
            owner: None,
            error: None,
            schedule_changed: false,
        }
    }

    #[test]
    fn a_row_read_twice_by_one_poll_counts_once_as_last_read() {
        // Row 2 moved by another node between two pages: read at 1 s, then
        // at 3 s.
        let mut rows = vec![
            execute(1, 1_000),
            execute(2, 1_000),
            execute(3, 2_000),
            execute(2, 3_000),
        ];
        dedup_latest(&mut rows);
        let kept: Vec<(i64, i64)> = rows
            .iter()
            .map(|e| (e.id, e.fire_state.next_fire_time.unwrap().as_millis()))
            .collect();
        assert_eq!(kept, [(1, 1_000), (3, 2_000), (2, 3_000)]);
    }
}
