//! A registry on this host for install_as_documented, reached as a user's would be: over
//! HTTPS at `localhost:<port>`, with a certificate of a CA made here. crane's registry
//! (go-containerregistry's, which release.sh's push already needs) serves plain HTTP on
//! loopback, and socat terminates TLS in front of it. helm and crane trust the CA through
//! SSL_CERT_FILE (Go's crypto/x509 reads it on Linux); containerd through a hosts.toml in
//! the testbed's registry config_path (cluster.sh), as containerd's docs set a registry's
//! CA up.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::cluster::run;
use graft_integration::Testbed;

/// Where cluster.sh points containerd's registry config_path.
const CERTS_D: &str = "/var/lib/graft-cluster/certs.d";

pub struct Registry {
    /// `localhost:<port>`, the registry's name in image references.
    pub host: String,
    /// The CA's certificate (PEM), for SSL_CERT_FILE.
    pub ca: PathBuf,
    children: Vec<Child>,
    hosts_dir: PathBuf,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    run(Command::new("openssl").current_dir(dir).args(args))?;
    Ok(())
}

/// crane, as release.sh finds or builds it (deploy/release/tools.sh).
fn crane(top: &Path) -> anyhow::Result<PathBuf> {
    let out = run(Command::new("bash")
        .current_dir(top)
        .env("cache", Testbed::cache_dir())
        .args([
            "-c",
            "source deploy/release/tools.sh && release_crane >&2 && echo \"$CRANE\"",
        ]))?;
    Ok(PathBuf::from(out.trim()))
}

fn wait_listening(port: u16) -> anyhow::Result<()> {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

impl Registry {
    /// Starts it, with its blobs and certificates in `dir`.
    pub fn start(top: &Path, dir: &Path) -> anyhow::Result<Self> {
        let crane = crane(top)?;
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=graft install_as_documented CA",
            ],
        )?;
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "tls.key",
                "-out",
                "tls.csr",
                "-subj",
                "/CN=localhost",
            ],
        )?;
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )?;
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "tls.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "tls.pem",
                "-days",
                "2",
                "-extfile",
                "san.ext",
            ],
        )?;
        let (plain, tls) = (free_port()?, free_port()?);
        let mut children = Vec::new();
        let blobs = dir.join("blobs");
        std::fs::create_dir_all(&blobs)?;
        children.push(
            Command::new(&crane)
                .args([
                    "registry",
                    "serve",
                    "--address",
                    &format!("127.0.0.1:{plain}"),
                ])
                .arg("--disk")
                .arg(&blobs)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting crane registry serve")?,
        );
        children.push(
            Command::new("socat")
                .arg(format!(
                    "OPENSSL-LISTEN:{tls},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
                    dir.join("tls.pem").display(),
                    dir.join("tls.key").display()
                ))
                .arg(format!("TCP:127.0.0.1:{plain}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting socat (the testbed installs it)")?,
        );
        let host = format!("localhost:{tls}");
        let hosts_dir = Path::new(CERTS_D).join(&host);
        let reg = Registry {
            host: host.clone(),
            ca: dir.join("ca.pem"),
            children,
            hosts_dir: hosts_dir.clone(),
        };
        std::fs::create_dir_all(&hosts_dir)?;
        std::fs::write(
            hosts_dir.join("hosts.toml"),
            format!(
                "server = \"https://{host}\"\n[host.\"https://{host}\"]\n  \
                 capabilities = [\"pull\", \"resolve\"]\n  ca = \"{}\"\n",
                reg.ca.display()
            ),
        )?;
        wait_listening(plain)?;
        wait_listening(tls)?;
        Ok(reg)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.hosts_dir);
    }
}
