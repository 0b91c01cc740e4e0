//! The two containers of the check's pod: `gpu`, which graft gives the device, and
//! `sibling`, which gets nothing. Each runs a list of commands and logs every command's
//! output between markers, which are parsed back into [`Section`]s.

use std::time::Duration;

use crate::cri::{Cri, Pod};

use super::image::{IMAGE, PROBE};

/// One command's output and exit status, as the container logged it.
#[derive(Debug, Clone, Default)]
pub struct Section {
    /// What the command was for.
    pub title: String,
    /// What it printed.
    pub output: String,
    /// Its exit status; `None` when the container did not say.
    pub rc: Option<i32>,
}

const BEGIN: &str = "### BEGIN ";
const END: &str = "### END ";
/// The last line a container logs: every command ran.
pub const DONE: &str = "### DONE";

/// What `gpu` runs: the driver's tool, the probe, and what /dev holds.
pub fn gpu_commands() -> Vec<(&'static str, String)> {
    vec![
        ("nvidia-smi -L", "nvidia-smi -L".into()),
        ("nvidia-smi -q", "nvidia-smi -q".into()),
        ("probe", PROBE.into()),
        ("ls /dev/nvidia-caps", "ls -l /dev/nvidia-caps".into()),
        ("device nodes", "find /dev -name 'nvidia*' -type c".into()),
        // Written only when graft-hook had to rebuild the image's linker cache.
        (
            "linker config",
            "cat /etc/ld.so.conf.d/00-graft-nvidia.conf 2>/dev/null || echo 'none: the image loader finds the driver as is'".into(),
        ),
    ]
}

/// What `sibling` runs: the same questions, which must find no GPU.
pub fn sibling_commands() -> Vec<(&'static str, String)> {
    vec![
        ("ls /dev/nvidia*", "ls -l /dev/nvidia*".into()),
        ("device nodes", "find /dev -name 'nvidia*' -type c".into()),
        ("nvidia-smi -L", "nvidia-smi -L".into()),
        ("probe", PROBE.into()),
    ]
}

/// A shell script running `commands`, each between markers that [`parse`] reads back.
pub fn script(commands: &[(&str, String)]) -> String {
    let mut s = String::new();
    for (title, cmd) in commands {
        s.push_str(&format!(
            "echo '{BEGIN}{title}'; {cmd} 2>&1; echo \"{END}{title} rc=$?\"\n"
        ));
    }
    s.push_str(&format!("echo '{DONE}'\n"));
    s
}

/// Parses a container's log back into its commands' sections.
pub fn parse(log: &str) -> Vec<Section> {
    let mut out = Vec::new();
    let mut cur: Option<Section> = None;
    for line in log.lines() {
        if let Some(title) = line.strip_prefix(BEGIN) {
            cur = Some(Section {
                title: title.to_string(),
                ..Default::default()
            });
        } else if let Some(rest) = line.strip_prefix(END) {
            if let Some(mut s) = cur.take() {
                s.rc = rest.rsplit_once(" rc=").and_then(|(_, rc)| rc.parse().ok());
                out.push(s);
            }
        } else if let Some(s) = cur.as_mut() {
            s.output.push_str(line);
            s.output.push('\n');
        }
    }
    out
}

/// Runs `commands` in container `name` of `pod` and returns their sections, or the
/// runtime's refusal.
pub async fn run(
    cri: &Cri,
    pod: &Pod,
    name: &str,
    commands: &[(&str, String)],
    env: &[(&str, &str)],
    limit: Duration,
) -> anyhow::Result<Vec<Section>> {
    let id = cri
        .create_from(pod, name, IMAGE, &script(commands), env)
        .await
        .map_err(|s| anyhow::anyhow!("CreateContainer {name}: {}", s.message()))?;
    cri.start(&id).await?;
    let log = cri.wait_log(pod, name, DONE, limit).await?;
    Ok(parse(&log))
}

/// The section titled `title` (empty when the container did not get that far).
pub fn section(sections: &[Section], title: &str) -> Section {
    sections
        .iter()
        .find(|s| s.title == title)
        .cloned()
        .unwrap_or_else(|| Section {
            title: title.into(),
            ..Default::default()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_round_trip() {
        let log =
            "### BEGIN a\nx\ny\n### END a rc=0\n### BEGIN b c\n### END b c rc=127\n### DONE\n";
        let s = parse(log);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].output.as_str(), s[0].rc), ("x\ny\n", Some(0)));
        assert_eq!((s[1].title.as_str(), s[1].rc), ("b c", Some(127)));
        assert!(script(&[("t", "true".into())]).contains("### END t rc=$?"));
    }
}
