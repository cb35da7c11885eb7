//! How a trigger's fire times are spaced: cron, fixed rate, fixed delay or
//! once, each checked when built.

use chrono_tz::Tz;

use crate::cron::{CronExpression, DstChoice};
use crate::error::Error;

/// The longest interval a fixed-rate or fixed-delay trigger may have: 100 years.
pub const MAX_INTERVAL_MILLIS: i64 = 100 * 366 * 86_400_000;

/// How a trigger's fire times are spaced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Schedule {
    /// A Quartz cron expression evaluated in a time zone.
    Cron {
        /// The expression.
        expr: CronExpression,
        /// The zone its wall times are in.
        zone: Tz,
        /// What it does with a local time a DST change skips or repeats
        /// (Quartz's behaviour by default).
        dst: DstChoice,
    },
    /// Every `interval_ms` from the trigger's start: start, start + i, start + 2i, …
    /// regardless of how long each run takes (Quartz's simple trigger).
    FixedRate {
        /// Milliseconds between fire times, 1 to [`MAX_INTERVAL_MILLIS`].
        interval_ms: i64,
    },
    /// First at the trigger's start, then `delay_ms` after the previous fire
    /// finished; the next fire time is known only once the previous run ends.
    FixedDelay {
        /// Milliseconds from a run's finish to the next fire, 1 to [`MAX_INTERVAL_MILLIS`].
        delay_ms: i64,
    },
    /// Exactly once, at the trigger's start.
    Once,
}

impl Schedule {
    /// A fixed-rate schedule.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] when the interval is not between 1 ms and
    /// [`MAX_INTERVAL_MILLIS`].
    pub fn fixed_rate_millis(interval_ms: i64) -> Result<Schedule, Error> {
        check_interval("fixed-rate interval", interval_ms)?;
        Ok(Schedule::FixedRate { interval_ms })
    }

    /// A fixed-delay schedule.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] when the delay is not between 1 ms and
    /// [`MAX_INTERVAL_MILLIS`].
    pub fn fixed_delay_millis(delay_ms: i64) -> Result<Schedule, Error> {
        check_interval("fixed-delay delay", delay_ms)?;
        Ok(Schedule::FixedDelay { delay_ms })
    }

    /// A cron schedule, with Quartz's behaviour at DST changes.
    pub fn cron(expr: CronExpression, zone: Tz) -> Schedule {
        Schedule::cron_with_dst(expr, zone, DstChoice::QUARTZ)
    }

    /// A cron schedule with an explicit choice for the local times a DST
    /// change skips or repeats.
    pub fn cron_with_dst(expr: CronExpression, zone: Tz, dst: DstChoice) -> Schedule {
        Schedule::Cron { expr, zone, dst }
    }

    /// A fixed-rate schedule of a [`Duration`](std::time::Duration), kept to
    /// the millisecond.
    ///
    /// # Errors
    ///
    /// As [`fixed_rate_millis`](Self::fixed_rate_millis).
    pub fn every(interval: std::time::Duration) -> Result<Schedule, Error> {
        Schedule::fixed_rate_millis(crate::store::millis_of(interval))
    }

    /// A fixed-delay schedule of a [`Duration`](std::time::Duration).
    ///
    /// # Errors
    ///
    /// As [`fixed_delay_millis`](Self::fixed_delay_millis).
    pub fn after_each(delay: std::time::Duration) -> Result<Schedule, Error> {
        Schedule::fixed_delay_millis(crate::store::millis_of(delay))
    }
}

pub(crate) fn check_interval(what: &str, ms: i64) -> Result<(), Error> {
    if (1..=MAX_INTERVAL_MILLIS).contains(&ms) {
        Ok(())
    } else {
        Err(Error::InvalidTrigger {
            reason: format!("{what} must be between 1 ms and 100 years, got {ms} ms"),
        })
    }
}
