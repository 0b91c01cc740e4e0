//! kubectl graft's command line: its own flags, taken from anywhere on the line, and the rest
//! handed to graftctl as given (`kubectl graft devices --node n1 -o wide`).

use anyhow::{bail, Context};

/// The label graft's DaemonSet selects its pods by (deploy/helm/graft/templates/50-daemonset.yaml).
pub const DEFAULT_SELECTOR: &str = "app.kubernetes.io/name=graft";
/// The namespace the chart's README installs graft into.
pub const DEFAULT_NAMESPACE: &str = "graft-system";

/// What kubectl graft was asked.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// `--node`: the node whose graft pod runs graftctl.
    pub node: Option<String>,
    /// `-n`/`--namespace`: graft's namespace (not the namespace of the pod explained).
    pub namespace: String,
    /// `-l`/`--selector`: the label selector of graft's pods.
    pub selector: String,
    /// kubectl's `--context` and `--kubeconfig`, passed to every kubectl call.
    pub kubectl_flags: Vec<String>,
    /// graftctl's arguments, in order.
    pub graftctl: Vec<String>,
    /// `-h`/`--help`, or nothing to run.
    pub help: bool,
}

/// graftctl's flags that take a value: their value is not the subcommand.
const GRAFTCTL_VALUED: &[&str] = &["-o", "--output", "--state-dir"];

impl Args {
    /// Parses the arguments after the program name.
    pub fn parse<I: IntoIterator<Item = String>>(argv: I) -> anyhow::Result<Args> {
        let mut a = Args {
            namespace: DEFAULT_NAMESPACE.into(),
            selector: DEFAULT_SELECTOR.into(),
            ..Args::default()
        };
        let mut it = argv.into_iter();
        while let Some(arg) = it.next() {
            if arg == "--" {
                a.graftctl.extend(it.by_ref());
                break;
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with('-') => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            let mut value = |name: &str| -> anyhow::Result<String> {
                let v = match inline.clone() {
                    Some(v) => v,
                    None => it.next().with_context(|| format!("{name} needs a value"))?,
                };
                if v.is_empty() {
                    bail!("{name} needs a value");
                }
                Ok(v)
            };
            match flag.as_str() {
                "--node" => a.node = Some(value("--node")?),
                "-n" | "--namespace" => a.namespace = value("--namespace")?,
                "-l" | "--selector" => a.selector = value("--selector")?,
                "--context" | "--kubeconfig" => {
                    let v = value(&flag)?;
                    a.kubectl_flags.push(format!("{flag}={v}"));
                }
                "-h" | "--help" => a.help = true,
                _ => a.graftctl.push(arg),
            }
        }
        if a.subcommand().is_none() {
            a.help = true;
        }
        Ok(a)
    }

    /// graftctl's subcommand and its first argument (`explain <container>`), skipping
    /// graftctl's own flags and their values.
    pub fn subcommand(&self) -> Option<(&str, Option<&str>)> {
        let mut words = Vec::new();
        let mut it = self.graftctl.iter();
        while let Some(a) = it.next() {
            if GRAFTCTL_VALUED.contains(&a.as_str()) {
                it.next();
            } else if !a.starts_with('-') {
                words.push(a.as_str());
            }
        }
        let first = *words.first()?;
        Some((first, words.get(1).copied()))
    }
}

/// `kubectl graft --help`.
pub const USAGE: &str = "\
Runs graftctl in graft's pod on a node: what graft publishes, prepared and injected there.

Usage:
  kubectl graft devices --node NODE [-o table|wide|yaml|json] [--no-headers]
  kubectl graft claims [namespace/name|uid] --node NODE
  kubectl graft status --node NODE
  kubectl graft explain NAMESPACE/POD[/CONTAINER]      (the node is the pod's)
  kubectl graft explain containerd://ID --node NODE

Flags:
  --node NODE          the node whose graft pod runs graftctl
  -n, --namespace NS   graft's namespace (default graft-system)
  -l, --selector SEL   the label selector of graft's pods (default app.kubernetes.io/name=graft)
  --context, --kubeconfig   passed to kubectl
Everything else goes to graftctl (graftctl --help lists it). KUBECTL names the kubectl to run.
";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> anyhow::Result<Args> {
        Args::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn own_flags_anywhere_the_rest_to_graftctl() {
        let a = parse(&["devices", "--node", "n1", "-o", "wide", "--no-headers"]).unwrap();
        assert_eq!(a.node.as_deref(), Some("n1"));
        assert_eq!(a.namespace, DEFAULT_NAMESPACE);
        assert_eq!(a.selector, DEFAULT_SELECTOR);
        assert_eq!(a.graftctl, ["devices", "-o", "wide", "--no-headers"]);
        assert_eq!(a.subcommand(), Some(("devices", None)));
        assert!(!a.help);

        let a = parse(&[
            "--context=prod",
            "-n",
            "graft",
            "-o",
            "yaml",
            "explain",
            "demo/web/app",
            "--kubeconfig",
            "/k",
            "--selector=app=g",
        ])
        .unwrap();
        assert_eq!(a.kubectl_flags, ["--context=prod", "--kubeconfig=/k"]);
        assert_eq!(
            (a.namespace.as_str(), a.selector.as_str()),
            ("graft", "app=g")
        );
        assert_eq!(a.subcommand(), Some(("explain", Some("demo/web/app"))));
        assert_eq!(a.graftctl, ["-o", "yaml", "explain", "demo/web/app"]);

        // After `--`, everything is graftctl's, our flag names included.
        let a = parse(&["--node=n", "--", "claims", "-n"]).unwrap();
        assert_eq!(a.graftctl, ["claims", "-n"]);
    }

    #[test]
    fn help_and_missing_values() {
        assert!(parse(&[]).unwrap().help);
        assert!(parse(&["--node", "n1"]).unwrap().help);
        assert!(parse(&["devices", "-h"]).unwrap().help);
        for bad in [&["devices", "--node"][..], &["devices", "--node="], &["-n"]] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("needs a value"), "{bad:?}: {e}");
        }
    }
}
