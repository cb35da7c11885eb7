//! What the admin surface hands back: jobs with their triggers and next fire
//! times, ledger rows, nodes and changes, as plain serialisable data. Times
//! are epoch milliseconds of the database's clock.

use serde::Serialize;

use super::{JobDefinition, TriggerDefinition};
use crate::store::{
    ChangeRecord, Execute, FireRecord, FireState, Job, JobDetail, JobSpec, Node, NodeState, RejectedRow,
};
use crate::time::Timestamp;
use crate::trigger::Schedule;

fn ms(t: Option<Timestamp>) -> Option<i64> {
    t.map(Timestamp::as_millis)
}

/// One page of a listing, and the cursor of the next (`None` on the last).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Page<T> {
    /// The rows.
    pub items: Vec<T>,
    /// Pass this back (`after` for jobs, `before` for fires and changes) for
    /// the next page.
    pub next: Option<String>,
}

/// A trigger: its definition, where it stands and its next fire times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TriggerView {
    /// Its id.
    pub id: i64,
    /// Its definition (in JSON, its fields beside the others: `kind`,
    /// `cron`, `interval_ms`, `start`, `misfire`, …).
    #[serde(flatten)]
    pub definition: TriggerDefinition,
    /// For people: `cron 0 0 6 * * ? Europe/Paris`, `every 5000 ms`, …
    pub summary: String,
    /// `waiting`, `running`, `paused`, `complete` or `error`.
    pub state: String,
    /// The last fire time won.
    pub prev_fire_time: Option<i64>,
    /// The next fire time.
    pub next_fire_time: Option<i64>,
    /// How many times it fired.
    pub times_triggered: u64,
    /// Why it is in error.
    pub error: Option<String>,
    /// The next fire times from `next_fire_time` on (a fixed-delay trigger's
    /// later ones depend on when each run finishes, so it shows one).
    pub upcoming: Vec<i64>,
    /// The same, as RFC 3339 in the trigger's time zone with its offset
    /// (`2026-12-24T06:00:00.000+01:00`; UTC for a trigger with no zone).
    pub upcoming_local: Vec<String>,
}

/// An instant as RFC 3339 in a time zone (by IANA name), with its offset;
/// in UTC when the zone is absent or unknown.
pub fn local_time(ms: i64, zone: Option<&str>) -> String {
    let zone = zone
        .and_then(|z| crate::cron::parse_time_zone(z).ok())
        .unwrap_or(chrono_tz::UTC);
    match chrono::TimeZone::timestamp_millis_opt(&zone, ms).single() {
        Some(t) if zone == chrono_tz::UTC => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, false),
        None => Timestamp::from_millis(ms).to_string(),
    }
}

/// The excluded runs the search for a trigger view's upcoming fire times
/// passes over, for all of them.
pub const VIEW_SEARCH_STEPS: u32 = 500;

impl TriggerView {
    /// The view of an execute, with up to `upcoming` next fire times (as
    /// many as a search of `VIEW_SEARCH_STEPS` excluded runs finds: a
    /// calendar that excludes almost every time leaves fewer, and a page of
    /// such jobs costs a fraction of a second).
    pub fn new(e: &Execute, upcoming: usize) -> TriggerView {
        let fires: Vec<i64> = crate::trigger::with_search_steps(VIEW_SEARCH_STEPS, || {
            e.trigger
                .fires_until(&e.fire_state, Timestamp::from_millis(i64::MAX))
                .take(upcoming)
                .map(|f| f.fire_time.as_millis())
                .collect()
        });
        let zone = match e.trigger.schedule() {
            Schedule::Cron { zone, .. } => Some(zone.name()),
            _ => None,
        };
        let upcoming_local = fires.iter().map(|t| local_time(*t, zone)).collect();
        TriggerView {
            id: e.id,
            definition: TriggerDefinition::of_trigger(&e.trigger, e.priority),
            summary: summary(&e.trigger),
            state: e.state.as_str().to_owned(),
            prev_fire_time: ms(e.fire_state.prev_fire_time),
            next_fire_time: ms(e.fire_state.next_fire_time),
            times_triggered: e.fire_state.times_triggered,
            error: e.error.clone(),
            upcoming: fires,
            upcoming_local,
        }
    }
}

/// How a trigger reads for people: `cron 0/2 * * * * ? UTC`, `every 5000 ms`,
/// `delay 1000 ms`, `once at 2026-01-01T00:00:00.000Z`, with its calendar,
/// jitter and catch-up window if it has them.
pub fn summary(trigger: &crate::trigger::Trigger) -> String {
    let schedule = match trigger.schedule() {
        Schedule::Cron { expr, zone, dst } if dst.is_quartz() => format!("cron {expr} {zone}"),
        Schedule::Cron { expr, zone, dst } => format!("cron {expr} {zone} (DST: {dst})"),
        Schedule::FixedRate { interval_ms } => format!("every {interval_ms} ms"),
        Schedule::FixedDelay { delay_ms } => format!("delay {delay_ms} ms"),
        Schedule::Once => format!("once at {}", trigger.start()),
    };
    let mut text = match trigger.calendar_name() {
        Some(calendar) => format!("{schedule}, except calendar {calendar}"),
        None => schedule,
    };
    if let Some(jitter) = trigger.jitter() {
        text.push_str(&format!(", jitter up to {} ms", jitter.max_ms));
    }
    if let Some(window) = trigger.catch_up() {
        text.push_str(&format!(", catch-up window {} ms", window.as_millis()));
    }
    if let Some(overlap) = trigger.overlap() {
        text.push_str(&format!(", overlap {overlap}"));
    }
    text
}

/// A job as the admin surface shows it: its stored fields (the
/// [`JobSpec`] its definition holds), where it stands, and its triggers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobView {
    /// Its id.
    pub id: i64,
    /// Its fields (in JSON, beside the others: `name`, `handler`,
    /// `payload`, `timeout_ms`, `max_attempts`, `backoff_ms`, …).
    #[serde(flatten)]
    pub spec: JobSpec,
    /// `enabled` or `paused`.
    pub state: String,
    /// Created (database time).
    pub created_at: i64,
    /// Last changed (database time).
    pub updated_at: i64,
    /// Its version, moved on by every change of its definition or state:
    /// the API's `ETag`, and what a write with `If-Match` must name.
    pub version: i64,
    /// The soonest next fire time of its triggers.
    pub next_fire_time: Option<i64>,
    /// Its triggers.
    pub triggers: Vec<TriggerView>,
    /// Trigger rows that cannot be read (written by hand), with why.
    pub broken_triggers: Vec<BrokenTrigger>,
    /// What a write of this job should know but did not refuse (for
    /// example: no node is live to offer its handler); only in the answer
    /// to an add or an edit, and left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A trigger row that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BrokenTrigger {
    /// The row's id.
    pub id: i64,
    /// Why.
    pub reason: String,
}

impl JobView {
    /// The view of a job, its triggers with up to `upcoming` next fire times.
    pub fn new(detail: &JobDetail, upcoming: usize) -> JobView {
        let job: &Job = &detail.job;
        let triggers: Vec<TriggerView> = detail.executes.iter().map(|e| TriggerView::new(e, upcoming)).collect();
        JobView {
            id: job.id,
            spec: job.spec.clone(),
            state: job.state.as_str().to_owned(),
            created_at: job.created_at.as_millis(),
            updated_at: job.updated_at.as_millis(),
            version: job.version,
            next_fire_time: triggers.iter().filter_map(|t| t.next_fire_time).min(),
            triggers,
            broken_triggers: detail
                .broken
                .iter()
                .map(|b: &RejectedRow| BrokenTrigger {
                    id: b.execute_id,
                    reason: b.reason.clone(),
                })
                .collect(),
            warnings: Vec::new(),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The definition the job is stored as: its fields and its triggers
    /// (each with its start).
    pub fn definition(&self) -> JobDefinition {
        JobDefinition {
            spec: self.spec.clone(),
            triggers: self.triggers.iter().map(|t| t.definition.clone()).collect(),
        }
    }
}

/// Whether the whole scheduler is on standby ([`Admin::pause_all`](super::Admin::pause_all),
/// [`Admin::resume_all`](super::Admin::resume_all), [`Admin::standby`](super::Admin::standby)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Standby {
    /// Whether it is on standby: no fire is claimed.
    pub on_standby: bool,
    /// Since when (database time, epoch ms), while it is.
    pub standby_since: Option<i64>,
}

impl Standby {
    /// The standby since `since`, or none.
    pub fn since(since: Option<Timestamp>) -> Standby {
        Standby {
            on_standby: since.is_some(),
            standby_since: since.map(Timestamp::as_millis),
        }
    }
}

/// A fire asked for by hand ([`Admin::job_trigger`](super::Admin::job_trigger)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ManualFire {
    /// The job.
    pub job: String,
    /// Its ledger row (pending until a node claims it).
    pub fire_id: i64,
    /// Its fire time: the database's now when it was asked for (epoch ms).
    pub fire_time: i64,
    /// Whether the job is paused (the fire runs all the same; the job stays
    /// paused).
    pub paused: bool,
    /// What happens now, in words.
    pub note: String,
}

/// A row of the fire ledger, with its job's name and what it measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FireView {
    /// Its id.
    pub id: i64,
    /// The trigger it fired (`0` for a fire by hand; for enqueued work, the
    /// work's id negated).
    pub execute_id: i64,
    /// Fired by hand ("fire now"), not by a trigger.
    pub by_hand: bool,
    /// Work enqueued from code, the API, the console or the CLI.
    pub enqueued: bool,
    /// A past fire time a backfill queued: a trigger's first attempt that
    /// was pending.
    pub backfill: bool,
    /// The job's id.
    pub job_id: i64,
    /// The job's name (`None` once the job is deleted).
    pub job: Option<String>,
    /// The scheduled fire time.
    pub fire_time: i64,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The node that claimed it.
    pub node_id: Option<String>,
    /// `claimed`, `running`, `succeeded`, `failed`, `misfired`, `skipped`,
    /// `abandoned` or `pending`.
    pub state: String,
    /// When it was claimed or recorded.
    pub claimed_at: i64,
    /// When its handler started.
    pub started_at: Option<i64>,
    /// When it finished.
    pub finished_at: Option<i64>,
    /// When it passed its timeout.
    pub timed_out_at: Option<i64>,
    /// For a pending fire: from when it may run.
    pub due_at: Option<i64>,
    /// How late it started (start less fire time).
    pub lateness_ms: Option<i64>,
    /// How long it ran.
    pub duration_ms: Option<i64>,
    /// The error.
    pub error: Option<String>,
    /// For a skipped range: how many fire times it holds.
    pub fire_count: u64,
}

impl FireView {
    /// The view of a ledger row; `job` its job's name, if known.
    pub fn new(f: &FireRecord, job: Option<String>) -> FireView {
        FireView {
            id: f.id,
            execute_id: f.execute_id,
            by_hand: f.by_hand(),
            enqueued: f.enqueued(),
            backfill: f.by_backfill(),
            job_id: f.job_id,
            job,
            fire_time: f.fire_time.as_millis(),
            attempt: f.attempt,
            node_id: f.owner.as_ref().map(|o| o.node_id.clone()),
            state: f.state.as_str().to_owned(),
            claimed_at: f.claimed_at.as_millis(),
            started_at: ms(f.started_at),
            finished_at: ms(f.finished_at),
            timed_out_at: ms(f.timed_out_at),
            due_at: ms(f.due_at),
            lateness_ms: f.started_at.map(|s| s.as_millis() - f.fire_time.as_millis()),
            duration_ms: f
                .started_at
                .zip(f.finished_at)
                .map(|(s, e)| e.as_millis() - s.as_millis()),
            error: f.error.clone(),
            fire_count: f.fire_count,
        }
    }
}

/// A node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeView {
    /// Its id.
    pub node_id: String,
    /// `live`; `silent`: live by its row, but its last heartbeat is older
    /// than its `dead_after` (in database time), so it has stalled or died
    /// and no peer is left, or able, to declare it dead; `dead`; or `gone`
    /// (left on shutdown).
    pub state: String,
    /// Its current registration.
    pub incarnation: i64,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Its weight.
    pub weight: u32,
    /// When it registered (database time).
    pub registered_at: i64,
    /// Its last heartbeat (database time).
    pub heartbeat_at: i64,
    /// Milliseconds since its last heartbeat (database time).
    pub heartbeat_age_ms: i64,
    /// How long its heartbeat may be silent before it is dead, as the node
    /// registered it (`None` for a node from before it was recorded).
    pub dead_after_ms: Option<i64>,
    /// Fires running or queued on its pool at its last heartbeat.
    pub busy: u64,
    /// The handlers it offers.
    pub handlers: Vec<String>,
}

/// Whether a node is live and heard from within its `dead_after` at `now`
/// (database time): a node whose handlers are offered.
pub(crate) fn is_live(n: &Node, now: Timestamp) -> bool {
    n.state == NodeState::Live && !is_silent(n, now)
}

/// Whether a node's row says live but its heartbeat is older than its
/// `dead_after` at `now` (database time).
pub fn is_silent(n: &Node, now: Timestamp) -> bool {
    n.state == NodeState::Live
        && n.dead_after
            .is_some_and(|d| now.as_millis() - n.heartbeat_at.as_millis() > crate::store::millis_of(d))
}

impl NodeView {
    /// The view of a node row, its heartbeat's age taken at `now`.
    pub fn new(n: &Node, now: Timestamp) -> NodeView {
        NodeView {
            node_id: n.node_id.clone(),
            state: if is_silent(n, now) { "silent" } else { n.state.as_str() }.to_owned(),
            incarnation: n.incarnation,
            host: n.host.clone(),
            pid: n.pid,
            weight: n.weight,
            registered_at: n.registered_at.as_millis(),
            heartbeat_at: n.heartbeat_at.as_millis(),
            heartbeat_age_ms: now.as_millis() - n.heartbeat_at.as_millis(),
            dead_after_ms: n.dead_after.map(crate::store::millis_of),
            busy: n.busy,
            handlers: n.handlers.clone(),
        }
    }
}

/// A change made through the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChangeView {
    /// Its id.
    pub id: i64,
    /// When (database time).
    pub at: i64,
    /// Who: `http:admin`, `http:local`, `cli`, `library`, …
    pub actor: String,
    /// What: `job.create`, `job.edit`, `job.pause`, `job.resume`,
    /// `job.trigger`, `job.add_triggers`, `job.delete`.
    pub action: String,
    /// The job or calendar, by name (`action` says which).
    pub target: String,
    /// The job's id, for a job's change (its fires are found by it after
    /// the job is deleted or renamed).
    pub target_id: Option<i64>,
    /// A short account.
    pub detail: String,
}

impl From<&ChangeRecord> for ChangeView {
    fn from(c: &ChangeRecord) -> ChangeView {
        ChangeView {
            id: c.id,
            at: c.at.as_millis(),
            actor: c.actor.clone(),
            action: c.action.clone(),
            target: c.target.clone(),
            target_id: c.target_id,
            detail: c.detail.clone(),
        }
    }
}

/// The cluster at a glance: nodes, and the recent ledger by outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Overview {
    /// The database's now.
    pub now: i64,
    /// Live nodes (heartbeating within their `dead_after`).
    pub live_nodes: usize,
    /// Nodes live by their row whose heartbeat is older than their
    /// `dead_after`: stalled, or dead with no peer to declare it.
    pub silent_nodes: usize,
    /// Nodes known (live, dead or gone).
    pub nodes: usize,
    /// Jobs (counted up to the page limit of a job listing: 10,000).
    pub jobs: usize,
    /// Paused jobs among them.
    pub paused_jobs: usize,
    /// The span the fire figures cover, from `now` back, in milliseconds.
    pub window_ms: i64,
    /// Ledger rows read for them (at most [`OVERVIEW_FIRES`](super::OVERVIEW_FIRES);
    /// when reached, the figures cover only the newest fires).
    pub fires_read: usize,
    /// Succeeded fires.
    pub succeeded: usize,
    /// Failed fires.
    pub failed: usize,
    /// Misfired fires.
    pub misfired: usize,
    /// Skipped fires.
    pub skipped: usize,
    /// Abandoned fires.
    pub abandoned: usize,
    /// Fires running or claimed now.
    pub open: usize,
    /// Fires that started later than the misfire threshold allows (5 s).
    pub late: usize,
    /// Fires per minute, oldest minute first, over the window.
    pub fires_per_minute: Vec<usize>,
    /// Lateness of started fires, p50, p99 and max, in milliseconds.
    pub lateness_ms: Option<[i64; 3]>,
    /// Lateness buckets (upper bounds in ms: 10, 50, 100, 500, 1,000,
    /// 5,000, more) and their counts, for a chart.
    pub lateness_histogram: Vec<(String, usize)>,
}

/// The lateness buckets of the overview's chart: upper bounds in ms.
const LATENESS_BUCKETS: [i64; 6] = [10, 50, 100, 500, 1_000, 5_000];

pub(super) fn overview(now: Timestamp, window_ms: i64, nodes: &[Node], jobs: &[Job], fires: &[FireRecord]) -> Overview {
    use crate::store::JobState;
    let count = |state: FireState| fires.iter().filter(|f| f.state == state).count();
    let minutes = usize::try_from(window_ms.div_euclid(60_000).max(1)).unwrap_or(1);
    let mut per_minute = vec![0; minutes];
    let mut lateness: Vec<i64> = Vec::new();
    for f in fires {
        let age = now.as_millis() - f.fire_time.as_millis();
        if let Ok(back) = usize::try_from(age.div_euclid(60_000))
            && back < minutes
        {
            per_minute[minutes - 1 - back] += 1;
        }
        if let Some(started) = f.started_at
            && f.attempt == 1
        {
            lateness.push((started.as_millis() - f.fire_time.as_millis()).max(0));
        }
    }
    lateness.sort_unstable();
    let pick = |q: f64| {
        let i = ((lateness.len() as f64 - 1.0) * q).round() as usize;
        lateness[i.min(lateness.len() - 1)]
    };
    let mut histogram: Vec<(String, usize)> = LATENESS_BUCKETS
        .iter()
        .map(|b| (format!("≤{b} ms"), 0))
        .chain(std::iter::once(("more".to_owned(), 0)))
        .collect();
    for l in &lateness {
        let i = LATENESS_BUCKETS
            .iter()
            .position(|b| l <= b)
            .unwrap_or(LATENESS_BUCKETS.len());
        histogram[i].1 += 1;
    }
    Overview {
        now: now.as_millis(),
        live_nodes: nodes.iter().filter(|n| is_live(n, now)).count(),
        silent_nodes: nodes.iter().filter(|n| is_silent(n, now)).count(),
        nodes: nodes.len(),
        jobs: jobs.len(),
        paused_jobs: jobs.iter().filter(|j| j.state == JobState::Paused).count(),
        window_ms,
        fires_read: fires.len(),
        succeeded: count(FireState::Succeeded),
        failed: count(FireState::Failed),
        misfired: count(FireState::Misfired),
        skipped: count(FireState::Skipped),
        abandoned: count(FireState::Abandoned),
        open: count(FireState::Running) + count(FireState::Claimed),
        late: lateness
            .iter()
            .filter(|l| **l > crate::misfire::DEFAULT_THRESHOLD_MILLIS)
            .count(),
        fires_per_minute: per_minute,
        lateness_ms: (!lateness.is_empty()).then(|| [pick(0.5), pick(0.99), pick(1.0)]),
        lateness_histogram: histogram,
    }
}

/// The views of jobs ([`JobView::new`], with [`super::UPCOMING`] fire times),
/// computed on a blocking thread: each trigger's search for its upcoming
/// times is bounded ([`VIEW_SEARCH_STEPS`]), but a page of jobs
/// behind calendars that exclude almost every time still costs a fraction
/// of a second of CPU, which a node's own tasks on the runtime's threads
/// must not wait behind.
pub(super) async fn views_of(details: Vec<crate::store::JobDetail>) -> Result<Vec<JobView>, super::AdminError> {
    tokio::task::spawn_blocking(move || details.iter().map(|d| JobView::new(d, super::UPCOMING)).collect())
        .await
        .map_err(|e| super::AdminError::Internal {
            reason: format!("computing the jobs' views failed: {e}"),
        })
}

/// One job's view, as [`views_of`] computes it.
pub(super) async fn view_of(detail: crate::store::JobDetail) -> Result<JobView, super::AdminError> {
    views_of(vec![detail])
        .await?
        .pop()
        .ok_or_else(|| super::AdminError::Internal {
            reason: "a job's view was not computed".to_owned(),
        })
}
