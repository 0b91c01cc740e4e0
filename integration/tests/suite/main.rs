//! graft's integration and end-to-end tests, one test binary (a clean build links kube,
//! tonic and the testbed harness once). Each module is one suite; run one with a filter,
//! e.g. `cargo test -p graft-integration --test suite -- cluster_gpu::`.
//!
//! The suites run in one process, so what they share is shared on purpose:
//! - the testbed cluster (one per host): cluster tests take turns through
//!   `graft_integration::cluster::gpu`'s bed lock ([`cluster_e2e`], [`cluster_install`],
//!   [`cluster_multi`] and [`compute_domain_cluster`] take the bed down for their own cluster);
//! - the API server of the driver suites (`apiserver::shared`), in which each suite uses
//!   its own node and namespace names; [`hostile_chart`] installs cluster-wide admission
//!   policies, so it has an API server of its own (`apiserver::named`), as do
//!   [`compute_domain_api`] and [`imex_daemon`] (CRDs and cluster-wide RBAC).
//!
//! README's test command (integration/testbed/test-all.sh) runs the suite in two processes
//! side by side: the cluster tier (the suites named there, one test at a time) and the node
//! tier (the rest). A suite that brings up or changes the testbed cluster belongs in that
//! list; one that runs its own containerd or API server must not touch the cluster's.
//!
//! Needs root, the testbed and the workspace binaries; README's test command provides them.

mod common;

mod cluster_e2e;
mod cluster_gpu;
mod cluster_guards;
mod cluster_install;
mod cluster_multi;
mod cluster_placement;
mod cluster_tokens;
mod coexistence;
mod compute_domain_api;
mod compute_domain_cluster;
mod compute_domain_node;
mod config_doc;
mod driver_apiserver;
mod driver_deadline;
mod driver_events;
mod driver_pod_cache;
mod dynamic_mig;
mod extender_hostile;
mod fake_imex;
mod fake_mps;
mod fake_mps_clients;
mod fake_mps_v3;
mod fake_nvml_events;
mod fake_nvml_mig;
mod fake_nvml_toolkit;
mod fake_nvml_usage;
mod fake_sysfs;
mod fleet_sim;
mod gpu_check;
mod gpu_health;
mod graftctl;
mod helm_chart;
mod hostile;
mod hostile_chart;
mod hostile_env_reads;
mod hostile_records;
mod hostile_served;
mod imex_daemon;
mod mps;
mod mps_escape;
mod mps_mig;
mod mps_v3;
mod nri_containerd;
mod nri_killed_bursts;
mod nvidia_fake;
mod nvlink_islands;
mod state_dir_faults;
