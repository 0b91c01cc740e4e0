//! The `pluginregistration.Registration` service on the socket the kubelet discovers.
//! GetInfo is answered from fixed data: the kubelet polls it to check liveness.

use std::sync::{Arc, Mutex};

use graft_proto::pluginregistration::registration_server::Registration;
use graft_proto::pluginregistration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use tonic::{Request, Response, Status};

/// The plugin type graft registers as with the kubelet.
pub const DRA_PLUGIN_TYPE: &str = "DRAPlugin";
/// The gRPC services graft offers, most preferred first: the kubelet picks the first
/// DRAPlugin it knows, and from 1.37 on streams device health only from a plugin that lists
/// a DRAResourceHealth service here (1.35 asks every plugin, and ignores the entry); a
/// kubelet that knows v1 of the health service picks it over v1alpha1, which the older
/// ones keep using.
pub const SUPPORTED_VERSIONS: [&str; 4] = [
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
];

/// The kubelet's last verdict, kept for logs and health checks.
#[derive(Debug, Clone, Default)]
pub enum RegistrationState {
    /// Not answered yet.
    #[default]
    Pending,
    /// The kubelet accepted the plugin.
    Registered,
    /// The kubelet refused it, with its reason.
    Rejected(String),
}

/// The kubelet's plugin registration service: says what graft is, hears the verdict.
pub struct RegistrationService {
    info: PluginInfo,
    state: Arc<Mutex<RegistrationState>>,
}

impl RegistrationService {
    /// A service registering `driver` with its DRA service at `dra_endpoint`; the verdict goes
    /// to `state`.
    pub fn new(driver: &str, dra_endpoint: &str, state: Arc<Mutex<RegistrationState>>) -> Self {
        RegistrationService {
            info: PluginInfo {
                r#type: DRA_PLUGIN_TYPE.to_string(),
                name: driver.to_string(),
                endpoint: dra_endpoint.to_string(),
                supported_versions: SUPPORTED_VERSIONS.iter().map(|s| s.to_string()).collect(),
            },
            state,
        }
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(&self, _req: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        req: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = req.into_inner();
        let new = if status.plugin_registered {
            tracing::info!(driver = self.info.name, "registered with the kubelet");
            RegistrationState::Registered
        } else {
            tracing::error!(
                driver = self.info.name,
                error = status.error,
                "the kubelet rejected the registration"
            );
            RegistrationState::Rejected(status.error.clone())
        };
        if let Ok(mut s) = self.state.lock() {
            *s = new;
        }
        if status.plugin_registered {
            Ok(Response::new(RegistrationStatusResponse {}))
        } else {
            Err(Status::failed_precondition(format!(
                "registration rejected by the kubelet: {}",
                status.error
            )))
        }
    }
}
