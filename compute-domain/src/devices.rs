//! graft's devices on a node as the controller keeps them, one record per ResourceSlice:
//! each device's name and what it is to placement (a GPU, a part of one, an IMEX channel of
//! a clique), nothing else. `clique::node_channels` reads these.
//!
//! Why not a trimmed ResourceSlice: a device's attributes are a map, and even trimmed to four
//! keys its node costs about 1.3 KiB, so a slice of an NVL72 tray (12 devices) cost about
//! 16 KiB (the fleet benchmark's heap profile at 5,000 nodes: 3.6 MB in 1,242 allocations,
//! one per channel node). Here a device costs its name and a few bytes.

use std::borrow::Cow;

use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use kube::runtime::reflector::Lookup;

use graft_api::attributes::{qualified, CLIQUE_ID, PARENT_UUID, TYPE, UUID};
use graft_api::types::{GPU as GPU_TYPE, IMEX_CHANNEL as CHANNEL_TYPE};
use graft_api::DRIVER;

/// What a device is to placement; the index is into its record's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A whole GPU: [`SliceDevices::gpus`]`[i]` is its UUID.
    Gpu(u32),
    /// A MIG device or share of the GPU with that UUID.
    Part(u32),
    /// An IMEX channel of the clique [`SliceDevices::cliques`]`[i]`.
    Channel(u32),
}

/// One of graft's ResourceSlices, as placement reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceDevices {
    /// The slice's name (the cache's key), resource version and UID.
    pub name: String,
    /// Its resource version.
    pub resource_version: Option<String>,
    /// Its UID.
    pub uid: Option<String>,
    /// The node it publishes for (`spec.nodeName`).
    pub node: Option<Box<str>>,
    /// Its pool (allocations name a device by pool and name).
    pub pool: Box<str>,
    /// GPU UUIDs the devices name, each once.
    pub gpus: Vec<Box<str>>,
    /// Cliques the channels name, each once.
    pub cliques: Vec<Box<str>>,
    /// Its devices that are GPUs, parts of GPUs or channels with a clique, in the slice's
    /// order; none when no device of the slice is in a clique ([`SliceDevices::of`]).
    pub devices: Vec<(Box<str>, Role)>,
}

/// An attribute by its name as a slice may spell it: bare (the driver's own domain) or
/// qualified with the driver's name.
pub(crate) fn string_attribute<'a>(device: &'a Device, name: &str) -> Option<&'a str> {
    let attrs = device.attributes.as_ref()?;
    attrs
        .get(name)
        .or_else(|| attrs.get(&qualified(name)))
        .and_then(|a| a.string.as_deref())
}

/// `s`'s index in `table`, added if new.
fn index(table: &mut Vec<Box<str>>, s: &str) -> u32 {
    let i = table.iter().position(|t| &**t == s).unwrap_or_else(|| {
        table.push(s.into());
        table.len() - 1
    });
    u32::try_from(i).unwrap_or(u32::MAX)
}

impl SliceDevices {
    /// The record of `s`. Only a slice of graft's with a device in an NVLink clique (an
    /// IMEX channel, or a GPU or part of one in a fabric clique: graft-driver gives them the
    /// clique's `cliqueID`) keeps devices: a node's GPUs count only on nodes with channels,
    /// and most of a fleet is in no clique. Not only channels: a node's devices may span
    /// slices (graft-driver cuts a pool into slices of 128 devices, or 64 with counters),
    /// and its GPUs and channels may be in different ones.
    pub fn of(s: &ResourceSlice) -> SliceDevices {
        let mut r = SliceDevices {
            name: s.metadata.name.clone().unwrap_or_default(),
            resource_version: s.metadata.resource_version.clone(),
            uid: s.metadata.uid.clone(),
            node: s.spec.node_name.as_deref().map(Into::into),
            pool: s.spec.pool.name.as_str().into(),
            ..Default::default()
        };
        let devices = s.spec.devices.as_deref().unwrap_or_default();
        let in_clique = devices
            .iter()
            .any(|d| string_attribute(d, CLIQUE_ID).is_some_and(|c| !c.is_empty()));
        if s.spec.driver != DRIVER || !in_clique {
            return r;
        }
        for d in devices {
            let kind = string_attribute(d, TYPE);
            let role = if let Some(parent) = string_attribute(d, PARENT_UUID) {
                Role::Part(index(&mut r.gpus, parent))
            } else if kind == Some(GPU_TYPE) {
                match string_attribute(d, UUID) {
                    Some(uuid) => Role::Gpu(index(&mut r.gpus, uuid)),
                    None => continue,
                }
            } else if kind == Some(CHANNEL_TYPE) {
                match string_attribute(d, CLIQUE_ID).filter(|c| !c.is_empty()) {
                    Some(clique) => Role::Channel(index(&mut r.cliques, clique)),
                    None => continue,
                }
            } else {
                continue;
            };
            r.devices.push((d.name.as_str().into(), role));
        }
        r.devices.shrink_to_fit();
        r.gpus.shrink_to_fit();
        r.cliques.shrink_to_fit();
        r
    }

    /// Whether the cache keeps it: it has devices (of a clique's node).
    pub fn kept(&self) -> bool {
        !self.devices.is_empty()
    }

    /// The GPU UUID at `i`.
    pub fn gpu(&self, i: u32) -> &str {
        self.gpus.get(i as usize).map_or("", |g| g)
    }

    /// The clique at `i`.
    pub fn clique(&self, i: u32) -> &str {
        self.cliques.get(i as usize).map_or("", |c| c)
    }
}

/// So that a kube-runtime reflector stores the records as it would the slices.
impl Lookup for SliceDevices {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        "ResourceSlice".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "resource.k8s.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "resourceslices".into()
    }
    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }
    fn namespace(&self) -> Option<Cow<'_, str>> {
        None
    }
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.resource_version.as_deref().map(Cow::Borrowed)
    }
    fn uid(&self) -> Option<Cow<'_, str>> {
        self.uid.as_deref().map(Cow::Borrowed)
    }
}

/// The records of `slices`, for tests.
#[cfg(test)]
pub fn records<'a>(slices: impl IntoIterator<Item = &'a ResourceSlice>) -> Vec<SliceDevices> {
    slices.into_iter().map(SliceDevices::of).collect()
}

#[cfg(test)]
mod tests;
