//! The GPU and compute instances that exist, and where they are kept: this process's
//! memory, or the configuration's `state` file, shared by every process using it.
//!
//! The file is text, one instance a line, GPU instances before the compute instances of
//! each (`#` comments and blank lines are skipped):
//!
//! ```text
//! gi <gpu> <gi id> <gi profile> <start> <size>    a GPU instance on memory slices
//!                                                 [start, start + size) of GPU <gpu>
//! ci <gpu> <gi id> <ci id> <ci profile> <start>   a compute instance of that GPU instance,
//!                                                 from its compute slice <start> on
//! ```
//!
//! `<gpu>` is the NVML index, profiles are `NVML_GPU_INSTANCE_PROFILE_*` and
//! `NVML_COMPUTE_INSTANCE_PROFILE_*` indices. The first call that finds no file writes the
//! initial state ([`PRESETS`] on the GPUs whose MIG mode is on), so that the file tells
//! what every process sees from then on. Every call holds an exclusive `flock` on
//! `<path>.lock` while it reads the file (again each time: processes see one another's
//! changes) and, for a change, rewrites it whole: a temporary file in the same directory,
//! renamed over it, so that no reader ever sees half of it.

use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nvml_wrapper_sys::bindings::*;

use super::config::{report, BadLine, Config};
// The id bounds are the handle tables' (`handles`), which the state's ids index.
pub(crate) use crate::handles::{CI_IDS, GI_IDS};
use crate::UNKNOWN;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gi {
    pub(crate) gpu: usize,
    pub(crate) id: u32,
    pub(crate) profile: u32,
    pub(crate) start: u32,
    pub(crate) size: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ci {
    pub(crate) gpu: usize,
    pub(crate) gi: u32,
    pub(crate) id: u32,
    pub(crate) profile: u32,
    pub(crate) start: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct State {
    /// By GPU, then id.
    pub(crate) gis: Vec<Gi>,
    /// By GPU, GI id, then id.
    pub(crate) cis: Vec<Ci>,
}

/// An instance the fake starts with: one GI holding one CI as large as it.
pub(crate) struct Preset {
    pub(crate) gpu: usize,
    pub(crate) gi: u32,
    pub(crate) profile: u32,
    pub(crate) start: u32,
    pub(crate) size: u32,
    pub(crate) ci_profile: u32,
}

/// The initial instances of GPUs 6 and 7 (a position here is the number in the MIG
/// device's UUID). GI 13 is an id creation would not pick; a driver may leave such ids.
pub(crate) const PRESETS: [Preset; 5] = [
    preset(6, 1, NVML_GPU_INSTANCE_PROFILE_3_SLICE, 0, 4),
    preset(6, 2, NVML_GPU_INSTANCE_PROFILE_3_SLICE, 4, 4),
    preset(7, 1, NVML_GPU_INSTANCE_PROFILE_4_SLICE, 0, 4),
    preset(7, 5, NVML_GPU_INSTANCE_PROFILE_2_SLICE, 4, 2),
    preset(7, 13, NVML_GPU_INSTANCE_PROFILE_1_SLICE, 6, 1),
];

const fn preset(gpu: usize, gi: u32, profile: u32, start: u32, size: u32) -> Preset {
    // The GI profiles 0..=3 hold the CI profile of the same index as their only full CI.
    Preset {
        gpu,
        gi,
        profile,
        start,
        size,
        ci_profile: profile,
    }
}

impl State {
    /// The presets on the GPUs whose MIG mode is on.
    pub(crate) fn initial(config: &Config) -> State {
        let mut state = State::default();
        for p in PRESETS.iter().filter(|p| config.mig[p.gpu]) {
            state.gis.push(Gi {
                gpu: p.gpu,
                id: p.gi,
                profile: p.profile,
                start: p.start,
                size: p.size,
            });
            state.cis.push(Ci {
                gpu: p.gpu,
                gi: p.gi,
                id: 0,
                profile: p.ci_profile,
                start: 0,
            });
        }
        state
    }

    pub(crate) fn gi(&self, gpu: usize, id: u32) -> Option<&Gi> {
        self.gis.iter().find(|g| g.gpu == gpu && g.id == id)
    }

    pub(crate) fn ci(&self, gpu: usize, gi: u32, id: u32) -> Option<&Ci> {
        self.cis
            .iter()
            .find(|c| c.gpu == gpu && c.gi == gi && c.id == id)
    }

    pub(crate) fn sort(&mut self) {
        self.gis.sort_by_key(|g| (g.gpu, g.id));
        self.cis.sort_by_key(|c| (c.gpu, c.gi, c.id));
    }

    pub(crate) fn to_text(&self) -> String {
        let mut text = String::from("# fake NVML MIG instances\n");
        for g in &self.gis {
            let (gpu, id) = (g.gpu, g.id);
            text += &format!("gi {gpu} {id} {} {} {}\n", g.profile, g.start, g.size);
            for c in self.cis.iter().filter(|c| c.gpu == gpu && c.gi == id) {
                text += &format!("ci {gpu} {id} {} {} {}\n", c.id, c.profile, c.start);
            }
        }
        text
    }

    pub(crate) fn parse(text: &str) -> Result<State, BadLine> {
        let mut state = State::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default();
            let words: Vec<&str> = line.split_whitespace().collect();
            let bad = || BadLine::at(n, line);
            let nums: Vec<u32> = match words.split_first() {
                None => continue,
                Some((_, rest)) => rest
                    .iter()
                    .map(|w| w.parse().map_err(|_| bad()))
                    .collect::<Result<_, _>>()?,
            };
            match (words[0], nums.as_slice()) {
                ("gi", &[gpu, id, profile, start, size]) if gpu < 8 && id < GI_IDS => {
                    if state.gi(gpu as usize, id).is_some() {
                        return Err(bad());
                    }
                    state.gis.push(Gi {
                        gpu: gpu as usize,
                        id,
                        profile,
                        start,
                        size,
                    });
                }
                ("ci", &[gpu, gi, id, profile, start]) if gpu < 8 && id < CI_IDS => {
                    let gpu = gpu as usize;
                    if state.gi(gpu, gi).is_none() || state.ci(gpu, gi, id).is_some() {
                        return Err(bad());
                    }
                    state.cis.push(Ci {
                        gpu,
                        gi,
                        id,
                        profile,
                        start,
                    });
                }
                _ => return Err(bad()),
            }
        }
        state.sort();
        Ok(state)
    }
}

/// The state when the configuration keeps none in a file.
static MEMORY: Mutex<Option<State>> = Mutex::new(None);

/// The instances now.
pub(crate) fn read(config: &Config) -> Result<State, nvmlReturn_t> {
    update(config, |_| Ok(())).map(|(state, ())| state)
}

/// Applies `change` to the instances, keeping the result only when it succeeds; returns
/// what `change` returned.
pub(crate) fn change<T>(
    config: &Config,
    change: impl FnOnce(&mut State) -> Result<T, nvmlReturn_t>,
) -> Result<T, nvmlReturn_t> {
    update(config, change).map(|(_, t)| t)
}

fn update<T>(
    config: &Config,
    change: impl FnOnce(&mut State) -> Result<T, nvmlReturn_t>,
) -> Result<(State, T), nvmlReturn_t> {
    let Some(path) = &config.state else {
        let mut memory = MEMORY.lock().map_err(|_| UNKNOWN)?;
        let state = memory.get_or_insert_with(|| State::initial(config));
        let mut next = state.clone();
        let t = change(&mut next)?;
        next.sort();
        *state = next.clone();
        return Ok((next, t));
    };
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        report(format!("MIG state {}: {what}: {e}", path.display()));
        UNKNOWN
    };
    let _lock = lock(path).map_err(|e| failed("locking", &e))?;
    let (before, mut state) = match std::fs::read_to_string(path) {
        Ok(text) => {
            let state = State::parse(&text).map_err(|e| failed("parsing", &e))?;
            (Some(state.clone()), state)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => (None, State::initial(config)),
        Err(e) => return Err(failed("reading", &e)),
    };
    let t = change(&mut state)?;
    state.sort();
    if before.as_ref() != Some(&state) {
        save(path, &state).map_err(|e| failed("writing", &e))?;
    }
    Ok((state, t))
}

/// `<path>.lock`, locked exclusively until the file is closed.
fn lock(path: &Path) -> std::io::Result<File> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(PathBuf::from(name))?;
    loop {
        // SAFETY: flock on a descriptor this function owns; it only blocks or fails.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(file);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Replaces the file at once, so that a reader sees the old state or the new one.
fn save(path: &Path, state: &State) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, state.to_text())?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text() {
        let config = Config::default();
        let state = State::initial(&config);
        assert_eq!(state.gis.len(), 5);
        assert_eq!(State::parse(&state.to_text()), Ok(state.clone()));
        assert!(state.to_text().contains("\ngi 7 13 0 6 1\nci 7 13 0 0 0\n"));

        let mut only_6 = Config::default();
        only_6.mig[7] = false;
        let state = State::initial(&only_6);
        assert!(state.gis.iter().all(|g| g.gpu == 6));
        assert_eq!(state.cis.len(), 2);

        assert_eq!(State::parse("# none\n\n"), Ok(State::default()));
        for bad in [
            "gi 8 1 2 0 4",
            "gi 0 15 2 0 4",
            "gi 0 1 2 0",
            "gi 0 x 2 0 4",
            "ci 0 1 0 2 0",
            "gi 0 1 2 0 4\nci 0 1 8 2 0",
            "gi 0 1 2 0 4\ngi 0 1 2 4 4",
            "gi 0 1 2 0 4\nci 0 1 0 2 0\nci 0 1 0 2 0",
            "cu 0 1 0 2 0",
        ] {
            assert!(State::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn file() {
        let dir = std::env::temp_dir().join(format!("fake-nvml-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = Config {
            state: Some(dir.join("mig")),
            ..Config::default()
        };
        // Absent: the initial state, which the first read writes.
        assert_eq!(read(&config), Ok(State::initial(&config)));
        let text = std::fs::read_to_string(dir.join("mig")).unwrap();
        assert_eq!(State::parse(&text), Ok(State::initial(&config)));
        let removed = change(&config, |s| {
            s.cis.retain(|c| c.gpu != 6);
            s.gis.retain(|g| g.gpu != 6);
            Ok(2)
        });
        assert_eq!(removed, Ok(2));
        let after = read(&config).unwrap();
        assert_eq!(after.gis.len(), 3);
        // A failed change keeps nothing.
        assert_eq!(
            change(&config, |s| {
                s.gis.clear();
                Err::<(), _>(UNKNOWN)
            }),
            Err(UNKNOWN)
        );
        assert_eq!(read(&config), Ok(after));
        std::fs::write(dir.join("mig"), "gi nonsense\n").unwrap();
        assert_eq!(read(&config), Err(UNKNOWN));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
