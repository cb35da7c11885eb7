//! Where a run's late fires were: the ledger by second of the run and by
//! the node that won each fire, the seconds with late starts or with claims
//! made after the fire time. A late second on one node whose claims came
//! after their time is a node that fell behind its claims; claims of one
//! node's share made by the others are its fires taken a strategy grace
//! later; late starts of fires claimed ahead are starts that waited.

use std::collections::BTreeMap;

use quartz_core::Timestamp;
use quartz_core::store::FireRecord;

/// Starts later than this many milliseconds count as late here.
const LATE_MS: i64 = 50;

/// One second of the run on one node.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct LateSecond {
    /// Fires of that second the node won.
    pub(crate) fires: usize,
    /// Of them, started more than [`LATE_MS`] after their time.
    pub(crate) late: usize,
    /// The latest start, ms after its time.
    pub(crate) max_ms: i64,
    /// Claimed after their fire time.
    pub(crate) claimed_after: usize,
}

impl LateSecond {
    /// Adds another scheduler's figures of the same second and node.
    pub(crate) fn add(&mut self, other: &LateSecond) {
        self.fires += other.fires;
        self.late += other.late;
        self.max_ms = self.max_ms.max(other.max_ms);
        self.claimed_after += other.claimed_after;
    }
}

/// The seconds of a run (from `start`) with a late start or a claim after
/// the fire time, by second and winning node (`-` for rows with none, such
/// as misfire records).
pub(crate) fn late_seconds(rows: &[FireRecord], start: Timestamp) -> BTreeMap<(i64, String), LateSecond> {
    let mut by: BTreeMap<(i64, String), LateSecond> = BTreeMap::new();
    for row in rows {
        let second = (row.fire_time.as_millis() - start.as_millis()).div_euclid(1_000);
        let node = row.owner.as_ref().map_or_else(|| "-".to_owned(), |o| o.node_id.clone());
        let entry = by.entry((second, node)).or_default();
        entry.fires += 1;
        if let Some(started) = row.started_at {
            let late = started.as_millis() - row.fire_time.as_millis();
            entry.late += usize::from(late > LATE_MS);
            entry.max_ms = entry.max_ms.max(late);
        }
        entry.claimed_after += usize::from(row.claimed_at > row.fire_time);
    }
    by.retain(|_, s| s.late > 0 || s.claimed_after > 0);
    by
}

/// The late seconds as lines, for the run's report.
pub(crate) fn lines(seconds: &BTreeMap<(i64, String), LateSecond>) -> Vec<String> {
    seconds
        .iter()
        .map(|((second, node), s)| {
            format!(
                "second {second:>3} {node}: {} fires, {} started over {LATE_MS} ms late (max {} ms), {} claimed after their time",
                s.fires, s.late, s.max_ms, s.claimed_after
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quartz_core::store::{FireState, NodeRef};

    fn row(fire_s: i64, node: &str, claimed_ms: i64, started_ms: Option<i64>) -> FireRecord {
        let fire_time = Timestamp::from_millis(fire_s * 1_000);
        FireRecord {
            id: 1,
            execute_id: 1,
            job_id: 1,
            fire_time,
            attempt: 1,
            owner: Some(NodeRef {
                node_id: node.to_owned(),
                incarnation: 1,
            }),
            state: FireState::Succeeded,
            claimed_at: fire_time.saturating_add_millis(claimed_ms),
            started_at: started_ms.map(|ms| fire_time.saturating_add_millis(ms)),
            finished_at: None,
            timed_out_at: None,
            due_at: None,
            error: None,
            skipped_until: None,
            fire_count: 1,
        }
    }

    #[test]
    fn only_seconds_with_late_starts_or_late_claims_are_kept() {
        let rows = [
            row(10, "a", -900, Some(0)),
            row(11, "a", -900, Some(80)),
            row(11, "a", -900, Some(0)),
            row(12, "b", 30, Some(40)),
        ];
        let seconds = late_seconds(&rows, Timestamp::from_millis(10_000));
        let kept: Vec<_> = seconds.iter().map(|((s, n), l)| (*s, n.as_str(), l.clone())).collect();
        assert_eq!(
            kept,
            [
                (
                    1,
                    "a",
                    LateSecond {
                        fires: 2,
                        late: 1,
                        max_ms: 80,
                        claimed_after: 0
                    }
                ),
                (
                    2,
                    "b",
                    LateSecond {
                        fires: 1,
                        late: 0,
                        max_ms: 40,
                        claimed_after: 1
                    }
                ),
            ]
        );
        assert_eq!(
            lines(&seconds)[0],
            "second   1 a: 2 fires, 1 started over 50 ms late (max 80 ms), 0 claimed after their time"
        );
    }
}
