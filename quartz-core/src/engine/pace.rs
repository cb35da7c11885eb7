//! How long the database takes per fire for a statement that handles many
//! (a claim, a start), smoothed: what lets the node begin a burst's claims
//! and starts early enough to finish them by the fire time, rather than a
//! fixed lead that a thousand fires due together overrun.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
