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
    /// It could not be read.
    Io(std::io::Error),
    /// Not a regular file.
    NotAFile,
    /// No execute permission.
    NotExecutable,
    /// Not a 64-bit ELF (a script, most likely).
    NotElf,
    /// An ELF, but a relocatable object or core file.
    NotAnExecutable(u16),
    /// An executable for another machine (its `e_machine`).
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
pub mod tests;
