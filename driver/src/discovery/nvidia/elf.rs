//! Whether a file is a driver executable of the running driver version: a 64-bit ELF
//! executable (or PIE) for this machine, with an execute bit, whose bytes contain the
//! version string, as NVIDIA's binaries embed it. A wrapper script (GKE's
//! `/usr/bin/nvidia-smi`) or a binary left from another driver version is not one.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nix::fcntl::OFlag;
use object::elf::{FileHeader64, ET_DYN, ET_EXEC};
use object::read::elf::FileHeader;
use object::Endianness;

/// The most of one binary read looking for the version (NVIDIA's are a few MB; nvidia-imex
/// the largest at some tens).
pub const MAX_SCAN_BYTES: u64 = 128 << 20;
const CHUNK: usize = 1 << 20;
const HEADER_LEN: usize = std::mem::size_of::<FileHeader64<Endianness>>();

#[cfg(target_arch = "aarch64")]
const MACHINE: u16 = object::elf::EM_AARCH64;
#[cfg(not(target_arch = "aarch64"))]
const MACHINE: u16 = object::elf::EM_X86_64;

/// Why a candidate is not the driver's executable.
#[derive(Debug)]
pub enum Rejected {
    Io(std::io::Error),
    NotAFile,
    NotExecutable,
    /// Not a 64-bit ELF (a script, most likely).
    NotElf,
    /// An ELF, but a relocatable object or core file.
    NotAnExecutable(u16),
    OtherMachine(u16),
    /// No trace of the running version in the first [`MAX_SCAN_BYTES`].
    OtherVersion,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejected::Io(e) => write!(f, "unreadable: {e}"),
            Rejected::NotAFile => f.write_str("not a regular file"),
            Rejected::NotExecutable => f.write_str("no execute permission"),
            Rejected::NotElf => f.write_str("not a 64-bit ELF (a wrapper script?)"),
            Rejected::NotAnExecutable(t) => write!(f, "an ELF of type {t}, not an executable"),
            Rejected::OtherMachine(m) => write!(f, "an ELF for machine {m}, not this one"),
            Rejected::OtherVersion => f.write_str("of another driver version"),
        }
    }
}

/// Accepts `path` (as this process can open it) when it is an executable of `version`.
pub fn check_executable(path: &Path, version: &str) -> Result<(), Rejected> {
    // Not blocking on a FIFO planted where a binary should be; the path is already
    // resolved, so a link in its place is refused too.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW).bits())
        .open(path)
        .map_err(Rejected::Io)?;
    let meta = file.metadata().map_err(Rejected::Io)?;
    if !meta.is_file() {
        return Err(Rejected::NotAFile);
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(Rejected::NotExecutable);
    }
    let mut header = [0u8; HEADER_LEN];
    file.read_exact(&mut header).map_err(|_| Rejected::NotElf)?;
    let h = FileHeader64::<Endianness>::parse(&header[..]).map_err(|_| Rejected::NotElf)?;
    let endian = h.endian().map_err(|_| Rejected::NotElf)?;
    let kind = h.e_type(endian);
    if kind != ET_EXEC && kind != ET_DYN {
        return Err(Rejected::NotAnExecutable(kind));
    }
    let machine = h.e_machine(endian);
    if machine != MACHINE {
        return Err(Rejected::OtherMachine(machine));
    }
    // The header is part of the file: scan from its start.
    let whole = header.as_slice().chain(file);
    match contains_version(whole, version.as_bytes(), MAX_SCAN_BYTES, CHUNK) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Rejected::OtherVersion),
        Err(e) => Err(Rejected::Io(e)),
    }
}

/// Whether `version` occurs in the first `limit` bytes of `r` with no digit right before
/// or after it (`550.54.1` is not in `550.54.14`), reading `chunk` bytes at a time.
pub fn contains_version(
    r: impl Read,
    version: &[u8],
    limit: u64,
    chunk: usize,
) -> std::io::Result<bool> {
    let n = version.len();
    if n == 0 {
        return Ok(false);
    }
    // Each round keeps the previous round's last n + 1 bytes, so that a match across the
    // boundary, and the byte on each side of it, are seen whole.
    let chunk = chunk.max(2 * (n + 1));
    let mut r = r.take(limit);
    let mut buf: Vec<u8> = Vec::with_capacity(chunk + n + 1);
    let mut first = true;
    loop {
        let kept = buf.len();
        buf.resize(kept + chunk, 0);
        let got = read_full(&mut r, &mut buf[kept..])?;
        buf.truncate(kept + got);
        let eof = got < chunk;
        let mut from = 0;
        while let Some(p) = buf[from..].windows(n).position(|w| w == version) {
            let at = from + p;
            // A match at 0 of a later round was judged in the round before.
            let before = if at == 0 {
                first
            } else {
                !buf[at - 1].is_ascii_digit()
            };
            let after = match buf.get(at + n) {
                Some(b) => !b.is_ascii_digit(),
                None => eof,
            };
            if before && after {
                return Ok(true);
            }
            from = at + 1;
        }
        if eof {
            return Ok(false);
        }
        first = false;
        let keep_from = buf.len().saturating_sub(n + 1);
        buf.drain(..keep_from);
    }
}

/// Fills `buf` unless the reader ends first; how much it read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const V: &str = "580.95.05";

    /// A small ELF executable of this machine: the host's `true`.
    pub(crate) fn host_elf() -> Vec<u8> {
        for p in ["/bin/true", "/usr/bin/true"] {
            if let Ok(b) = std::fs::read(p) {
                return b;
            }
        }
        panic!("no /bin/true to copy as an ELF stand-in");
    }

    /// Writes `bytes` to `path` with mode 0755.
    pub(crate) fn write_exe(path: &Path, bytes: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// An ELF stand-in for a driver binary of `version`: appended bytes keep it an ELF.
    pub(crate) fn driver_elf(version: &str) -> Vec<u8> {
        let mut b = host_elf();
        b.extend_from_slice(format!("\0NVIDIA driver {version}\0").as_bytes());
        b
    }

    #[test]
    fn an_elf_of_the_version_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nvidia-smi");
        write_exe(&p, &driver_elf(V));
        check_executable(&p, V).unwrap();
    }

    #[test]
    fn scripts_other_versions_and_plain_files_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        write_exe(
            &script,
            format!("#!/bin/sh\n# {V}\nexec x \"$@\"\n").as_bytes(),
        );
        let old = dir.path().join("old");
        write_exe(&old, &driver_elf("570.86.10"));
        let plain = dir.path().join("plain");
        write_exe(&plain, &driver_elf(V));
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut obj = driver_elf(V);
        obj[16] = 1; // e_type ET_REL, little-endian
        obj[17] = 0;
        let rel = dir.path().join("rel");
        write_exe(&rel, &obj);
        let check = |p: &Path| check_executable(p, V).unwrap_err();
        assert!(matches!(check(&script), Rejected::NotElf));
        assert!(matches!(check(&old), Rejected::OtherVersion));
        assert!(matches!(check(&plain), Rejected::NotExecutable));
        assert!(matches!(check(&rel), Rejected::NotAnExecutable(1)));
        assert!(matches!(check(dir.path()), Rejected::NotAFile));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o755)).unwrap();
        assert!(matches!(check(&fifo), Rejected::NotAFile));
        assert!(matches!(
            check(&dir.path().join("missing")),
            Rejected::Io(_)
        ));
    }

    #[test]
    fn the_version_is_found_across_chunks_and_only_whole() {
        let v = b"550.54.1";
        for chunk in [1, 18, 19, 20, 25, 64] {
            for pad in 0..40 {
                let mut data = vec![b'x'; pad];
                data.extend_from_slice(v);
                data.extend_from_slice(b"xyz");
                let found = |d: &[u8]| contains_version(d, v, 1 << 20, chunk).unwrap();
                assert!(found(&data), "chunk {chunk} pad {pad}");
                // 550.54.14 is another version; 1550.54.1 is nothing.
                let mut longer = vec![b'x'; pad];
                longer.extend_from_slice(b"550.54.14 1550.54.1");
                assert!(!found(&longer), "chunk {chunk} pad {pad}");
                // At the very end of the data.
                let mut end = vec![b'x'; pad];
                end.extend_from_slice(v);
                assert!(found(&end), "chunk {chunk} pad {pad}");
            }
        }
    }

    #[test]
    fn the_scan_is_bounded() {
        let mut data = vec![0u8; 1000];
        data.extend_from_slice(V.as_bytes());
        assert!(!contains_version(&data[..], V.as_bytes(), 1000, 64).unwrap());
        assert!(contains_version(&data[..], V.as_bytes(), 1009, 64).unwrap());
    }
}
