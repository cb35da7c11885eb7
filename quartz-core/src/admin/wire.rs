//! The JSON form of the job model: the field names and units the API, the
//! CLI and the console have always used (`interval_ms`, `timeout_ms`, a
//! misfire policy by name, an instant as epoch milliseconds or RFC 3339),
//! read into and written from the typed [`JobDefinition`] and
//! [`TriggerDefinition`]. Everything a value alone can get wrong is refused
//! here, with the field named; what depends on the time of the write (a
//! trigger's default start, an end before it) is checked when the
//! definition is stored.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::AdminError;
use super::definition::{JobDefinition, TriggerDefinition, TriggerKind, deserialize_instant};
use crate::misfire::MisfirePolicy;
use crate::store::{
    ConcurrencyLimit, DEFAULT_LIMIT_KEY, JobSpec, RetryPolicy, ScheduleColumns, duration_of, millis_of,
};
use crate::time::Timestamp;
use crate::trigger::Overlap;

/// A field of the JSON form that cannot be read, by name: what the
/// definitions' deserialisation reports, as `` `cron`: why ``, so that the
/// API can name the field at fault (`triggers[0].cron`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field, relative to the value being read (`cron`, `timeout_ms`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    fn new(field: &str, message: impl fmt::Display) -> FieldError {
        FieldError {
            field: field.to_owned(),
            message: message.to_string(),
        }
    }

    /// A message of this form read back: the field and the rest, for a
    /// message that starts `` `field`: ``.
    pub fn parse(message: &str) -> Option<(&str, &str)> {
        let rest = message.strip_prefix('`')?;
        let (field, rest) = rest.split_once("`: ")?;
        Some((field, rest))
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.field, self.message)
    }
}

impl From<FieldError> for AdminError {
    fn from(e: FieldError) -> AdminError {
        AdminError::invalid(e.field, e.message)
    }
}

/// A trigger as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = TriggerDefinition))]
pub(super) struct TriggerWire {
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
    #[cfg_attr(feature = "openapi", schema(schema_with = super::definition::instant_schema))]
    pub start: Option<i64>,
    /// Not after this instant.
    #[serde(
        default,
        deserialize_with = "deserialize_instant",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(schema_with = super::definition::instant_schema))]
    pub end: Option<i64>,
    /// At most this many fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u64>,
    /// The misfire policy (`smart`, `fire_now`, `ignore_misfires`,
    /// `do_nothing`, `reschedule_now_with_existing_count`, …; default
    /// `smart`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<String>,
    /// Higher fires first among fires due at the same instant.
    #[serde(default)]
    pub priority: i32,
    /// The calendar, by name, whose excluded times are not fire times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<String>,
    /// For `cron`: a local time a DST change skips fires at the shifted
    /// instant (`shift`) or not at all (`skip`); default `quartz`, Quartz's
    /// own behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_skipped: Option<String>,
    /// For `cron`: a local time a DST change repeats fires at its `first`
    /// occurrence, its `second`, or `both`; default `quartz` (once, at the
    /// later instant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_repeated: Option<String>,
    /// Spread each fire by up to this many milliseconds, the offset fixed
    /// per fire time (so every node agrees) and below the time to the next
    /// scheduled time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<i64>,
    /// Make up for missed fire times only this many milliseconds back:
    /// older ones are recorded as misfired and skipped, whatever the
    /// misfire policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_ms: Option<i64>,
    /// What a fire does while a fire of its job is still running: `allow`,
    /// `skip`, `buffer_one`, `buffer_all` or `cancel`; absent keeps the
    /// job's own rule (`allow_concurrent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<String>,
}

impl TryFrom<TriggerWire> for TriggerDefinition {
    type Error = FieldError;

    fn try_from(w: TriggerWire) -> Result<TriggerDefinition, FieldError> {
        let kind = kind_name(w.kind);
        let unused = |name: &str, given: bool| {
            if given {
                Err(FieldError::new(
                    name,
                    format!("{name} does not apply to a {kind} trigger"),
                ))
            } else {
                Ok(())
            }
        };
        if w.kind != TriggerKind::Cron {
            unused("cron", w.cron.is_some())?;
            unused("time_zone", w.time_zone.is_some())?;
            for (name, given) in [("dst_skipped", &w.dst_skipped), ("dst_repeated", &w.dst_repeated)] {
                if given.is_some() {
                    return Err(FieldError::new(
                        name,
                        format!("a DST choice does not apply to a {kind} trigger: only cron triggers have local times"),
                    ));
                }
            }
        }
        if matches!(w.kind, TriggerKind::Cron | TriggerKind::Once) {
            unused("interval_ms", w.interval_ms.is_some())?;
        }
        let columns = ScheduleColumns {
            kind: w.kind.as_str().to_owned(),
            cron_expression: w.cron,
            time_zone: w.time_zone,
            interval_ms: w.interval_ms,
            dst_skipped: w.dst_skipped,
            dst_repeated: w.dst_repeated,
        };
        // The columns' names where the JSON's differ.
        let schedule = columns.to_schedule().map_err(|(column, e)| match column {
            "cron_expression" => FieldError::new("cron", e),
            column => FieldError::new(column, e),
        })?;
        let misfire = match &w.misfire {
            Some(name) => name
                .parse::<MisfirePolicy>()
                .map_err(|e| FieldError::new("misfire", e))?,
            None => MisfirePolicy::Smart,
        };
        let duration = |name: &str, ms: Option<i64>| match ms {
            Some(ms) if !(1..=crate::trigger::MAX_INTERVAL_MILLIS).contains(&ms) => Err(FieldError::new(
                name,
                format!("must be between 1 ms and 100 years, got {ms} ms"),
            )),
            ms => Ok(ms.map(duration_of)),
        };
        let jitter = duration("jitter_ms", w.jitter_ms)?;
        let catch_up = duration("catch_up_ms", w.catch_up_ms)?;
        let overlap = w
            .overlap
            .as_deref()
            .map(str::parse::<Overlap>)
            .transpose()
            .map_err(|e| FieldError::new("overlap", e))?;
        Ok(TriggerDefinition {
            overlap,
            schedule,
            jitter,
            catch_up,
            start: w.start.map(Timestamp::from_millis),
            end: w.end.map(Timestamp::from_millis),
            repeat: w.repeat,
            misfire,
            priority: w.priority,
            calendar: w.calendar,
        })
    }
}

impl From<TriggerDefinition> for TriggerWire {
    fn from(t: TriggerDefinition) -> TriggerWire {
        let columns = ScheduleColumns::of(&t.schedule);
        TriggerWire {
            kind: TriggerKind::of(&t.schedule),
            cron: columns.cron_expression,
            time_zone: columns.time_zone,
            interval_ms: columns.interval_ms,
            start: t.start.map(Timestamp::as_millis),
            end: t.end.map(Timestamp::as_millis),
            repeat: t.repeat,
            misfire: Some(t.misfire.as_str().to_owned()),
            priority: t.priority,
            calendar: t.calendar,
            dst_skipped: columns.dst_skipped,
            dst_repeated: columns.dst_repeated,
            jitter_ms: t.jitter.map(millis_of),
            catch_up_ms: t.catch_up.map(millis_of),
            overlap: t.overlap.map(|o| o.as_str().to_owned()),
        }
    }
}

/// A kind as an error message says it.
pub(super) fn kind_name(kind: TriggerKind) -> &'static str {
    match kind {
        TriggerKind::Cron => "cron",
        TriggerKind::FixedRate => "fixed-rate",
        TriggerKind::FixedDelay => "fixed-delay",
        TriggerKind::Once => "one-off",
    }
}

fn default_true() -> bool {
    true
}

fn default_attempts() -> u32 {
    1
}

/// A job as JSON: its fields and its triggers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = JobDefinition))]
pub(super) struct JobWire {
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
    /// At most this many fires at once, on every node together, among the
    /// jobs whose `concurrency_key` resolves the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_limit: Option<u32>,
    /// The limit's key: `{handler}` (the default) and `{/json/pointer}`
    /// into the payload stand for their values, e.g. `tenant:{/tenant}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// Its triggers (none for a child job, or a job run only by hand).
    #[serde(default)]
    pub triggers: Vec<TriggerDefinition>,
}

/// A duration the API gives in milliseconds: never negative.
pub(super) fn wire_duration(field: &str, ms: i64) -> Result<std::time::Duration, FieldError> {
    if ms < 0 {
        return Err(FieldError::new(
            field,
            format!("{field} must be between 0 and 100 years, got {ms} ms"),
        ));
    }
    Ok(duration_of(ms))
}

impl TryFrom<JobWire> for JobDefinition {
    type Error = FieldError;

    fn try_from(w: JobWire) -> Result<JobDefinition, FieldError> {
        let job = JobSpec {
            name: w.name,
            handler: w.handler,
            payload: w.payload.to_string(),
            description: w.description,
            requests_recovery: w.requests_recovery,
            allow_concurrent: w.allow_concurrent,
            timeout: w.timeout_ms.map(|ms| wire_duration("timeout_ms", ms)).transpose()?,
            retry: RetryPolicy {
                max_attempts: w.max_attempts,
                backoff: wire_duration("backoff_ms", w.backoff_ms)?,
                backoff_max: w
                    .backoff_max_ms
                    .map(|ms| wire_duration("backoff_max_ms", ms))
                    .transpose()?,
            },
            parent: w.parent,
            limit: limit_of(w.concurrency_limit, w.concurrency_key)?,
        };
        Ok(JobDefinition {
            spec: job,
            triggers: w.triggers,
        })
    }
}

/// A concurrency limit from its two fields: a key needs a limit.
pub(super) fn limit_of(max: Option<u32>, key: Option<String>) -> Result<Option<ConcurrencyLimit>, FieldError> {
    match (max, key) {
        (Some(max), key) => Ok(Some(ConcurrencyLimit::new(
            max,
            key.unwrap_or_else(|| DEFAULT_LIMIT_KEY.to_owned()),
        ))),
        (None, Some(_)) => Err(FieldError::new(
            "concurrency_key",
            "a concurrency key needs a concurrency_limit",
        )),
        (None, None) => Ok(None),
    }
}

/// A job's own fields as JSON (its triggers apart): how a [`JobSpec`]
/// serialises, in a definition and in a view.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = JobSpec))]
pub(super) struct JobSpecWire {
    /// Unique in the scheduler.
    pub name: String,
    /// The handler that runs it.
    pub handler: String,
    /// The handler's input.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub payload: serde_json::Value,
    /// Free text.
    pub description: String,
    /// Re-run a fire whose node died mid-run.
    pub requests_recovery: bool,
    /// Whether fires of the job may overlap.
    pub allow_concurrent: bool,
    /// Its timeout, in milliseconds.
    pub timeout_ms: Option<i64>,
    /// Attempts in all.
    pub max_attempts: u32,
    /// Milliseconds between a failure and the next attempt.
    pub backoff_ms: i64,
    /// Exponential backoff's longest wait, in milliseconds.
    pub backoff_max_ms: Option<i64>,
    /// Its parent job, for a child.
    pub parent: Option<String>,
    /// At most this many fires at once of its concurrency key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency_limit: Option<u32>,
    /// The limit's key template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
}

impl From<&JobSpec> for JobSpecWire {
    fn from(s: &JobSpec) -> JobSpecWire {
        JobSpecWire {
            name: s.name.clone(),
            handler: s.handler.clone(),
            payload: s.payload_value(),
            description: s.description.clone(),
            requests_recovery: s.requests_recovery,
            allow_concurrent: s.allow_concurrent,
            timeout_ms: s.timeout.map(millis_of),
            max_attempts: s.retry.max_attempts,
            backoff_ms: millis_of(s.retry.backoff),
            backoff_max_ms: s.retry.backoff_max.map(millis_of),
            parent: s.parent.clone(),
            concurrency_limit: s.limit.as_ref().map(|l| l.max),
            concurrency_key: s.limit.as_ref().map(|l| l.key.clone()),
        }
    }
}

impl Serialize for JobSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        JobSpecWire::from(self).serialize(serializer)
    }
}

impl Serialize for JobDefinition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            job: &'a JobSpec,
            triggers: &'a [TriggerDefinition],
        }
        Out {
            job: &self.spec,
            triggers: &self.triggers,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JobDefinition {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<JobDefinition, D::Error> {
        JobWire::deserialize(deserializer)?
            .try_into()
            .map_err(serde::de::Error::custom)
    }
}

/// The OpenAPI schema of a typed value is its JSON form's, open to more
/// properties: a view shows a trigger's definition beside its state. (The
/// API still refuses a field it does not know in a request.)
#[cfg(feature = "openapi")]
fn open(
    schema: utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::Schema;
    match schema {
        RefOr::T(Schema::Object(mut object)) => {
            object.additional_properties = None;
            RefOr::T(Schema::Object(object))
        }
        other => other,
    }
}

#[cfg(feature = "openapi")]
macro_rules! schema_of_wire {
    ($typed:ty, $wire:ty, $name:literal) => {
        impl utoipa::PartialSchema for $typed {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                open(<$wire as utoipa::PartialSchema>::schema())
            }
        }

        impl utoipa::ToSchema for $typed {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed($name)
            }

            fn schemas(schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>) {
                <$wire as utoipa::ToSchema>::schemas(schemas);
            }
        }
    };
}

#[cfg(feature = "openapi")]
schema_of_wire!(TriggerDefinition, TriggerWire, "TriggerDefinition");
#[cfg(feature = "openapi")]
schema_of_wire!(JobDefinition, JobWire, "JobDefinition");
#[cfg(feature = "openapi")]
schema_of_wire!(JobSpec, JobSpecWire, "JobSpec");
#[cfg(feature = "openapi")]
schema_of_wire!(super::JobPatch, super::patch::PatchWire, "JobPatch");
