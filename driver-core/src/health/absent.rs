//! Devices that prepared claims hold but the inventory no longer has (a device node or a
//! served entry that disappeared), written for graft-nri (`graft_record::absent`), which
//! refuses containers that would need them. The inventory itself drops them at the rescan,
//! so they are no longer published.

use std::collections::BTreeSet;
use std::path::Path;

use graft_record::absent::{read_absent, write_absent};
use graft_record::RecordStore;

use crate::error::Result;
use crate::model::Device;

/// Rewrites the list when it changed; the devices absent now.
pub fn refresh(state_dir: &Path, inventory: &[Device]) -> Result<BTreeSet<String>> {
    let store = RecordStore::open(state_dir)?;
    let present: BTreeSet<&str> = inventory.iter().map(|d| d.name.as_str()).collect();
    let mut absent = BTreeSet::new();
    for uid in store.claim_uids()? {
        let Some(rec) = store.get_claim(&uid)? else {
            continue;
        };
        for d in rec
            .devices
            .iter()
            .filter(|d| !present.contains(d.name.as_str()))
        {
            if absent.insert(d.name.clone()) {
                tracing::warn!(
                    device = d.name, claim = %rec.claim,
                    "a prepared device is gone from the node: containers that need it are refused"
                );
            }
        }
    }
    // An unreadable old list is simply replaced.
    if read_absent(state_dir).ok().as_ref() != Some(&absent) {
        write_absent(state_dir, &absent)?;
    }
    Ok(absent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;
    use graft_record::{ClaimRecord, ClaimRef, DeviceRecord};

    fn device(name: &str) -> Device {
        Device::new(name, Kind::Char)
    }

    #[test]
    fn held_devices_missing_from_the_inventory() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path()).unwrap();
        store
            .put_claim(&ClaimRecord {
                version: graft_record::FORMAT_VERSION,
                claim: ClaimRef {
                    uid: "u1".into(),
                    namespace: "default".into(),
                    name: "serial".into(),
                },
                devices: vec![DeviceRecord {
                    name: "serial-0".into(),
                    pool: "node".into(),
                    requests: vec!["dev".into()],
                    edits: Default::default(),
                }],
                env: Vec::new(),
                pods: vec![],
            })
            .unwrap();
        let both = [device("serial-0"), device("fuse")];
        assert!(refresh(dir.path(), &both).unwrap().is_empty());
        let gone = refresh(dir.path(), &both[1..]).unwrap();
        assert_eq!(gone, BTreeSet::from(["serial-0".to_string()]));
        assert_eq!(read_absent(dir.path()).unwrap(), gone);
        assert!(refresh(dir.path(), &both).unwrap().is_empty());
        assert!(read_absent(dir.path()).unwrap().is_empty());
    }
}
