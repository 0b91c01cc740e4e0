//! What a GPU costs at container start: CRI CreateContainer + StartContainer of a plain
//! container and of one graft gives the GPU (its mounts, device nodes and createContainer
//! hook), same image and pod, interleaved so that neither side always runs after the
//! other, as the nri_latency benchmark measures.

use std::time::{Duration, Instant};

use crate::cri::{Cri, Pod};

use super::image::IMAGE;

/// Container names: the record lists the GPU ones, so graft injects exactly those.
/// `set` tells the images apart (`g` for the glibc image, `s` for the static one).
pub fn gpu_name(set: &str, round: &str) -> String {
    format!("t-gpu-{set}{round}")
}

fn plain_name(set: &str, round: &str) -> String {
    format!("t-plain-{set}{round}")
}

/// The GPU containers whose driver files are mounted one by one (the comparison).
pub fn files_name(set: &str, round: &str) -> String {
    format!("t-files-{set}{round}")
}

/// The images timed: the check's glibc image, whose loader finds the driver's libraries
/// where graft mounts them (no linker cache rebuild), and the static busybox test image,
/// which has no glibc graft-hook recognises (graft-hook rebuilds the cache).
pub const SETS: [(&str, &str, &str); 2] = [
    (
        "g",
        IMAGE,
        "glibc image (the image's loader finds the driver as is)",
    ),
    (
        "s",
        crate::containerd::BUSYBOX_IMAGE,
        "static busybox image (linker cache rebuilt by graft-hook)",
    ),
];

/// Every round's name, plus the unmeasured warm-up.
pub fn rounds(n: usize) -> Vec<String> {
    std::iter::once("warm".to_string())
        .chain((0..n).map(|i| i.to_string()))
        .collect()
}

/// `name` of every set and round (`gpu_name`, `files_name`): what a record lists.
pub fn all_names(n: usize, name: fn(&str, &str) -> String) -> Vec<String> {
    SETS.iter()
        .flat_map(|(set, _, _)| rounds(n).into_iter().map(move |r| name(set, &r)))
        .collect()
}

/// Container start times of one image set, plain and with the GPU, sorted.
pub struct Timing {
    /// Which image set.
    pub label: String,
    /// Without the GPU.
    pub plain: Vec<Duration>,
    /// With the GPU.
    pub gpu: Vec<Duration>,
    /// With the GPU, its driver files mounted one by one; empty when not measured.
    pub files: Vec<Duration>,
}

async fn create_start(cri: &Cri, pod: &Pod, image: &str, name: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let id = cri
        .create_from(pod, name, image, "true", &[])
        .await
        .map_err(|s| anyhow::anyhow!("CreateContainer {name}: {}", s.message()))?;
    cri.start(&id).await?;
    Ok(t.elapsed())
}

/// Runs the warm-up and `n` measured rounds of one image set, with the per-file GPU
/// container as a third when `files`; the order rotates each round, so that no kind
/// always runs after another. The containers just exit.
pub async fn measure(
    cri: &Cri,
    pod: &Pod,
    n: usize,
    (set, image, label): (&str, &str, &str),
    files: bool,
) -> anyhow::Result<Timing> {
    let mut t = Timing {
        label: label.to_string(),
        plain: Vec::with_capacity(n),
        gpu: Vec::with_capacity(n),
        files: Vec::with_capacity(n),
    };
    let kinds = if files { 3 } else { 2 };
    for (i, round) in rounds(n).iter().enumerate() {
        let mut took = [Duration::ZERO; 3];
        for k in 0..kinds {
            let kind = (i + k) % kinds;
            let name = match kind {
                0 => gpu_name(set, round),
                1 => plain_name(set, round),
                _ => files_name(set, round),
            };
            took[kind] = create_start(cri, pod, image, &name).await?;
        }
        if i == 0 {
            continue;
        }
        t.gpu.push(took[0]);
        t.plain.push(took[1]);
        if files {
            t.files.push(took[2]);
        }
    }
    t.gpu.sort();
    t.plain.sort();
    t.files.sort();
    Ok(t)
}

/// The `p` quantile (nearest rank) of sorted samples.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Timing {
    /// The markdown table: median, p90 and max per side, and the medians' ratio.
    pub fn markdown(&self) -> String {
        let row = |label: &str, s: &[Duration]| {
            format!(
                "| {label} | {} | {:.1} | {:.1} | {:.1} |\n",
                s.len(),
                ms(pct(s, 0.5)),
                ms(pct(s, 0.9)),
                ms(s.last().copied().unwrap_or_default())
            )
        };
        let mut out = format!(
            "{}:\n\n| container | rounds | median ms | p90 ms | max ms |\n",
            self.label
        );
        out.push_str("|---|---|---|---|---|\n");
        out.push_str(&row("plain", &self.plain));
        out.push_str(&row("GPU (graft-injected)", &self.gpu));
        if !self.files.is_empty() {
            out.push_str(&row("GPU, driver files mounted one by one", &self.files));
        }
        let base = ms(pct(&self.plain, 0.5));
        if base > 0.0 {
            let ratio = ms(pct(&self.gpu, 0.5)) / base;
            out.push_str(&format!(
                "\nmedian ratio GPU/plain: {ratio:.2} ({:+.1} ms)\n",
                ms(pct(&self.gpu, 0.5)) - base
            ));
            if !self.files.is_empty() {
                let ratio = ms(pct(&self.files, 0.5)) / base;
                out.push_str(&format!(
                    "median ratio one-by-one/plain: {ratio:.2} ({:+.1} ms)\n",
                    ms(pct(&self.files, 0.5)) - base
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_both_rows_and_the_ratio() {
        let d = |m: u64| Duration::from_millis(m);
        let t = Timing {
            label: "x".into(),
            plain: vec![d(100), d(110), d(120)],
            gpu: vec![d(150), d(160), d(400)],
            files: Vec::new(),
        };
        let md = t.markdown();
        assert!(md.contains("| plain | 3 | 110.0 | 120.0 | 120.0 |"), "{md}");
        assert!(md.contains("| GPU (graft-injected) | 3 | 160.0 |"), "{md}");
        assert!(md.contains("median ratio GPU/plain: 1.45"), "{md}");
        assert_eq!(rounds(2), ["warm", "0", "1"]);
        assert!(!md.contains("one by one"), "{md}");
        let t = Timing {
            files: vec![d(200), d(210), d(220)],
            ..t
        };
        let md = t.markdown();
        assert!(
            md.contains("| GPU, driver files mounted one by one | 3 | 210.0 |"),
            "{md}"
        );
        assert!(md.contains("median ratio one-by-one/plain: 1.91"), "{md}");
    }
}
