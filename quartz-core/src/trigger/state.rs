//! Where a trigger stands: the state its execute row holds, and a fire
//! with the state before and after it is won.

use crate::time::Timestamp;

use super::Trigger;

/// The part of an execute row the claim's compare-and-set reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerState {
    /// The last fire time won, if any.
    pub prev_fire_time: Option<Timestamp>,
    /// The next fire time, if one is scheduled.
    pub next_fire_time: Option<Timestamp>,
    /// How many times the trigger has fired.
    pub times_triggered: u64,
    /// A fixed-delay trigger waiting for its running fire to finish.
    pub awaiting_finish: bool,
    /// The row's calendar stamp, which moves when a calendar the trigger
    /// uses changes (its fire times recomputed): compared by every
    /// compare-and-set, so that fire times expanded under the calendar as
    /// it was are not won; never written by one.
    pub calendar_stamp: i64,
}

impl TriggerState {
    /// The state of a trigger that has never fired.
    pub fn initial(trigger: &Trigger) -> TriggerState {
        TriggerState {
            prev_fire_time: None,
            next_fire_time: trigger.first_fire_time(),
            times_triggered: 0,
            awaiting_finish: false,
            calendar_stamp: 0,
        }
    }

    pub(super) fn next_fire_time_kind(&self) -> NextFire {
        match (self.next_fire_time, self.awaiting_finish) {
            (_, true) => NextFire::AfterFinish,
            (Some(t), false) => NextFire::At(t),
            (None, false) => NextFire::Done,
        }
    }
}

/// What follows a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextFire {
    /// The next fire time.
    At(Timestamp),
    /// A fixed-delay trigger: the next fire time is the finish time plus the delay.
    AfterFinish,
    /// The trigger is complete: past its end, at its repeat limit, or with no
    /// further cron time.
    Done,
}

/// One fire of a trigger, with the row's state before and after it is won: the
/// compare-and-set matches `before` and writes `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    /// The scheduled fire time.
    pub fire_time: Timestamp,
    /// The state the claim expects.
    pub before: TriggerState,
    /// The state the claim writes.
    pub after: TriggerState,
    /// What follows this fire.
    pub next: NextFire,
}
