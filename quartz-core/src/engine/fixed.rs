//! Hash maps and sets whose iteration order is the same on every run.
//!
//! std's default hasher is keyed at random per process, so a map's order
//! differs from one run to the next: a node that gives back, cancels or
//! starts what a map holds, in its order, would do so in another order on
//! another run, and a simulated cluster (one seed, one run, bit for bit)
//! could not be replayed. The engine's maps hold its own ids and names,
//! never input an attacker chooses to collide, so a fixed key costs
//! nothing; their order then depends only on what was put in them.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;

/// The engine's hasher: SipHash with fixed keys.
pub(crate) type Fixed = BuildHasherDefault<DefaultHasher>;

/// A hash map with the same order on every run.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, Fixed>;

/// A hash set with the same order on every run.
pub(crate) type HashSet<K> = std::collections::HashSet<K, Fixed>;
