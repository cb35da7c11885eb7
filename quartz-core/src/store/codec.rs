//! The column codec: a [`Trigger`] as the execute row's columns, the one
//! format every backend stores.

use crate::cron::{DstChoice, RepeatedTime, SkippedTime};
use crate::error::Error;
use crate::misfire::MisfirePolicy;
use crate::time::Timestamp;
use crate::trigger::{Jitter, Schedule, Trigger};

/// A trigger as the execute row's columns, the format every backend shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerColumns {
    /// `cron`, `fixed_rate`, `fixed_delay` or `once`.
    pub kind: String,
    /// The cron expression (cron only).
    pub cron_expression: Option<String>,
    /// The IANA zone (cron only).
    pub time_zone: Option<String>,
    /// The interval or delay (fixed rate and fixed delay).
    pub interval_ms: Option<i64>,
    /// Start of the validity window.
    pub start_time: i64,
    /// End of the validity window, inclusive.
    pub end_time: Option<i64>,
    /// Most fires in all.
    pub repeat_limit: Option<i64>,
    /// The misfire policy's name.
    pub misfire_policy: String,
    /// The calendar's name, if the trigger uses one.
    pub calendar: Option<String>,
    /// A cron trigger's choice for skipped local times (`shift` or `skip`);
    /// `None` for Quartz's behaviour.
    pub dst_skipped: Option<String>,
    /// A cron trigger's choice for repeated local times (`first`, `second`
    /// or `both`); `None` for Quartz's behaviour.
    pub dst_repeated: Option<String>,
    /// The largest jitter, exclusive, in milliseconds; `None` for none.
    pub jitter_ms: Option<i64>,
    /// The jitter's seed (see [`Jitter`]); with `jitter_ms` only.
    pub jitter_seed: Option<i64>,
    /// The catch-up window in milliseconds; `None` for no limit.
    pub catch_up_ms: Option<i64>,
    /// The overlap policy's name ([`Overlap`](crate::trigger::Overlap));
    /// `None` keeps the job's own rule.
    pub overlap: Option<String>,
}

/// A schedule as text and numbers: what the execute row's columns and the
/// API's JSON both hold of it (their one mapping, both ways).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleColumns {
    /// `cron`, `fixed_rate`, `fixed_delay` or `once`.
    pub kind: String,
    /// The cron expression (cron only).
    pub cron_expression: Option<String>,
    /// The IANA zone (cron only; `UTC` when absent).
    pub time_zone: Option<String>,
    /// The interval or delay (fixed rate and fixed delay).
    pub interval_ms: Option<i64>,
    /// A cron schedule's choice for skipped local times; `None` for
    /// Quartz's.
    pub dst_skipped: Option<String>,
    /// A cron schedule's choice for repeated local times; `None` for
    /// Quartz's.
    pub dst_repeated: Option<String>,
}

impl ScheduleColumns {
    /// The columns of a schedule.
    pub fn of(schedule: &Schedule) -> ScheduleColumns {
        let (kind, cron_expression, time_zone, interval_ms, dst) = match schedule {
            Schedule::Cron { expr, zone, dst } => (
                "cron",
                Some(expr.as_str().to_owned()),
                Some(zone.name().to_owned()),
                None,
                *dst,
            ),
            Schedule::FixedRate { interval_ms } => ("fixed_rate", None, None, Some(*interval_ms), DstChoice::QUARTZ),
            Schedule::FixedDelay { delay_ms } => ("fixed_delay", None, None, Some(*delay_ms), DstChoice::QUARTZ),
            Schedule::Once => ("once", None, None, None, DstChoice::QUARTZ),
        };
        ScheduleColumns {
            kind: kind.to_owned(),
            cron_expression,
            time_zone,
            interval_ms,
            dst_skipped: Some(dst.skipped)
                .filter(|s| *s != SkippedTime::Quartz)
                .map(|s| s.as_str().to_owned()),
            dst_repeated: Some(dst.repeated)
                .filter(|r| *r != RepeatedTime::Quartz)
                .map(|r| r.as_str().to_owned()),
        }
    }

    /// The schedule the columns describe, checked; an error names the
    /// column at fault (`cron_expression`, `time_zone`, `interval_ms`,
    /// `dst_skipped`, `dst_repeated`, or `kind`).
    ///
    /// # Errors
    ///
    /// The column and why.
    pub fn to_schedule(&self) -> Result<Schedule, (&'static str, Error)> {
        let missing = |column: &'static str, what: &str| {
            let reason = format!("a {} trigger needs {what}", self.kind);
            (column, Error::InvalidTrigger { reason })
        };
        let interval = |what: &str| self.interval_ms.ok_or_else(|| missing("interval_ms", what));
        let schedule = match self.kind.as_str() {
            "cron" => {
                let expr = self
                    .cron_expression
                    .as_deref()
                    .ok_or_else(|| missing("cron_expression", "a cron expression"))?;
                let expr = crate::cron::CronExpression::parse(expr).map_err(|e| ("cron_expression", e))?;
                let zone = crate::cron::parse_time_zone(self.time_zone.as_deref().unwrap_or("UTC"))
                    .map_err(|e| ("time_zone", e))?;
                let dst = DstChoice {
                    skipped: self
                        .dst_skipped
                        .as_deref()
                        .map_or(Ok(SkippedTime::Quartz), str::parse)
                        .map_err(|e| ("dst_skipped", e))?,
                    repeated: self
                        .dst_repeated
                        .as_deref()
                        .map_or(Ok(RepeatedTime::Quartz), str::parse)
                        .map_err(|e| ("dst_repeated", e))?,
                };
                Schedule::cron_with_dst(expr, zone, dst)
            }
            "fixed_rate" => Schedule::fixed_rate_millis(interval("an interval")?).map_err(|e| ("interval_ms", e))?,
            "fixed_delay" => Schedule::fixed_delay_millis(interval("a delay")?).map_err(|e| ("interval_ms", e))?,
            "once" => Schedule::Once,
            other => {
                let reason = format!("unknown trigger kind {other:?} (expected cron, fixed_rate, fixed_delay or once)");
                return Err(("kind", Error::InvalidTrigger { reason }));
            }
        };
        Ok(schedule)
    }
}

impl TriggerColumns {
    /// The columns of a trigger.
    pub fn from_trigger(trigger: &Trigger) -> TriggerColumns {
        let s = ScheduleColumns::of(trigger.schedule());
        TriggerColumns {
            kind: s.kind,
            cron_expression: s.cron_expression,
            time_zone: s.time_zone,
            interval_ms: s.interval_ms,
            start_time: trigger.start().as_millis(),
            end_time: trigger.end().map(Timestamp::as_millis),
            repeat_limit: trigger.repeat_limit().map(|l| i64::try_from(l).unwrap_or(i64::MAX)),
            misfire_policy: trigger.misfire_policy().as_str().to_owned(),
            calendar: trigger.calendar_name().map(str::to_owned),
            dst_skipped: s.dst_skipped,
            dst_repeated: s.dst_repeated,
            jitter_ms: trigger.jitter().map(|j| j.max_ms),
            jitter_seed: trigger.jitter().map(|j| j.seed),
            catch_up_ms: trigger.catch_up().map(crate::store::millis_of),
            overlap: trigger.overlap().map(|o| o.as_str().to_owned()),
        }
    }

    /// The schedule's columns.
    pub fn schedule(&self) -> ScheduleColumns {
        ScheduleColumns {
            kind: self.kind.clone(),
            cron_expression: self.cron_expression.clone(),
            time_zone: self.time_zone.clone(),
            interval_ms: self.interval_ms,
            dst_skipped: self.dst_skipped.clone(),
            dst_repeated: self.dst_repeated.clone(),
        }
    }

    /// A stable 64-bit signature of the schedule columns (kind, expression,
    /// zone, interval, window, repeat limit, calendar name, DST choice and
    /// jitter; not the misfire policy or the catch-up window). The
    /// row keeps the signature its fire times were computed from, so that a
    /// schedule edited with plain SQL is noticed and recomputed once.
    pub fn signature(&self) -> i64 {
        // FNV-1a: stable across builds and platforms, unlike std's hasher.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |bytes: &[u8]| {
            for b in bytes.iter().chain([0xff_u8].iter()) {
                hash ^= u64::from(*b);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        let num = |n: Option<i64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
        feed(self.kind.as_bytes());
        feed(self.cron_expression.as_deref().unwrap_or("-").as_bytes());
        feed(self.time_zone.as_deref().unwrap_or("-").as_bytes());
        feed(num(self.interval_ms).as_bytes());
        feed(self.start_time.to_string().as_bytes());
        feed(num(self.end_time).as_bytes());
        feed(num(self.repeat_limit).as_bytes());
        // Fed only when there is one, so that a row from before calendars
        // keeps its signature.
        if let Some(calendar) = &self.calendar {
            feed(b"calendar");
            feed(calendar.as_bytes());
        }
        // The same for the DST choice, new after calendars.
        for (name, choice) in [
            (&b"dst_skipped"[..], &self.dst_skipped),
            (b"dst_repeated", &self.dst_repeated),
        ] {
            if let Some(choice) = choice {
                feed(name);
                feed(choice.as_bytes());
            }
        }
        // And the jitter, newer still.
        if let Some(jitter) = self.jitter_ms {
            feed(b"jitter");
            feed(jitter.to_string().as_bytes());
            feed(self.jitter_seed.unwrap_or(0).to_string().as_bytes());
        }
        i64::from_ne_bytes(hash.to_ne_bytes())
    }

    /// The trigger the columns describe, validated as if it were new.
    ///
    /// # Errors
    ///
    /// The error a trigger built from these values would get: an unknown kind,
    /// a missing or invalid expression, zone or interval, an end before the
    /// start, a policy that does not apply.
    pub fn to_trigger(&self) -> Result<Trigger, Error> {
        let schedule = self.schedule().to_schedule().map_err(|(_, e)| e)?;
        let mut trigger = Trigger::new(schedule, Timestamp::from_millis(self.start_time))?;
        if let Some(end) = self.end_time {
            trigger = trigger.with_end(Timestamp::from_millis(end))?;
        }
        if let Some(limit) = self.repeat_limit {
            let limit = u64::try_from(limit).map_err(|_| Error::InvalidTrigger {
                reason: format!("a repeat limit must be at least 1, got {limit}"),
            })?;
            trigger = trigger.with_repeat_limit(limit)?;
        }
        trigger = trigger.with_misfire_policy(self.misfire_policy.parse::<MisfirePolicy>()?)?;
        if let Some(ms) = self.jitter_ms {
            let max = std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
            trigger = trigger.with_jitter(Jitter::new(max, self.jitter_seed.unwrap_or(0))?);
        }
        if let Some(ms) = self.catch_up_ms {
            trigger = trigger.with_catch_up(std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0)))?;
        }
        if let Some(name) = &self.overlap {
            trigger = trigger.with_overlap(Some(name.parse()?));
        }
        match &self.calendar {
            Some(name) => trigger.with_calendar(name),
            None => Ok(trigger),
        }
    }
}
