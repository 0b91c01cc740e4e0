//! The MIG instances graft made (dynamic MIG): kept by the setup that makes them, read by
//! the scan, which offers only placements no other instance overlaps. Seeded from the
//! checkpoint at start.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

/// `(profile id, placement start)` of each GPU instance graft made on one GPU.
pub type Placements = BTreeSet<(u32, u32)>;

/// The GPU instances graft made, by parent GPU UUID.
#[derive(Debug, Clone, Default)]
pub struct MigLedger(Arc<RwLock<BTreeMap<String, Placements>>>);

impl MigLedger {
    /// Records an instance graft made (or is about to make) on GPU `gpu`.
    pub fn insert(&self, gpu: &str, profile: u32, start: u32) {
        if let Ok(mut m) = self.0.write() {
            m.entry(gpu.to_string())
                .or_default()
                .insert((profile, start));
        }
    }

    /// Forgets an instance graft removed.
    pub fn remove(&self, gpu: &str, profile: u32, start: u32) {
        if let Ok(mut m) = self.0.write() {
            if let Some(s) = m.get_mut(gpu) {
                s.remove(&(profile, start));
            }
        }
    }

    /// The placements graft holds on GPU `gpu`.
    pub fn owned(&self, gpu: &str) -> Placements {
        self.0
            .read()
            .ok()
            .and_then(|m| m.get(gpu).cloned())
            .unwrap_or_default()
    }

    /// The checkpoint's MIG instances (`(gpu uuid, profile id, placement start)`), at
    /// start.
    pub fn seed<'a>(&self, instances: impl IntoIterator<Item = (&'a str, u32, u32)>) {
        for (gpu, profile, start) in instances {
            self.insert(gpu, profile, start);
        }
    }
}
