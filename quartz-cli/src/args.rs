//! What the commands read from their options: durations, instants, a job's
//! definition and its trigger. Every check on the values themselves is the
//! library's (`JobSpec::validate`, `Trigger::new`, the cron parser); this only
//! turns text into those types.

use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, SecondsFormat};
use quartz_core::Timestamp;
use quartz_core::admin::{JobPatch, TriggerDefinition};
use quartz_core::cron::DstChoice;
use quartz_core::store::JobSpec;

/// A duration: `500ms`, `5s`, `2m`, `1h`, `1d`, or a bare number of
/// milliseconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .with_context(|| format!("{text:?} is not a duration (examples: 500ms, 5s, 2m, 1h)"))?;
    let ms = match unit.trim() {
        "" | "ms" => n,
        "s" => n.saturating_mul(1_000),
        "m" | "min" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        "d" => n.saturating_mul(86_400_000),
        other => bail!("{text:?}: unknown unit {other:?} (use ms, s, m, h or d)"),
    };
    Ok(Duration::from_millis(ms))
}

/// A duration for clap.
pub fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// An instant: RFC 3339 (`2026-01-01T09:00:00Z`) or epoch milliseconds.
pub fn parse_instant(text: &str) -> anyhow::Result<Timestamp> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(Timestamp::from_millis(ms));
    }
    match DateTime::parse_from_rfc3339(text) {
        Ok(t) => Ok(Timestamp::from(t.to_utc())),
        Err(_) => bail!("{text:?} is neither an RFC 3339 instant (2026-01-01T09:00:00Z) nor epoch milliseconds"),
    }
}

/// An instant for clap.
pub fn instant_arg(text: &str) -> Result<Timestamp, String> {
    parse_instant(text).map_err(|e| e.to_string())
}

/// An instant for people: RFC 3339 in UTC, to the millisecond.
pub fn show_instant(t: Timestamp) -> String {
    t.to_datetime().map_or_else(
        || t.as_millis().to_string(),
        |d| d.to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}

/// Milliseconds of a duration, for the store's `i64` fields.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The one trigger of `job add` and `job edit`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct TriggerArgs {
    /// A Quartz cron expression (seconds first), e.g. "0/2 * * * * ?".
    #[arg(long, group = "schedule")]
    pub cron: Option<String>,
    /// The time zone of --cron [default: UTC].
    #[arg(long)]
    pub tz: Option<String>,
    /// Fixed rate: every DURATION from the start (e.g. 30s).
    #[arg(long, group = "schedule", value_parser = duration_arg)]
    pub every: Option<Duration>,
    /// Fixed delay: DURATION after the previous run finished.
    #[arg(long, group = "schedule", value_parser = duration_arg)]
    pub delay: Option<Duration>,
    /// Once, at this instant (RFC 3339 or epoch ms).
    #[arg(long, group = "schedule", value_parser = instant_arg)]
    pub at: Option<Timestamp>,
    /// Not before this instant [default: now].
    #[arg(long, value_parser = instant_arg)]
    pub start: Option<Timestamp>,
    /// Not after this instant.
    #[arg(long, value_parser = instant_arg)]
    pub end: Option<Timestamp>,
    /// At most N fires.
    #[arg(long)]
    pub repeat: Option<u64>,
    /// What to do with fire times missed by more than the misfire threshold:
    /// smart, fire_now, ignore_misfires, do_nothing, reschedule_now_with_existing_count, …
    #[arg(long)]
    pub misfire: Option<String>,
    /// A calendar (see `quartz calendar`) whose excluded times are not fire times.
    #[arg(long)]
    pub calendar: Option<String>,
    /// Spread each fire by up to DURATION (e.g. 10m), the offset fixed per
    /// fire time, so that many jobs on one schedule do not start at once.
    #[arg(long, value_parser = duration_arg)]
    pub jitter: Option<Duration>,
    /// Make up for missed fire times only DURATION back (e.g. 1h): older
    /// ones are recorded misfired and skipped, whatever --misfire says.
    #[arg(long, value_parser = duration_arg)]
    pub catch_up: Option<Duration>,
    /// What a fire does while a fire of its job still runs: allow, skip
    /// (recorded skipped), buffer_one (runs once when it ends), buffer_all
    /// (each runs, in order) or cancel (asks the running fire to stop, then
    /// runs) [default: the job's own rule, --no-concurrent].
    #[arg(long)]
    pub overlap: Option<String>,
    #[command(flatten)]
    pub dst: DstArgs,
}

/// A cron trigger's DST choice, for `job add|edit` and `cron next`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct DstArgs {
    /// With --cron: a local time that a DST change skips (spring forward)
    /// fires at the shifted instant (shift), or not at all (skip)
    /// [default: quartz, Quartz's own behaviour].
    #[arg(long, value_name = "CHOICE", value_parser = ["quartz", "shift", "skip"])]
    pub dst_skipped: Option<String>,
    /// With --cron: a local time that a DST change repeats (fall back)
    /// fires at its first occurrence, its second, or both
    /// [default: quartz, once at the later instant].
    #[arg(long, value_name = "CHOICE", value_parser = ["quartz", "first", "second", "both"])]
    pub dst_repeated: Option<String>,
}

impl DstArgs {
    /// Whether either choice was given.
    pub fn given(&self) -> bool {
        self.dst_skipped.is_some() || self.dst_repeated.is_some()
    }

    /// The choice; Quartz's where not given.
    pub fn choice(&self) -> anyhow::Result<DstChoice> {
        Ok(quartz_core::admin::parse_dst(
            self.dst_skipped.as_deref(),
            self.dst_repeated.as_deref(),
        )?)
    }
}

impl TriggerArgs {
    /// Whether any trigger option was given (so that one given without a
    /// schedule, as `job edit --calendar`, is refused rather than ignored).
    pub fn given(&self) -> bool {
        self.cron.is_some()
            || self.every.is_some()
            || self.delay.is_some()
            || self.at.is_some()
            || self.tz.is_some()
            || self.start.is_some()
            || self.end.is_some()
            || self.repeat.is_some()
            || self.misfire.is_some()
            || self.calendar.is_some()
            || self.jitter.is_some()
            || self.catch_up.is_some()
            || self.overlap.is_some()
            || self.dst.given()
    }

    /// The trigger these options describe (its start, when not given, is
    /// the time it is stored).
    pub fn to_definition(&self) -> anyhow::Result<TriggerDefinition> {
        if self.tz.is_some() && self.cron.is_none() {
            bail!("--tz is the time zone of a --cron expression");
        }
        if self.dst.given() && self.cron.is_none() {
            bail!("--dst-skipped and --dst-repeated apply to a --cron trigger, whose times are local times");
        }
        let mut trigger = if let Some(expr) = &self.cron {
            TriggerDefinition::cron(expr, self.tz.as_deref().unwrap_or("UTC"))?.dst(self.dst.choice()?)
        } else if let Some(every) = self.every {
            TriggerDefinition::every(every)
        } else if let Some(delay) = self.delay {
            TriggerDefinition::after_each(delay)
        } else if let Some(at) = self.at {
            if self.start.is_some() {
                bail!("--at is the start of a one-off trigger: give --at or --start, not both");
            }
            TriggerDefinition::once(at)
        } else {
            bail!("a trigger needs one of --cron, --every, --delay or --at");
        };
        trigger.start = self.start.or(trigger.start);
        trigger.end = self.end;
        trigger.repeat = self.repeat;
        if let Some(policy) = &self.misfire {
            trigger.misfire = policy.parse()?;
        }
        trigger.calendar.clone_from(&self.calendar);
        trigger.jitter = self.jitter;
        trigger.catch_up = self.catch_up;
        trigger.overlap = self.overlap.as_deref().map(str::parse).transpose()?;
        Ok(trigger)
    }
}

/// A job's options, for `job add` (everything) and `job edit` (what changes).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct JobArgs {
    /// The handler that runs it (built in: noop, log, sleep, shell).
    #[arg(long)]
    pub handler: Option<String>,
    /// The handler's input, JSON (e.g. '{"ms": 500}' for sleep).
    #[arg(long)]
    pub payload: Option<String>,
    /// Free text.
    #[arg(long)]
    pub description: Option<String>,
    /// Re-run a fire whose node died mid-run (at-least-once).
    #[arg(long)]
    pub recover: bool,
    /// One fire of the job at a time, across all nodes.
    #[arg(long)]
    pub no_concurrent: bool,
    /// Cancel a run after this long and record it failed.
    #[arg(long, value_parser = duration_arg)]
    pub timeout: Option<Duration>,
    /// Attempts in all, retries included [default: 1].
    #[arg(long)]
    pub attempts: Option<u32>,
    /// Wait between attempts (with --backoff-max, before the second).
    #[arg(long, value_parser = duration_arg)]
    pub backoff: Option<Duration>,
    /// Exponential backoff: the wait doubles with each attempt from --backoff
    /// up to this, with jitter.
    #[arg(long, value_parser = duration_arg)]
    pub backoff_max: Option<Duration>,
    /// Run after this job succeeds (a chain).
    #[arg(long)]
    pub parent: Option<String>,
    /// At most N fires at once, on every node together, among the jobs with
    /// the same --limit-key; 0 removes the limit.
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// The limit's key: {handler} and {/json/pointer} into the payload stand
    /// for their values, e.g. 'tenant:{/tenant}' [default: {handler}].
    #[arg(long, value_name = "KEY")]
    pub limit_key: Option<String>,
}

impl JobArgs {
    /// These options over a new job's defaults.
    pub fn apply(&self, job: JobSpec) -> anyhow::Result<JobSpec> {
        Ok(self.patch()?.apply(job, Timestamp::from_millis(0))?.0)
    }

    /// These options as the change of an edit: each option given replaces
    /// the job's.
    pub fn patch(&self) -> anyhow::Result<JobPatch> {
        let payload = match &self.payload {
            Some(payload) => Some(
                serde_json::from_str::<serde_json::Value>(payload)
                    .with_context(|| format!("--payload is not JSON: {payload}"))?,
            ),
            None => None,
        };
        Ok(JobPatch {
            handler: self.handler.clone(),
            payload,
            description: self.description.clone(),
            requests_recovery: self.recover.then_some(true),
            allow_concurrent: self.no_concurrent.then_some(false),
            timeout: self.timeout.map(Some),
            max_attempts: self.attempts,
            backoff: self.backoff,
            backoff_max: self.backoff_max.map(Some),
            parent: self.parent.clone().map(Some),
            concurrency_limit: self.limit.map(|n| (n != 0).then_some(n)),
            concurrency_key: self.limit_key.clone(),
            ..JobPatch::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3_600));
        assert_eq!(parse_duration("250").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn instants() {
        assert_eq!(parse_instant("1000").unwrap(), Timestamp::from_millis(1_000));
        assert_eq!(
            parse_instant("1970-01-01T00:00:01.5Z").unwrap(),
            Timestamp::from_millis(1_500)
        );
        assert!(parse_instant("tomorrow").is_err());
        assert_eq!(show_instant(Timestamp::from_millis(1_500)), "1970-01-01T00:00:01.500Z");
    }
}
