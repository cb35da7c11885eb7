//! The jobs a seed draws: every kind of schedule, misfire and overlap
//! policy, concurrency limits, retries, timeouts, failures and run times
//! that sometimes outlast their interval.

use std::time::Duration;

use quartz_core::Timestamp;
use quartz_core::calendar::{CalendarDefinition, CalendarType};
use quartz_core::misfire::MisfirePolicy;
use quartz_core::store::{ConcurrencyLimit, ExecuteSpec, JobSpec, RetryPolicy};
use quartz_core::trigger::{Overlap, Schedule, Trigger};

use crate::rng::Rng;

/// The one handler every simulated job names.
pub const HANDLER: &str = "sim";

/// What a job's handler does, from its payload.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Behaviour {
    /// The shortest and longest run, in ms.
    pub run_ms: (u64, u64),
    /// Runs that fail, per mille.
    pub fail: u64,
}

/// A drawn job: its spec and triggers, as a user would add them.
#[derive(Debug, Clone)]
pub struct DrawnJob {
    /// Its longest run, in ms.
    pub longest_ms: u64,
    /// The job.
    pub spec: JobSpec,
    /// Its triggers.
    pub executes: Vec<ExecuteSpec>,
}

const ZONES: &[&str] = &["UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe"];
const CRONS: &[&str] = &[
    "0 * * * * ?",
    "*/20 * * * * ?",
    "15 */2 * * * ?",
    "0 */5 * * * ?",
    "0 0/15 * * * ?",
    "0 30 * * * ?",
    "0 0 1-3 * * ?",
    "0 30 2 * * ?",
];

/// The calendars a seed's jobs may name: a daily window of quiet (five
/// to thirty minutes at a drawn hour, in one of the zones, so now and then
/// across a daylight-saving change) and a cron calendar that excludes
/// every other minute.
pub const CALENDARS: [&str; 2] = ["quiet", "odd-minutes"];

/// Draws the definitions of [`CALENDARS`].
pub fn draw_calendars(rng: &mut Rng) -> Vec<(&'static str, CalendarDefinition)> {
    // Within one day: the window ends by 23:19.
    let (hour, minute, length) = (rng.below(23), rng.below(50), rng.range(5, 30));
    let end = minute + length;
    let quiet = CalendarDefinition {
        kind: CalendarType::Daily,
        days: Vec::new(),
        range: Some(format!("{hour:02}:{minute:02}-{:02}:{:02}", hour + end / 60, end % 60)),
        invert: false,
        cron: None,
        time_zone: Some((*rng.pick(ZONES)).to_owned()),
        base: None,
        description: String::new(),
    };
    let odd = CalendarDefinition {
        kind: CalendarType::Cron,
        days: Vec::new(),
        range: None,
        invert: false,
        cron: Some("* 1/2 * * * ?".to_owned()),
        time_zone: None,
        base: None,
        description: String::new(),
    };
    vec![(CALENDARS[0], quiet), (CALENDARS[1], odd)]
}

/// Draws `count` jobs whose triggers start from `from` and whose one-off
/// fires fall before `until`.
pub fn draw(rng: &mut Rng, count: usize, from: Timestamp, until: Timestamp) -> Vec<DrawnJob> {
    (0..count).map(|i| draw_one(rng, i, from, until)).collect()
}

/// Now and then a child or two: jobs of no trigger of their own that run
/// after a drawn job (one with a trigger) succeeds, each fire of theirs
/// claimed in the transaction that records the parent's success.
pub fn draw_children(rng: &mut Rng, jobs: &mut Vec<DrawnJob>) {
    if !rng.chance(400) {
        return;
    }
    let parents = jobs.len();
    for _ in 0..rng.range(1, 2) {
        let parent = jobs[usize::try_from(rng.below(parents as u64)).unwrap_or(0)]
            .spec
            .name
            .clone();
        let mut spec = JobSpec::new(format!("job-{:02}", jobs.len()), HANDLER);
        spec.parent = Some(parent);
        spec.allow_concurrent = rng.chance(500);
        spec.requests_recovery = rng.chance(500);
        let longest = rng.range(50, 2_000);
        let behaviour = Behaviour {
            run_ms: (rng.range(1, 50), longest),
            fail: if rng.chance(300) { rng.range(50, 400) } else { 0 },
        };
        spec.payload = serde_json::to_string(&behaviour).expect("a payload");
        jobs.push(DrawnJob {
            longest_ms: longest,
            spec,
            executes: Vec::new(),
        });
    }
}

fn draw_one(rng: &mut Rng, i: usize, from: Timestamp, until: Timestamp) -> DrawnJob {
    let start = from.saturating_add_millis(i64::try_from(rng.range(0, 60_000)).unwrap_or(0));
    let span_ms = (until.as_millis() - start.as_millis()).max(1_000);
    // The trigger, and its typical interval (what run times are drawn
    // against, so that some outlast it).
    let (trigger, every_ms) = match rng.below(8) {
        0..=2 => {
            let expr = *rng.pick(CRONS);
            let zone = *rng.pick(ZONES);
            let trigger = Trigger::cron(expr, zone, start).expect("a valid cron trigger");
            let every = if expr.starts_with("*/20") { 20_000 } else { 60_000 };
            (trigger, every)
        }
        3..=5 => {
            // A third of them every few seconds: a node that freezes or is
            // cut off then always has fires claimed and not yet started.
            let every = if rng.chance(330) {
                rng.range(1, 10)
            } else {
                rng.range(5, 300)
            } * 1_000;
            (
                Trigger::every(Duration::from_millis(every), start).expect("a valid interval"),
                every,
            )
        }
        6 => {
            let delay = rng.range(5, 120) * 1_000;
            (
                Trigger::after_each(Duration::from_millis(delay), start).expect("a valid delay"),
                delay,
            )
        }
        _ => {
            let at =
                start.saturating_add_millis(i64::try_from(rng.below(u64::try_from(span_ms).unwrap_or(1))).unwrap_or(0));
            (Trigger::once(at), 60_000)
        }
    };
    let policy = *rng.pick(&MisfirePolicy::ALL);
    let mut trigger = trigger.clone().with_misfire_policy(policy).unwrap_or(trigger);
    if rng.chance(150) {
        trigger = trigger.clone().with_repeat_limit(rng.range(1, 20)).unwrap_or(trigger);
    }
    if rng.chance(400) {
        trigger = trigger.with_overlap(Some(*rng.pick(&Overlap::ALL)));
    }
    if rng.chance(200) {
        let name = *rng.pick(&CALENDARS);
        trigger = trigger.clone().with_calendar(name).unwrap_or(trigger);
    }
    let mut spec = JobSpec::new(format!("job-{i:02}"), HANDLER);
    spec.allow_concurrent = rng.chance(500);
    spec.requests_recovery = rng.chance(500);
    if rng.chance(250) {
        spec.retry = RetryPolicy {
            max_attempts: u32::try_from(rng.range(2, 3)).unwrap_or(2),
            backoff: Duration::from_secs(rng.range(1, 30)),
            backoff_max: None,
        };
    }
    if rng.chance(200) {
        // One limit per key, as a user means it: `key-0` one at a time,
        // `key-1` two (two jobs sharing a key with different limits leave
        // open which one holds; each claim counts by its own job's).
        let _ = rng.range(1, 2);
        let key = rng.below(2);
        spec.limit = Some(ConcurrencyLimit::new(
            u32::try_from(key + 1).unwrap_or(1),
            format!("key-{key}"),
        ));
    }
    // Mostly short; now and then as long as the interval or longer, where
    // the fires that wait for a run are bounded (not under buffer-all, nor
    // a concurrency limit, whose backlogs would then grow without end).
    let backlog_grows = spec.limit.is_some() || trigger.overlap() == Some(Overlap::BufferAll);
    let longest = if rng.chance(200) && !backlog_grows {
        every_ms * 3 / 2
    } else {
        rng.range(50, 5_000).min(every_ms / 4).max(50)
    };
    let behaviour = Behaviour {
        run_ms: (rng.range(1, 50), longest),
        fail: if rng.chance(300) { rng.range(50, 400) } else { 0 },
    };
    if rng.chance(150) {
        spec.timeout = Some(Duration::from_millis(rng.range(500, longest.max(600))));
    }
    spec.payload = serde_json::to_string(&behaviour).expect("a payload");
    DrawnJob {
        longest_ms: longest,
        spec,
        executes: vec![ExecuteSpec::new(trigger)],
    }
}

/// A new schedule for a job, as an operator edits one: a trigger of the
/// same kind from `at`, its interval no shorter than before (the job's run
/// times were drawn against it), with the trigger's misfire and overlap
/// policies and repeat limit.
pub fn redraw(rng: &mut Rng, old: &Trigger, at: Timestamp, until: Timestamp) -> Trigger {
    let start = at.saturating_add_millis(i64::try_from(rng.range(0, 30_000)).unwrap_or(0));
    let redrawn = match old.schedule() {
        Schedule::Cron { expr, .. } => {
            // Another expression as frequent or less (every one but
            // `*/20 …` fires at most once a minute).
            let every_20 = expr.to_string().starts_with("*/20");
            let choices: Vec<&str> = CRONS
                .iter()
                .copied()
                .filter(|c| every_20 || !c.starts_with("*/20"))
                .collect();
            let (expr, zone) = (*rng.pick(&choices), *rng.pick(ZONES));
            Trigger::cron(expr, zone, start).expect("a valid cron trigger")
        }
        Schedule::FixedRate { interval_ms } => {
            let every = u64::try_from(*interval_ms).unwrap_or(1_000) * rng.range(2, 6) / 2;
            Trigger::every(Duration::from_millis(every), start).expect("a valid interval")
        }
        Schedule::FixedDelay { delay_ms } => {
            let delay = u64::try_from(*delay_ms).unwrap_or(1_000) * rng.range(2, 6) / 2;
            Trigger::after_each(Duration::from_millis(delay), start).expect("a valid delay")
        }
        _ => {
            let span = u64::try_from((until.as_millis() - start.as_millis()).max(1)).unwrap_or(1);
            Trigger::once(start.saturating_add_millis(i64::try_from(rng.below(span)).unwrap_or(0)))
        }
    };
    let mut trigger = redrawn
        .clone()
        .with_misfire_policy(old.misfire_policy())
        .unwrap_or(redrawn)
        .with_overlap(old.overlap());
    if let Some(limit) = old.repeat_limit() {
        trigger = trigger.clone().with_repeat_limit(limit).unwrap_or(trigger);
    }
    if let Some(name) = old.calendar_name() {
        trigger = trigger.clone().with_calendar(name).unwrap_or(trigger);
    }
    trigger
}
