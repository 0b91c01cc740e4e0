//! A domain's slot N: its IMEX channel number in Single mode (every node of the domain uses
//! channel N, so that two domains on one node never share one) and its IMEX ports (two
//! domains' daemons on one node share the node's address, hostNetwork). Unique among the
//! live domains of a clique, below the fewest IMEX channels any node of the clique
//! publishes; kept while the domain lives (or until `policy` takes it from an empty domain
//! another waits behind). Pure functions of the controller's records.

use std::collections::{BTreeMap, BTreeSet};

use crate::clique::{self, NoClique, NodeChannels};
// Placement is the record's field; it is published here, where it was first.
pub use crate::record::Placement;
use crate::record::Record;

/// IMEX's default `SERVER_PORT`; slot N listens for peers at `SERVER_PORT_BASE + 10 N`.
pub const SERVER_PORT_BASE: u16 = 50000;
/// IMEX's default `IMEX_CMD_PORT`; slot N answers `nvidia-imex-ctl` at `CMD_PORT_BASE + 10 N`.
pub const CMD_PORT_BASE: u16 = 50005;
/// Slots whose ports fit in 16 bits: the last is (65535 - 50005) / 10.
pub const MAX_SLOTS: u32 = ((u16::MAX - CMD_PORT_BASE) / 10) as u32 + 1;

/// The IMEX ports of slot `n`: (`SERVER_PORT`, `IMEX_CMD_PORT`); `None` past [`MAX_SLOTS`].
pub fn ports(n: u32) -> Option<(u16, u16)> {
    let step = u16::try_from(n.checked_mul(10)?).ok()?;
    Some((
        SERVER_PORT_BASE.checked_add(step)?,
        CMD_PORT_BASE.checked_add(step)?,
    ))
}

/// How many slots each clique has: the fewest channels any of its nodes publishes (a
/// domain's channel N must exist on every node it may land on), at most [`MAX_SLOTS`].
pub fn bounds(nodes: &BTreeMap<String, NodeChannels>) -> BTreeMap<String, u32> {
    let mut b: BTreeMap<String, u32> = BTreeMap::new();
    for n in nodes.values() {
        let total = u32::try_from(n.total).unwrap_or(u32::MAX).min(MAX_SLOTS);
        b.entry(n.clique.clone())
            .and_modify(|t| *t = (*t).min(total))
            .or_insert(total);
    }
    b
}

/// The slots the domains hold, by clique, from the controller's records (by uid), leaving
/// out the domain `except`. A domain being deleted still holds its slot until its record
/// goes: its daemons may still run.
pub fn taken(records: &BTreeMap<String, Record>, except: &str) -> BTreeMap<String, BTreeSet<u32>> {
    let mut t: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for (uid, r) in records {
        if uid == except {
            continue;
        }
        if let Some(p) = &r.placement {
            t.entry(p.clique.clone()).or_default().insert(p.slot);
        }
    }
    t
}

/// The lowest slot of `clique` that no other domain holds.
pub fn free(
    clique: &str,
    bounds: &BTreeMap<String, u32>,
    taken: &BTreeMap<String, BTreeSet<u32>>,
) -> Option<u32> {
    let bound = bounds.get(clique).copied().unwrap_or(0);
    let held = taken.get(clique);
    (0..bound).find(|n| !held.is_some_and(|h| h.contains(n)))
}

/// Why a domain is not placed (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unplaced {
    /// No clique has the nodes.
    #[error(transparent)]
    NoClique(#[from] NoClique),
    /// The clique that has the nodes has no slot left: every channel number is another
    /// domain's.
    #[error(
        "clique {clique} has no free slot: its {slots} IMEX channel numbers are held by other \
         domains (a slot frees when its domain is deleted, or is taken from a domain that has \
         had no workload claim for a while)"
    )]
    NoSlot {
        /// The clique.
        clique: String,
        /// Its slots.
        slots: u32,
    },
    /// The domain's namespace holds as many slots as one namespace may.
    #[error(
        "namespace {namespace} holds {held} slots, the most one namespace may hold; \
         a slot frees when one of its domains is deleted or loses its slot"
    )]
    NamespaceFull {
        /// The namespace.
        namespace: String,
        /// The slots its domains hold.
        held: usize,
    },
}

/// The domain's placement: the one it has (a clique and slot kept in its status), else the
/// smallest clique with room and a free slot (as [`clique::choose`]), with its lowest free
/// slot. A domain that has a clique but no slot yet gets a slot there.
pub fn place(
    nodes: &BTreeMap<String, NodeChannels>,
    num_nodes: usize,
    current: (Option<&str>, Option<u32>),
    taken: &BTreeMap<String, BTreeSet<u32>>,
) -> Result<Placement, Unplaced> {
    let bounds = bounds(nodes);
    let no_slot = |clique: String| Unplaced::NoSlot {
        slots: bounds.get(&clique).copied().unwrap_or(0),
        clique,
    };
    match current {
        (Some(c), Some(slot)) if !c.is_empty() => {
            return Ok(Placement {
                clique: c.to_string(),
                slot,
            })
        }
        (Some(c), None) if !c.is_empty() => {
            return match free(c, &bounds, taken) {
                Some(slot) => Ok(Placement {
                    clique: c.to_string(),
                    slot,
                }),
                None => Err(no_slot(c.to_string())),
            };
        }
        _ => {}
    }
    // Only cliques with a free slot compete; when none of them fits, say whether slots
    // or nodes are what is missing.
    let open: BTreeMap<String, NodeChannels> = nodes
        .iter()
        .filter(|(_, n)| free(&n.clique, &bounds, taken).is_some())
        .map(|(k, n)| (k.clone(), n.clone()))
        .collect();
    match clique::choose(&open, num_nodes, None) {
        Ok(c) => {
            let slot = free(&c, &bounds, taken).ok_or_else(|| no_slot(c.clone()))?;
            Ok(Placement { clique: c, slot })
        }
        Err(_) => Err(match clique::choose(nodes, num_nodes, None) {
            Ok(c) => no_slot(c),
            Err(e) => Unplaced::NoClique(e),
        }),
    }
}

#[cfg(test)]
mod tests;
