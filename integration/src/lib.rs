//! The testbed: real containerd (2.4.x, 2.2.x and 1.7.24), runc, crictl, helm, etcd and
//! kube-apiserver from the cache that `integration/testbed/setup.sh` fills, driven from Rust
//! through CRI, the Kubernetes API and the kubelet plugin sockets.

pub mod apiserver;
pub mod bench;
pub mod claims;
pub mod cluster;
pub mod containerd;
pub mod cri;
pub mod dra_node;
pub mod dra_test_driver;
pub mod driver;
pub mod extender_pki;
pub mod fake_gpu;
pub mod fake_mps;
pub mod fake_sysfs;
pub mod fleet;
pub mod gpu_check;
pub mod hostile;
pub mod images;
pub mod logs;
pub mod mounts;
pub mod nri;
pub mod pod_clock;
pub mod records;
pub mod scrape;
pub mod testbed;
pub mod unix;

pub use containerd::{Containerd, Version};
pub use cri::Cri;
pub use nri::GraftNri;
pub use testbed::Testbed;
