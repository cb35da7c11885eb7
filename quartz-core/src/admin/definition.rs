//! The job model: a job's definition and its triggers, typed (durations as
//! [`Duration`], the misfire policy as [`MisfirePolicy`], the schedule as a
//! [`Schedule`] with its [`DstChoice`]). The same definition is what code
//! declares, what the API, the CLI and the console read and write as JSON
//! (with the field names and units the API has always used), and, with
//! where it stands, what a view shows.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::AdminError;
use crate::cron::{CronExpression, DstChoice, parse_time_zone};
use crate::misfire::MisfirePolicy;
use crate::store::{ExecuteSpec, JobSpec, RetryPolicy};
use crate::time::Timestamp;
use crate::trigger::{Jitter, Overlap, Schedule, Trigger};

/// An instant as the admin API takes it: epoch milliseconds (a number, or
/// digits in a query string), or RFC 3339 text (`2026-12-24T18:00:00+01:00`).
///
/// # Errors
///
/// A message naming both forms when `text` is neither.
pub fn parse_instant(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|_| format!("{text:?} is neither epoch milliseconds nor an RFC 3339 instant (2026-01-01T09:00:00Z)"))
}

/// Deserialises an optional instant with [`parse_instant`]'s rules, for
/// `#[serde(deserialize_with = ...)]` on request bodies and query strings.
///
/// # Errors
///
/// The deserialiser's error when the value is neither form.
pub fn deserialize_instant<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Millis(i64),
        Text(String),
    }
    match Option::<Either>::deserialize(d)? {
        None => Ok(None),
        Some(Either::Millis(ms)) => Ok(Some(ms)),
        Some(Either::Text(text)) => parse_instant(&text).map(Some).map_err(serde::de::Error::custom),
    }
}

/// The OpenAPI schema of an instant the API takes: epoch milliseconds or
/// RFC 3339 text.
#[cfg(feature = "openapi")]
pub fn instant_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                    .description(Some("epoch milliseconds")),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
                    .description(Some("RFC 3339, with its offset")),
            )
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .description(Some("An instant: epoch milliseconds or RFC 3339 text"))
            .build(),
    )
}

/// How a trigger's fire times are spaced, as stored in `quartz_execute.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TriggerKind {
    /// A Quartz cron expression in a time zone.
    Cron,
    /// Every `interval_ms` from the start.
    FixedRate,
    /// `interval_ms` after the previous run finished.
    FixedDelay,
    /// Once, at `start`.
    Once,
}

impl TriggerKind {
    /// The kind of a schedule.
    pub fn of(schedule: &Schedule) -> TriggerKind {
        match schedule {
            Schedule::Cron { .. } => TriggerKind::Cron,
            Schedule::FixedRate { .. } => TriggerKind::FixedRate,
            Schedule::FixedDelay { .. } => TriggerKind::FixedDelay,
            Schedule::Once => TriggerKind::Once,
        }
    }

    /// `cron`, `fixed_rate`, `fixed_delay` or `once`.
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::Cron => "cron",
            TriggerKind::FixedRate => "fixed_rate",
            TriggerKind::FixedDelay => "fixed_delay",
            TriggerKind::Once => "once",
        }
    }
}

/// A trigger: when its job fires. Its JSON form is the API's (`kind`,
/// `cron`, `time_zone`, `interval_ms`, `start`, `end`, `repeat`, `misfire`,
/// `priority`, `calendar`, `dst_skipped`, `dst_repeated`, `jitter_ms`,
/// `catch_up_ms`, `overlap`); reading it
/// checks each value and names the field at fault.
///
/// ```
/// use quartz_core::admin::TriggerDefinition;
/// use quartz_core::misfire::MisfirePolicy;
///
/// let nightly: TriggerDefinition = serde_json::from_str(
///     r#"{"kind": "cron", "cron": "0 0 2 * * ?", "time_zone": "Europe/Paris", "misfire": "do_nothing"}"#,
/// )?;
/// assert_eq!(nightly.misfire, MisfirePolicy::DoNothing);
/// assert_eq!(nightly, TriggerDefinition::cron("0 0 2 * * ?", "Europe/Paris")?.misfire(MisfirePolicy::DoNothing));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "super::wire::TriggerWire", into = "super::wire::TriggerWire")]
pub struct TriggerDefinition {
    /// How fire times are spaced.
    pub schedule: Schedule,
    /// Not before this instant (default: when the trigger is stored); for
    /// a one-off trigger, its one fire time.
    pub start: Option<Timestamp>,
    /// Not after this instant.
    pub end: Option<Timestamp>,
    /// At most this many fires.
    pub repeat: Option<u64>,
    /// What a late fire does (default [`MisfirePolicy::Smart`]).
    pub misfire: MisfirePolicy,
    /// Higher fires first among fires due at the same instant.
    pub priority: i32,
    /// The calendar, by name, whose excluded times are not fire times (see
    /// [`crate::calendar`]).
    pub calendar: Option<String>,
    /// Spread each fire by up to this much, the offset fixed per fire time
    /// (see [`Trigger::with_jitter`]).
    pub jitter: Option<Duration>,
    /// Make up for missed fire times only this far back; older ones are
    /// recorded as misfired and skipped, whatever the misfire policy (see
    /// [`Trigger::with_catch_up`]).
    pub catch_up: Option<Duration>,
    /// What a fire does while a fire of its job is still running (see
    /// [`Overlap`]); `None` keeps the job's own rule.
    pub overlap: Option<Overlap>,
}

impl TriggerDefinition {
    /// A trigger on `schedule`, from when it is stored on.
    pub fn new(schedule: Schedule) -> TriggerDefinition {
        TriggerDefinition {
            schedule,
            start: None,
            end: None,
            repeat: None,
            misfire: MisfirePolicy::Smart,
            priority: 0,
            calendar: None,
            jitter: None,
            catch_up: None,
            overlap: None,
        }
    }

    /// A cron trigger: a Quartz expression (seconds first) in an IANA zone.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] on `cron` or `time_zone`.
    pub fn cron(expr: &str, time_zone: &str) -> Result<TriggerDefinition, AdminError> {
        let expr = CronExpression::parse(expr).map_err(|e| AdminError::invalid("cron", e.to_string()))?;
        let zone = parse_time_zone(time_zone).map_err(|e| AdminError::invalid("time_zone", e.to_string()))?;
        Ok(TriggerDefinition::new(Schedule::cron(expr, zone)))
    }

    /// A fixed-rate trigger: every `interval` (1 ms to 100 years, kept to
    /// the millisecond; checked when stored).
    pub fn every(interval: Duration) -> TriggerDefinition {
        TriggerDefinition::new(Schedule::FixedRate {
            interval_ms: crate::store::millis_of(interval),
        })
    }

    /// A fixed-delay trigger: `delay` after each run finished.
    pub fn after_each(delay: Duration) -> TriggerDefinition {
        TriggerDefinition::new(Schedule::FixedDelay {
            delay_ms: crate::store::millis_of(delay),
        })
    }

    /// A trigger that fires once, at `at`.
    pub fn once(at: Timestamp) -> TriggerDefinition {
        TriggerDefinition::new(Schedule::Once).starting(at)
    }

    /// Not before `start`.
    #[must_use]
    pub fn starting(mut self, start: Timestamp) -> TriggerDefinition {
        self.start = Some(start);
        self
    }

    /// Not after `end`.
    #[must_use]
    pub fn ending(mut self, end: Timestamp) -> TriggerDefinition {
        self.end = Some(end);
        self
    }

    /// At most `limit` fires.
    #[must_use]
    pub fn repeating(mut self, limit: u64) -> TriggerDefinition {
        self.repeat = Some(limit);
        self
    }

    /// The times calendar `name` excludes are not fire times.
    #[must_use]
    pub fn calendar(mut self, name: impl Into<String>) -> TriggerDefinition {
        self.calendar = Some(name.into());
        self
    }

    /// For a cron trigger: what it does with a local time a DST change
    /// skips or repeats. Other schedules have no local times, and are left
    /// as they are.
    #[must_use]
    pub fn dst(mut self, choice: DstChoice) -> TriggerDefinition {
        if let Schedule::Cron { dst, .. } = &mut self.schedule {
            *dst = choice;
        }
        self
    }

    /// The misfire policy.
    #[must_use]
    pub fn misfire(mut self, policy: MisfirePolicy) -> TriggerDefinition {
        self.misfire = policy;
        self
    }

    /// Spreads each fire by up to `max`, the offset fixed per fire time.
    #[must_use]
    pub fn jitter(mut self, max: Duration) -> TriggerDefinition {
        self.jitter = Some(max);
        self
    }

    /// What a fire does while a fire of its job is still running.
    #[must_use]
    pub fn overlap(mut self, policy: Overlap) -> TriggerDefinition {
        self.overlap = Some(policy);
        self
    }

    /// Makes up for missed fire times only `window` back.
    #[must_use]
    pub fn catch_up(mut self, window: Duration) -> TriggerDefinition {
        self.catch_up = Some(window);
        self
    }

    /// The priority among fires due at the same instant.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> TriggerDefinition {
        self.priority = priority;
        self
    }

    /// A cron trigger's zone, by IANA name.
    pub fn zone_name(&self) -> Option<&'static str> {
        match &self.schedule {
            Schedule::Cron { zone, .. } => Some(zone.name()),
            _ => None,
        }
    }

    /// A cron trigger's expression, as written.
    pub fn cron_text(&self) -> Option<&str> {
        match &self.schedule {
            Schedule::Cron { expr, .. } => Some(expr.as_str()),
            _ => None,
        }
    }

    /// A fixed-rate trigger's interval or a fixed-delay trigger's delay.
    pub fn interval(&self) -> Option<Duration> {
        match self.schedule {
            Schedule::FixedRate { interval_ms: ms } | Schedule::FixedDelay { delay_ms: ms } => {
                Some(crate::store::duration_of(ms))
            }
            _ => None,
        }
    }

    /// A cron trigger's DST choice.
    pub fn dst_choice(&self) -> Option<DstChoice> {
        match self.schedule {
            Schedule::Cron { dst, .. } => Some(dst),
            _ => None,
        }
    }

    /// How fire times are spaced.
    pub fn kind(&self) -> TriggerKind {
        TriggerKind::of(&self.schedule)
    }

    /// The stored form of this trigger in job `job`; `index` is its place
    /// in the job's list (for the field an error names, `triggers[i].end`,
    /// and the jitter's seed), `now` the default start.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming the field.
    pub fn to_execute(&self, job: &str, index: usize, now: Timestamp) -> Result<ExecuteSpec, AdminError> {
        let invalid = |name: &str, e: &dyn std::fmt::Display| {
            AdminError::invalid(format!("triggers[{index}].{name}"), e.to_string())
        };
        let schedule_field = match self.kind() {
            TriggerKind::FixedRate | TriggerKind::FixedDelay => "interval_ms",
            TriggerKind::Cron | TriggerKind::Once => "kind",
        };
        let mut trigger =
            Trigger::new(self.schedule.clone(), self.start.unwrap_or(now)).map_err(|e| invalid(schedule_field, &e))?;
        if let Some(end) = self.end {
            trigger = trigger.with_end(end).map_err(|e| invalid("end", &e))?;
        }
        if let Some(n) = self.repeat {
            trigger = trigger.with_repeat_limit(n).map_err(|e| invalid("repeat", &e))?;
        }
        trigger = trigger
            .with_misfire_policy(self.misfire)
            .map_err(|e| invalid("misfire", &e))?;
        if let Some(name) = &self.calendar {
            trigger = trigger.with_calendar(name).map_err(|e| invalid("calendar", &e))?;
        }
        if let Some(max) = self.jitter {
            let jitter = Jitter::new(max, Jitter::seed_of(job, index)).map_err(|e| invalid("jitter_ms", &e))?;
            trigger = trigger.with_jitter(jitter);
        }
        if let Some(window) = self.catch_up {
            trigger = trigger.with_catch_up(window).map_err(|e| invalid("catch_up_ms", &e))?;
        }
        trigger = trigger.with_overlap(self.overlap);
        Ok(ExecuteSpec {
            trigger,
            priority: self.priority,
        })
    }
}

impl From<&ExecuteSpec> for TriggerDefinition {
    /// A stored trigger's definition, its start given.
    fn from(e: &ExecuteSpec) -> TriggerDefinition {
        TriggerDefinition::of_trigger(&e.trigger, e.priority)
    }
}

impl TriggerDefinition {
    /// The definition of a trigger and its priority, its start given.
    pub fn of_trigger(trigger: &Trigger, priority: i32) -> TriggerDefinition {
        TriggerDefinition {
            schedule: trigger.schedule().clone(),
            start: Some(trigger.start()),
            end: trigger.end(),
            repeat: trigger.repeat_limit(),
            misfire: trigger.misfire_policy(),
            priority,
            calendar: trigger.calendar_name().map(str::to_owned),
            jitter: trigger.jitter().map(|j| crate::store::duration_of(j.max_ms)),
            catch_up: trigger.catch_up(),
            overlap: trigger.overlap(),
        }
    }
}

/// A job: its own fields (the [`JobSpec`] that is stored) and its
/// triggers. Its JSON form is the API's: the job's fields (`name`,
/// `handler`, `payload`, `timeout_ms`, `max_attempts`, `backoff_ms`, …)
/// beside `triggers`.
///
/// ```
/// use quartz_core::admin::JobDefinition;
///
/// let job: JobDefinition = serde_json::from_str(r#"{
///     "name": "report", "handler": "log", "payload": {"to": "ops"}, "timeout_ms": 30000,
///     "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]
/// }"#)?;
/// assert_eq!(job.spec.timeout, Some(std::time::Duration::from_secs(30)));
/// let (spec, executes) = job.to_specs(quartz_core::Timestamp::from_millis(0))?;
/// assert_eq!(spec.payload, r#"{"to":"ops"}"#);
/// assert_eq!(executes.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDefinition {
    /// The job's own fields: name, handler, payload, description,
    /// recovery, concurrency, timeout, retry and parent.
    pub spec: JobSpec,
    /// Its triggers: none for a child job (see [`JobSpec::parent`]) or a
    /// job that runs only when fired by hand.
    pub triggers: Vec<TriggerDefinition>,
}

impl JobDefinition {
    /// A job with the defaults and no trigger.
    pub fn new(name: impl Into<String>, handler: impl Into<String>) -> JobDefinition {
        JobDefinition {
            spec: JobSpec::new(name, handler),
            triggers: Vec::new(),
        }
    }

    /// The definition of a job stored as `job` with `executes` as its
    /// triggers (each with its start).
    pub fn of_specs(job: &JobSpec, executes: &[ExecuteSpec]) -> JobDefinition {
        JobDefinition {
            spec: job.clone(),
            triggers: executes.iter().map(TriggerDefinition::from).collect(),
        }
    }

    /// A typed job's definition: its kind as the handler and `job` as the
    /// payload (see [`TypedJob`](crate::engine::TypedJob)), no trigger yet.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] on `payload` when it does not serialise.
    pub fn of<J: crate::engine::TypedJob>(name: impl Into<String>, job: &J) -> Result<JobDefinition, AdminError> {
        JobDefinition::new(name, J::KIND).with_payload(job)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The payload: any serde value.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] on `payload` when it does not serialise.
    pub fn with_payload<T: Serialize + ?Sized>(mut self, payload: &T) -> Result<JobDefinition, AdminError> {
        self.spec = self
            .spec
            .with_payload(payload)
            .map_err(|e| AdminError::invalid("payload", e.to_string()))?;
        Ok(self)
    }

    /// A trigger more.
    #[must_use]
    pub fn with_trigger(mut self, trigger: TriggerDefinition) -> JobDefinition {
        self.triggers.push(trigger);
        self
    }

    /// The description.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> JobDefinition {
        self.spec.description = description.into();
        self
    }

    /// A timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> JobDefinition {
        self.spec.timeout = Some(timeout);
        self
    }

    /// A retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> JobDefinition {
        self.spec.retry = retry;
        self
    }

    /// Re-run a fire whose node died mid-run, or not.
    #[must_use]
    pub fn with_recovery(mut self, requests_recovery: bool) -> JobDefinition {
        self.spec.requests_recovery = requests_recovery;
        self
    }

    /// Whether fires of the job may overlap.
    #[must_use]
    pub fn with_concurrency(mut self, allow_concurrent: bool) -> JobDefinition {
        self.spec.allow_concurrent = allow_concurrent;
        self
    }

    /// A cluster-wide concurrency limit (see [`ConcurrencyLimit`](crate::store::ConcurrencyLimit)).
    #[must_use]
    pub fn with_limit(mut self, limit: crate::store::ConcurrencyLimit) -> JobDefinition {
        self.spec.limit = Some(limit);
        self
    }

    /// A parent: the job runs after each success of this one instead of on
    /// triggers.
    #[must_use]
    pub fn with_parent(mut self, parent: impl Into<String>) -> JobDefinition {
        self.spec.parent = Some(parent.into());
        self
    }

    /// The stored form: the job and its triggers, every field checked.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming the first field at fault.
    pub fn to_specs(&self, now: Timestamp) -> Result<(JobSpec, Vec<ExecuteSpec>), AdminError> {
        self.spec
            .check_fields()
            .map_err(|(field, e)| AdminError::invalid(field, e.to_string()))?;
        check_overlaps(self.spec.allow_concurrent, &self.triggers)?;
        let executes = self
            .triggers
            .iter()
            .enumerate()
            .map(|(i, t)| t.to_execute(&self.spec.name, i, now))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((self.spec.clone(), executes))
    }
}

/// A job that disallows concurrency cannot have a trigger whose overlap
/// policy allows it.
pub(crate) fn check_overlaps(allow_concurrent: bool, triggers: &[TriggerDefinition]) -> Result<(), AdminError> {
    if allow_concurrent {
        return Ok(());
    }
    match triggers.iter().position(|t| t.overlap == Some(Overlap::Allow)) {
        Some(i) => Err(AdminError::invalid(
            format!("triggers[{i}].overlap"),
            "the job disallows concurrency (allow_concurrent is false): its triggers' overlap policy \
             cannot be allow"
                .to_owned(),
        )),
        None => Ok(()),
    }
}
