//! One term of leadership: what its reconciles share besides the [`Context`] (the caches
//! started for it, and the records loaded when it began).

use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;
use std::sync::Arc;

use crate::cache::Caches;
use crate::context::Context;
use crate::crd::ComputeDomainStatus;
use crate::record::Record;

/// One term of leadership: its caches and the domains' records, shared by its reconciles.
pub(crate) struct Term {
    ctx: Arc<Context>,
    pub(crate) caches: Caches,
    /// The records by domain uid, as last written. Held for the whole of a reconcile, so
    /// that two domains cannot take one slot, and a slot is not taken from a domain while
    /// its objects are written.
    pub(crate) records: tokio::sync::Mutex<BTreeMap<String, Record>>,
    /// The status last written for each domain, by uid.
    pub(crate) reported: std::sync::Mutex<HashMap<String, ComputeDomainStatus>>,
    /// The DaemonSet last written for each domain, by the domain's uid.
    pub(crate) written: std::sync::Mutex<HashMap<String, Written>>,
}

/// A DaemonSet as the controller wrote it: a digest of what it applied, and the uid and
/// generation the API server gave back. While the cached DaemonSet still has both, applying
/// the same again would change nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) digest: u64,
    pub(crate) uid: Option<String>,
    pub(crate) generation: Option<i64>,
}

impl Deref for Term {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.ctx
    }
}

impl Term {
    /// The term of `ctx`'s controller over `caches`, with the records it loaded.
    pub(crate) fn new(
        ctx: Arc<Context>,
        caches: Caches,
        records: BTreeMap<String, Record>,
    ) -> Self {
        Term {
            ctx,
            caches,
            records: tokio::sync::Mutex::new(records),
            reported: Default::default(),
            written: Default::default(),
        }
    }
}
