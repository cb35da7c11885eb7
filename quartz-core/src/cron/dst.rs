//! The explicit DST choice: what a cron trigger does with a local time that a
//! daylight-saving change skips (spring forward) or repeats (fall back).
//!
//! The evaluation under an explicit choice is [`next_after`]; the
//! choice's meaning is documented on [`DstChoice`].

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, LocalResult, Offset, TimeZone};
use chrono_tz::Tz;

use super::parse::Fields;
use crate::error::Error;

/// What a cron trigger does with a local time that a DST change skips.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SkippedTime {
    /// As Quartz 2.3.2's own walk (the default): not fired, and times just
    /// after the gap can be passed over too.
    #[default]
    Quartz,
    /// Fire at the shifted instant: 02:30 in a skipped 02:00-03:00 fires at
    /// 03:30 in the new offset.
    Shift,
    /// Do not fire for a time that does not exist.
    Skip,
}

/// What a cron trigger does with a local time that a DST change repeats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RepeatedTime {
    /// As Quartz: once, at the later instant, by Quartz's own walk (the
    /// default).
    #[default]
    Quartz,
    /// Once, at the first occurrence (the earlier instant, in the summer
    /// offset).
    First,
    /// Once, at the second occurrence (the later instant).
    Second,
    /// At both occurrences.
    Both,
}

/// A cron trigger's choice for the local times a DST change skips and
/// repeats.
///
/// By default ([`DstChoice::QUARTZ`]) an expression is evaluated as Quartz
/// 2.3.2 evaluates it, which no single rule describes. A time in a repeated
/// hour fires once, at the later instant (01:30 on New York's autumn day is
/// 01:30 EST, and an hourly trigger leaves two hours between 00:00 EDT and
/// 01:00 EST). A time in a skipped hour does not fire (02:30 daily does not
/// fire on New York's spring day), and the walk can pass over times just
/// after the gap that do exist: in Lord Howe, whose clocks jump from 02:00
/// to 02:30, `0 5/7 * * * ?` fires 01:54 and then 02:40, never 02:33 (see
/// the `eval` module).
///
/// Choosing either half makes the trigger follow the wall clock exactly.
/// Every local time the expression matches is a fire time at each of its
/// instants the choice keeps:
///
/// | local time | [`SkippedTime`] / [`RepeatedTime`] | fires at |
/// |---|---|---|
/// | exists once | any | its instant |
/// | skipped | `Shift` | the instant it would have been without the change: the time plus the gap, in the new offset |
/// | skipped | `Skip` (or `Quartz`, with an explicit repeated choice) | nowhere |
/// | repeated | `First` | the earlier instant |
/// | repeated | `Second` (or `Quartz`) | the later instant |
/// | repeated | `Both` | both instants |
///
/// Two matched times that land on the same instant (a shifted 02:30 and a
/// regular 03:30) fire once.
///
/// ```
/// use quartz_core::cron::{CronExpression, DstChoice, RepeatedTime, SkippedTime, parse_time_zone};
/// use quartz_core::Timestamp;
///
/// // 01:30 every day in New York; 1 November 2026 has it twice.
/// let cron = CronExpression::parse("0 30 1 * * ?")?;
/// let zone = parse_time_zone("America/New_York")?;
/// let both = DstChoice { skipped: SkippedTime::Skip, repeated: RepeatedTime::Both };
/// let after = Timestamp::from_millis(1_793_491_200_000); // 2026-11-01T00:00:00Z
/// let fires: Vec<String> = cron.iter_after_with(after, zone, both).take(3).map(|t| t.to_string()).collect();
/// assert_eq!(fires, ["2026-11-01T05:30:00.000Z", "2026-11-01T06:30:00.000Z", "2026-11-02T06:30:00.000Z"]);
/// # Ok::<(), quartz_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DstChoice {
    /// For a local time that does not exist.
    pub skipped: SkippedTime,
    /// For a local time that exists twice.
    pub repeated: RepeatedTime,
}

impl DstChoice {
    /// Quartz's behaviour on both sides: the default.
    pub const QUARTZ: DstChoice = DstChoice {
        skipped: SkippedTime::Quartz,
        repeated: RepeatedTime::Quartz,
    };

    /// Whether this is Quartz's behaviour on both sides.
    pub fn is_quartz(&self) -> bool {
        *self == DstChoice::QUARTZ
    }
}

impl fmt::Display for DstChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skipped {}, repeated {}", self.skipped, self.repeated)
    }
}

macro_rules! named {
    ($ty:ident, $what:literal, $($variant:ident = $name:literal),+) => {
        impl $ty {
            /// The name stored and shown.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = Error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(Error::InvalidTrigger {
                        reason: format!(
                            concat!("unknown choice {:?} for a ", $what, " (expected {})"),
                            s,
                            [$($name),+].join(", ")
                        ),
                    }),
                }
            }
        }
    };
}

named!(
    SkippedTime,
    "skipped local time",
    Quartz = "quartz",
    Shift = "shift",
    Skip = "skip"
);
named!(
    RepeatedTime,
    "repeated local time",
    Quartz = "quartz",
    First = "first",
    Second = "second",
    Both = "both"
);

const DAY_MS: i64 = 86_400_000;

/// The next fire time strictly after `after_ms` under an explicit choice.
///
/// Local ("wall") times are epoch milliseconds read as UTC. The walk visits
/// the matched wall times after the wall time of `after_ms` in order and
/// keeps the earliest instant after `after_ms`; walls map to instants in
/// order except across a change, so it goes on until no later wall can give
/// an earlier instant. Two kinds of wall before that wall time can still
/// have an instant after `after_ms`: a repeated time's second occurrence
/// when `after_ms` is in the first, and a skipped time's shifted instant
/// when `after_ms` is just past a gap. Each is the first matched wall of its
/// stretch, one evaluation each.
pub(crate) fn next_after(f: &Fields, tz: &Tz, after_ms: i64, choice: DstChoice) -> Option<i64> {
    let wall = after_ms.checked_add(offset_ms(tz, after_ms)?)?;
    let mut best: Option<i64> = None;
    let keep = |wall: i64, best: &mut Option<i64>| {
        for instant in instants(tz, wall, choice).into_iter().flatten() {
            if instant > after_ms && best.is_none_or(|b| instant < b) {
                *best = Some(instant);
            }
        }
    };
    if let Some(change) = change_between(tz, after_ms, after_ms.saturating_add(DAY_MS)) {
        // A fall-back ahead: the repeated walls up to this one have their
        // second instant still to come.
        let gap = change.before - change.after;
        if gap > 0
            && wall >= change.at + change.after
            && let Some(w) = wall_after(f, (change.at + change.after - 1).max(wall - gap))
        {
            keep(w, &mut best);
        }
    }
    if let Some(change) = change_between(tz, after_ms.saturating_sub(DAY_MS), after_ms) {
        // Just past a spring-forward: skipped walls whose shifted instant is
        // still to come.
        if change.after > change.before
            && after_ms < change.at + (change.after - change.before)
            && let Some(w) = wall_after(f, after_ms + change.before)
        {
            keep(w, &mut best);
        }
    }
    let mut at = wall;
    while let Some(next) = wall_after(f, at) {
        // A later wall's instant is at least the wall minus the zone's
        // largest offset between `after_ms` and the best instant: past
        // that, no wall can beat the best.
        if best.is_some_and(|b| next > b.saturating_add(largest_offset_between(tz, after_ms, b).unwrap_or(0))) {
            break;
        }
        at = next;
        keep(next, &mut best);
    }
    best
}

/// The first matched wall time strictly after `wall`.
fn wall_after(f: &Fields, wall: i64) -> Option<i64> {
    super::eval::next_after(f, &Tz::UTC, wall)
}

/// The instants of a wall time that `choice` fires at, earliest first.
fn instants(tz: &Tz, wall: i64, choice: DstChoice) -> [Option<i64>; 2] {
    let Some(naive) = DateTime::from_timestamp_millis(wall).map(|d| d.naive_utc()) else {
        return [None, None];
    };
    match tz.offset_from_local_datetime(&naive) {
        LocalResult::Single(offset) => [Some(wall - offset_of(&offset)), None],
        LocalResult::Ambiguous(a, b) => {
            let (x, y) = (wall - offset_of(&a), wall - offset_of(&b));
            let (first, second) = (x.min(y), x.max(y));
            match choice.repeated {
                RepeatedTime::First => [Some(first), None],
                RepeatedTime::Second | RepeatedTime::Quartz => [Some(second), None],
                RepeatedTime::Both => [Some(first), Some(second)],
            }
        }
        LocalResult::None => match choice.skipped {
            SkippedTime::Skip | SkippedTime::Quartz => [None, None],
            SkippedTime::Shift => {
                // The offset in force before the gap: a day earlier, as no
                // zone changes twice within a day.
                let before = naive
                    .checked_sub_signed(chrono::TimeDelta::days(1))
                    .and_then(|d| tz.offset_from_local_datetime(&d).earliest());
                [before.map(|o| wall - offset_of(&o)), None]
            }
        },
    }
}

fn offset_of(offset: &<Tz as TimeZone>::Offset) -> i64 {
    i64::from(offset.fix().local_minus_utc()) * 1000
}

/// The zone's offset at an instant, in milliseconds.
fn offset_ms(tz: &Tz, at_ms: i64) -> Option<i64> {
    let utc = DateTime::from_timestamp_millis(at_ms)?;
    Some(offset_of(&tz.offset_from_utc_datetime(&utc.naive_utc())))
}

/// The zone's largest offset at the instants in `(from, to]` that matter:
/// a later wall could map before `to` only by hours, so the last day
/// before `to` (or from `from`, if later), which holds at most one change.
/// Taking the offsets a day around `to` instead would make every step in
/// the day after a fall-back (or before a spring-forward) walk an hour of
/// walls.
fn largest_offset_between(tz: &Tz, from: i64, to: i64) -> Option<i64> {
    let start = from.max(to.saturating_sub(DAY_MS));
    Some(offset_ms(tz, start)?.max(offset_ms(tz, to)?))
}

/// A change of the zone's offset.
struct Change {
    /// The first instant with the new offset.
    at: i64,
    before: i64,
    after: i64,
}

/// The change between two instants less than a day or so apart, when the
/// offsets at the two ends differ (found by bisection).
fn change_between(tz: &Tz, from: i64, to: i64) -> Option<Change> {
    let before = offset_ms(tz, from)?;
    let after = offset_ms(tz, to)?;
    if before == after {
        return None;
    }
    let (mut lo, mut hi) = (from, to);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if offset_ms(tz, mid)? == before {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(Change {
        at: hi,
        before,
        after: offset_ms(tz, hi)?,
    })
}
