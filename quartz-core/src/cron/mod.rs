//! Cron expressions with Quartz's syntax and meaning, evaluated in a time zone.
//!
//! ```
//! use quartz_core::cron::CronExpression;
//! use quartz_core::Timestamp;
//!
//! // 10:15 on the last Friday of every month, in New York.
//! let cron = CronExpression::parse("0 15 10 ? * 6L")?;
//! let zone = quartz_core::cron::parse_time_zone("America/New_York")?;
//! let after = Timestamp::from_millis(1_767_225_600_000); // 2026-01-01T00:00:00Z
//! let next = cron.next_after(after, zone).expect("fires again");
//! assert_eq!(next.to_string(), "2026-01-30T15:15:00.000Z");
//! # Ok::<(), quartz_core::Error>(())
//! ```
//!
//! # Syntax
//!
//! Six or seven fields: seconds, minutes, hours, day-of-month, month, day-of-week,
//! and an optional year (1970-2099). Each field takes `*`, a value, a list
//! (`1,15`), a range (`10-20`, wrapping past the end as in `22-2`), a step (`0/10`,
//! `5/15`, `10-20/3`, `*/3`, and Quartz's `/3`). Months take `JAN`-`DEC`, weekdays
//! `SUN`-`SAT` (any case) or 1-7 with 1 = Sunday. Exactly one of day-of-month and
//! day-of-week is `?`. Day-of-month also takes `L` (last day), `L-n`, `LW` (last
//! weekday) and `nW` (weekday nearest day n); day-of-week takes `L` (Saturday),
//! `nL` (last weekday n of the month) and `n#k` (the k-th weekday n, k = 1-5).
//!
//! A standard 5-field Unix expression is accepted only through
//! [`CronExpression::parse_unix`], never guessed from the field count.
//!
//! # Why our own evaluator
//!
//! Expressions must mean exactly what they mean in Quartz, and neither cron crate
//! does that: the `cron` crate accepts `0/10` steps and years but rejects `L`, `W`
//! and `#`; `croner` accepts those but rejects `0/10`-style steps; and neither
//! reproduces Quartz's behaviour at DST edges, which follows from the lenient Java
//! calendar Quartz walks (see the `eval` module: in Australia/Lord_Howe's half-hour
//! jump, Quartz fires `0 5/7 * * * ?` at 02:40 and passes over 02:33). The
//! evaluator here is a port of Quartz's `getTimeAfter` over an emulation of that
//! calendar, checked against next fire times computed by Quartz itself.
//!
//! # Which Quartz: 2.3.2
//!
//! The evaluator follows Quartz **2.3.2**: the release the cluster-enhanced fork
//! this project grew from was built on, and the one Linux distributions ship
//! (Debian's `libquartz2-java`). Quartz 2.5 rewrote the day-of-month walk, and
//! 2.5.2 fixed part of it (quartz #1420); the two releases still disagree on
//! `nW`, and every such answer here is 2.3.2's:
//!
//! - `31W` (or `30W`, `29W`) in a month without that day: 2.5.2 never fires
//!   there; 2.3.2, asked after the previous month's fire, can fire on the
//!   month's last weekday. `0 0 12 31W * ?` after 2027-03-31 12:00 UTC: 2.3.2
//!   fires 2027-04-30 12:00, 2.5.2 2027-05-31 12:00.
//! - `nW` whose day falls on a weekend, asked between that day and the weekday
//!   it moves to: 2.3.2 fires on that weekday, 2.5.2 skips the month. Sunday
//!   1 February 2026: `0 0 12 1W * ?` after 2026-02-01 12:00 UTC fires
//!   2026-02-02 12:00 in 2.3.2, 2026-03-02 12:00 in 2.5.2 (the same for `15W`
//!   after Sunday 15 February).
//!
//! Where they agree, so do we (`1W` on a Saturday 1st is Monday the 3rd in
//! both). `LW` does not differ. The 419 cases where the releases disagree over
//! 2026 and 2027 (n = 1..31 and `LW`, UTC and New York), computed by each
//! release's own `CronExpression`, are a test
//! (`tests/cron_quartz_version.rs`).
//!
//! # DST: Quartz's behaviour, or an explicit choice
//!
//! [`CronExpression::next_after`] is Quartz's answer at DST changes too. A
//! trigger may instead choose, per side, what a skipped local time (shift or
//! skip) and a repeated one (first, second or both) do:
//! [`CronExpression::next_after_with`] and [`DstChoice`].
//!
//! # Where we are stricter than Quartz
//!
//! Quartz silently misreads some strings; those are refused here with an error
//! instead: text after a value (`5X`, `MON-FRI/2`, `1-5L`), more than seven fields,
//! `W` in a list (Quartz uses only the list's first day), `?` inside a list, a
//! step of 0, and `L` in fields other than the two day fields.
//!
//! The last year evaluated is 2099, the last year an expression may name.

mod dst;
pub(crate) mod eval;
mod parse;

pub use dst::{DstChoice, RepeatedTime, SkippedTime};

/// The longest cron expression accepted, in bytes (the stores' column holds
/// 512 characters).
pub const MAX_CRON_BYTES: usize = 512;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use chrono_tz::Tz;

use crate::error::Error;
use crate::time::Timestamp;

/// A parsed Quartz cron expression. Evaluate it in a zone with
/// [`next_after`](CronExpression::next_after).
///
/// Cloning is cheap: clones share the parsed form.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CronExpression {
    inner: Arc<Parsed>,
}

#[derive(PartialEq, Eq, Hash)]
struct Parsed {
    text: String,
    fields: parse::Fields,
}

impl CronExpression {
    /// Parses a 6- or 7-field Quartz expression.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCron`] naming the field and the offending text, for
    /// everything Quartz rejects (and the strings it would misread; see the module
    /// docs): `* * * * * *` (no `?`), `0 0 12 * * MON` (both day fields),
    /// `0 0 0 32 * ?`, `0 60 * * * ?`, `0 0 0 ? * 8`, `0 0 0 ? 13 *`,
    /// `0 0 0 L-31 * ?`, `0 0 0 ? * 1#6`, five fields.
    pub fn parse(expr: &str) -> Result<CronExpression, Error> {
        let fields = parse::parse(expr)?;
        Ok(CronExpression {
            inner: Arc::new(Parsed {
                text: expr.trim().to_owned(),
                fields,
            }),
        })
    }

    /// Parses a standard 5-field Unix expression (minute hour day-of-month month
    /// day-of-week, weekdays 0-7 with 0 and 7 = Sunday) as the Quartz expression
    /// that fires at second 0 of the same minutes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCron`] when it does not have five fields, does not parse, or
    /// restricts both day-of-month and day-of-week: Unix fires when either matches,
    /// which Quartz syntax cannot say.
    pub fn parse_unix(expr: &str) -> Result<CronExpression, Error> {
        let quartz = parse::unix_to_quartz(expr)?;
        CronExpression::parse(&quartz).map_err(|e| match e {
            Error::InvalidCron {
                field, text, reason, ..
            } => Error::InvalidCron {
                expr: expr.to_owned(),
                field,
                text,
                reason,
            },
            other => other,
        })
    }

    /// The expression as given (trimmed); for a Unix expression, its Quartz form.
    pub fn as_str(&self) -> &str {
        &self.inner.text
    }

    /// The first fire time strictly after `after`, in `zone`; `None` when the
    /// expression never fires again (its years are past, or it names an impossible
    /// date such as 30 February).
    ///
    /// Fire times fall on whole seconds, and successive calls are strictly
    /// increasing: `next_after(t) > t`.
    pub fn next_after(&self, after: Timestamp, zone: Tz) -> Option<Timestamp> {
        eval::next_after(&self.inner.fields, &zone, after.as_millis()).map(Timestamp::from_millis)
    }

    /// The first fire time strictly after `after` under a DST choice: with
    /// [`DstChoice::QUARTZ`] this is [`next_after`](Self::next_after); any
    /// other choice follows the wall clock exactly (see [`DstChoice`]).
    pub fn next_after_with(&self, after: Timestamp, zone: Tz, dst: DstChoice) -> Option<Timestamp> {
        if dst.is_quartz() {
            return self.next_after(after, zone);
        }
        dst::next_after(&self.inner.fields, &zone, after.as_millis(), dst).map(Timestamp::from_millis)
    }

    /// Whether the expression matches the second `at` falls in, as Quartz's
    /// `isSatisfiedBy`: the second is set again as a wall time in the zone
    /// (so in a fall-back overlap it is the later of the two), and the next
    /// time after the second before it must be it.
    pub fn is_satisfied_by(&self, at: Timestamp, zone: Tz) -> bool {
        use chrono::Timelike;
        let Some(utc) = chrono::DateTime::from_timestamp_millis(at.as_millis()) else {
            return false;
        };
        let local = utc.with_timezone(&zone);
        let second_of_day = i64::from(local.num_seconds_from_midnight());
        let Some(second) = eval::java_instant_ms(&zone, local.date_naive(), second_of_day * 1000) else {
            return false;
        };
        self.next_after(Timestamp::from_millis(second - 1000), zone)
            .is_some_and(|t| t.as_millis() == second)
    }

    /// The fire times after `after`, in order, until the expression ends.
    pub fn iter_after(&self, after: Timestamp, zone: Tz) -> impl Iterator<Item = Timestamp> + '_ {
        self.iter_after_with(after, zone, DstChoice::QUARTZ)
    }

    /// The fire times after `after` under a DST choice, in order.
    pub fn iter_after_with(&self, after: Timestamp, zone: Tz, dst: DstChoice) -> impl Iterator<Item = Timestamp> + '_ {
        let mut at = after;
        std::iter::from_fn(move || {
            let next = self.next_after_with(at, zone, dst)?;
            at = next;
            Some(next)
        })
    }
}

impl FromStr for CronExpression {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CronExpression::parse(s)
    }
}

impl fmt::Display for CronExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.text)
    }
}

impl fmt::Debug for CronExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CronExpression").field(&self.inner.text).finish()
    }
}

/// Parses an IANA time zone name (`"UTC"`, `"Europe/London"`).
///
/// # Errors
///
/// [`Error::UnknownTimeZone`] when the name is not in the IANA database.
pub fn parse_time_zone(name: &str) -> Result<Tz, Error> {
    name.parse::<Tz>()
        .map_err(|_| Error::UnknownTimeZone { zone: name.to_owned() })
}
