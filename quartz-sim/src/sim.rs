//! One seed's run: the cluster built, driven through its faults and
//! operations on the simulated clock, settled, and judged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::engine::{Scheduler, SchedulerBuilder, Settings};
use quartz_core::runlog::{CheckParams, check};
use quartz_core::store::{ExecuteSpec, FireQuery, FireState, SharedStore, Store};
use quartz_testkit::memory::MemoryStore;
use tokio::sync::watch;

use crate::handler::{handler, rules_of};
use crate::link::{Cut, Link, LinkState};
use crate::rng::{Rng, mix};
use crate::witness::Witness;
use crate::workload::{self, DrawnJob, HANDLER};

/// The simulated cluster's name.
pub const CLUSTER: &str = "sim";

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Options {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Simulated minutes of faults and operations per seed (then the
    /// cluster settles before it is judged).
    pub minutes: u64,
    /// Keep every line of the trace in the report (to compare two runs).
    pub keep_trace: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            nodes: 3,
            minutes: 60,
            keep_trace: false,
        }
    }
}

/// How one seed went.
#[derive(Debug, Clone)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// What the oracles found, empty when nothing.
    pub violations: Vec<String>,
    /// The digest of every event of the run.
    pub trace: u64,
    /// Handler starts.
    pub starts: u64,
    /// Fire times the checker matched.
    pub fire_times: u64,
    /// Faults and operations the simulator applied.
    pub actions: u64,
    /// Every line of the trace, when [`Options::keep_trace`] asked.
    pub lines: Vec<String>,
}

/// Runs one seed on a runtime of its own: one thread, tokio's clock paused
/// (it moves only when every task waits), so that the seed alone decides
/// what happens.
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn run_seed(options: &Options, seed: u64) -> SeedReport {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    // The runtime's own randomness (which waiter of a watch channel wakes
    // first) from the seed too.
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let runtime = builder.build().expect("a current-thread runtime");
    runtime.block_on(simulate(options, seed))
}

/// Moments the seed starts from: quiet days and the nights the clocks move
/// (United States and Europe, spring and autumn), so that zoned cron
/// triggers cross them.
const STARTS: &[i64] = &[
    1_767_225_600_000, // 2026-01-01T00:00Z
    1_772_949_600_000, // 2026-03-08T06:00Z, New York springs forward at 07:00Z
    1_774_742_400_000, // 2026-03-29T00:00Z, London springs forward at 01:00Z
    1_792_890_000_000, // 2026-10-25T00:20Z, London falls back at 01:00Z
    1_793_509_200_000, // 2026-11-01T04:20Z, New York falls back at 06:00Z
];

/// One node of the simulated cluster: its link, its running process (none
/// while crashed), and its clock.
struct SimNode {
    link: Arc<LinkState>,
    scheduler: Option<Scheduler>,
    process: usize,
    /// Tells the handlers of the process that it died.
    died: watch::Sender<bool>,
    offset_ms: i64,
    rate_ppm: i64,
    restarts: u64,
}

/// Something the simulator does at a moment.
#[derive(Debug, Clone)]
enum Action {
    Cut(usize, Cut),
    SlowAnswers(usize, u64),
    Freeze(usize, bool),
    Crash(usize),
    Restart(usize),
    StoreDown(bool),
    PerCall(usize, u64, u64, u64),
    FireNow(String),
    Pause(String, bool),
    /// An operator's edit of the job's schedule (its one trigger replaced).
    Reschedule(String, Box<quartz_core::trigger::Trigger>),
    /// An operator deletes the job.
    Delete(String),
}

struct World {
    seed: u64,
    store: MemoryStore,
    operator: SharedStore,
    witness: Arc<Witness>,
    settings: Settings,
    nodes: Vec<SimNode>,
    /// The end of the simulated span (an edit's one-off time falls before).
    end: Timestamp,
}

async fn simulate(options: &Options, seed: u64) -> SeedReport {
    let mut rng = Rng::new(seed);
    let mut setup = rng.fork(1);
    let t0 = STARTS[usize::try_from(setup.below(STARTS.len() as u64)).unwrap_or(0)]
        + i64::try_from(setup.below(3_600_000)).unwrap_or(0);
    let store = MemoryStore::starting_at(Timestamp::from_millis(t0));
    let operator = store.scoped(CLUSTER);
    let span_ms = i64::try_from(options.minutes * 60_000).unwrap_or(i64::MAX);
    let end = Timestamp::from_millis(t0 + span_ms);
    let count = usize::try_from(setup.range(3, 12)).unwrap_or(3);
    let mut jobs = workload::draw(&mut rng.fork(2), count, Timestamp::from_millis(t0 + 20_000), end);
    workload::draw_children(&mut rng.fork(6), &mut jobs);
    for (name, definition) in workload::draw_calendars(&mut rng.fork(7)) {
        operator
            .add_calendar(name, &definition)
            .await
            .expect("the simulator's calendars are valid");
    }
    let mut rules = BTreeMap::new();
    for job in &jobs {
        operator
            .create_job(&job.spec, &job.executes)
            .await
            .expect("the simulator's jobs are valid");
        rules.insert(job.spec.name.clone(), rules_of(job));
    }
    let witness = Witness::new(rules);
    if options.keep_trace {
        witness.keep_lines();
    }
    for job in &jobs {
        witness.note(&format!("{:?} {:?}", job.spec, job.executes));
    }
    let mut clocks = rng.fork(3);
    let skewed = clocks.chance(500);
    let mut world = World {
        seed,
        store: store.clone(),
        operator: operator.clone(),
        witness: Arc::clone(&witness),
        settings: Settings::default(),
        nodes: Vec::new(),
        end,
    };
    for index in 0..options.nodes {
        let (offset_ms, rate_ppm) = if skewed {
            (clocks.around(30_000), clocks.around(500))
        } else {
            (0, 0)
        };
        let (died, _) = watch::channel(false);
        world.nodes.push(SimNode {
            link: LinkState::new(Rng::new(0)),
            scheduler: None,
            process: 0,
            died,
            offset_ms,
            rate_ppm,
            restarts: 0,
        });
        world.start(index).await;
    }

    let mut agenda: BTreeMap<(i64, u64), Action> = BTreeMap::new();
    let mut seq = 0u64;
    let mut plan = rng.fork(5);
    let mut actions = 0u64;
    let mut at = t0;
    loop {
        at += i64::try_from(plan.range(5_000, 240_000)).unwrap_or(60_000);
        if at >= end.as_millis() {
            break;
        }
        for (when, action) in world.draw_action(&mut plan, at, &jobs) {
            seq += 1;
            agenda.insert((when, seq), action);
        }
    }
    while let Some(((when, _), action)) = agenda.pop_first() {
        sleep_until(&store, when).await;
        witness.note(&format!("{when} {action:?}"));
        world.apply(action).await;
        actions += 1;
    }
    sleep_until(&store, end.as_millis()).await;
    // Everything mended: every link whole, the store up, the crashed
    // restarted; then the cluster settles before it is judged.
    world.heal().await;
    // Long enough for the longest run to end twice over (one waiting
    // behind another), retries' backoffs, and a dead node's fires to be
    // recovered.
    let longest = jobs.iter().map(|j| j.longest_ms).max().unwrap_or(0);
    let settle = 2 * i64::try_from(longest).unwrap_or(0)
        + 4 * duration_ms(world.settings.dead_after)
        + duration_ms(world.settings.misfire.threshold)
        + 180_000;
    sleep_until(&store, end.as_millis() + settle).await;
    // A backlog a policy promised (a job paused for minutes near the end,
    // every missed time to run, one at a time) drains at its own pace:
    // judged once nothing is open, or half an hour on at the most (what is
    // still open then is reported as unsettled).
    let drained_by = store.clock().as_millis() + DRAIN_MAX_MS;
    while store.clock().as_millis() < drained_by && open_fires(&operator, end).await > 0 {
        sleep_until(&store, store.clock().as_millis() + 10_000).await;
    }

    let params = CheckParams {
        since: Timestamp::from_millis(t0),
        until: end,
        misfire_threshold: world.settings.misfire.threshold,
        clock_slack: Duration::from_millis(100),
    };
    let mut violations = witness.violations();
    let mut fire_times = 0;
    // A fire of a job that requests recovery whose node was cut off after
    // its handler succeeded and before the success was recorded is run
    // again: at least once, as the job asked. Recovery reruns it at once,
    // or (a job with retries left) records the attempt failed and retries
    // it, the retry found late going to the trigger's misfire policy. The
    // checker reports the second run (it happened); the simulator expects
    // it where an attempt of the fire ran under an incarnation that was
    // declared dead after it started.
    let files = witness.files();
    let recovering: std::collections::BTreeSet<&str> = jobs
        .iter()
        .filter(|j| j.spec.requests_recovery)
        .map(|j| j.spec.name.as_str())
        .collect();
    let retired: BTreeMap<(&str, i64), i64> = files
        .iter()
        .flat_map(|f| &f.events)
        .filter_map(|e| match e {
            quartz_core::runlog::RunEvent::Retired {
                node,
                incarnation,
                db_ms,
                ..
            } => Some(((node.as_str(), *incarnation), *db_ms)),
            _ => None,
        })
        .collect();
    let recovered: std::collections::BTreeSet<(i64, i64)> = files
        .iter()
        .flat_map(|f| &f.events)
        .filter_map(|e| match e {
            quartz_core::runlog::RunEvent::Start(s)
                if s.kind == "recovery"
                    || (recovering.contains(s.job.as_str())
                        && retired
                            .get(&(s.node.as_str(), s.incarnation))
                            .is_some_and(|at| *at >= s.db_ms)) =>
            {
                Some((s.execute_id, s.fire_time))
            }
            _ => None,
        })
        .collect();
    match check(&*operator, &files, &params).await {
        Ok(report) => {
            fire_times = report.fire_times_checked;
            let expected = |v: &&quartz_core::runlog::RunViolation| {
                v.kind == quartz_core::runlog::RunViolationKind::RunTwice
                    && recovered.contains(&(v.execute_id, v.fire_time.as_millis()))
            };
            violations.extend(report.violations.iter().filter(|v| !expected(v)).map(|v| {
                format!(
                    "{}: {} (execute {}) at {}: {}",
                    v.kind.as_str(),
                    v.job,
                    v.execute_id,
                    v.fire_time,
                    v.detail
                )
            }));
        }
        Err(e) => violations.push(format!("the checker could not read the store: {e}")),
    }
    violations.sort();
    for v in &violations {
        witness.note(v);
    }
    for row in ledger(&operator).await {
        witness.note(&row);
    }
    let report = SeedReport {
        seed,
        violations,
        trace: witness.trace(),
        starts: witness.starts(),
        fire_times,
        actions,
        lines: witness.lines(),
    };
    // Crashed, not shut down: a shutdown hands the pool's threads to a
    // blocking task, which the one-thread simulation does not schedule.
    for node in &mut world.nodes {
        node.link.crash();
        drop(node.scheduler.take());
    }
    report
}

impl World {
    /// Starts node `index` as a new process (a new incarnation).
    async fn start(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        node.restarts += 1;
        let link = LinkState::new(Rng::new(mix(self.seed ^ mix(index as u64 * 1_000 + node.restarts))));
        let (process, sink) = self.witness.process(&format!("sim-{index}.{}", node.restarts));
        let (died, died_rx) = watch::channel(false);
        let settings = Settings {
            node_id: Some(format!("sim-{index}")),
            ..self.settings.clone()
        };
        let anchor = self.store.clock().as_millis() + node.offset_ms;
        let handler = handler(
            Arc::clone(&self.witness),
            self.store.clone(),
            process,
            died_rx,
            self.seed,
        );
        let scheduler = SchedulerBuilder::new(CLUSTER)
            .settings(settings)
            .simulated_for_tests(anchor, node.rate_ppm, sink)
            .async_handler(HANDLER, handler)
            .start(Link::new(Arc::new(self.store.clone()), Arc::clone(&link)))
            .await
            .expect("a node starts on a healthy link");
        node.link = link;
        node.scheduler = Some(scheduler);
        node.process = process;
        node.died = died;
    }

    /// Draws what happens at `at`, and when it is undone.
    fn draw_action(&mut self, plan: &mut Rng, at: i64, jobs: &[DrawnJob]) -> Vec<(i64, Action)> {
        let node = usize::try_from(plan.below(self.nodes.len() as u64)).unwrap_or(0);
        let lasting = |plan: &mut Rng, lo: u64, hi: u64| at + i64::try_from(plan.range(lo, hi)).unwrap_or(0);
        let drawn = &jobs[usize::try_from(plan.below(jobs.len() as u64)).unwrap_or(0)];
        let job = drawn.spec.name.clone();
        match plan.below(12) {
            0 if plan.chance(500) => {
                // Answers slow to come back (the lease renewals among
                // them), then the node cut off.
                let slow = plan.range(1_000, 4_500);
                let cut_at = lasting(plan, 2_000, 20_000);
                let healed = cut_at + i64::try_from(plan.range(5_000, 40_000)).unwrap_or(0);
                vec![
                    (at, Action::SlowAnswers(node, slow)),
                    (cut_at, Action::Cut(node, Cut::Both)),
                    (healed, Action::SlowAnswers(node, 0)),
                    (healed, Action::Cut(node, Cut::None)),
                ]
            }
            0 => {
                let cut = *plan.pick(&[Cut::Both, Cut::ToStore, Cut::FromStore]);
                vec![
                    (at, Action::Cut(node, cut)),
                    (lasting(plan, 1_000, 60_000), Action::Cut(node, Cut::None)),
                ]
            }
            1 => vec![
                (at, Action::Freeze(node, true)),
                (lasting(plan, 500, 30_000), Action::Freeze(node, false)),
            ],
            2 => vec![
                (at, Action::Crash(node)),
                (lasting(plan, 1_000, 90_000), Action::Restart(node)),
            ],
            3 => vec![
                (at, Action::StoreDown(true)),
                (lasting(plan, 500, 20_000), Action::StoreDown(false)),
            ],
            4 | 5 => {
                let (e, l, d) = (plan.range(0, 50), plan.range(0, 50), plan.range(0, 100));
                vec![
                    (at, Action::PerCall(node, e, l, d)),
                    (lasting(plan, 10_000, 300_000), Action::PerCall(node, 0, 0, 0)),
                ]
            }
            6 | 7 => vec![(at, Action::FireNow(job))],
            10 | 11 if plan.chance(150) => vec![(at, Action::Delete(job))],
            10 | 11 => match drawn.executes.first() {
                Some(e) => {
                    let trigger = workload::redraw(plan, &e.trigger, Timestamp::from_millis(at), self.end);
                    vec![(at, Action::Reschedule(job, Box::new(trigger)))]
                }
                None => vec![(at, Action::FireNow(job))],
            },
            _ => vec![
                (at, Action::Pause(job.clone(), true)),
                (lasting(plan, 1_000, 600_000), Action::Pause(job, false)),
            ],
        }
    }

    async fn apply(&mut self, action: Action) {
        match action {
            Action::Cut(i, cut) => self.nodes[i].link.cut(cut),
            Action::SlowAnswers(i, ms) => self.nodes[i].link.slow_answers(ms),
            Action::Freeze(i, on) => self.nodes[i].link.freeze(on),
            Action::Crash(i) => self.crash(i),
            Action::Restart(i) => {
                if self.nodes[i].scheduler.is_none() {
                    self.start(i).await;
                }
            }
            Action::StoreDown(down) => {
                for node in &self.nodes {
                    node.link.store_down(down);
                }
            }
            Action::PerCall(i, e, l, d) => self.nodes[i].link.per_call(e, l, d),
            Action::FireNow(job) => {
                let _ = self.operator.fire_now(&job).await;
            }
            Action::Pause(job, paused) => {
                let _ = self.operator.set_paused(&job, paused, None).await;
            }
            Action::Reschedule(job, trigger) => {
                if let Ok(Some(detail)) = self.operator.get_job(&job).await {
                    let _ = self
                        .operator
                        .update_job(&job, &detail.job.spec, Some(&[ExecuteSpec::new(*trigger)]), None)
                        .await;
                }
            }
            Action::Delete(job) => {
                let _ = self.operator.delete_job(&job, None).await;
            }
        }
    }

    /// Node `i`'s process dies: its tasks stop, its handlers with it, and
    /// nothing it had on its way reaches the store.
    fn crash(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let Some(scheduler) = node.scheduler.take() else { return };
        node.link.crash();
        let _ = node.died.send(true);
        self.witness.died(node.process, self.store.clock().as_millis());
        drop(scheduler);
    }

    /// Mends everything, and starts every crashed node again.
    async fn heal(&mut self) {
        for i in 0..self.nodes.len() {
            let link = &self.nodes[i].link;
            link.cut(Cut::None);
            link.freeze(false);
            link.store_down(false);
            link.slow_answers(0);
            link.per_call(0, 0, 0);
            if self.nodes[i].scheduler.is_none() {
                self.start(i).await;
            }
        }
    }
}

/// Every ledger row, oldest first, as trace lines.
async fn ledger(store: &SharedStore) -> Vec<String> {
    let mut rows = Vec::new();
    let mut query = FireQuery {
        limit: 1_000,
        ..FireQuery::new()
    };
    while let Ok(page) = store.fires(&query).await {
        let Some(last) = page.last() else { break };
        query.before_id = Some(last.id);
        rows.extend(page);
    }
    rows.sort_by_key(|f| f.id);
    rows.iter()
        .map(|f| {
            format!(
                "{} {} {} {} {:?} {:?} {:?} {:?}",
                f.id,
                f.execute_id,
                f.fire_time,
                f.attempt,
                f.state,
                f.started_at,
                f.finished_at,
                f.owner.as_ref().map(|o| (&o.node_id, o.incarnation))
            )
        })
        .collect()
}

/// How long after the settle time the simulator waits for open fires
/// (pending, claimed, running) to end before it judges the run.
const DRAIN_MAX_MS: i64 = 1_800_000;

/// How many fires scheduled before `until` (those the checker judges) the
/// ledger holds open: pending, claimed or running.
async fn open_fires(store: &SharedStore, until: Timestamp) -> usize {
    let mut open = 0;
    for state in [FireState::Pending, FireState::Claimed, FireState::Running] {
        let query = FireQuery {
            state: Some(state),
            until: Some(until),
            limit: 1,
            ..FireQuery::new()
        };
        open += store.fires(&query).await.map_or(1, |page| page.len());
    }
    open
}

async fn sleep_until(store: &MemoryStore, at_ms: i64) {
    let now = store.clock().as_millis();
    if at_ms > now {
        tokio::time::sleep(Duration::from_millis(u64::try_from(at_ms - now).unwrap_or(0))).await;
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
