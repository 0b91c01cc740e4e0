//! The shell blocks of README.md and docs/install.md that install_as_documented runs: each
//! is the ```sh block right after a `<!-- install_as_documented: NAME -->` line, taken
//! from the markdown as it is, so that what the docs say is what runs.

use std::path::Path;

use anyhow::{bail, Context};

/// The block `name` of the markdown file `doc` (relative to the repository), its lines.
pub fn block(top: &Path, doc: &str, name: &str) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(top.join(doc)).with_context(|| format!("reading {doc}"))?;
    let marker = format!("<!-- install_as_documented: {name} -->");
    let mut lines = text.lines().skip_while(|l| l.trim() != marker);
    lines
        .next()
        .with_context(|| format!("{doc} has no {marker}"))?;
    match lines.next() {
        Some("```sh") => {}
        other => bail!("{doc}: {marker} is followed by {other:?}, not a ```sh block"),
    }
    let mut out = Vec::new();
    for l in lines {
        if l == "```" {
            return Ok(out);
        }
        out.push(l.to_string());
    }
    bail!("{doc}: the block after {marker} never ends")
}

/// `lines` with the one line starting `VAR=` given `value` instead (the docs' placeholder,
/// registry.example.com/team, is the one thing a test must choose), its comment kept.
pub fn with_var(lines: &[String], var: &str, value: &str) -> anyhow::Result<Vec<String>> {
    let prefix = format!("{var}=");
    let n = lines.iter().filter(|l| l.starts_with(&prefix)).count();
    anyhow::ensure!(n == 1, "{n} lines set {var} in {lines:#?}");
    Ok(lines
        .iter()
        .map(|l| match l.strip_prefix(&prefix) {
            Some(rest) => {
                let comment = rest.find('#').map(|i| &rest[i..]).unwrap_or("");
                format!("{prefix}{value}    {comment}")
            }
            None => l.clone(),
        })
        .collect())
}

#[test]
fn blocks_are_found_and_the_registry_placeholder_is_replaced() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("d.md"),
        "x\n<!-- install_as_documented: a -->\n```sh\nR=reg.example/t    # yours\necho \"$R\"\n```\n",
    )?;
    let b = block(dir.path(), "d.md", "a")?;
    assert_eq!(b, ["R=reg.example/t    # yours", "echo \"$R\""]);
    let b = with_var(&b, "R", "localhost:1/x")?;
    assert_eq!(b[0], "R=localhost:1/x    # yours");
    assert!(block(dir.path(), "d.md", "b").is_err());
    Ok(())
}
