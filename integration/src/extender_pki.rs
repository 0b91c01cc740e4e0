//! Certificates for graft-scheduler-extender's HTTPS in tests, made with the openssl
//! command: a CA, a serving certificate for the loopback and a client certificate for
//! kube-scheduler (the files the chart's Secret holds: `ca.crt`, `tls.crt`, `tls.key`,
//! `client.crt`, `client.key`), and, apart, an impostor's self-signed serving certificate
//! for the same address (`impostor.crt`, `impostor.key`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// The files, in one directory.
pub struct ExtenderPki {
    /// Where they are.
    pub dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl")?;
    if !out.status.success() {
        bail!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

const KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];

impl ExtenderPki {
    /// Makes them all in `dir` (created if missing).
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let self_signed = |name: &str, cn: &str, ext: &[&str]| {
            let (crt, key, subj) = (
                format!("{name}.crt"),
                format!("{name}.key"),
                format!("/CN={cn}"),
            );
            let mut a = vec!["req", "-x509", "-nodes", "-days", "2"];
            a.extend(KEY);
            a.extend(["-keyout", &key, "-out", &crt, "-subj", &subj]);
            a.extend(ext);
            openssl(dir, &a)
        };
        self_signed(
            "ca",
            "graft-scheduler-extender-ca",
            &[
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        )?;
        let signed = |name: &str, cn: &str, ext: &str| -> anyhow::Result<()> {
            let (crt, key, csr, cnf, subj) = (
                format!("{name}.crt"),
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.cnf"),
                format!("/CN={cn}"),
            );
            std::fs::write(
                dir.join(&cnf),
                format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n{ext}\n"),
            )?;
            let mut a = vec!["req", "-nodes"];
            a.extend(KEY);
            a.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
            openssl(dir, &a)?;
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-days",
                    "2",
                    "-set_serial",
                    "2",
                    "-out",
                    &crt,
                    "-extfile",
                    &cnf,
                ],
            )
        };
        signed(
            "tls",
            "graft-scheduler-extender",
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost",
        )?;
        signed("client", "kube-scheduler", "extendedKeyUsage=clientAuth")?;
        // What an impostor can make: the same names, signed by itself.
        self_signed(
            "impostor",
            "graft-scheduler-extender",
            &[
                "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-addext",
                "extendedKeyUsage=serverAuth,clientAuth",
            ],
        )?;
        // Only graft's CA certificate is kept: its key has signed all it needs to.
        std::fs::remove_file(dir.join("ca.key"))?;
        Ok(ExtenderPki {
            dir: dir.to_path_buf(),
        })
    }

    /// One of the files.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}
