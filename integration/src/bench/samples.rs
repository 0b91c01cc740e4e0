//! Every timed call of a bench, one CSV line each, so that a figure can be recomputed,
//! its tail looked at call by call, and two runs compared without rerunning them.
//! Files go under `target/bench-samples/` (or `GRAFT_BENCH_SAMPLES`), named after the bench
//! and the time it started.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// A CSV file of per-call samples.
pub struct Samples {
    path: PathBuf,
    out: BufWriter<File>,
}

impl Samples {
    /// Creates `<dir>/<bench>-<unix seconds>.csv` with the `columns` as its header.
    pub fn create(bench: &str, columns: &[&str]) -> anyhow::Result<Self> {
        let dir = std::env::var_os("GRAFT_BENCH_SAMPLES")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-samples")
            });
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let path = dir.join(format!("{bench}-{secs}.csv"));
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut s = Samples {
            path,
            out: BufWriter::new(file),
        };
        s.row(columns)?;
        Ok(s)
    }

    /// Appends one line; fields must not hold commas (labels and numbers do not).
    pub fn row<S: AsRef<str>>(&mut self, fields: &[S]) -> anyhow::Result<()> {
        let line: Vec<&str> = fields.iter().map(AsRef::as_ref).collect();
        writeln!(self.out, "{}", line.join(","))
            .with_context(|| format!("writing {}", self.path.display()))
    }

    /// Flushes the file and gives its path.
    pub fn finish(mut self) -> anyhow::Result<PathBuf> {
        self.out
            .flush()
            .with_context(|| format!("writing {}", self.path.display()))?;
        Ok(self.path)
    }
}
