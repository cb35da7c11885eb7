//! Spreading and bounding a trigger's fires: jitter (each fire time moved by
//! an offset fixed per fire) and the catch-up window (how far back a misfire
//! is still made up for).

use std::time::Duration;

use crate::error::Error;
use crate::time::Timestamp;

/// A trigger's jitter: each scheduled time `t` fires at `t + offset`, the
/// offset below `max_ms` and below the time to the next scheduled time (so
/// fires keep their order and never merge), chosen by hashing `seed` with
/// `t`. Every node computes the same offset for the same fire, and a fire's
/// offset never changes: its jittered time is its identity in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Jitter {
    /// The largest offset, exclusive, in milliseconds (1 to
    /// [`MAX_INTERVAL_MILLIS`](super::MAX_INTERVAL_MILLIS)).
    pub max_ms: i64,
    /// What tells this trigger's offsets from another's with the same
    /// schedule: a job definition derives it from the job's name and the
    /// trigger's place ([`Jitter::seed_of`]), so ten thousand jobs on one
    /// cron second spread apart, and the same definition always has the
    /// same times.
    pub seed: i64,
}

impl Jitter {
    /// A jitter of up to `max` (kept to the millisecond).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] when `max` is under 1 ms or over 100 years.
    pub fn new(max: Duration, seed: i64) -> Result<Jitter, Error> {
        let max_ms = crate::store::millis_of(max);
        if !(1..=super::MAX_INTERVAL_MILLIS).contains(&max_ms) {
            return Err(Error::InvalidTrigger {
                reason: format!("a jitter must be between 1 ms and 100 years, got {max_ms} ms"),
            });
        }
        Ok(Jitter { max_ms, seed })
    }

    /// The seed of the trigger at `index` in job `job`'s list.
    pub fn seed_of(job: &str, index: usize) -> i64 {
        let mut h = mix(index as u64 ^ 0x9e37_79b9_7f4a_7c15);
        for chunk in job.as_bytes().chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            h = mix(h ^ u64::from_le_bytes(word));
        }
        i64::from_ne_bytes(h.to_ne_bytes())
    }

    /// The offset of scheduled time `t`, whose next scheduled time is
    /// `next` (none for the last, a one-off or a fixed delay's): in
    /// `[0, min(max_ms, next - t))`.
    pub fn offset(&self, t: Timestamp, next: Option<Timestamp>) -> i64 {
        let cap = next.map_or(self.max_ms, |n| {
            self.max_ms.min(n.as_millis().saturating_sub(t.as_millis()))
        });
        let Ok(cap) = u64::try_from(cap) else { return 0 };
        if cap <= 1 {
            return 0;
        }
        let h = mix(u64::from_ne_bytes(self.seed.to_ne_bytes()) ^ mix(u64::from_ne_bytes(t.as_millis().to_ne_bytes())));
        i64::try_from(h % cap).unwrap_or(0)
    }
}

/// SplitMix64's finaliser: every bit of the input moves every bit of the
/// output, stable across builds and platforms.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Checks a catch-up window: how far back (from the moment a misfire is
/// found) a missed fire time is still made up for by the misfire policy.
///
/// # Errors
///
/// [`Error::InvalidTrigger`] when the window is under 1 ms or over 100 years.
pub fn check_catch_up(window: Duration) -> Result<i64, Error> {
    let ms = crate::store::millis_of(window);
    if (1..=super::MAX_INTERVAL_MILLIS).contains(&ms) {
        Ok(ms)
    } else {
        Err(Error::InvalidTrigger {
            reason: format!("a catch-up window must be between 1 ms and 100 years, got {ms} ms"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_stay_below_the_cap_and_differ_by_seed() {
        let j = Jitter::new(Duration::from_secs(60), Jitter::seed_of("report", 0)).unwrap();
        let other = Jitter::new(Duration::from_secs(60), Jitter::seed_of("report", 1)).unwrap();
        let t = Timestamp::from_millis(1_767_225_600_000);
        let mut differ = 0;
        for k in 0..1000 {
            let at = t.saturating_add_millis(k * 1000);
            let o = j.offset(at, None);
            assert!((0..60_000).contains(&o));
            assert!(j.offset(at, Some(at.saturating_add_millis(500))) < 500);
            assert_eq!(j.offset(at, None), o, "fixed per fire");
            differ += usize::from(o != other.offset(at, None));
        }
        assert!(differ > 990, "seeds spread: {differ}");
        assert_eq!(j.offset(t, Some(t.saturating_add_millis(1))), 0);
        assert!(Jitter::new(Duration::ZERO, 0).is_err());
        assert!(check_catch_up(Duration::ZERO).is_err());
    }
}
