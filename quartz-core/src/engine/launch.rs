//! The launcher: from a won fire to its fenced start, then to the runner
//! at its fire time.
//!
//! The fires won for one fire time wait together. A start lead before their
//! time (twice the recent duration of the start statement, plus a margin,
//! and twice the time their number takes at the start's measured pace)
//! one fenced statement marks them all running, each with `started_at` =
//! the later of the database's now and its fire time; at the fire time (on
//! the node's estimate of the database clock, which never runs ahead) they
//! go to the runner, which hands each to its lane ([`super::runner`]). The
//! handler starts only after its fire is marked running, so after any crash
//! the ledger can tell that it may have started; a node that dies between
//! the start and the fire time leaves fires the ledger says may have
//! started, which recovery treats as such (re-run when the job requests
//! recovery, abandoned otherwise).
//!
//! A lane is never asked for more than it can take: the dispatcher claims
//! no more fires than its room (see [`super::flight`]), counting every fire
//! this node holds until its handler returns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use super::context::{Ctx, duration_ms, sleep_until_or_forever};
use super::fixed::{HashMap, HashSet};
use super::launch_handle::Inbox;
use super::pace::{Pace, Shortfall, smooth};
use super::run::RunFire;
use super::runner::Runner;
use crate::store::{FireEnd, JobState, NodeRef, StoreError};
use crate::time::Timestamp;

/// The start lead's bounds, and its margin over twice the statement's time.
const START_LEAD_MIN: Duration = Duration::from_millis(5);
const START_LEAD_MAX: Duration = Duration::from_millis(1_000);
const START_LEAD_MARGIN: Duration = Duration::from_millis(3);
/// How many times the start statement is tried, and the first pause between
/// tries (doubled each time).
const START_TRIES: u32 = 5;
const START_RETRY: Duration = Duration::from_millis(25);
/// The longest wait between two questions about fires whose start went
/// unanswered ([`Launcher::settle`]).
const SETTLE_WAIT_MAX: Duration = Duration::from_secs(2);

/// The fires of one fire time waiting for their start.
#[derive(Debug, Default)]
struct Starting {
    runs: Vec<RunFire>,
    /// Whether they waited for their start lead: only then does the
    /// start's end say the lead was short (not when the fires were won
    /// after it).
    waited: bool,
}

/// How late a fire started, when that is past the threshold that applies.
fn late_past_limit(run: &RunFire, threshold_ms: i64, started_at: Timestamp) -> Option<i64> {
    let late_ms = started_at.as_millis() - run.fire_time.as_millis();
    run.misfire_limit(threshold_ms)
        .is_some_and(|limit| late_ms > limit)
        .then_some(late_ms)
}

/// Twice the smoothed duration plus a margin, within bounds.
fn start_lead(smoothed_micros: u64) -> Duration {
    let lead = Duration::from_micros(smoothed_micros.saturating_mul(2)) + START_LEAD_MARGIN;
    lead.clamp(START_LEAD_MIN, START_LEAD_MAX)
}

/// The launch stage: a loop that owns the won fires waiting for their
/// start, by fire time, and what the starts fell short by lately; each
/// fire time's start runs as a task of its own ([`Starter`]).
pub(super) struct Launcher {
    starter: Arc<Starter>,
    /// Won fires (and a chain's children), from [`Launch`].
    inbox: Inbox,
    /// How far past their fire time the starts begun at their lead ended.
    ended: mpsc::UnboundedReceiver<(i64, Timestamp)>,
    /// Won fires waiting for their start, by fire time: each fire time's
    /// start begins a start lead ahead that grows with how many there are.
    starting: BTreeMap<Timestamp, Starting>,
    /// How far the starts of a fire time have ended past it lately, though
    /// begun at their lead: added to the lead.
    shortfall: Shortfall,
}

/// The start of one fire time's fires, a task each: what the starts share
/// is the measure of the start statement.
struct Starter {
    ctx: Arc<Ctx>,
    /// Where started fires go.
    runner: Arc<Runner>,
    /// The start statement's recent duration, smoothed, in microseconds.
    start_micros: AtomicU64,
    /// The start statement's cost per fire.
    start_pace: Pace,
    /// Where a start begun at its lead says how far past its fire time it
    /// ended (the launcher's shortfall).
    ended: mpsc::UnboundedSender<(i64, Timestamp)>,
}

impl Launcher {
    /// The launch stage of a node, taking the fires of the [`Launch`]
    /// handles made with `inbox`.
    pub(super) fn new(ctx: Arc<Ctx>, runner: Arc<Runner>, inbox: Inbox) -> Launcher {
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let starter = Arc::new(Starter {
            ctx,
            runner,
            start_micros: AtomicU64::default(),
            start_pace: Pace::default(),
            ended: ended_tx,
        });
        Launcher {
            starter,
            inbox,
            ended,
            starting: BTreeMap::new(),
            shortfall: Shortfall::default(),
        }
    }

    /// Takes won fires and starts each fire time's a start lead ahead,
    /// until the node stops.
    pub(super) async fn run(mut self) {
        let ctx = Arc::clone(&self.starter.ctx);
        let mut stop = ctx.stop_signal();
        loop {
            let wake = self.start_due().map(|t| ctx.clock.instant_of(t));
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                Some((over_ms, at)) = self.ended.recv() => self.shortfall.observe(over_ms, at, START_LEAD_MAX),
                won = self.inbox.recv() => match won {
                    Some((fire_time, runs)) => self.join(fire_time, runs),
                    None => return,
                },
                () = sleep_until_or_forever(wake) => {}
            }
        }
    }

    /// Fires won for `fire_time` join those waiting for it.
    fn join(&mut self, fire_time: Timestamp, runs: Vec<RunFire>) {
        self.starting.entry(fire_time).or_default().runs.extend(runs);
    }

    /// Starts the fire times whose start lead has come (measured again each
    /// time, for as many fires as wait then), each on a task of its own;
    /// returns when the next one's comes.
    fn start_due(&mut self) -> Option<Timestamp> {
        let now = self.starter.ctx.clock.db_now();
        let shortfall = self.shortfall.at(now);
        let early = crate::mutants::on("start-early");
        // No lead is longer than the longest: fire times past that wait.
        let reach = now.saturating_add_millis(i64::try_from(START_LEAD_MAX.as_millis()).unwrap_or(0));
        let mut next: Option<Timestamp> = None;
        let mut due = Vec::new();
        for (fire_time, waiting) in self.starting.range_mut(..=reach) {
            let lead = i64::try_from(self.starter.start_lead(waiting.runs.len(), shortfall).as_millis()).unwrap_or(0);
            let start_at = fire_time.saturating_add_millis(-lead);
            if start_at <= now || early {
                due.push(*fire_time);
            } else {
                waiting.waited = true;
                next = Some(next.map_or(start_at, |n| n.min(start_at)));
            }
        }
        if let Some(later) = self.starting.keys().find(|t| **t > reach) {
            let at = later.saturating_add_millis(-i64::try_from(START_LEAD_MAX.as_millis()).unwrap_or(0));
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        for fire_time in due {
            if let Some(waiting) = self.starting.remove(&fire_time) {
                tokio::spawn(Arc::clone(&self.starter).start_then_submit(fire_time, waiting));
            }
        }
        next
    }
}

impl Starter {
    /// How far ahead of the fire time the start of `fires` fires due
    /// together is issued: twice a start statement's recent time plus a
    /// margin, and twice the time their number takes at the start's pace.
    /// The pace is an average, and the starts of a second's fires meet every
    /// other node's at that second: on MariaDB at 5,000 fires a second, a
    /// lead of once the pace left a few hundred of a node's 1,700 fires
    /// started up to 190 ms late in a third of the seconds. Averages miss
    /// the seconds when the database is busy with other work too (another
    /// node's poll of 10,000 executes): what the starts fell short by lately
    /// (`shortfall`) is added.
    fn start_lead(&self, fires: usize, shortfall: Duration) -> Duration {
        let statement = start_lead(self.start_micros.load(Ordering::Relaxed));
        (statement + self.start_pace.of(fires) * 2 + shortfall).min(START_LEAD_MAX)
    }

    /// Folds one start statement's duration into the average.
    fn observe_start(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .start_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| Some(smooth(old, took)));
    }

    /// The start of one fire time's fires, their lead come: marks them
    /// running and hands them over at their time. Fires won after it took
    /// them have a start of their own, which begins at once.
    async fn start_then_submit(self: Arc<Self>, fire_time: Timestamp, waiting: Starting) {
        let Starting { runs, waited: on_lead } = waiting;
        if self.ctx.stopping() {
            return; // the shutdown gives them back
        }
        let runs = self.ready(runs);
        if runs.is_empty() {
            return;
        }
        let started = self.start_fenced(runs).await;
        let ended = self.ctx.clock.db_now();
        if on_lead {
            let _ = self.ended.send((ended.as_millis() - fire_time.as_millis(), ended));
        }
        if fire_time > ended && !crate::mutants::on("start-early") {
            tokio::time::sleep_until(self.ctx.clock.instant_of(fire_time)).await;
        }
        let (fires, handed_from) = (started.len(), self.ctx.clock.db_now());
        for run in started {
            self.runner.submit(run);
        }
        tracing::debug!(
            scheduler = self.ctx.scheduler,
            node = self.ctx.node().node_id,
            fires,
            started_by_ms = ended.as_millis() - fire_time.as_millis(),
            handed_from_ms = handed_from.as_millis() - fire_time.as_millis(),
            handed_until_ms = self.ctx.clock.db_now().as_millis() - fire_time.as_millis(),
            "handed over"
        );
    }

    /// The fires still to run: a fire whose job was paused or deleted since
    /// its claim is recorded skipped, and one whose job was edited runs the
    /// new version.
    fn ready(self: &Arc<Self>, runs: Vec<RunFire>) -> Vec<RunFire> {
        let mut ready = Vec::with_capacity(runs.len());
        for mut run in runs {
            if let Some(reason) = self.refresh_job(&mut run) {
                tokio::spawn(Arc::clone(self).skip_unstarted(run, reason));
            } else if self.ctx.handlers.contains_key(&run.job.spec.handler) {
                ready.push(run);
            }
        }
        ready
    }

    /// The fenced start of fires due together, one statement (refused for a
    /// fire this incarnation no longer owns, or when it is no longer live);
    /// returns the started ones. A fire that did not start is given back; one
    /// whose recorded start is past the misfire threshold goes to its policy.
    async fn start_fenced(self: &Arc<Self>, runs: Vec<RunFire>) -> Vec<RunFire> {
        // Fenced by the incarnation that claimed them, never by a later one
        // of this node: a fire claimed before the node was declared dead and
        // rejoined may have been taken over since, by that later incarnation
        // too, whose own launch of it is the one that must run.
        let mut by_owner: HashMap<NodeRef, Vec<RunFire>> = HashMap::default();
        let mut seen = HashSet::default();
        for run in runs {
            // One start statement answers for a fire once: a second launch
            // of it in the batch would run beside the first.
            if !seen.insert(run.fire_id) {
                tracing::warn!(
                    scheduler = self.ctx.scheduler,
                    fire_id = run.fire_id,
                    "a fire launched twice at once; started once"
                );
                continue;
            }
            by_owner.entry(run.node.clone()).or_default().push(run);
        }
        let mut ready = Vec::new();
        for (owner, mut runs) in by_owner {
            // A statement each of at most a claim batch's size.
            while !runs.is_empty() {
                let rest = runs.split_off(runs.len().min(self.ctx.settings.claim_batch));
                ready.extend(self.start_owned(&owner, runs).await);
                runs = rest;
            }
        }
        ready
    }

    /// [`Self::start_fenced`] for the fires of one incarnation.
    async fn start_owned(self: &Arc<Self>, node: &NodeRef, runs: Vec<RunFire>) -> Vec<RunFire> {
        // No start without the lease: a node whose renewals have not gone
        // through within it may be declared dead any moment, and its
        // running fires run again elsewhere. The database still calling it
        // live is no answer (it declares the node dead only at dead_after,
        // and a fire started just before then ran twice: the simulator's
        // seed 91, a node cut off and back). Its fires wait for a renewal
        // (or for the database to fence them, once the node is declared
        // dead); a node that stops meanwhile gives them back.
        let lease_wait = tokio::time::Instant::now();
        while !self.ctx.membership_fresh() {
            if !self.ctx.pause(super::context::LEASE_WAIT).await {
                return Vec::new();
            }
        }
        let lease_wait = lease_wait.elapsed();
        let ids: Vec<i64> = runs.iter().map(|r| r.fire_id).collect();
        // Counted before the statement: a shutdown from here on waits. The
        // fires stay known as unstarted until the answer, so that the sweep
        // for claims this node lost track of leaves them alone meanwhile.
        self.ctx.flights.started(runs.len());
        let asked = tokio::time::Instant::now();
        let (started, error) = self.mark_running(&ids, node).await;
        tracing::debug!(
            scheduler = self.ctx.scheduler,
            node = node.node_id,
            fires = ids.len(),
            ms = duration_ms(asked.elapsed()),
            lease_wait_ms = duration_ms(lease_wait),
            "marked running"
        );
        self.ctx.flights.not_unstarted(ids.iter().copied());
        let mut ready = Vec::with_capacity(started.len());
        let mut refused = 0;
        let mut unsettled = Vec::new();
        // The start the statement recorded is its time when it ran; a
        // commit that waited (a database whose commits hang) comes later,
        // and the handlers with it: judged by the answer's time, too.
        let answered_at = self.ctx.clock.db_now();
        for mut run in runs {
            let Some(&started_at) = started.get(&run.fire_id) else {
                if error.is_some() {
                    unsettled.push(run);
                } else {
                    refused += 1;
                }
                continue;
            };
            run.marked_at = Some(started_at);
            let judged_at = started_at.max(answered_at);
            match late_past_limit(&run, self.ctx.settings.misfire.threshold_ms(), judged_at) {
                Some(late_ms) => {
                    let (runner, ctx) = (Arc::clone(&self.runner), Arc::clone(&self.ctx));
                    tokio::spawn(async move {
                        let cause = format!("started {late_ms} ms after its time");
                        runner.misfired(run, &cause, false).await;
                        ctx.flights.ended(1);
                    });
                }
                None => ready.push(run),
            }
        }
        super::metrics::started(&self.ctx.scheduler, ready.len());
        if let Some(e) = error {
            tracing::warn!(scheduler = self.ctx.scheduler, fires = unsettled.len(), error = %e,
                "could not mark fires running, nor learn whether they were: settling them");
            tokio::spawn(Arc::clone(self).settle(node.clone(), unsettled));
        }
        self.ctx.flights.ended(refused);
        if refused > 0 {
            self.ctx.count(|c| c.fenced += refused as u64);
            tracing::warn!(
                scheduler = self.ctx.scheduler,
                fires = refused,
                "fires not started: no longer claimed by this incarnation (taken over by recovery, or \
                 unclaimed since: their trigger's schedule edited)"
            );
        }
        ready
    }

    /// The start statement, tried again on database errors. An error may
    /// come after the statement committed (the answer lost on its way): after
    /// one, a fire the next try does not start is confirmed one by one, and
    /// one found running under this incarnation counts as started now.
    /// Returns the started fires, and the last error if some fires' fate is
    /// still unknown after every try.
    async fn mark_running(&self, ids: &[i64], node: &NodeRef) -> (HashMap<i64, Timestamp>, Option<StoreError>) {
        let mut started = HashMap::default();
        let mut unknown = ids.to_vec();
        let mut answer_lost = false;
        let mut last_error = None;
        for tries in 1..=START_TRIES {
            let asked = tokio::time::Instant::now();
            let answer = self.ctx.store.mark_running_all(&unknown, node).await;
            self.observe_start(asked.elapsed());
            self.start_pace.observe(asked.elapsed(), unknown.len());
            match answer {
                Ok(now_started) => {
                    started.extend(now_started);
                    unknown.retain(|id| !started.contains_key(id));
                    if !answer_lost {
                        return (started, None);
                    }
                    match self.ctx.store.confirm_starts(&unknown, node).await {
                        Ok(confirmed) => {
                            started.extend(confirmed);
                            return (started, None);
                        }
                        Err(e) => last_error = Some(e),
                    }
                }
                Err(e) => {
                    tracing::warn!(scheduler = self.ctx.scheduler, fires = unknown.len(), error = %e,
                        "marking fires running failed; retrying");
                    answer_lost = true;
                    last_error = Some(e);
                }
            }
            if self.ctx.stopping() {
                break;
            }
            tokio::time::sleep(START_RETRY * (1 << tries)).await;
        }
        (started, last_error)
    }

    /// Fires whose start statement failed with its answer perhaps lost,
    /// and whose fate the retries could not learn: asked until the
    /// database answers (or the node stops, leaving them to recovery once it
    /// is declared dead), so that none stays `running` in the ledger while
    /// this node lives. One found running under this incarnation was marked
    /// running and never run: its trigger's policy decides (a misfire, and
    /// the late run it promises); the others are given back.
    async fn settle(self: Arc<Self>, node: NodeRef, runs: Vec<RunFire>) {
        if runs.is_empty() {
            return;
        }
        let ids: Vec<i64> = runs.iter().map(|r| r.fire_id).collect();
        let mut wait = START_RETRY;
        let running = loop {
            // Asked once the node holds its lease again, its renewals going
            // through: a question sent while the database's commits hang
            // would itself commit late, moving the fires' recorded starts.
            if !self.ctx.membership_fresh() {
                if !self.ctx.pause(wait).await {
                    self.ctx.flights.ended(runs.len());
                    return;
                }
                continue;
            }
            match self.ctx.store.confirm_starts(&ids, &node).await {
                Ok(confirmed) => break confirmed.into_iter().map(|(id, _)| id).collect::<HashSet<i64>>(),
                Err(e) => {
                    tracing::warn!(scheduler = self.ctx.scheduler, fires = ids.len(), error = %e,
                        "fires of an unanswered start still unsettled; asking again");
                }
            }
            if !self.ctx.pause(wait).await {
                self.ctx.flights.ended(runs.len());
                return;
            }
            wait = (wait * 2).min(SETTLE_WAIT_MAX);
        };
        for run in runs {
            if running.contains(&run.fire_id) {
                self.runner
                    .misfired(run, "its start's answer was lost, and it was not run", false)
                    .await;
            } else {
                let _ = self.ctx.give_back_fire(run.fire_id, &run.node).await;
            }
            self.ctx.flights.ended(1);
        }
    }

    /// A fire claimed before an edit of its job that a poll has seen since
    /// runs with the edited job (when this node has its handler); one claimed
    /// before its job was paused or deleted does not run: why is returned.
    fn refresh_job(&self, run: &mut RunFire) -> Option<&'static str> {
        match self.ctx.flights.launching(run.job.id) {
            Some(None) => Some("the job was deleted after the fire was claimed"),
            Some(Some(job)) if job.updated_at >= run.job.updated_at => {
                if job.state == JobState::Paused {
                    return Some("the job was paused after the fire was claimed");
                }
                if job.spec != run.job.spec && self.ctx.handlers.contains_key(&job.spec.handler) {
                    run.job = job;
                }
                None
            }
            _ => None,
        }
    }

    /// A claimed fire whose job was paused or deleted since: recorded skipped
    /// with the reason, and its execute released.
    async fn skip_unstarted(self: Arc<Self>, run: RunFire, reason: &'static str) {
        self.ctx.flights.not_unstarted([run.fire_id]);
        match self
            .ctx
            .store
            .end_fire(run.fire_id, &run.node, FireEnd::skipped(reason))
            .await
            .map(|f| f.ended())
        {
            Ok(true) => {
                tracing::info!(
                    scheduler = self.ctx.scheduler,
                    job = run.job.spec.name,
                    fire_id = run.fire_id,
                    reason,
                    "fire skipped"
                );
            }
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(scheduler = self.ctx.scheduler, fire_id = run.fire_id, error = %e,
                    "could not record a skipped fire; giving it back");
                let _ = self.ctx.give_back_fire(run.fire_id, &run.node).await;
                return;
            }
        }
        self.runner.release(&run).await;
    }
}

#[cfg(test)]
mod tests;
