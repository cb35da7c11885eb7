//! The core's one error type.

use std::fmt;

/// A field of a cron expression, for errors that name where the problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CronField {
    /// Seconds, 0-59.
    Seconds,
    /// Minutes, 0-59.
    Minutes,
    /// Hours, 0-23.
    Hours,
    /// Day of month, 1-31, with `L`, `L-n`, `LW`, `nW`.
    DayOfMonth,
    /// Month, 1-12 or JAN-DEC.
    Month,
    /// Day of week, 1-7 (1 = Sunday) or SUN-SAT, with `L`, `nL`, `n#k`.
    DayOfWeek,
    /// Year, 1970-2099 (optional).
    Year,
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CronField::Seconds => "seconds",
            CronField::Minutes => "minutes",
            CronField::Hours => "hours",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
            CronField::Year => "year",
        })
    }
}

/// The most characters of a refused input an error repeats.
const QUOTED_CHARS: usize = 100;

/// Input repeated in an error, quoted and escaped, and cut after
/// [`QUOTED_CHARS`] characters (escapes make control characters up to eight
/// times longer: the message stays short whatever came in).
fn quoted(input: &str) -> String {
    if input.chars().count() <= QUOTED_CHARS {
        return format!("{input:?}");
    }
    let head: String = input.chars().take(QUOTED_CHARS).collect();
    format!("{head:?}… ({} bytes)", input.len())
}

/// Errors from the core: bad input refused at the boundary, with what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A cron expression that Quartz's `CronExpression` would not accept (or that
    /// it would silently misread; see the `cron` module's docs).
    #[error("invalid cron expression {}: {}{reason}", quoted(expr), field.map(|f| format!("{f} field {}: ", quoted(text))).unwrap_or_default())]
    InvalidCron {
        /// The whole expression, as given.
        expr: String,
        /// The field at fault, when one field is.
        field: Option<CronField>,
        /// The offending text: the field's text, or the whole expression.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A trigger whose settings contradict each other or are out of range (an end
    /// before its start, a zero or negative interval, a zero repeat limit).
    #[error("invalid trigger: {reason}")]
    InvalidTrigger {
        /// What is wrong.
        reason: String,
    },
    /// A job whose definition is out of range: an empty or oversized name, a
    /// payload that is not JSON, a zero timeout.
    #[error("invalid job: {reason}")]
    InvalidJob {
        /// What is wrong.
        reason: String,
    },
    /// Enqueued work out of range: the field at fault (`job`, `payload`,
    /// `unique_key`) and why.
    #[error("invalid work: {field}: {reason}")]
    InvalidWork {
        /// The field at fault.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A calendar whose definition is out of range or contradicts itself, or
    /// whose chain of bases is broken (a base missing, a cycle).
    #[error("invalid calendar: {field}: {reason}")]
    InvalidCalendar {
        /// The field at fault (`days`, `range`, `cron`, `time_zone`, `base`, …).
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A time zone name that is not in the IANA database.
    #[error("unknown time zone {zone:?} (expected an IANA name such as \"Europe/London\")")]
    UnknownTimeZone {
        /// The name as given.
        zone: String,
    },
}
