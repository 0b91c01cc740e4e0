//! A real control plane for driver tests: etcd and kube-apiserver from the testbed, token
//! authentication, RBAC, listening on loopback ports of their own.
//!
//! [`shared`] starts one per test process. The processes are started from a thread that
//! never exits and carry PR_SET_PDEATHSIG, so they die with the test process.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::Signal;

use crate::cluster::Kubernetes;
use crate::testbed::Testbed;

/// etcd and kube-apiserver, running; stopped on drop.
pub struct ControlPlane {
    /// Their files: certificates, tokens, data, logs.
    pub dir: PathBuf,
    /// The API server's URL.
    pub server: String,
    /// A kubeconfig for the API server, as an admin.
    pub kubeconfig: PathBuf,
    /// The testbed's kubectl.
    pub kubectl_bin: PathBuf,
    children: Vec<Child>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn spawn_logged(cmd: &mut Command, log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::File::create(log)?;
    let err = out.try_clone()?;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            Ok(())
        });
    }
    Ok(cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn()?)
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver under `dir` and waits until the API is ready.
    pub fn start(tb: &Testbed, dir: &Path) -> anyhow::Result<Self> {
        Self::start_on(tb, dir, Kubernetes::Newest)
    }

    /// [`ControlPlane::start`] of the Kubernetes `k8s`; on 1.34 with the gates README's
    /// support table names for the API server's part of graft (cluster.sh's).
    pub fn start_on(tb: &Testbed, dir: &Path, k8s: Kubernetes) -> anyhow::Result<Self> {
        Self::start_with(tb, dir, k8s, &[])
    }

    /// [`ControlPlane::start_on`] with more kube-apiserver arguments (files they name must
    /// lie outside `dir`, which is made afresh).
    pub fn start_with(
        tb: &Testbed,
        dir: &Path,
        k8s: Kubernetes,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let bins = match k8s {
            Kubernetes::Newest => &tb.k8s,
            Kubernetes::V1_34 => &tb.k8s_134,
        };
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("pki"))?;
        let token = format!("graft-test-{:x}", std::process::id() as u64 * 7919 + 17);
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{token},admin,admin-uid,\"system:masters\"\n"),
        )?;
        let sa_key = dir.join("pki/sa.key");
        let st = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&sa_key)
            .arg("2048")
            .stderr(Stdio::null())
            .status()
            .context("running openssl")?;
        if !st.success() {
            bail!("openssl genrsa failed");
        }

        let (client, peer, secure) = (free_port()?, free_port()?, free_port()?);
        let etcd = spawn_logged(
            Command::new(bins.join("etcd"))
                .arg("--data-dir")
                .arg(dir.join("etcd"))
                .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                ))
                .arg(format!("--initial-cluster=default=http://127.0.0.1:{peer}"))
                // The tests exercise the driver's durability, not etcd's.
                .arg("--unsafe-no-fsync"),
            &dir.join("etcd.log"),
        )?;
        let mut children = vec![etcd];
        let mut apiserver = Command::new(bins.join("kube-apiserver"));
        if k8s == Kubernetes::V1_34 {
            apiserver.arg(
                "--feature-gates=MutatingAdmissionPolicy=true,DRADeviceTaints=true,\
                 DRAConsumableCapacity=true,DRADeviceBindingConditions=true",
            );
        }
        let apiserver = spawn_logged(
            apiserver
                .args(extra)
                .arg(format!("--etcd-servers=http://127.0.0.1:{client}"))
                .arg("--bind-address=127.0.0.1")
                .arg(format!("--secure-port={secure}"))
                .arg(format!("--cert-dir={}", dir.join("pki").display()))
                .arg(format!(
                    "--token-auth-file={}",
                    dir.join("tokens.csv").display()
                ))
                .arg("--anonymous-auth=false")
                .arg("--authorization-mode=RBAC")
                .arg("--service-cluster-ip-range=10.0.0.0/24")
                // deploy/optional/ uses the MutatingAdmissionPolicy API at v1beta1, which
                // 1.34 and 1.35 serve (off by default); GA (v1, no gate) from 1.36.
                .arg("--runtime-config=admissionregistration.k8s.io/v1beta1=true")
                // deploy/gpu/'s graft-driver is privileged.
                .arg("--allow-privileged=true")
                .arg("--service-account-issuer=https://kubernetes.default.svc")
                .arg(format!("--service-account-key-file={}", sa_key.display()))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    sa_key.display()
                )),
            &dir.join("kube-apiserver.log"),
        );
        match apiserver {
            Ok(c) => children.push(c),
            Err(e) => {
                for c in &mut children {
                    let _ = c.kill();
                }
                return Err(e);
            }
        }
        let server = format!("https://127.0.0.1:{secure}");
        let kubeconfig = dir.join("admin.kubeconfig");
        // The API server's certificate is self-signed per run, on loopback only.
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: testbed\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: testbed\n  context:\n    cluster: testbed\n    user: admin\ncurrent-context: testbed\n"
            ),
        )?;
        let cp = ControlPlane {
            dir: dir.to_path_buf(),
            server,
            kubeconfig,
            kubectl_bin: bins.join("kubectl"),
            children,
        };
        cp.wait_ready(Duration::from_secs(90))?;
        Ok(cp)
    }

    fn wait_ready(&self, limit: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            if self.kubectl(&["get", "--raw", "/readyz"]).is_ok()
                && self
                    .kubectl(&["get", "serviceaccounts", "-n", "kube-system"])
                    .is_ok()
            {
                return Ok(());
            }
            if start.elapsed() > limit {
                let log = std::fs::read_to_string(self.dir.join("kube-apiserver.log"))
                    .unwrap_or_default();
                let tail: String = log.lines().rev().take(30).collect::<Vec<_>>().join("\n");
                bail!("kube-apiserver not ready after {limit:?}; log tail (newest first):\n{tail}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Runs kubectl against this control plane; stdout on success.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.kubectl_bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .with_context(|| format!("running {}", self.kubectl_bin.display()))?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A client for the API server, as an admin.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for c in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Why a control plane did not start: kept in its cell, and told to every later caller.
#[derive(Debug, thiserror::Error)]
enum Unstarted {
    /// Starting it failed; the whole chain, as `{:#}` writes it.
    #[error("{0:#}")]
    Start(anyhow::Error),
    /// The thread starting it went away without an answer.
    #[error("{0}")]
    NoAnswer(std::sync::mpsc::RecvError),
}

/// A control plane's cell: the plane, or why it did not start.
type Cell = OnceLock<Result<ControlPlane, Unstarted>>;

/// The control planes of this test process, by name; each is started on first use and
/// lives until the process exits.
static PLANES: Mutex<BTreeMap<&'static str, &'static Cell>> = Mutex::new(BTreeMap::new());

/// The control plane the test suites of this process share, started on first use.
pub fn shared() -> anyhow::Result<&'static ControlPlane> {
    named("shared")
}

/// A control plane of its own for a suite that changes cluster-wide objects (admission
/// policies) the others must not see, started on first use.
pub fn named(name: &'static str) -> anyhow::Result<&'static ControlPlane> {
    named_on(name, Kubernetes::Newest)
}

/// [`named`] of the Kubernetes `k8s` (each name is one control plane: give another
/// Kubernetes another name).
pub fn named_on(name: &'static str, k8s: Kubernetes) -> anyhow::Result<&'static ControlPlane> {
    let cell: &'static Cell = {
        let mut planes = PLANES.lock().unwrap_or_else(|p| p.into_inner());
        planes
            .entry(name)
            .or_insert_with(|| Box::leak(Box::new(OnceLock::new())))
    };
    // Started outside the map's lock: another suite's plane may start meanwhile.
    let r = cell.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        // PDEATHSIG fires when the spawning thread exits, so spawn from one that never does.
        std::thread::spawn(move || {
            remove_stale_dirs();
            let dir = std::env::temp_dir().join(format!("graft-cp-{}-{name}", std::process::id()));
            let r = Testbed::load().and_then(|tb| ControlPlane::start_on(&tb, &dir, k8s));
            let _ = tx.send(r.map_err(Unstarted::Start));
            loop {
                std::thread::park();
            }
        });
        rx.recv().unwrap_or_else(|e| Err(Unstarted::NoAnswer(e)))
    });
    match r {
        Ok(cp) => Ok(cp),
        Err(e) => bail!("{e}"),
    }
}

/// Control-plane directories of test processes that are gone.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        // graft-cp-<pid>-<name>
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix("graft-cp-"))
            .and_then(|rest| rest.split('-').next());
        let Some(pid) = pid else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
