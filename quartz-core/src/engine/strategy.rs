//! Which node tries a fire first: a pure function of the execute, the
//! strategy and the live members every node reads from the same table, so
//! that the nodes agree without talking. The compare-and-set alone decides
//! who wins; the strategy only cuts needless races.

use super::settings::Strategy;
use crate::store::{Node, NodeState};

/// Whether node `me` is the one the strategy prefers for an execute's fires
/// among `members` (the others try a strategy grace later).
pub(super) fn tries_first(strategy: Strategy, members: &[Node], me: &str, execute_id: i64) -> bool {
    strategy == Strategy::FirstCome || preferred(strategy, execute_id, members).is_none_or(|id| id == me)
}

/// The live node the strategy prefers for an execute, `None` for first come
/// (or no live node).
pub(super) fn preferred(strategy: Strategy, execute_id: i64, members: &[Node]) -> Option<String> {
    let key = mix(u64::from_ne_bytes(execute_id.to_ne_bytes()));
    let live = members.iter().filter(|n| n.state == NodeState::Live);
    match strategy {
        Strategy::FirstCome => None,
        Strategy::IdHash => {
            let mut ids: Vec<&str> = live.map(|n| n.node_id.as_str()).collect();
            ids.sort_unstable();
            let len = u64::try_from(ids.len()).unwrap_or(1).max(1);
            ids.get(usize::try_from(key % len).unwrap_or(0))
                .map(|s| (*s).to_owned())
        }
        Strategy::Weighted => rendezvous(key, live, |n| f64::from(n.weight.max(1))),
        // The weight shrinks as the node gets busier: a node running ten
        // fires is offered a tenth of what an idle one is.
        #[allow(clippy::cast_precision_loss)]
        Strategy::LeastLoaded => rendezvous(key, live, |n| f64::from(n.weight.max(1)) / (1.0 + n.busy as f64)),
    }
}

/// Weighted rendezvous hashing: the node with the highest `-w / ln(u)`, `u` a
/// hash of the key and the node in (0, 1). Every node computes the same choice
/// from the same members, and each node gets keys in proportion to its weight.
fn rendezvous<'a>(key: u64, nodes: impl Iterator<Item = &'a Node>, weight: impl Fn(&Node) -> f64) -> Option<String> {
    nodes
        .map(|n| {
            let h = mix(key ^ fnv(n.node_id.as_bytes()));
            #[allow(clippy::cast_precision_loss)]
            let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            (-weight(n) / u.ln(), n)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n.node_id.clone())
}

/// splitmix64's finaliser: spreads ids over the hash space.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a: a name's bits, for [`mix`].
pub(super) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NodeState;
    use crate::time::Timestamp;

    fn node(id: &str, weight: u32, busy: u64, state: NodeState) -> Node {
        Node {
            scheduler: "s".to_owned(),
            node_id: id.to_owned(),
            host: "h".to_owned(),
            pid: 1,
            weight,
            state,
            incarnation: 1,
            registered_at: Timestamp::from_millis(0),
            heartbeat_at: Timestamp::from_millis(0),
            busy,
            handlers: Vec::new(),
            dead_after: None,
        }
    }

    fn shares(strategy: Strategy, members: &[Node]) -> crate::engine::fixed::HashMap<String, usize> {
        let mut out = crate::engine::fixed::HashMap::default();
        for id in 0..30_000 {
            *out.entry(preferred(strategy, id, members).unwrap_or_default())
                .or_default() += 1;
        }
        out
    }

    #[test]
    fn first_come_prefers_no_one() {
        let members = [node("a", 1, 0, NodeState::Live)];
        assert_eq!(preferred(Strategy::FirstCome, 1, &members), None);
    }

    #[test]
    fn every_strategy_prefers_only_live_nodes_and_the_same_one_each_time() {
        let members = [
            node("a", 1, 0, NodeState::Live),
            node("b", 1, 0, NodeState::Dead),
            node("c", 1, 0, NodeState::Live),
        ];
        for strategy in [Strategy::IdHash, Strategy::Weighted, Strategy::LeastLoaded] {
            for id in 0..1_000 {
                let chosen = preferred(strategy, id, &members).unwrap();
                assert_ne!(chosen, "b", "{strategy:?} chose a dead node");
                assert_eq!(preferred(strategy, id, &members).unwrap(), chosen);
            }
        }
    }

    #[test]
    fn weighted_shares_follow_the_weights() {
        let members = [
            node("light", 1, 0, NodeState::Live),
            node("heavy", 3, 0, NodeState::Live),
        ];
        let shares = shares(Strategy::Weighted, &members);
        let heavy = shares["heavy"];
        assert!((21_000..24_000).contains(&heavy), "heavy got {heavy} of 30,000");
    }

    #[test]
    fn least_loaded_offers_a_busy_node_less() {
        let members = [node("busy", 1, 9, NodeState::Live), node("idle", 1, 0, NodeState::Live)];
        let shares = shares(Strategy::LeastLoaded, &members);
        assert!(shares["idle"] > 8 * shares["busy"], "{shares:?}");
    }

    #[test]
    fn removing_a_node_moves_only_its_own_executes() {
        let three = [
            node("a", 1, 0, NodeState::Live),
            node("b", 1, 0, NodeState::Live),
            node("c", 1, 0, NodeState::Live),
        ];
        let two = [three[0].clone(), three[1].clone()];
        for id in 0..3_000 {
            let before = preferred(Strategy::Weighted, id, &three).unwrap();
            if before != "c" {
                assert_eq!(preferred(Strategy::Weighted, id, &two).unwrap(), before);
            }
        }
    }
}
