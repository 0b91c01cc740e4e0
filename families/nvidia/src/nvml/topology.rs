//! NVLink islands: the groups of GPUs that NVLink joins within the node, so that a claim for
//! several GPUs can ask for one group (`matchAttribute` on `nvlinkIsland`).
//!
//! NVML answers per pair (`nvmlDeviceGetP2PStatus` with the NVLink index); an island is a
//! connected part of that graph, so GPUs joined through NVSwitch (every pair OK) and pairs
//! joined by a bridge both come out right. A pair NVML cannot answer for (a lost GPU, a
//! GPU in MIG mode, which has no GPU-to-GPU P2P) counts as not joined; a GPU joined to no
//! other has no island.

use nvml_wrapper::enum_wrappers::device::{P2pCapabilitiesIndex, P2pStatus};
use nvml_wrapper::Device as NvmlDevice;

/// A GPU's NVLink island.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Island {
    /// The PCI address (sysfs form) of the island's first GPU in PCI order: the same for
    /// every GPU of the island, and stable while the wiring is.
    pub id: String,
    /// How many GPUs the island has, the GPU itself included.
    pub size: u32,
}

/// Each GPU's island, by position in `bus_ids`, given which pairs (positions, first < second)
/// NVLink joins.
pub fn islands(bus_ids: &[String], joined: &[(usize, usize)]) -> Vec<Option<Island>> {
    // Union-find by lowest position: a GPU's root is the first GPU of its island.
    let mut parent: Vec<usize> = (0..bus_ids.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for &(a, b) in joined {
        if a >= bus_ids.len() || b >= bus_ids.len() {
            continue;
        }
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        parent[ra.max(rb)] = ra.min(rb);
    }
    let roots: Vec<usize> = (0..bus_ids.len()).map(|i| root(&mut parent, i)).collect();
    let size = |r: usize| roots.iter().filter(|&&x| x == r).count() as u32;
    roots
        .iter()
        .map(|&r| {
            // The first GPU in PCI order, whatever order NVML gave them in.
            let first = (0..bus_ids.len())
                .filter(|&i| roots[i] == r)
                .min_by(|&a, &b| bus_ids[a].cmp(&bus_ids[b]))
                .unwrap_or(r);
            (size(r) > 1).then(|| Island {
                id: bus_ids[first].clone(),
                size: size(r),
            })
        })
        .collect()
}

/// The order to publish GPUs in, as positions into `islands` (each GPU's island, in NVML
/// index order): each island's GPUs together, where its first GPU stands, the rest in
/// index order. kube-scheduler's allocator takes the first devices that fit, in slice
/// order, so a request for several GPUs without a `matchAttribute` (a pod's
/// `nvidia.com/gpu: 2`) gets one island's GPUs while the first island with a free GPU has
/// room for all of them (docs/placement.md).
pub fn island_order(islands: &[Option<&Island>]) -> Vec<usize> {
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, island) in islands.iter().enumerate() {
        if let Some(x) = island {
            first.entry(x.id.as_str()).or_insert(i);
        }
    }
    let mut order: Vec<usize> = (0..islands.len()).collect();
    order.sort_by_key(|&i| (islands[i].map_or(i, |x| first[x.id.as_str()]), i));
    order
}

/// The pairs of `devices` (positions) that NVML says NVLink joins.
pub fn joined_pairs(devices: &[&NvmlDevice<'_>]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for a in 0..devices.len() {
        for b in a + 1..devices.len() {
            match devices[a].p2p_status(devices[b], P2pCapabilitiesIndex::NvLink) {
                Ok(P2pStatus::Ok) => pairs.push((a, b)),
                Ok(_) => {}
                // Logged once per pair and scan; the pair is left unjoined.
                Err(e) => {
                    tracing::debug!(a, b, error = %e, "NVML cannot tell whether NVLink joins these GPUs")
                }
            }
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("0000:{:02x}:00.0", 0x18 + i))
            .collect()
    }

    #[test]
    fn pairs_and_a_switch_make_islands_named_by_their_first_gpu() {
        let bus = ids(8);
        // 0-2 and 1-3 bridged; 4..7 through a switch (every pair); nothing else.
        let mut joined = vec![(0, 2), (1, 3)];
        for a in 4..8 {
            for b in a + 1..8 {
                joined.push((a, b));
            }
        }
        let got = islands(&bus, &joined);
        let id = |i: usize| got[i].as_ref().map(|x| (x.id.clone(), x.size));
        assert_eq!(id(0), Some((bus[0].clone(), 2)));
        assert_eq!(id(2), Some((bus[0].clone(), 2)));
        assert_eq!(id(1), Some((bus[1].clone(), 2)));
        assert_eq!(id(3), Some((bus[1].clone(), 2)));
        for i in 4..8 {
            assert_eq!(id(i), Some((bus[4].clone(), 4)));
        }
    }

    #[test]
    fn an_islands_gpus_are_published_together_where_its_first_stands() {
        let bus = ids(9);
        let got = islands(&bus, &[(0, 2), (1, 3), (4, 5), (6, 8)]);
        let refs: Vec<Option<&Island>> = got.iter().map(Option::as_ref).collect();
        assert_eq!(island_order(&refs), vec![0, 2, 1, 3, 4, 5, 6, 8, 7]);
        let none: Vec<Option<&Island>> = vec![None; 3];
        assert_eq!(island_order(&none), vec![0, 1, 2]);
    }

    #[test]
    fn a_chain_is_one_island_and_a_lone_gpu_has_none() {
        let bus = ids(4);
        let got = islands(&bus, &[(0, 1), (1, 2)]);
        assert!(got[..3]
            .iter()
            .all(|x| x.as_ref().map(|x| x.size) == Some(3)));
        assert_eq!(got[3], None);
        assert!(islands(&bus, &[]).iter().all(Option::is_none));
    }

    #[test]
    fn the_name_is_the_lowest_pci_address_whatever_the_order() {
        let bus = vec!["0000:9a:00.0".to_string(), "0000:18:00.0".to_string()];
        let got = islands(&bus, &[(0, 1)]);
        assert_eq!(got[0].as_ref().map(|x| x.id.as_str()), Some("0000:18:00.0"));
        assert_eq!(got[0], got[1]);
        // Positions NVML never had are ignored, not a panic.
        assert!(islands(&bus, &[(0, 5)]).iter().all(Option::is_none));
    }
}
