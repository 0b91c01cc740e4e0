//! graftctl's command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// What graft publishes, prepared and injected on this node, read from its state directory
/// (read-only).
#[derive(Debug, Parser)]
#[command(name = "graftctl", version)]
pub struct Args {
    /// graft's state directory, as graft-driver and graft-nri use it.
    #[arg(long, global = true, env = "GRAFT_STATE_DIR", default_value = graft_record::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Output format: a table for people (`wide`: every column), YAML or JSON for scripts.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Tables without their header line (as kubectl's `--no-headers`).
    #[arg(long, global = true)]
    pub no_headers: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Wide,
    Yaml,
    Json,
}

#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Every device graft publishes on this node, its health and the claim holding it.
    Devices,
    /// Prepared claims, their pods and what each container receives.
    Claims {
        /// One claim: `namespace/name` or its UID.
        claim: Option<String>,
    },
    /// What graft injected into a container, and from which records.
    Explain {
        /// The container: `containerd://<id>` (as kubectl shows it), an id or a unique prefix
        /// (as crictl shows it), or `namespace/pod[/container]`.
        container: String,
    },
    /// graft-nri's status, graft-driver's version and process, counts.
    Status,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("graftctl").chain(args.iter().copied()))
    }

    #[test]
    fn commands_and_flags() {
        let a = parse(&["devices"]).unwrap();
        assert_eq!(a.command, Command::Devices);
        assert_eq!(a.output, Output::Table);
        let a = parse(&["claims", "ns/c", "-o", "json", "--state-dir", "/s"]).unwrap();
        assert_eq!(
            a.command,
            Command::Claims {
                claim: Some("ns/c".into())
            }
        );
        assert_eq!((a.output, a.state_dir), (Output::Json, PathBuf::from("/s")));
        let a = parse(&["-o", "json", "explain", "abc"]).unwrap();
        assert_eq!(
            a.command,
            Command::Explain {
                container: "abc".into()
            }
        );
        assert_eq!(parse(&["status"]).unwrap().command, Command::Status);
        let a = parse(&["devices", "-o", "wide", "--no-headers"]).unwrap();
        assert_eq!((a.output, a.no_headers), (Output::Wide, true));
        assert_eq!(
            parse(&["-o", "yaml", "status"]).unwrap().output,
            Output::Yaml
        );
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(parse(&[]).is_err());
        assert!(parse(&["explain"]).is_err());
        assert!(parse(&["devices", "-o", "xml"]).is_err());
        assert!(parse(&["devices", "--no-headers=maybe"]).is_err());
        assert!(parse(&["frobnicate"]).is_err());
    }
}
