//! The controller's metrics (`graft_compute_domain_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A domain, as metric labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DomainLabels {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// How a reconcile ended.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `ok` or `error`.
    pub result: String,
}

/// The controller's metrics.
#[derive(Clone, Default)]
pub struct Metrics {
    /// Reconciles, by result.
    pub reconciles: Family<ResultLabels, Counter>,
    /// Ready nodes per domain.
    pub ready_nodes: Family<DomainLabels, Gauge>,
    /// 1 for a Ready domain, 0 otherwise.
    pub ready: Family<DomainLabels, Gauge>,
    /// Reconciles that found no clique with room.
    pub placement_failures: Counter,
    /// Daemon pods of a domain on nodes that are no members of it (left out of it).
    pub non_member_daemons: Family<DomainLabels, Gauge>,
    /// Slots taken from empty domains for domains that waited for one.
    pub slots_released: Counter,
    /// Domains moved to another clique before any of their claims was allocated.
    pub cliques_changed: Counter,
}

impl Metrics {
    /// New metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics::default();
        registry.register(
            "graft_compute_domain_reconciles",
            "Reconciles of ComputeDomains, by result",
            m.reconciles.clone(),
        );
        registry.register(
            "graft_compute_domain_ready_nodes",
            "Nodes of a ComputeDomain whose IMEX daemon is ready",
            m.ready_nodes.clone(),
        );
        registry.register(
            "graft_compute_domain_ready",
            "1 while a ComputeDomain is Ready",
            m.ready.clone(),
        );
        registry.register(
            "graft_compute_domain_placement_failures",
            "Reconciles that found no NVLink clique with room for a domain",
            m.placement_failures.clone(),
        );
        registry.register(
            "graft_compute_domain_non_member_daemons",
            "Daemon pods of a ComputeDomain on nodes no allocated claim of it names",
            m.non_member_daemons.clone(),
        );
        registry.register(
            "graft_compute_domain_slots_released",
            "Slots taken from ComputeDomains without workload claims for waiting domains",
            m.slots_released.clone(),
        );
        registry.register(
            "graft_compute_domain_cliques_changed",
            "ComputeDomains moved, before any claim of theirs was allocated, from a clique \
             without room to one with room",
            m.cliques_changed.clone(),
        );
        m
    }

    /// Forgets a deleted domain.
    pub fn forget(&self, d: &DomainLabels) {
        self.ready_nodes.remove(d);
        self.ready.remove(d);
        self.non_member_daemons.remove(d);
    }
}
