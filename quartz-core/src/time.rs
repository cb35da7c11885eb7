//! Instants as the database keeps them: epoch milliseconds.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

/// An instant in epoch milliseconds (UTC), the unit every backend stores.
///
/// The database's clock is the only clock the cluster trusts; the core is handed
/// `Timestamp`s and never reads the wall clock to make a decision another node must
/// agree with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The instant `ms` milliseconds after 1970-01-01T00:00:00Z.
    pub const fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    /// Milliseconds since 1970-01-01T00:00:00Z.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// This instant as a chrono UTC date-time, if chrono can represent it.
    pub fn to_datetime(self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_millis(self.0)
    }

    /// `self + ms`, or `None` on overflow.
    pub fn checked_add_millis(self, ms: i64) -> Option<Timestamp> {
        self.0.checked_add(ms).map(Timestamp)
    }

    /// `self + ms`, clamped to the representable range.
    pub const fn saturating_add_millis(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }
}

/// A duration in whole milliseconds, clamped to `i64`.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `t + d`, clamped to the representable range (as
/// [`saturating_add_millis`](Timestamp::saturating_add_millis)).
///
/// ```
/// use std::time::Duration;
/// use quartz_core::Timestamp;
///
/// let t = Timestamp::from_millis(1_000);
/// assert_eq!(t + Duration::from_secs(2), Timestamp::from_millis(3_000));
/// assert_eq!(t - Duration::from_millis(1_500), Timestamp::from_millis(-500));
/// assert_eq!(Timestamp::from_millis(3_000) - t, Duration::from_secs(2));
/// ```
impl Add<Duration> for Timestamp {
    type Output = Timestamp;

    fn add(self, d: Duration) -> Timestamp {
        self.saturating_add_millis(millis(d))
    }
}

/// `t - d`, clamped to the representable range.
impl Sub<Duration> for Timestamp {
    type Output = Timestamp;

    fn sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(millis(d)))
    }
}

/// How long after `earlier` this instant is (zero when it is not after).
impl Sub for Timestamp {
    type Output = Duration;

    fn sub(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(t: DateTime<Utc>) -> Timestamp {
        Timestamp(t.timestamp_millis())
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC with milliseconds, or the raw number when out of chrono's range.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_datetime() {
            Some(t) => f.write_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true)),
            None => write!(f, "{}ms", self.0),
        }
    }
}
