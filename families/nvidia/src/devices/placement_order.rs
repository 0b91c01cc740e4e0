//! The order of a dynamic-MIG GPU's placements in the ResourceSlice, which is the order the
//! scheduler tries them in: it takes the first device that matches a request and whose
//! counters are free (docs/placement.md, from the allocator's source). So the placement
//! that spoils least for bigger instances must come first.
//!
//! Rule: a profile's placements go by how many placements of profiles with more memory
//! slices they overlap, fewest first; between equals, the higher start first, so that
//! small instances fill the GPU from its end, away from the one place the biggest
//! profiles have (start 0). On an H100 80GB that puts `1g.10gb` at 6, then 5, 4, ..., 0;
//! `2g.20gb` at 4, 2, 0; `3g.40gb` at 4, then 0: after a 1g and a 2g instance a 4g still
//! fits at 0-3, where placements in NVML's order (start 0 first) would have taken it.

use crate::nvml::{GiProfile, MigLayout};

/// Which order placements are published in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PlacementOrder {
    /// The rule above.
    #[default]
    SpareLarge,
    /// NVML's order (start 0 first): what graft published before, kept for side-by-side
    /// benchmarks (`integration/benches/placement.rs`).
    Nvml,
}

/// `p`'s placements `(start, size)` in publishing order.
pub fn ordered(layout: &MigLayout, p: &GiProfile, order: PlacementOrder) -> Vec<(u32, u32)> {
    if order == PlacementOrder::Nvml {
        return p.placements.clone();
    }
    let bigger: Vec<(u32, u32)> = layout
        .profiles
        .iter()
        .flat_map(|q| q.placements.iter().copied())
        .collect();
    let blocks = |&(start, size): &(u32, u32)| {
        bigger
            .iter()
            .filter(|&&(s, n)| n > size && s < start + size && start < s + n)
            .count()
    };
    let mut out = p.placements.clone();
    out.sort_by_key(|pl| (blocks(pl), std::cmp::Reverse(pl.0)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(id: u32, name: &str, placements: &[(u32, u32)]) -> GiProfile {
        GiProfile {
            id,
            name: name.into(),
            slices: placements.first().map_or(0, |p| p.1),
            instance_count: placements.len() as u32,
            multiprocessors: 0,
            copy_engines: 0,
            decoders: 0,
            encoders: 0,
            jpeg_engines: 0,
            ofa_engines: 0,
            memory_mib: 0,
            placements: placements.to_vec(),
        }
    }

    /// The H100 80GB's profiles and placements as NVML lists them (the fake's, from
    /// NVIDIA's MIG user guide).
    fn h100() -> MigLayout {
        let each =
            |size: u32, starts: &[u32]| starts.iter().map(|&s| (s, size)).collect::<Vec<_>>();
        MigLayout {
            profiles: vec![
                profile(0, "1g.10gb", &each(1, &[0, 1, 2, 3, 4, 5, 6])),
                profile(7, "1g.10gb+me", &each(1, &[0, 1, 2, 3, 4, 5, 6])),
                profile(9, "1g.20gb", &each(2, &[0, 2, 4, 6])),
                profile(1, "2g.20gb", &each(2, &[0, 2, 4])),
                profile(2, "3g.40gb", &each(4, &[0, 4])),
                profile(3, "4g.40gb", &each(4, &[0])),
                profile(4, "7g.80gb", &each(8, &[0])),
            ],
            instances: vec![],
        }
    }

    fn starts(layout: &MigLayout, name: &str) -> Vec<u32> {
        let p = layout.profiles.iter().find(|p| p.name == name).unwrap();
        ordered(layout, p, PlacementOrder::SpareLarge)
            .into_iter()
            .map(|p| p.0)
            .collect()
    }

    #[test]
    fn small_instances_fill_the_gpu_from_its_end() {
        let l = h100();
        assert_eq!(starts(&l, "1g.10gb"), [6, 5, 4, 3, 2, 1, 0]);
        assert_eq!(starts(&l, "1g.20gb"), [6, 4, 2, 0]);
        assert_eq!(starts(&l, "2g.20gb"), [4, 2, 0]);
        assert_eq!(starts(&l, "3g.40gb"), [4, 0]);
        assert_eq!(starts(&l, "4g.40gb"), [0]);
        assert_eq!(starts(&l, "7g.80gb"), [0]);
        let p = &l.profiles[0];
        assert_eq!(ordered(&l, p, PlacementOrder::Nvml), p.placements);
    }

    /// First-fit over the published order, as the scheduler does: a 1g then a 2g instance
    /// leave the 4g placement free.
    #[test]
    fn first_fit_over_this_order_keeps_a_4g_slot() {
        let l = h100();
        let mut used = [false; 8];
        let mut place = |name: &str| {
            let p = l.profiles.iter().find(|p| p.name == name).unwrap();
            let at = ordered(&l, p, PlacementOrder::SpareLarge)
                .into_iter()
                .find(|&(s, n)| (s..s + n).all(|i| !used[i as usize]));
            if let Some((s, n)) = at {
                (s..s + n).for_each(|i| used[i as usize] = true);
            }
            at
        };
        assert_eq!(place("1g.10gb"), Some((6, 1)));
        assert_eq!(place("2g.20gb"), Some((4, 2)));
        assert_eq!(place("4g.40gb"), Some((0, 4)));
    }
}
