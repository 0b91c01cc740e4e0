//! A library's soname, read from its ELF `DT_SONAME` as ldconfig names its cache entries.
//!
//! The file name is not enough: many of the driver's libraries (`libnvidia-glcore.so.580.95.05`)
//! are asked for by their full version, others (`libcuda.so.580.95.05`) by a shorter soname
//! (`libcuda.so.1`) that only the ELF says. Only what is needed is read (the ELF header, the
//! program headers, the dynamic section, one string), each with a bounded positioned read,
//! so a 40 MiB libcuda costs four small reads. Layout facts: the ELF-64 object file format
//! (System V gABI, `elf.h`). Anything malformed or foreign (32-bit, another machine, the
//! other byte order) is "not a library of this machine", which is what ldconfig skips.

use std::fs::File;
use std::os::unix::fs::FileExt;

const EHDR: usize = 64;
const PHDR: usize = 56;
const DYN: usize = 16;
const MAX_PHNUM: usize = 256;
const MAX_DYNAMIC: u64 = 64 << 10;
const MAX_SONAME: usize = 255;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;
const ET_DYN: u16 = 3;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// What a file is to the cache.
#[derive(Debug, PartialEq, Eq)]
pub enum Lib {
    /// A shared library of this machine with this `DT_SONAME`.
    Soname(Vec<u8>),
    /// A shared library of this machine without one (ldconfig then uses the file name).
    NoSoname,
    /// Not a 64-bit shared library of this machine, or malformed.
    Other,
}

/// Reads `file`'s soname; I/O errors and short files make it [`Lib::Other`].
pub fn read(file: &File) -> Lib {
    read_inner(file).unwrap_or(Lib::Other)
}

fn read_inner(file: &File) -> Option<Lib> {
    let ehdr = read_at(file, 0, EHDR)?;
    let little = cfg!(target_endian = "little");
    let machine = if cfg!(target_arch = "aarch64") {
        EM_AARCH64
    } else {
        EM_X86_64
    };
    if ehdr[..4] != *b"\x7fELF"
        || ehdr[4] != 2
        || ehdr[5] != if little { 1 } else { 2 }
        || u16_at(&ehdr, 16)? != ET_DYN
        || u16_at(&ehdr, 18)? != machine
        || usize::from(u16_at(&ehdr, 54)?) != PHDR
    {
        return Some(Lib::Other);
    }
    let phnum = usize::from(u16_at(&ehdr, 56)?);
    if phnum == 0 || phnum > MAX_PHNUM {
        return Some(Lib::Other);
    }
    let phdrs = read_at(file, u64_at(&ehdr, 32)?, phnum * PHDR)?;
    let mut dynamic = None;
    let mut loads = Vec::new();
    for ph in phdrs.chunks_exact(PHDR) {
        // (offset, vaddr, filesz)
        let seg = (u64_at(ph, 8)?, u64_at(ph, 16)?, u64_at(ph, 32)?);
        match u32_at(ph, 0)? {
            PT_DYNAMIC => dynamic = Some(seg),
            PT_LOAD => loads.push(seg),
            _ => {}
        }
    }
    let Some((dyn_off, _, dyn_size)) = dynamic else {
        return Some(Lib::Other);
    };
    let dyns = read_at(
        file,
        dyn_off,
        usize::try_from(dyn_size.min(MAX_DYNAMIC)).ok()?,
    )?;
    let (mut strtab, mut strsz, mut soname) = (None, None, None);
    for d in dyns.chunks_exact(DYN) {
        match u64_at(d, 0)? {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(u64_at(d, 8)?),
            DT_STRSZ => strsz = Some(u64_at(d, 8)?),
            DT_SONAME => soname = Some(u64_at(d, 8)?),
            _ => {}
        }
    }
    let Some(name_at) = soname else {
        return Some(Lib::NoSoname);
    };
    let (strtab, strsz) = (strtab?, strsz?);
    if name_at >= strsz {
        return Some(Lib::Other);
    }
    // DT_STRTAB is an address: the file offset is where the loaded segment holding it starts.
    let file_off = loads.iter().find_map(|&(off, vaddr, filesz)| {
        let rel = strtab.checked_sub(vaddr)?;
        (rel < filesz).then(|| off.checked_add(rel))?
    })?;
    let len = usize::try_from((strsz - name_at).min(MAX_SONAME as u64 + 1)).ok()?;
    let bytes = read_at(file, file_off.checked_add(name_at)?, len)?;
    let end = bytes.iter().position(|&b| b == 0)?;
    let name = &bytes[..end];
    if name.is_empty() || name.contains(&b'/') {
        return Some(Lib::Other);
    }
    Some(Lib::Soname(name.to_vec()))
}

/// `len` bytes at `off`, or `None` past the end of the file.
fn read_at(file: &File, off: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, off).ok()?;
    Some(buf)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's own libc: a real library with a soname.
    #[test]
    fn a_real_librarys_soname_is_read() {
        let t = if cfg!(target_arch = "aarch64") {
            "aarch64-linux-gnu"
        } else {
            "x86_64-linux-gnu"
        };
        let Ok(f) = File::open(format!("/lib/{t}/libc.so.6")) else {
            return;
        };
        assert_eq!(read(&f), Lib::Soname(b"libc.so.6".to_vec()));
    }

    #[test]
    fn truncated_or_foreign_files_are_other() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x");
        let t = if cfg!(target_arch = "aarch64") {
            "aarch64-linux-gnu"
        } else {
            "x86_64-linux-gnu"
        };
        let real = std::fs::read(format!("/lib/{t}/libc.so.6")).unwrap_or_default();
        let mut cases: Vec<Vec<u8>> = vec![vec![], b"\x7fELF".to_vec(), vec![0; 4096]];
        for len in [16, 63, 64, 100, 600] {
            cases.push(real.iter().copied().take(len).collect());
        }
        for c in cases {
            std::fs::write(&p, &c).unwrap();
            assert_eq!(
                read(&File::open(&p).unwrap()),
                Lib::Other,
                "{} bytes",
                c.len()
            );
        }
        // A header claiming 65535 program headers at a huge offset.
        let mut h = real.iter().copied().take(64).collect::<Vec<u8>>();
        if h.len() == 64 {
            h[32..40].copy_from_slice(&u64::MAX.to_ne_bytes());
            std::fs::write(&p, &h).unwrap();
            assert_eq!(read(&File::open(&p).unwrap()), Lib::Other);
            h[56..58].copy_from_slice(&u16::MAX.to_ne_bytes());
            std::fs::write(&p, &h).unwrap();
            assert_eq!(read(&File::open(&p).unwrap()), Lib::Other);
        }
    }
}
