//! A CRI client for driving containerd as the kubelet does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use tonic::transport::Channel;

use crate::containerd::BUSYBOX_IMAGE;

/// Bounds each call of a pod's removal: a wedged runtime fails it instead of hanging.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often removing a pod is tried before what is left is reported.
const REMOVE_TRIES: u32 = 3;

/// A CRI client of a containerd, with where its containers log.
#[derive(Clone)]
pub struct Cri {
    client: RuntimeServiceClient<Channel>,
    log_root: PathBuf,
}

/// A pod sandbox we created, with what a container needs to join it.
#[derive(Debug, Clone)]
pub struct Pod {
    /// The sandbox's ID.
    pub id: String,
    /// The pod's UID.
    pub uid: String,
    /// The pod's name.
    pub name: String,
    /// The config it was made with.
    pub config: PodSandboxConfig,
    /// Where its containers log.
    pub log_dir: PathBuf,
}

impl Cri {
    /// Connects to `socket`; containers log under `log_root`.
    pub async fn connect(socket: &Path, log_root: &Path) -> anyhow::Result<Self> {
        let channel = crate::unix::unix_channel(socket)
            .await
            .context("connecting to CRI")?;
        Ok(Cri {
            client: RuntimeServiceClient::new(channel),
            log_root: log_root.to_path_buf(),
        })
    }

    /// The runtime's name and version.
    pub async fn version(&self) -> anyhow::Result<String> {
        let v = self
            .client
            .clone()
            .version(VersionRequest {
                version: "v1".into(),
            })
            .await?
            .into_inner();
        Ok(format!("{} {}", v.runtime_name, v.runtime_version))
    }

    /// A host-network pod, as the testbed machine needs (no CNI).
    pub async fn run_pod(&self, name: &str, uid: &str) -> anyhow::Result<Pod> {
        self.run_pod_annotated(name, uid, &[]).await
    }

    /// [`Cri::run_pod`] with pod annotations (which NRI plugins see on every container).
    pub async fn run_pod_annotated(
        &self,
        name: &str,
        uid: &str,
        annotations: &[(&str, &str)],
    ) -> anyhow::Result<Pod> {
        let log_dir = self.log_root.join(uid);
        std::fs::create_dir_all(&log_dir)?;
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: String::new(),
            log_directory: log_dir.to_string_lossy().into_owned(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let id = self
            .client
            .clone()
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .with_context(|| format!("RunPodSandbox {name}"))?
            .into_inner()
            .pod_sandbox_id;
        Ok(Pod {
            id,
            uid: uid.into(),
            name: name.into(),
            config,
            log_dir,
        })
    }

    /// Creates a busybox container running `script` with sh. Returns its id, or the
    /// runtime's error (with its message) when creation is refused.
    pub async fn create(
        &self,
        pod: &Pod,
        name: &str,
        script: &str,
    ) -> Result<String, tonic::Status> {
        self.create_from(pod, name, BUSYBOX_IMAGE, script, &[])
            .await
    }

    /// Creates a container of `image` (which has `/bin/sh`) running `script`, with `env`.
    pub async fn create_from(
        &self,
        pod: &Pod,
        name: &str,
        image: &str,
        script: &str,
        env: &[(&str, &str)],
    ) -> Result<String, tonic::Status> {
        self.create_config(pod, config(name, image, script, env))
            .await
    }

    /// [`Cri::create_from`] with no env and the CDI devices `cdi` (`vendor/class=name`),
    /// which the runtime resolves from its CDI specs.
    pub async fn create_with_cdi(
        &self,
        pod: &Pod,
        name: &str,
        image: &str,
        script: &str,
        cdi: &[&str],
    ) -> Result<String, tonic::Status> {
        let mut c = config(name, image, script, &[]);
        c.cdi_devices = cdi
            .iter()
            .map(|n| CdiDevice {
                name: n.to_string(),
            })
            .collect();
        self.create_config(pod, c).await
    }

    async fn create_config(
        &self,
        pod: &Pod,
        config: ContainerConfig,
    ) -> Result<String, tonic::Status> {
        Ok(self
            .client
            .clone()
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod.id.clone(),
                config: Some(config),
                sandbox_config: Some(pod.config.clone()),
            })
            .await?
            .into_inner()
            .container_id)
    }

    /// Starts container `id`.
    pub async fn start(&self, id: &str) -> anyhow::Result<()> {
        self.client
            .clone()
            .start_container(StartContainerRequest {
                container_id: id.into(),
            })
            .await
            .with_context(|| format!("StartContainer {id}"))?;
        Ok(())
    }

    /// Creates a container in `pod` and starts it.
    pub async fn create_and_start(
        &self,
        pod: &Pod,
        name: &str,
        script: &str,
    ) -> anyhow::Result<String> {
        let id = self
            .create(pod, name, script)
            .await
            .with_context(|| format!("CreateContainer {name}"))?;
        self.start(&id).await?;
        Ok(id)
    }

    /// Stops (at once) and removes container `id`, as the kubelet does before it makes the
    /// container again.
    pub async fn remove_container(&self, id: &str) -> anyhow::Result<()> {
        let mut c = self.client.clone();
        tokio::time::timeout(
            CALL_TIMEOUT,
            c.stop_container(StopContainerRequest {
                container_id: id.into(),
                timeout: 0,
            }),
        )
        .await
        .context("StopContainer timed out")?
        .with_context(|| format!("StopContainer {id}"))?;
        // containerd 2.2 may answer StopContainer before it has recorded the task's exit,
        // and then refuses the removal as "still running" for a moment.
        let start = Instant::now();
        loop {
            let removed = tokio::time::timeout(
                CALL_TIMEOUT,
                c.remove_container(RemoveContainerRequest {
                    container_id: id.into(),
                }),
            )
            .await
            .context("RemoveContainer timed out")?;
            match removed {
                Err(e)
                    if e.message().contains("still running") && start.elapsed() < CALL_TIMEOUT =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                other => {
                    other.with_context(|| format!("RemoveContainer {id}"))?;
                    return Ok(());
                }
            }
        }
    }

    /// Container `id`'s state.
    pub async fn state(&self, id: &str) -> anyhow::Result<ContainerState> {
        let s = self
            .client
            .clone()
            .container_status(ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status
            .context("no status")?;
        Ok(ContainerState::try_from(s.state).unwrap_or(ContainerState::ContainerUnknown))
    }

    /// Waits until the container's log holds `marker`; returns the log.
    pub async fn wait_log(
        &self,
        pod: &Pod,
        name: &str,
        marker: &str,
        limit: Duration,
    ) -> anyhow::Result<String> {
        let path = pod.log_dir.join(format!("{name}.log"));
        let start = Instant::now();
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // CRI log lines: "<time> <stream> <tag> <message>".
            let msgs: Vec<&str> = text
                .lines()
                .filter_map(|l| l.splitn(4, ' ').nth(3))
                .collect();
            let joined = msgs.join("\n");
            if joined.contains(marker) {
                return Ok(joined);
            }
            if start.elapsed() > limit {
                bail!(
                    "{marker:?} not in {} after {limit:?}:\n{joined}",
                    path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops and removes the pod, each call bounded and the whole retried a few times, then
    /// checks that neither the pod nor any of its containers is left.
    pub async fn remove_pod(&self, pod: &Pod) -> anyhow::Result<()> {
        let mut failed = String::new();
        for attempt in 1..=REMOVE_TRIES {
            if let Err(e) = self.stop_and_remove(&pod.id).await {
                failed = format!("{e:#}");
            }
            let left = self.left_of(&pod.id).await?;
            if left.is_empty() {
                return Ok(());
            }
            failed = format!("{left} left ({failed})");
            if attempt < REMOVE_TRIES {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        bail!(
            "pod {} ({}) not removed after {REMOVE_TRIES} tries: {failed}",
            pod.name,
            pod.id
        )
    }

    async fn stop_and_remove(&self, id: &str) -> anyhow::Result<()> {
        let mut c = self.client.clone();
        tokio::time::timeout(
            CALL_TIMEOUT,
            c.stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            }),
        )
        .await
        .context("StopPodSandbox timed out")?
        .context("StopPodSandbox")?;
        tokio::time::timeout(
            CALL_TIMEOUT,
            c.remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            }),
        )
        .await
        .context("RemovePodSandbox timed out")?
        .context("RemovePodSandbox")?;
        Ok(())
    }

    /// What the runtime still lists of the pod: "" when nothing.
    async fn left_of(&self, id: &str) -> anyhow::Result<String> {
        let mut c = self.client.clone();
        let pods = tokio::time::timeout(
            CALL_TIMEOUT,
            c.list_pod_sandbox(ListPodSandboxRequest {
                filter: Some(PodSandboxFilter {
                    id: id.into(),
                    ..Default::default()
                }),
            }),
        )
        .await
        .context("ListPodSandbox timed out")??
        .into_inner()
        .items;
        let ctrs = tokio::time::timeout(
            CALL_TIMEOUT,
            c.list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    pod_sandbox_id: id.into(),
                    ..Default::default()
                }),
            }),
        )
        .await
        .context("ListContainers timed out")??
        .into_inner()
        .containers;
        let mut left = Vec::new();
        if !pods.is_empty() {
            left.push("the pod".to_string());
        }
        if !ctrs.is_empty() {
            let ids: Vec<&str> = ctrs.iter().map(|c| c.id.as_str()).collect();
            left.push(format!("containers {}", ids.join(" ")));
        }
        Ok(left.join(" and "))
    }
}

/// A container of `image` (which has `/bin/sh`) running `script`, with `env`.
fn config(name: &str, image: &str, script: &str, env: &[(&str, &str)]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        envs: env
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        log_path: format!("{name}.log"),
        labels: HashMap::from([("graft-test".to_string(), "1".to_string())]),
        ..Default::default()
    }
}
