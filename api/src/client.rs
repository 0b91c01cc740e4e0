//! The API client every graft component uses: the configuration kube-rs infers (in-cluster,
//! or KUBECONFIG), with a `User-Agent` naming the component and graft's version, so that
//! the API server's audit log and an operator's tooling can tell graft's requests apart
//! (kube-rs sends none of its own).

use http::header::{HeaderValue, USER_AGENT};

/// `<component>/<graft's version>`, e.g. `graft-driver/0.1.0`.
pub fn user_agent(component: &str) -> String {
    format!("{component}/{}", env!("CARGO_PKG_VERSION"))
}

/// A client for the API server as `component` (a binary's name).
pub async fn connect(component: &str) -> Result<kube::Client, kube::Error> {
    let mut config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let agent = HeaderValue::from_str(&user_agent(component))
        .map_err(|e| kube::Error::HttpError(e.into()))?;
    config.headers.push((USER_AGENT, agent));
    kube::Client::try_from(config)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_user_agent_names_the_component_and_version() {
        let ua = super::user_agent("graft-driver");
        assert!(ua.starts_with("graft-driver/") && ua.len() > "graft-driver/".len());
        assert!(http::HeaderValue::from_str(&ua).is_ok());
    }
}
