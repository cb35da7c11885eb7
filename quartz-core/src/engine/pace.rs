//! How long the database takes per fire for a statement that handles many
//! (a claim, a start), smoothed: what lets the node begin a burst's claims
//! and starts early enough to finish them by the fire time, rather than a
//! fixed lead that a thousand fires due together overrun.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::time::Timestamp;

/// Statements with fewer fires than this are dominated by their round trip,
/// and say little about the cost of one more fire.
const MIN_FIRES_OBSERVED: usize = 16;

/// The smoothed cost of one fire in a statement that handles many.
#[derive(Debug)]
pub(super) struct Pace {
    /// Nanoseconds per fire, smoothed.
    nanos_per_fire: AtomicU64,
}

impl Default for Pace {
    /// A quarter of a millisecond a fire until statements are observed
    /// (a claim's cost on a busy two-core database; a start's is less).
    fn default() -> Pace {
        Pace::assuming(Duration::from_micros(250))
    }
}

impl Pace {
    /// A pace that assumes `per_fire` until statements are observed.
    pub(super) fn assuming(per_fire: Duration) -> Pace {
        Pace {
            nanos_per_fire: AtomicU64::new(u64::try_from(per_fire.as_nanos()).unwrap_or(u64::MAX)),
        }
    }

    /// Folds in one statement that handled `fires` fires in `took`: a quarter
    /// of the way to what it shows. Small statements are left out.
    pub(super) fn observe(&self, took: Duration, fires: usize) {
        if fires < MIN_FIRES_OBSERVED {
            return;
        }
        let per_fire = u64::try_from(took.as_nanos() / fires as u128).unwrap_or(u64::MAX);
        let _ = self
            .nanos_per_fire
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| Some(smooth(old, per_fire)));
    }

    /// The time `fires` fires take at this pace.
    pub(super) fn of(&self, fires: usize) -> Duration {
        let nanos = self.nanos_per_fire.load(Ordering::Relaxed);
        Duration::from_nanos(nanos.saturating_mul(fires as u64))
    }
}

/// How long a shortfall is remembered: it fades linearly to nothing over
/// this time after the last one.
const SHORTFALL_MEMORY_MS: i64 = 60_000;

/// How far a lead fell short lately: what must be added to an estimate
/// made from averages so that work met at some moments by other work
/// (another node's poll reading thousands of rows in the same second, a
/// checkpoint) still ends in time. Each shortfall seen adds to what is left
/// of the ones before, which fades linearly over a minute: a collision that
/// comes back every few seconds keeps its margin, one that stops is
/// forgotten.
#[derive(Debug, Default)]
pub(super) struct Shortfall {
    /// The margin in ms, as of the database time in ms.
    margin: (i64, i64),
}

impl Shortfall {
    /// The margin at `now`.
    pub(super) fn at(&self, now: Timestamp) -> Duration {
        let (margin, since) = self.margin;
        Duration::from_millis(u64::try_from(fade(margin, now.as_millis() - since)).unwrap_or(0))
    }

    /// Folds in work that ended `over_ms` after it was due at `now` (none
    /// when it ended in time).
    pub(super) fn observe(&mut self, over_ms: i64, now: Timestamp, cap: Duration) {
        if over_ms <= 0 {
            return;
        }
        let cap = i64::try_from(cap.as_millis()).unwrap_or(i64::MAX);
        let left = fade(self.margin.0, now.as_millis() - self.margin.1);
        self.margin = (left.saturating_add(over_ms).min(cap), now.as_millis());
    }
}

/// What is left of `margin` ms after `age` ms.
fn fade(margin: i64, age: i64) -> i64 {
    let left = SHORTFALL_MEMORY_MS.saturating_sub(age.max(0)).max(0);
    i64::try_from(i128::from(margin) * i128::from(left) / i128::from(SHORTFALL_MEMORY_MS)).unwrap_or(0)
}

/// A smoothed value after one more observation: a quarter of the way from
/// `old` to `seen` (the first observation, onto 0, is taken whole).
pub(super) fn smooth(old: u64, seen: u64) -> u64 {
    if old == 0 {
        return seen;
    }
    let (old, seen) = (i128::from(old), i128::from(seen));
    u64::try_from(old + (seen - old) / 4).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smoothed_time_moves_a_quarter_of_the_way_to_each_observation() {
        assert_eq!(smooth(0, 8_000), 8_000);
        assert_eq!(smooth(8_000, 16_000), 10_000);
        assert_eq!(smooth(10_000, 2_000), 8_000);
    }

    #[test]
    fn a_shortfall_adds_to_what_is_left_of_the_last_and_fades_over_a_minute() {
        let mut shortfall = Shortfall::default();
        let cap = Duration::from_millis(1_000);
        let at = |s: i64| Timestamp::from_millis(1_000_000 + s * 1_000);
        assert_eq!(shortfall.at(at(0)), Duration::ZERO);
        shortfall.observe(-20, at(0), cap);
        assert_eq!(shortfall.at(at(0)), Duration::ZERO, "in time: nothing to add");
        shortfall.observe(120, at(0), cap);
        assert_eq!(shortfall.at(at(0)), Duration::from_millis(120));
        assert_eq!(shortfall.at(at(30)), Duration::from_millis(60), "half a minute later");
        shortfall.observe(40, at(30), cap);
        assert_eq!(shortfall.at(at(30)), Duration::from_millis(100), "60 left, 40 more");
        assert_eq!(shortfall.at(at(90)), Duration::ZERO, "a minute without one");
        shortfall.observe(5_000, at(90), cap);
        assert_eq!(shortfall.at(at(90)), cap, "within the cap");
    }

    #[test]
    fn the_pace_moves_a_quarter_of_the_way_and_ignores_small_statements() {
        let pace = Pace::assuming(Duration::from_micros(100));
        assert_eq!(pace.of(1_000), Duration::from_millis(100));
        pace.observe(Duration::from_millis(1), 1);
        assert_eq!(pace.of(1_000), Duration::from_millis(100), "a lone fire says little");
        pace.observe(Duration::from_micros(300 * 100), 100);
        assert_eq!(
            pace.of(1_000),
            Duration::from_millis(150),
            "100 µs a quarter of the way to 300"
        );
    }
}
