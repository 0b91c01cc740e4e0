//! Opaque device configuration for graft, resolved per allocated device.
//!
//! ```yaml
//! config:
//! - requests: [dev]
//!   opaque:
//!     driver: graft.dev
//!     parameters:
//!       apiVersion: graft.dev/v1alpha1
//!       kind: DeviceConfig
//!       env: {FOO: bar}
//!       fileMode: 0o660 as a number (432)
//! ```
//!
//! Every entry of this driver that applies to a request is merged, key by key: the class's
//! entries first, then the claim's, each in its listed order, a later value replacing an
//! earlier one (`env` per variable, `fileMode`, `uid`, `gid` and each family's fields as
//! its family merges them: NVIDIA's `sharing` as a whole). Other drivers' entries are
//! skipped. An unknown kind, a field graft does not know, or an environment variable
//! outside the rules of `graft_record::env` (loader variables, `PATH`, the variables graft
//! owns) fails the claim with an error naming the entry and field.
//!
//! The fields and kinds a device family owns are parsed by that family, once per entry:
//! this module hands them to the families it is given ([`OpaqueFamilies`]) and imports no
//! family itself.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;
use serde::Deserialize;
use serde_json::{Map, Value};

use graft_record::env::check_user_env;

use crate::mapping::base_request;

pub mod families;

pub use families::{
    Applies, FamilyConfig, FamilyKindError, FamilyPart, OpaqueFamilies, OpaqueFamily, OptionalEdits,
};

/// The `apiVersion` of graft's opaque device configuration.
pub use graft_api::opaque::API_VERSION;
/// The `kind` of graft's opaque device configuration.
pub use graft_api::opaque::DEVICE_CONFIG_KIND as KIND;

/// The parameters graft understands: the generic ones, and the families' parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Extra environment for containers that get the device.
    pub env: BTreeMap<String, String>,
    /// Permission bits of the device node in the container.
    pub file_mode: Option<u32>,
    /// Owner of the device node in the container.
    pub uid: Option<u32>,
    /// Group of the device node in the container.
    pub gid: Option<u32>,
    /// The fields the device families own (NVIDIA's `sharing` and `driverCapabilities`).
    pub family: FamilyConfig,
}

/// The generic fields as written; the fields left over go to the families.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Params {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(default)]
    env: BTreeMap<String, String>,
    file_mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// The generic fields, as users spell them.
const FIELDS: &[&str] = &["apiVersion", "kind", "env", "fileMode", "uid", "gid"];

impl DeviceConfig {
    /// The generic fields as written, and the families' parts parsed by `families`.
    fn from_params(p: Params, families: &OpaqueFamilies) -> Result<Self, serde_json::Error> {
        let mut rest = p.rest;
        let known = |k: &str| families.fields().any(|f| f == k);
        // A field nobody knows is named first, with every field's name, as serde names it.
        if let Some(k) = rest.keys().find(|k| !known(k)) {
            let all: Vec<String> = FIELDS
                .iter()
                .copied()
                .chain(families.fields())
                .map(|f| format!("`{f}`"))
                .collect();
            return Err(serde::de::Error::custom(format_args!(
                "unknown field `{k}`, expected one of {}",
                all.join(", ")
            )));
        }
        Ok(DeviceConfig {
            env: p.env,
            file_mode: p.file_mode,
            uid: p.uid,
            gid: p.gid,
            family: families.take(&mut rest)?,
        })
    }
}

#[derive(Deserialize)]
struct TypeMeta {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

/// A configuration entry that cannot be used, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {reason}")]
pub struct ConfigError {
    /// The field, e.g. `status.allocation.devices.config[1].opaque.parameters.env`.
    pub at: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Entry `index` of the allocation's configuration, its parameters `params` read with the
/// families' parts of `families`.
pub fn decode(
    index: usize,
    params: &serde_json::Value,
    families: &OpaqueFamilies,
) -> Result<DeviceConfig, ConfigError> {
    let at = format!("status.allocation.devices.config[{index}].opaque.parameters");
    let err = |at: String, reason: String| ConfigError { at, reason };
    // Read from the borrowed value: no copy of the parameters per entry.
    let meta = TypeMeta::deserialize(params).map_err(|e| err(at.clone(), e.to_string()))?;
    let family_kind = families.kinds().any(|k| k == meta.kind);
    if meta.api_version != API_VERSION || (meta.kind != KIND && !family_kind) {
        let kinds: Vec<&str> = std::iter::once(KIND).chain(families.kinds()).collect();
        return Err(err(
            at,
            format!(
                "unknown kind {:?} of apiVersion {:?} (graft knows {} of {API_VERSION})",
                meta.kind,
                meta.api_version,
                kinds.join(", ")
            ),
        ));
    }
    if family_kind {
        return families
            .of_kind(&meta.kind, params)
            .map(|family| DeviceConfig {
                family,
                ..Default::default()
            })
            .map_err(|reason| err(at, reason.to_string()));
    }
    let cfg = Params::deserialize(params)
        .and_then(|p| DeviceConfig::from_params(p, families))
        .map_err(|e| err(at.clone(), e.to_string()))?;
    if let Some(m) = cfg.file_mode {
        if m > 0o777 {
            return Err(err(
                format!("{at}.fileMode"),
                format!("{m:#o} is not a permission mode"),
            ));
        }
    }
    for (k, v) in &cfg.env {
        check_user_env(&format!("{at}.env[{k:?}]"), k, v).map_err(|e| err(e.field, e.reason))?;
    }
    Ok(cfg)
}

impl DeviceConfig {
    /// `later` on top of `self`, key by key.
    fn merge(&mut self, later: DeviceConfig) {
        self.env.extend(later.env);
        if later.file_mode.is_some() {
            self.file_mode = later.file_mode;
        }
        if later.uid.is_some() {
            self.uid = later.uid;
        }
        if later.gid.is_some() {
            self.gid = later.gid;
        }
        self.family.merge(later.family);
    }
}

/// The configuration that applies to devices allocated for `request` (its full name,
/// subrequest included): every applicable entry of this driver merged, class entries
/// first, the families' parts read by `families`. `None` when no entry of this driver names
/// it.
pub fn resolve(
    driver: &str,
    configs: &[DeviceAllocationConfiguration],
    request: &str,
    families: &OpaqueFamilies,
) -> Result<Option<DeviceConfig>, ConfigError> {
    // Class before claim; a stable sort keeps the order within each source.
    let mut ordered: Vec<(usize, &DeviceAllocationConfiguration)> =
        configs.iter().enumerate().collect();
    ordered.sort_by_key(|(_, c)| c.source != "FromClass");
    let mut merged: Option<DeviceConfig> = None;
    for (i, c) in ordered {
        let Some(opaque) = &c.opaque else { continue };
        if opaque.driver != driver {
            continue;
        }
        let applies = c.requests.as_deref().is_none_or(|reqs| {
            reqs.is_empty()
                || reqs
                    .iter()
                    .any(|r| r == request || r == base_request(request))
        });
        if applies {
            let cfg = decode(i, &opaque.parameters.0, families)?;
            match &mut merged {
                Some(m) => m.merge(cfg),
                None => merged = Some(cfg),
            }
        }
    }
    Ok(merged)
}
