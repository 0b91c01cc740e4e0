//! The driver's shared vocabulary, as plain data: the devices a node offers and the
//! allocations the core prepares. It imports nothing from the rest of the driver, so every
//! module (discovery backends, the core, setups, health, metrics) can use it without
//! reaching into another's insides.

use std::collections::BTreeMap;

use graft_record::ContainerEdits;

/// Standard attribute for the PCIe root complex a device hangs off.
pub use graft_api::attributes::PCIE_ROOT as PCIE_ROOT_ATTRIBUTE;

/// A ResourceSlice device attribute value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attribute {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A string.
    String(String),
    /// A semantic version (semver 2.0.0).
    Version(String),
}

/// What role a device plays: what the core and its family's setups do with it. (The `type`
/// attribute says what it is to DeviceClass selectors; code asks this instead.) Each family
/// maps its own devices onto these roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A plain device node, with no setup or configuration of its own: the char
    /// backend's list, a render node.
    Char,
    /// A whole accelerator: the claim's configuration may add its optional edits, it may be
    /// shared between claims, and it may be split into [`Kind::Partition`]s.
    Whole,
    /// A partition of an accelerator, pre-made or made for the claim at prepare: optional
    /// edits apply as to a whole one.
    Partition,
    /// A channel between the nodes of a domain, handed out per claim once the domain lets
    /// the claim in.
    Channel,
    /// A node's place for one domain's daemon: no device node, it holds the node for the
    /// daemon's pod, one domain at a time.
    DomainSlot,
    /// A PCI function handed whole to a virtual machine: it is taken from the host's driver
    /// at prepare and given back at unprepare.
    Passthrough,
    /// An entry of a served directory (the files backend), of this type.
    Entry(graft_record::nofollow::EntryType),
}

impl Kind {
    /// A whole accelerator or a partition of one: what a claim's optional edits and
    /// sharing settings apply to.
    pub fn is_accelerator(self) -> bool {
        matches!(self, Kind::Whole | Kind::Partition)
    }
}

/// One device this node offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// DNS label, unique in the node's pool.
    pub name: String,
    /// What setups and configuration apply to it.
    pub kind: Kind,
    /// Its ResourceSlice attributes, by name.
    pub attributes: BTreeMap<String, Attribute>,
    /// Capacity name to Kubernetes quantity.
    pub capacity: BTreeMap<String, String>,
    /// What a container that is allocated this device receives.
    pub edits: ContainerEdits,
    /// Edits added only when the claim's configuration asks for them by name (a family's
    /// driver capabilities beyond those every container gets).
    pub optional_edits: BTreeMap<String, ContainerEdits>,
    /// Counters it takes from a counter set of the pool while allocated (a partitionable
    /// device: a partition made at prepare); `None` for devices that stand alone.
    pub consumes: Option<Consumption>,
    /// Set when several claims may be allocated the device at once, each consuming part of
    /// its capacity (DRA consumable capacity: an accelerator shared between processes): how
    /// much of each capacity a request may take.
    pub shared: Option<BTreeMap<String, CapacityPolicy>>,
    /// Set when the scheduler must wait, before it binds a pod allocated this device, until
    /// someone (a family's controller) reports the device ready on the claim's status (DRA
    /// binding conditions).
    pub binding: Option<Binding>,
}

/// A device's DRA binding conditions (condition types on the claim's device status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The pod is bound once every one of these is True.
    pub ready: Vec<String>,
    /// Any of these True undoes the allocation: the pod is scheduled again.
    pub failed: Vec<String>,
}

/// How a request consumes one capacity of a shared device (quantities as the API writes
/// them): `default` when the request names none, otherwise rounded up to `min + n * step`
/// and at most `max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityPolicy {
    /// The quantity when the request names none.
    pub default: String,
    /// The least a request may take.
    pub min: String,
    /// The most a request may take.
    pub max: String,
    /// The granularity above `min`.
    pub step: String,
}

/// A partitionable device's use of a shared counter set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumption {
    /// The counter set: a DNS label, unique in the pool.
    pub set: String,
    /// What the set holds in all; the same on every device that names the set.
    pub totals: BTreeMap<String, i64>,
    /// What this device takes from it.
    pub counters: BTreeMap<String, i64>,
}

impl Device {
    /// A device with nothing but its name and kind yet.
    pub fn new(name: impl Into<String>, kind: Kind) -> Self {
        Device {
            name: name.into(),
            kind,
            attributes: BTreeMap::new(),
            capacity: BTreeMap::new(),
            edits: ContainerEdits::default(),
            optional_edits: BTreeMap::new(),
            consumes: None,
            shared: None,
            binding: None,
        }
    }

    /// A string attribute's value.
    pub fn string_attribute(&self, key: &str) -> Option<&str> {
        match self.attributes.get(key) {
            Some(Attribute::String(s)) => Some(s),
            _ => None,
        }
    }

    /// An integer attribute's value.
    pub fn int_attribute(&self, key: &str) -> Option<i64> {
        match self.attributes.get(key) {
            Some(Attribute::Int(i)) => Some(*i),
            _ => None,
        }
    }
}

/// A claim as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimId {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's UID.
    pub uid: String,
    /// The claim's name.
    pub name: String,
}

impl std::fmt::Display for ClaimId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One allocation result of this driver.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Allocated {
    /// The request's full name (`main/sub` for a subrequest).
    pub request: String,
    /// The pool allocated from.
    pub pool: String,
    /// The device allocated.
    pub device: String,
    /// The share of a shared device, as the scheduler allocated it; `None` for a whole device.
    pub share_id: Option<String>,
    /// DRA admin access: the device is given even while other claims hold it.
    pub admin_access: bool,
    /// Of a shared device (consumable capacity): what the allocation takes of each of its
    /// capacities, as the scheduler rounded it (Kubernetes quantities).
    pub consumed: BTreeMap<String, String>,
}

/// Which devices the families keep out of the ResourceSlices for now, by family: NVIDIA's
/// GPUs while its device plugin advertises them on the Node. The publisher publishes a
/// device only when no family holds it back; a family changes only its own hold.
#[derive(Clone, Default)]
pub struct Holds(BTreeMap<&'static str, fn(&Device) -> bool>);

impl Holds {
    /// `family` holds back the devices `which` picks; false when it already did.
    pub fn hold(&mut self, family: &'static str, which: fn(&Device) -> bool) -> bool {
        self.0.insert(family, which).is_none()
    }

    /// `family` holds nothing back any more; false when it held nothing.
    pub fn release(&mut self, family: &'static str) -> bool {
        self.0.remove(family).is_some()
    }

    /// Whether `device` may be published: no family holds it back.
    pub fn publishes(&self, device: &Device) -> bool {
        self.0.values().all(|which| !which(device))
    }
}

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// A taint a family puts on one of its devices, beside health's: NVIDIA's MPS tenant
/// (`<driver>/mps-tenant=<namespace>`), which keeps other namespaces' claims off a GPU
/// one namespace shares. Its effect is always `NoSchedule`: the scheduler allocates the
/// device only to claims that tolerate it, and running pods stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyTaint {
    /// The key, below the driver's name (`mps-tenant` is published as
    /// `<driver>/mps-tenant`).
    pub key: &'static str,
    /// The value (a label value: at most 63 characters).
    pub value: String,
    /// Since when: published as `timeAdded`, so that an unchanged taint writes nothing.
    pub since: std::time::SystemTime,
}

/// The taints each family puts on its devices, by family and device name. A family
/// changes only its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FamilyTaints(BTreeMap<&'static str, BTreeMap<String, Vec<FamilyTaint>>>);

impl FamilyTaints {
    /// `family`'s taints are now `taints` (by device name); false when nothing changed.
    pub fn set(
        &mut self,
        family: &'static str,
        taints: BTreeMap<String, Vec<FamilyTaint>>,
    ) -> bool {
        let old = if taints.is_empty() {
            self.0.remove(family)
        } else {
            self.0.insert(family, taints.clone())
        };
        old.unwrap_or_default() != taints
    }

    /// Every family's taints of `device`.
    pub fn of<'a>(&'a self, device: &'a str) -> impl Iterator<Item = &'a FamilyTaint> {
        self.0.values().filter_map(move |m| m.get(device)).flatten()
    }
}
