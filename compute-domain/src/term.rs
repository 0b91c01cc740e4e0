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
        }
    }
}
