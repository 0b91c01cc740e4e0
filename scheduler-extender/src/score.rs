//! Node scores for a pod's GPU demand, 0 to [`MAX_SCORE`] (the extender API's maximum).
//!
//! - **Fit:** a node with fewer free GPUs than the pod asks for, or, when the claim asks for
//!   one NVLink island, without an island that has enough free, scores 0 (the scheduler's
//!   DRA plugin rejects it anyway; a 0 keeps the extender's view consistent).
//! - **Packing** (default, `Mode::Pack`): the fewer GPUs a node has left free after the
//!   placement, relative to its size, the higher, so that partly used nodes fill up and
//!   whole nodes stay free for pods that need all their GPUs. `Mode::Spread` inverts it.
//!   Worth up to 7 points.
//! - **Island fit:** up to 3 more points for a multi-GPU demand when one island has room
//!   for all of it, most when that island is the tightest fit (the placement breaks no
//!   bigger island).

use crate::demand::Demand;
use crate::state::NodeGpus;

/// The extender API's highest score (`MaxExtenderPriority`).
pub const MAX_SCORE: i64 = 10;
const PACK_POINTS: i64 = 7;
const ISLAND_POINTS: i64 = 3;

/// How free capacity is weighed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Fill partly used nodes first.
    #[default]
    Pack,
    /// Keep load even across nodes.
    Spread,
}

/// A placement mode that is neither `pack` nor `spread`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("placement mode {0:?}: pack or spread")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, UnknownMode> {
        match s {
            "pack" => Ok(Mode::Pack),
            "spread" => Ok(Mode::Spread),
            other => Err(UnknownMode(other.to_string())),
        }
    }
}

/// The score of `node` for `d` (`d.gpus` > 0).
pub fn score(node: &NodeGpus, d: &Demand, mode: Mode) -> i64 {
    let total = node.gpus.len();
    let free = node.free();
    if total == 0 || free < d.gpus {
        return 0;
    }
    let islands = node.free_by_island();
    // The tightest island that holds the whole island-bound demand, and how much room it has.
    let need = if d.one_island > 0 {
        d.one_island
    } else {
        d.gpus
    };
    let tightest = islands.values().copied().filter(|&n| n >= need).min();
    if d.one_island > 0 && tightest.is_none() {
        return 0;
    }
    let left = (free - d.gpus) as i64;
    let total = total as i64;
    let pack = match mode {
        Mode::Pack => PACK_POINTS * (total - left) / total,
        Mode::Spread => PACK_POINTS * left / total,
    };
    let island = match tightest {
        Some(room) if need >= 2 => {
            // Full points when the island fits exactly, fewer the more room is left over.
            let spare = (room - need) as i64;
            ISLAND_POINTS - (ISLAND_POINTS * spare / room as i64).min(ISLAND_POINTS - 1)
        }
        _ => 0,
    };
    (pack + island).clamp(0, MAX_SCORE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Gpu;

    fn node(islands: &[(&str, usize)], used: usize) -> NodeGpus {
        let mut gpus = Vec::new();
        for (island, n) in islands {
            for _ in 0..*n {
                gpus.push(Gpu {
                    name: format!("gpu-{}", gpus.len()),
                    island: (!island.is_empty()).then(|| island.to_string()),
                    used: false,
                });
            }
        }
        for g in gpus.iter_mut().take(used) {
            g.used = true;
        }
        NodeGpus { gpus }
    }

    fn want(gpus: usize, one_island: usize) -> Demand {
        Demand {
            gpus,
            one_island,
            unknown_claims: 0,
        }
    }

    #[test]
    fn packing_prefers_the_fullest_node_that_fits() {
        let empty = node(&[("a", 8)], 0);
        let half = node(&[("a", 8)], 4);
        let full = node(&[("a", 8)], 8);
        let d = want(1, 0);
        assert!(score(&half, &d, Mode::Pack) > score(&empty, &d, Mode::Pack));
        assert_eq!(score(&full, &d, Mode::Pack), 0);
        assert!(score(&half, &d, Mode::Spread) < score(&empty, &d, Mode::Spread));
    }

    #[test]
    fn a_node_without_room_scores_zero() {
        assert_eq!(score(&node(&[("a", 4)], 3), &want(2, 0), Mode::Pack), 0);
        assert_eq!(score(&NodeGpus::default(), &want(1, 0), Mode::Pack), 0);
    }

    #[test]
    fn island_demand_needs_one_island_with_room() {
        // Four free GPUs, but two on each island: no island holds three.
        let split = node(&[("a", 4), ("b", 4)], 0);
        let mut split_used = split.clone();
        for i in [0, 1, 4, 5] {
            split_used.gpus[i].used = true;
        }
        assert_eq!(score(&split_used, &want(3, 3), Mode::Pack), 0);
        assert!(score(&split, &want(3, 3), Mode::Pack) > 0);
    }

    #[test]
    fn a_tight_island_beats_breaking_a_big_one() {
        // Node x: an island of 2 free and one of 8; node y: only the island of 8.
        let x = node(&[("p", 2), ("q", 8)], 0);
        let y = node(&[("q", 8)], 0);
        let d = want(2, 0);
        let (sx, sy) = (score(&x, &d, Mode::Pack), score(&y, &d, Mode::Pack));
        assert!(sx <= MAX_SCORE && sy <= MAX_SCORE);
        // The island points say which island fits best; x has the exact fit.
        let island_x = sx - PACK_POINTS * (10 - 8) / 10;
        let island_y = sy - PACK_POINTS * (8 - 6) / 8;
        assert!(island_x > island_y, "{sx} {sy}");
    }

    #[test]
    fn gpus_without_islands_get_no_island_points() {
        let plain = node(&[("", 4)], 0);
        let linked = node(&[("a", 4)], 0);
        let d = want(2, 0);
        assert!(score(&linked, &d, Mode::Pack) > score(&plain, &d, Mode::Pack));
        assert_eq!(score(&plain, &want(2, 2), Mode::Pack), 0);
    }
}
