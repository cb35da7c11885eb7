//! The overlap policy: what a fire does when a fire of its job is still
//! claimed or running (on any node). Decided at the claim, in the store's
//! transaction that locks the job's row, so the whole cluster agrees.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// What a trigger's fire does when its job's previous fire is still running.
///
/// A trigger without one keeps the job's own rule: alongside the running fire
/// when the job allows concurrency, or (a job that disallows it) held as
/// Quartz holds a non-concurrent job's trigger, until the running fire ends,
/// after which the misfire policy decides what the held time became.
///
/// ```
/// use quartz_core::trigger::Overlap;
///
/// let policy: Overlap = "buffer_one".parse()?;
/// assert_eq!(policy, Overlap::BufferOne);
/// assert_eq!(policy.to_string(), "buffer_one");
/// assert!(policy.waits());
/// # Ok::<(), quartz_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overlap {
    /// Runs alongside the running fire.
    Allow,
    /// Does not run: recorded in the ledger as skipped, with the running
    /// fire's id, and the trigger moves on to its next time.
    Skip,
    /// Waits, as a pending fire, and runs once the running fire has ended; at
    /// most one of the trigger's fires waits, the others are recorded as
    /// skipped (run once, however many were missed).
    BufferOne,
    /// Every such fire waits, and they run one at a time, in the order of
    /// their fire times.
    BufferAll,
    /// Asks the running fire to stop (its handler's cancellation signal, on
    /// whichever node runs it; the fire is recorded as failed, cancelled,
    /// and not retried), then runs once it has ended.
    Cancel,
}

impl Overlap {
    /// Every policy, in the order the docs list them.
    pub const ALL: [Overlap; 5] = [
        Overlap::Allow,
        Overlap::Skip,
        Overlap::BufferOne,
        Overlap::BufferAll,
        Overlap::Cancel,
    ];

    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::BufferAll => "buffer_all",
            Overlap::Cancel => "cancel",
        }
    }

    /// The policy a trigger's fires follow: its own, else `Allow` for a job
    /// that allows concurrency; `None` for one that disallows it and a
    /// trigger without a policy (held while the job runs, as in Quartz).
    pub fn effective(trigger: Option<Overlap>, allow_concurrent: bool) -> Option<Overlap> {
        trigger.or(allow_concurrent.then_some(Overlap::Allow))
    }

    /// Whether a fire under this policy waits for the running fire to end
    /// (as a pending fire) rather than run or be skipped.
    pub fn waits(self) -> bool {
        matches!(self, Overlap::BufferOne | Overlap::BufferAll | Overlap::Cancel)
    }
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Overlap {
    type Err = Error;

    fn from_str(s: &str) -> Result<Overlap, Error> {
        Overlap::ALL
            .into_iter()
            .find(|o| o.as_str() == s.trim())
            .ok_or_else(|| Error::InvalidTrigger {
                reason: format!("unknown overlap policy {s:?}: one of allow, skip, buffer_one, buffer_all, cancel"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for o in Overlap::ALL {
            assert_eq!(o.as_str().parse::<Overlap>().unwrap(), o);
        }
        assert!("buffer".parse::<Overlap>().is_err());
        assert!(!Overlap::Skip.waits() && !Overlap::Allow.waits() && Overlap::Cancel.waits());
    }
}
