//! Entry uprobes on a binary's functions, read back from tracefs, so that a bench can time
//! what happens inside containerd (for example from sending a plugin its CreateContainer to
//! applying the plugin's reply) without changing containerd. Needs root and a kernel with
//! uprobes; the probes are on the file, so every process running it fires them, and each hit
//! carries its process id.
//!
//! Only entry probes: a return probe moves the return address, which Go's stack copying
//! does not survive.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use object::{Object, ObjectSegment, ObjectSymbol};

const TRACEFS: &str = "/sys/kernel/tracing";

/// One probe hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The process (thread group) it fired in.
    pub tgid: u32,
    /// The probe's name.
    pub event: String,
    /// Seconds on the monotonic clock (microsecond resolution, as tracefs prints it).
    pub secs: f64,
}

/// A group of entry probes, removed on drop.
pub struct Uprobes {
    group: String,
    names: Vec<String>,
    tracefs: PathBuf,
}

impl Uprobes {
    /// Places one probe per `(name, symbol)` on `binary` and starts tracing them on the
    /// monotonic clock. `group` must be a C identifier.
    pub fn attach(binary: &Path, group: &str, probes: &[(&str, &str)]) -> anyhow::Result<Self> {
        let tracefs = PathBuf::from(TRACEFS);
        if !tracefs.join("uprobe_events").exists() {
            let st = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev", TRACEFS])
                .status()?;
            if !st.success() || !tracefs.join("uprobe_events").exists() {
                bail!("no uprobes: tracefs is not at {TRACEFS} and mounting it failed");
            }
        }
        let data =
            std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
        let mut u = Uprobes {
            group: group.to_string(),
            names: Vec::new(),
            tracefs,
        };
        for (name, symbol) in probes {
            let off = file_offset(&data, symbol)
                .with_context(|| format!("{symbol} in {}", binary.display()))?;
            u.write(
                "uprobe_events",
                &format!("p:{group}/{name} {}:{off:#x}\n", binary.display()),
                true,
            )?;
            u.names.push(name.to_string());
        }
        u.write("trace_clock", "mono", false)?;
        u.write("options/record-tgid", "1", false)?;
        u.write(&format!("events/{group}/enable"), "1", false)?;
        u.write("trace", "", false)?;
        Ok(u)
    }

    fn write(&self, file: &str, text: &str, append: bool) -> anyhow::Result<()> {
        let path = self.tracefs.join(file);
        let mut f = OpenOptions::new()
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("writing {text:?} to {}", path.display()))
    }

    /// The hits recorded since the last drain, oldest first; clears the buffer.
    pub fn drain(&self) -> anyhow::Result<Vec<Hit>> {
        let path = self.tracefs.join("trace");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        self.write("trace", "", false)?;
        Ok(text
            .lines()
            .filter_map(parse_line)
            .filter(|h| self.names.contains(&h.event))
            .collect())
    }
}

impl Drop for Uprobes {
    fn drop(&mut self) {
        let _ = self.write(&format!("events/{}/enable", self.group), "0", false);
        for name in &self.names {
            let _ = self.write("uprobe_events", &format!("-:{}/{name}\n", self.group), true);
        }
    }
}

/// Where `symbol`'s code is in the file: its address less its segment's load address,
/// plus the segment's offset in the file.
fn file_offset(elf: &[u8], symbol: &str) -> anyhow::Result<u64> {
    let file = object::File::parse(elf)?;
    let sym = file
        .symbols()
        .find(|s| s.name() == Ok(symbol))
        .context("no such symbol")?;
    let addr = sym.address();
    for seg in file.segments() {
        let (start, size) = (seg.address(), seg.size());
        if addr >= start && addr < start + size {
            let (offset, _) = seg.file_range();
            return Ok(addr - start + offset);
        }
    }
    bail!("address {addr:#x} is in no segment")
}

/// A trace line with the thread group:
/// `  comm-tid  (  tgid) [cpu] flags  secs.micros: name: (0x...)`.
fn parse_line(line: &str) -> Option<Hit> {
    if line.starts_with('#') {
        return None;
    }
    let open = line.find('(')?;
    let close = open + line[open..].find(')')?;
    let tgid = line[open + 1..close].trim().parse().ok()?;
    let after = &line[line.find(']')? + 1..];
    let mut tokens = after.split_whitespace().skip(1);
    let secs = tokens.next()?.strip_suffix(':')?.parse().ok()?;
    let event = tokens.next()?.strip_suffix(':')?.to_string();
    Some(Hit { tgid, event, secs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_line_with_its_thread_group() {
        let line = "      containerd-4211    (   4200) [001] ..... 81234.567890: cc: (0xf8ce20)";
        assert_eq!(
            parse_line(line),
            Some(Hit {
                tgid: 4200,
                event: "cc".into(),
                secs: 81234.567890
            })
        );
        assert_eq!(parse_line("# tracer: nop"), None);
        assert_eq!(
            parse_line("      x-1 (-------) [000] ..... 1.0: cc: (0x1)"),
            None
        );
    }

    #[test]
    fn finds_a_function_in_this_test_binary() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let file = object::File::parse(&*exe).unwrap();
        let name = file
            .symbols()
            .find(|s| s.size() > 0 && s.name().is_ok_and(|n| n.contains("main")))
            .and_then(|s| s.name().ok().map(String::from))
            .unwrap();
        let off = file_offset(&exe, &name).unwrap();
        assert!(off > 0 && (off as usize) < exe.len());
        assert!(file_offset(&exe, "no such symbol at all").is_err());
    }
}
