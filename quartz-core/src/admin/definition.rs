//! What the admin surface takes in: a job's definition and its triggers, as plain data (serde), checked field by field so that an
//! error names the field at fault.

use serde::{Deserialize, Deserializer, Serialize};

use super::AdminError;
use crate::cron::{CronExpression, DstChoice, parse_time_zone};
use crate::misfire::MisfirePolicy;
use crate::store::{ExecuteSpec, JobSpec, RetryPolicy};
use crate::time::Timestamp;
use crate::trigger::{Schedule, Trigger};

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

/// A trigger as the admin API takes it.
///
/// ```
/// use quartz_core::admin::TriggerDefinition;
///
/// let nightly: TriggerDefinition = serde_json::from_str(
///     r#"{"kind": "cron", "cron": "0 0 2 * * ?", "time_zone": "Europe/Paris"}"#,
/// )?;
/// let spec = nightly.to_execute(0, quartz_core::Timestamp::from_millis(0))?;
/// assert_eq!(spec.priority, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TriggerDefinition {
    /// How fire times are spaced.
    pub kind: TriggerKind,
    /// For `cron`: the expression (Quartz syntax, seconds first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// For `cron`: the IANA time zone (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// For `fixed_rate` and `fixed_delay`: milliseconds between fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<i64>,
    /// Not before this instant (epoch ms or RFC 3339; default now); for
    /// `once`, its one fire time.
    #[serde(
        default,
        deserialize_with = "deserialize_instant",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(schema_with = instant_schema))]
    pub start: Option<i64>,
    /// Not after this instant.
    #[serde(
        default,
        deserialize_with = "deserialize_instant",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(schema_with = instant_schema))]
    pub end: Option<i64>,
    /// At most this many fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u64>,
    /// The misfire policy (`smart`, `fire_now`, `ignore_misfires`,
    /// `do_nothing`, `reschedule_now_with_existing_count`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<String>,
    /// Higher fires first among fires due at the same instant.
    #[serde(default)]
    pub priority: i32,
    /// The calendar, by name, whose excluded times are not fire times (see
    /// [`crate::calendar`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<String>,
    /// For `cron`: a local time a DST change skips fires at the shifted
    /// instant (`shift`) or not at all (`skip`); default `quartz`, Quartz's
    /// own behaviour (see [`crate::cron::DstChoice`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_skipped: Option<String>,
    /// For `cron`: a local time a DST change repeats fires at its `first`
    /// occurrence, its `second`, or `both`; default `quartz` (once, at the
    /// later instant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_repeated: Option<String>,
}

impl TriggerDefinition {
    /// A cron trigger in a zone, from now on.
    pub fn cron(expr: impl Into<String>, time_zone: impl Into<String>) -> TriggerDefinition {
        TriggerDefinition {
            cron: Some(expr.into()),
            time_zone: Some(time_zone.into()),
            ..TriggerDefinition::of(TriggerKind::Cron)
        }
    }

    /// A fixed-rate trigger, from now on.
    pub fn every(interval: std::time::Duration) -> TriggerDefinition {
        TriggerDefinition {
            interval_ms: Some(i64::try_from(interval.as_millis()).unwrap_or(i64::MAX)),
            ..TriggerDefinition::of(TriggerKind::FixedRate)
        }
    }

    /// A fixed-delay trigger: `delay` after each run finished, from now on.
    pub fn after_each(delay: std::time::Duration) -> TriggerDefinition {
        TriggerDefinition {
            interval_ms: Some(crate::store::millis_of(delay)),
            ..TriggerDefinition::of(TriggerKind::FixedDelay)
        }
    }

    /// A trigger that fires once, at `at`.
    pub fn once(at: Timestamp) -> TriggerDefinition {
        TriggerDefinition {
            start: Some(at.as_millis()),
            ..TriggerDefinition::of(TriggerKind::Once)
        }
    }

    /// Not before `start`.
    #[must_use]
    pub fn starting(mut self, start: Timestamp) -> TriggerDefinition {
        self.start = Some(start.as_millis());
        self
    }

    /// Not after `end`.
    #[must_use]
    pub fn ending(mut self, end: Timestamp) -> TriggerDefinition {
        self.end = Some(end.as_millis());
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
    /// skips or repeats.
    #[must_use]
    pub fn dst(mut self, choice: DstChoice) -> TriggerDefinition {
        self.dst_skipped = Some(choice.skipped.as_str().to_owned());
        self.dst_repeated = Some(choice.repeated.as_str().to_owned());
        self
    }

    /// The misfire policy.
    #[must_use]
    pub fn misfire(mut self, policy: crate::misfire::MisfirePolicy) -> TriggerDefinition {
        self.misfire = Some(policy.as_str().to_owned());
        self
    }

    fn of(kind: TriggerKind) -> TriggerDefinition {
        TriggerDefinition {
            kind,
            cron: None,
            time_zone: None,
            interval_ms: None,
            start: None,
            end: None,
            repeat: None,
            misfire: None,
            priority: 0,
            calendar: None,
            dst_skipped: None,
            dst_repeated: None,
        }
    }

    /// The stored form of this trigger; `index` is its place in the job's
    /// list (for the field an error names, `triggers[i].cron`), `now` the
    /// default start.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming the field.
    pub fn to_execute(&self, index: usize, now: Timestamp) -> Result<ExecuteSpec, AdminError> {
        let field = |name: &str| format!("triggers[{index}].{name}");
        let invalid = |name: &str, e: &dyn std::fmt::Display| AdminError::invalid(field(name), e.to_string());
        let unused = |name: &str, given: bool| {
            if given {
                Err(AdminError::invalid(
                    field(name),
                    format!("{name} does not apply to a {} trigger", self.kind_name()),
                ))
            } else {
                Ok(())
            }
        };
        let interval = || {
            self.interval_ms.ok_or_else(|| {
                AdminError::invalid(
                    field("interval_ms"),
                    "a fixed-rate or fixed-delay trigger needs interval_ms",
                )
            })
        };
        let schedule = match self.kind {
            TriggerKind::Cron => {
                unused("interval_ms", self.interval_ms.is_some())?;
                let text = self
                    .cron
                    .as_deref()
                    .ok_or_else(|| AdminError::invalid(field("cron"), "a cron trigger needs a cron expression"))?;
                let expr = CronExpression::parse(text).map_err(|e| invalid("cron", &e))?;
                let zone = parse_time_zone(self.time_zone.as_deref().unwrap_or("UTC"))
                    .map_err(|e| invalid("time_zone", &e))?;
                let dst =
                    super::parse_dst(self.dst_skipped.as_deref(), self.dst_repeated.as_deref()).map_err(
                        |e| match e {
                            AdminError::Invalid { field: name, message } => AdminError::invalid(field(&name), message),
                            other => other,
                        },
                    )?;
                Schedule::cron_with_dst(expr, zone, dst)
            }
            TriggerKind::FixedRate | TriggerKind::FixedDelay | TriggerKind::Once
                if self.dst_skipped.is_some() || self.dst_repeated.is_some() =>
            {
                let name = if self.dst_skipped.is_some() {
                    "dst_skipped"
                } else {
                    "dst_repeated"
                };
                return Err(AdminError::invalid(
                    field(name),
                    format!(
                        "a DST choice does not apply to a {} trigger: only cron triggers have local times",
                        self.kind_name()
                    ),
                ));
            }
            TriggerKind::FixedRate | TriggerKind::FixedDelay => {
                unused("cron", self.cron.is_some())?;
                unused("time_zone", self.time_zone.is_some())?;
                let ms = interval()?;
                let schedule = if self.kind == TriggerKind::FixedRate {
                    Schedule::fixed_rate_millis(ms)
                } else {
                    Schedule::fixed_delay_millis(ms)
                };
                schedule.map_err(|e| invalid("interval_ms", &e))?
            }
            TriggerKind::Once => {
                unused("cron", self.cron.is_some())?;
                unused("time_zone", self.time_zone.is_some())?;
                unused("interval_ms", self.interval_ms.is_some())?;
                Schedule::Once
            }
        };
        let start = self.start.map_or(now, Timestamp::from_millis);
        let mut trigger = Trigger::new(schedule, start).map_err(|e| invalid("kind", &e))?;
        if let Some(end) = self.end {
            trigger = trigger
                .with_end(Timestamp::from_millis(end))
                .map_err(|e| invalid("end", &e))?;
        }
        if let Some(n) = self.repeat {
            trigger = trigger.with_repeat_limit(n).map_err(|e| invalid("repeat", &e))?;
        }
        if let Some(policy) = &self.misfire {
            let policy: MisfirePolicy = policy.parse().map_err(|e| invalid("misfire", &e))?;
            trigger = trigger
                .with_misfire_policy(policy)
                .map_err(|e| invalid("misfire", &e))?;
        }
        if let Some(name) = &self.calendar {
            trigger = trigger.with_calendar(name).map_err(|e| invalid("calendar", &e))?;
        }
        Ok(ExecuteSpec {
            trigger,
            priority: self.priority,
        })
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            TriggerKind::Cron => "cron",
            TriggerKind::FixedRate => "fixed-rate",
            TriggerKind::FixedDelay => "fixed-delay",
            TriggerKind::Once => "one-off",
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_attempts() -> u32 {
    1
}

/// A new job as the admin API takes it: its definition and its triggers.
///
/// ```
/// use quartz_core::admin::JobDefinition;
///
/// let job: JobDefinition = serde_json::from_str(r#"{
///     "name": "report", "handler": "log", "payload": {"to": "ops"},
///     "triggers": [{"kind": "fixed_rate", "interval_ms": 60000}]
/// }"#)?;
/// let (spec, executes) = job.to_specs(quartz_core::Timestamp::from_millis(0))?;
/// assert_eq!(spec.payload, r#"{"to":"ops"}"#);
/// assert_eq!(executes.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobDefinition {
    /// Unique in the scheduler.
    pub name: String,
    /// The handler that runs it.
    pub handler: String,
    /// The handler's input (any JSON; default `null`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub payload: serde_json::Value,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Re-run a fire whose node died mid-run.
    #[serde(default)]
    pub requests_recovery: bool,
    /// Whether fires of the job may overlap (default true).
    #[serde(default = "default_true")]
    pub allow_concurrent: bool,
    /// Cancel a run after this many milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<i64>,
    /// Attempts in all (default 1: no retry).
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Milliseconds between a failure and the next attempt.
    #[serde(default)]
    pub backoff_ms: i64,
    /// Exponential backoff's longest wait, in milliseconds.
    #[serde(default)]
    pub backoff_max_ms: Option<i64>,
    /// Run after each success of this job instead of on triggers.
    #[serde(default)]
    pub parent: Option<String>,
    /// Its triggers (none for a child job).
    #[serde(default)]
    pub triggers: Vec<TriggerDefinition>,
}

impl JobDefinition {
    /// A job with the defaults and no trigger.
    pub fn new(name: impl Into<String>, handler: impl Into<String>) -> JobDefinition {
        JobDefinition {
            name: name.into(),
            handler: handler.into(),
            payload: serde_json::Value::Null,
            description: String::new(),
            requests_recovery: false,
            allow_concurrent: true,
            timeout_ms: None,
            max_attempts: 1,
            backoff_ms: 0,
            backoff_max_ms: None,
            parent: None,
            triggers: Vec::new(),
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

    /// The payload: any serde value.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] on `payload` when it does not serialise.
    pub fn with_payload<T: Serialize + ?Sized>(mut self, payload: &T) -> Result<JobDefinition, AdminError> {
        self.payload = serde_json::to_value(payload)
            .map_err(|e| AdminError::invalid("payload", format!("the payload does not serialise: {e}")))?;
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
        self.description = description.into();
        self
    }

    /// A timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> JobDefinition {
        self.timeout_ms = Some(crate::store::millis_of(timeout));
        self
    }

    /// A retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> JobDefinition {
        self.max_attempts = retry.max_attempts;
        self.backoff_ms = crate::store::millis_of(retry.backoff);
        self.backoff_max_ms = retry.backoff_max.map(crate::store::millis_of);
        self
    }

    /// Re-run a fire whose node died mid-run, or not.
    #[must_use]
    pub fn with_recovery(mut self, requests_recovery: bool) -> JobDefinition {
        self.requests_recovery = requests_recovery;
        self
    }

    /// Whether fires of the job may overlap.
    #[must_use]
    pub fn with_concurrency(mut self, allow_concurrent: bool) -> JobDefinition {
        self.allow_concurrent = allow_concurrent;
        self
    }

    /// A parent: the job runs after each success of this one instead of on
    /// triggers.
    #[must_use]
    pub fn with_parent(mut self, parent: impl Into<String>) -> JobDefinition {
        self.parent = Some(parent.into());
        self
    }

    /// The stored form: the job and its triggers, every field checked.
    ///
    /// # Errors
    ///
    /// [`AdminError::Invalid`] naming the first field at fault.
    pub fn to_specs(&self, now: Timestamp) -> Result<(JobSpec, Vec<ExecuteSpec>), AdminError> {
        let spec = JobSpec {
            name: self.name.clone(),
            handler: self.handler.clone(),
            payload: self.payload.to_string(),
            description: self.description.clone(),
            requests_recovery: self.requests_recovery,
            allow_concurrent: self.allow_concurrent,
            timeout: self.timeout_ms.map(|ms| wire_duration("timeout_ms", ms)).transpose()?,
            retry: RetryPolicy {
                max_attempts: self.max_attempts,
                backoff: wire_duration("backoff_ms", self.backoff_ms)?,
                backoff_max: self
                    .backoff_max_ms
                    .map(|ms| wire_duration("backoff_max_ms", ms))
                    .transpose()?,
            },
            parent: self.parent.clone(),
        };
        spec.check_fields()
            .map_err(|(field, e)| AdminError::invalid(field, e.to_string()))?;
        // No trigger and no parent: a job that runs only when fired by hand.
        let executes = self
            .triggers
            .iter()
            .enumerate()
            .map(|(i, t)| t.to_execute(i, now))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((spec, executes))
    }
}

/// A duration the API gives in milliseconds: never negative.
pub(super) fn wire_duration(field: &str, ms: i64) -> Result<std::time::Duration, AdminError> {
    if ms < 0 {
        return Err(AdminError::invalid(
            field,
            format!("{field} must be between 0 and 100 years, got {ms} ms"),
        ));
    }
    Ok(crate::store::duration_of(ms))
}
