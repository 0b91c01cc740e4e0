//! Wire bindings for the protocols graft speaks. Everything here is generated at build time
//! from the .proto files in this crate; nothing generated is committed.

/// NRI messages (package `nri.pkg.api.v1alpha1`).
#[allow(
    clippy::all,
    missing_docs,
    unused_imports,
    unused_qualifications,
    non_upper_case_globals,
    unused_mut,
    unused_variables,
    dead_code,
    unreachable_pub,
    renamed_and_removed_lints,
    non_camel_case_types,
    non_snake_case
)]
pub mod nri {
    include!(concat!(env!("OUT_DIR"), "/nri.rs"));
}

/// NRI ttrpc services: the `Plugin` server trait graft implements and the `Runtime` client.
#[allow(
    clippy::all,
    missing_docs,
    unused_imports,
    unused_qualifications,
    non_upper_case_globals,
    unused_mut,
    unused_variables,
    dead_code,
    unreachable_pub,
    renamed_and_removed_lints,
    non_camel_case_types,
    non_snake_case
)]
pub mod nri_ttrpc {
    include!(concat!(env!("OUT_DIR"), "/nri_ttrpc.rs"));
}

/// Kubelet plugin registration (package `pluginregistration`).
#[cfg(feature = "kubelet")]
#[allow(clippy::all, missing_docs, unreachable_pub)]
pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");
}

/// The kubelet's DRA plugin service, v1 and its v1beta1 twin.
#[cfg(feature = "kubelet")]
pub mod dra {
    #[allow(clippy::all, missing_docs, unreachable_pub)]
    pub mod v1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
    }
    #[allow(clippy::all, missing_docs, unreachable_pub)]
    pub mod v1beta1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
    }
}

/// The kubelet's DRA resource health stream (packages `v1` and `v1alpha1`, feature gate
/// `ResourceHealthStatus`), served on the same socket as [`dra`].
#[cfg(feature = "kubelet")]
pub mod dra_health {
    #[allow(clippy::all, missing_docs, unreachable_pub)]
    pub mod v1 {
        tonic::include_proto!("v1");
    }
    #[allow(clippy::all, missing_docs, unreachable_pub)]
    pub mod v1alpha1 {
        tonic::include_proto!("v1alpha1");
    }
}
