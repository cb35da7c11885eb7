//! The fire queue's slots: each lane's fires by claim time, this node's
//! own and those left to another node first, with the own fires counted by
//! claim time.

use std::collections::BTreeMap;

use super::{Key, Pending};
use crate::engine::handler::Lane;
use crate::time::Timestamp;

/// The queued fires of each lane, by claim time, in four slots ([`slot`]):
/// this node's own (the strategy prefers it, or first come) and those left
/// to another node first, of each lane. A lane without room is passed over
/// whole, however many fires wait in it; the fires left to others are not
/// walked to pace this node's claims.
#[derive(Debug, Default)]
pub(super) struct Lanes {
    pub(super) slots: [BTreeMap<Key, Pending>; 4],
    /// How many of this node's own fires (both lanes) wait at each claim
    /// time: what [`FireQueue::claim_ahead`](super::FireQueue::claim_ahead) reads. It walked the own
    /// fires one by one, and the dispatcher asks it each time it wakes (as
    /// each handler returns, thousands of times a second in a storm): with
    /// a second's few thousand fires at one claim time, that walk took
    /// 4-9 % of a node's CPU at 10,000 fires a second (two profiles).
    pub(super) own_at: BTreeMap<Timestamp, usize>,
}

impl std::ops::Index<usize> for Lanes {
    type Output = BTreeMap<Key, Pending>;

    fn index(&self, at: usize) -> &Self::Output {
        &self.slots[at]
    }
}

impl Lanes {
    /// Whether a slot holds this node's own fires.
    fn own(at: usize) -> bool {
        at == slot(lane_of(at), false)
    }

    /// Queues a fire in slot `at`.
    pub(super) fn insert(&mut self, at: usize, key: Key, pending: Pending) {
        if self.slots[at].insert(key, pending).is_none() && Lanes::own(at) {
            *self.own_at.entry(key.0).or_default() += 1;
        }
    }

    /// Takes a fire out of slot `at`.
    pub(super) fn remove(&mut self, at: usize, key: &Key) -> Option<Pending> {
        let pending = self.slots[at].remove(key)?;
        if Lanes::own(at)
            && let std::collections::btree_map::Entry::Occupied(mut count) = self.own_at.entry(key.0)
        {
            *count.get_mut() -= 1;
            if *count.get() == 0 {
                count.remove();
            }
        }
        Some(pending)
    }

    /// Empties a lane's slot of fires left to another node, returning them.
    pub(super) fn take_deferred(&mut self, lane: Lane) -> BTreeMap<Key, Pending> {
        std::mem::take(&mut self.slots[slot(lane, true)])
    }

    /// Empties every slot.
    pub(super) fn clear(&mut self) {
        self.slots.iter_mut().for_each(BTreeMap::clear);
        self.own_at.clear();
    }

    /// How many of this node's own fires wait.
    pub(super) fn own_len(&self) -> usize {
        self.slots[slot(Lane::Pool, false)].len() + self.slots[slot(Lane::Task, false)].len()
    }
}

/// The slot of a lane's fires, this node's own or left to another first.
pub(super) fn slot(lane: Lane, deferred: bool) -> usize {
    lane as usize + if deferred { 2 } else { 0 }
}

/// The lane of a slot.
pub(super) fn lane_of(slot: usize) -> Lane {
    if slot % 2 == Lane::Pool as usize {
        Lane::Pool
    } else {
        Lane::Task
    }
}
