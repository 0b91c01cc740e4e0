//! graftctl: an operator's view of graft on one node, from its state directory, read-only.
//! Every file there is read as hostile input: no symlink followed, sizes capped, errors
//! naming the file.

mod args;
mod claims;
mod devices;
mod explain;
mod status;
mod table;
mod target;
#[cfg(test)]
mod testdata;

use std::io::Write;

use anyhow::{bail, Context};
use clap::Parser;
use graft_record::containers::entry_ids;
use graft_record::devices::read_snapshot;
use serde::Serialize;

use args::{Args, Command, Output};
use table::Style;

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(text) => {
            // A closed pipe (`graftctl claims | head`) is not an error worth a message.
            let _ = std::io::stdout().write_all(text.as_bytes());
        }
        Err(e) => {
            // Record errors carry their cause in their own message already.
            eprintln!("graftctl: {e}");
            std::process::exit(1);
        }
    }
}

fn run(args: &Args) -> anyhow::Result<String> {
    let root = args.state_dir.as_path();
    if !root.is_dir() {
        bail!(
            "state directory {} does not exist (--state-dir, GRAFT_STATE_DIR)",
            root.display()
        );
    }
    let out = (args.output, !args.no_headers);
    match &args.command {
        Command::Devices => {
            let snap = read_snapshot(root)?.with_context(|| {
                format!(
                    "no device snapshot {}: graft-driver has not published from this state \
                     directory yet",
                    root.join("devices.json").display()
                )
            })?;
            let v = devices::view(&snap, &claims::load(root)?);
            render(out, &v, devices::table)
        }
        Command::Claims { claim } => {
            let mut all = claims::load(root)?;
            if let Some(wanted) = claim {
                all.retain(|c| claims::matches(c, wanted));
                if all.is_empty() {
                    bail!("no prepared claim {wanted:?} on this node (namespace/name or UID)");
                }
            }
            let views: Vec<_> = all.iter().map(claims::view).collect();
            render(out, &views, |v, s| claims::table(v, s))
        }
        Command::Explain { container } => {
            let v = explain::view(root, container)?;
            render(out, &v, |v, _| explain::text(v))
        }
        Command::Status => {
            let snap = read_snapshot(root)?;
            let all = claims::load(root)?;
            let containers = entry_ids(root)?.len();
            let v = status::view(root, snap.as_ref(), &all, containers)?;
            render(out, &v, |v, _| status::text(v))
        }
    }
}

/// `v` as asked: `table` and `wide` through `table` (explain and status are the same text
/// in both), `yaml` and `json` as serialized. `headers` is false with `--no-headers`.
fn render<T: Serialize + ?Sized>(
    (out, headers): (Output, bool),
    v: &T,
    table: impl Fn(&T, Style) -> String,
) -> anyhow::Result<String> {
    Ok(match out {
        Output::Table | Output::Wide => table(
            v,
            Style {
                wide: out == Output::Wide,
                headers,
            },
        ),
        Output::Yaml => serde_norway::to_string(v)?,
        Output::Json => serde_json::to_string_pretty(v)? + "\n",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_json_and_tables_of_one_view() {
        let v = devices::view(&testdata::snapshot(), &[]);
        let yaml = render((Output::Yaml, true), &v, devices::table).unwrap();
        assert!(yaml.starts_with("node: node-a\n"), "{yaml}");
        assert!(yaml.contains("- name: gpu-0\n"), "{yaml}");
        assert!(
            yaml.contains("  healthReason: 'xid-79: GPU has fallen off the bus'\n"),
            "{yaml}"
        );
        let json = render((Output::Json, false), &v, devices::table).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&json).unwrap()["node"],
            "node-a"
        );
        let t = render((Output::Table, false), &v, devices::table).unwrap();
        assert!(t.starts_with("fuse "), "{t}");
        let t = render((Output::Wide, true), &v, devices::table).unwrap();
        assert!(t.lines().next().unwrap().ends_with("ATTRIBUTES"), "{t}");
    }
}
