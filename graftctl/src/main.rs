//! graftctl: an operator's view of graft on one node, from its state directory, read-only.
//! Every file there is read as hostile input: no symlink followed, sizes capped, errors
//! naming the file.

mod args;
mod claims;
mod devices;
mod explain;
mod status;
mod table;
#[cfg(test)]
mod testdata;

use std::io::Write;

use anyhow::{bail, Context};
use clap::Parser;
use graft_record::containers::entry_ids;
use graft_record::devices::read_snapshot;
use serde::Serialize;

use args::{Args, Command, Output};

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
    let out = args.output;
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
            render(out, &views, |v| claims::table(v))
        }
        Command::Explain { container } => {
            let v = explain::view(root, container)?;
            render(out, &v, explain::text)
        }
        Command::Status => {
            let snap = read_snapshot(root)?;
            let all = claims::load(root)?;
            let containers = entry_ids(root)?.len();
            let v = status::view(root, snap.as_ref(), &all, containers)?;
            render(out, &v, status::text)
        }
    }
}

fn render<T: Serialize + ?Sized>(
    out: Output,
    v: &T,
    table: impl Fn(&T) -> String,
) -> anyhow::Result<String> {
    Ok(match out {
        Output::Table => table(v),
        Output::Json => serde_json::to_string_pretty(v)? + "\n",
    })
}
