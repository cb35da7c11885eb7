//! A trigger's misfire policy: its names, and the schedules it applies to.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;
use crate::trigger::Schedule;

/// What a trigger does when it has misfired. See the [module docs](crate::misfire) for
/// the table of what each policy means for each schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MisfirePolicy {
    /// Quartz's smart policy: a choice per schedule, see the module docs.
    #[default]
    Smart,
    /// Fire once now (Quartz's `FIRE_ONCE_NOW` for cron, `FIRE_NOW` for simple
    /// triggers).
    FireNow,
    /// Fire every missed time as soon as possible, oldest first (bounded).
    IgnoreMisfires,
    /// Skip the missed times; wait for the next one after now. Cron and fixed
    /// delay.
    DoNothing,
    /// Restart the schedule now, keeping the number of fires left. Fixed rate and
    /// once.
    RescheduleNowWithExistingCount,
    /// Restart the schedule now, counting the missed fires as fired. Fixed rate
    /// and once.
    RescheduleNowWithRemainingCount,
    /// The next time after now on the original schedule, keeping the count of
    /// times triggered. Fixed rate and once.
    RescheduleNextWithExistingCount,
    /// The next time after now on the original schedule, counting the missed
    /// fires as fired. Fixed rate and once.
    RescheduleNextWithRemainingCount,
}

impl MisfirePolicy {
    /// Every policy, in declaration order.
    pub const ALL: [MisfirePolicy; 8] = [
        MisfirePolicy::Smart,
        MisfirePolicy::FireNow,
        MisfirePolicy::IgnoreMisfires,
        MisfirePolicy::DoNothing,
        MisfirePolicy::RescheduleNowWithExistingCount,
        MisfirePolicy::RescheduleNowWithRemainingCount,
        MisfirePolicy::RescheduleNextWithExistingCount,
        MisfirePolicy::RescheduleNextWithRemainingCount,
    ];

    /// The policy's name as stored in the database and accepted by the CLI:
    /// `smart`, `fire_now`, `ignore_misfires`, `do_nothing`,
    /// `reschedule_now_with_existing_count`, `reschedule_now_with_remaining_count`,
    /// `reschedule_next_with_existing_count`, `reschedule_next_with_remaining_count`.
    pub fn as_str(self) -> &'static str {
        match self {
            MisfirePolicy::Smart => "smart",
            MisfirePolicy::FireNow => "fire_now",
            MisfirePolicy::IgnoreMisfires => "ignore_misfires",
            MisfirePolicy::DoNothing => "do_nothing",
            MisfirePolicy::RescheduleNowWithExistingCount => "reschedule_now_with_existing_count",
            MisfirePolicy::RescheduleNowWithRemainingCount => "reschedule_now_with_remaining_count",
            MisfirePolicy::RescheduleNextWithExistingCount => "reschedule_next_with_existing_count",
            MisfirePolicy::RescheduleNextWithRemainingCount => "reschedule_next_with_remaining_count",
        }
    }

    /// Whether the policy applies to a schedule, as Quartz validates its misfire
    /// instructions per trigger type.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTrigger`] naming the policy and the schedule when it does
    /// not.
    pub fn check_applies_to(self, schedule: &Schedule) -> Result<(), Error> {
        let simple = matches!(schedule, Schedule::FixedRate { .. } | Schedule::Once);
        let applies = match self {
            MisfirePolicy::Smart | MisfirePolicy::FireNow | MisfirePolicy::IgnoreMisfires => true,
            MisfirePolicy::DoNothing => !simple,
            MisfirePolicy::RescheduleNowWithExistingCount
            | MisfirePolicy::RescheduleNowWithRemainingCount
            | MisfirePolicy::RescheduleNextWithExistingCount
            | MisfirePolicy::RescheduleNextWithRemainingCount => simple,
        };
        if applies {
            return Ok(());
        }
        let kind = match schedule {
            Schedule::Cron { .. } => "cron",
            Schedule::FixedRate { .. } => "fixed-rate",
            Schedule::FixedDelay { .. } => "fixed-delay",
            Schedule::Once => "once",
        };
        let allowed = if simple {
            "smart, fire_now, ignore_misfires or one of the reschedule_* policies"
        } else {
            "smart, fire_now, ignore_misfires or do_nothing"
        };
        Err(Error::InvalidTrigger {
            reason: format!("misfire policy {self} does not apply to a {kind} trigger (use {allowed})"),
        })
    }
}

impl fmt::Display for MisfirePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MisfirePolicy {
    type Err = Error;

    /// Parses a policy name, case-insensitively, with `-` accepted for `_`.
    fn from_str(s: &str) -> Result<MisfirePolicy, Error> {
        let name = s.trim().to_ascii_lowercase().replace('-', "_");
        MisfirePolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == name)
            .ok_or_else(|| Error::InvalidTrigger {
                reason: format!(
                    "unknown misfire policy {s:?} (expected one of: {})",
                    MisfirePolicy::ALL.map(MisfirePolicy::as_str).join(", ")
                ),
            })
    }
}
