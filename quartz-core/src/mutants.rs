//! Planted bugs, for proving that the simulator (`quartz-sim`) catches
//! what it claims to: each mutant is a one-line break of a real guarantee,
//! switched on by name for a whole process, and compiled in only with the
//! `mutants` feature (without it, [`on`] is `false` and costs nothing).
//!
//! ```
//! assert!(quartz_core::mutants::ALL.iter().any(|m| m.name == "start-early"));
//! assert!(!quartz_core::mutants::on("start-early"));
//! ```

/// A planted bug: its name and the guarantee it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mutant {
    /// Its name (`--mutant NAME`).
    pub name: &'static str,
    /// What it breaks.
    pub breaks: &'static str,
}

/// Every mutant the simulator catches (`quartz-sim --list-mutants`).
pub const ALL: &[Mutant] = &[
    Mutant {
        name: "retry-after-success",
        breaks: "a fire that succeeded is tried again while its job allows more attempts",
    },
    Mutant {
        name: "fence-keeps-handlers",
        breaks: "a node whose membership lease ran out does not ask its running handlers to stop",
    },
    Mutant {
        name: "recover-live-fire",
        breaks: "recovery takes over the open fires of live nodes, not only dead ones'",
    },
    Mutant {
        name: "dead-too-soon",
        breaks: "a silent node is declared dead at half of dead_after, while it may still hold its lease",
    },
    Mutant {
        name: "misfire-threshold-late",
        breaks: "the misfire threshold is counted one poll window too late",
    },
    Mutant {
        name: "skip-ignores-running",
        breaks: "the skip overlap policy and a job's disallowed concurrency ignore running fires",
    },
    Mutant {
        name: "limit-ignores-running",
        breaks: "a concurrency limit counts claimed fires only, not running ones",
    },
    Mutant {
        name: "start-early",
        breaks: "a fire won ahead of its time is handed to its handler at once",
    },
];

/// Planted bugs the simulator does not catch yet, each masked by another
/// defence in its model: the start fence by the node's own refusal to
/// start without its lease (a start statement only reaches the store late
/// from a frozen node, which the simulation freezes by its link, not its
/// timers); the lease counted from a renewal's answer by the store's
/// deadline on every call (an answer later than it is no renewal at all).
/// Switched on like the others; `quartz-sim --list-mutants` leaves them out.
pub const MASKED: &[Mutant] = &[
    Mutant {
        name: "start-without-fence",
        breaks: "the start of a fire is not fenced by the incarnation that claimed it, nor by its being live",
    },
    Mutant {
        name: "lease-from-answer",
        breaks: "the membership lease is counted from a renewal's answer instead of its send",
    },
];

#[cfg(feature = "mutants")]
static ACTIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether the mutant `name` is switched on.
#[inline]
pub fn on(name: &str) -> bool {
    #[cfg(feature = "mutants")]
    {
        match ACTIVE.load(std::sync::atomic::Ordering::Relaxed) {
            0 => false,
            i => ALL.iter().chain(MASKED).nth(i - 1).is_some_and(|m| m.name == name),
        }
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = name;
        false
    }
}

/// Switches the mutant `name` on for the whole process (`None`: none).
///
/// # Errors
///
/// The name when no mutant has it.
#[cfg(feature = "mutants")]
pub fn set(name: Option<&str>) -> Result<(), String> {
    let index = match name {
        None => 0,
        Some(name) => {
            ALL.iter()
                .chain(MASKED)
                .position(|m| m.name == name)
                .ok_or_else(|| name.to_owned())?
                + 1
        }
    };
    ACTIVE.store(index, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}
