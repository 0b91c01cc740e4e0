//! glibc's `/etc/ld.so.cache`: a strict reader and a writer.
//!
//! Layouts (glibc's `sysdeps/generic/dl-cache.h`): the old `ld.so-1.7.0` table followed,
//! 8-byte aligned, by the new `glibc-ld.so.cache1.1` table (ldconfig's default before glibc
//! 2.32), or the new table alone (2.32 and later; every loader since 2.2 reads it). In the
//! new table, string offsets count from the new table's own start. The reader treats the
//! file as hostile: every count, offset and length is checked and nothing is guessed (a
//! foreign byte order is an error). The writer writes the new table alone, without the
//! extension directory of glibc 2.33+ (its generator string and `glibc-hwcaps` names), in
//! the order the loader's binary search needs (see [`libcmp`]); it refuses what it cannot
//! order. Entries with hwcap bits refer to that directory: a caller that writes what it
//! read must leave those out or not write.

use std::cmp::Ordering;

const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const OLD_HEADER: usize = 16; // magic (11) padded to 12, nlibs u32
const OLD_ENTRY: usize = 12; // flags i32, key u32, value u32
const NEW_HEADER: usize = 48;
const NEW_ENTRY: usize = 24; // flags i32, key u32, value u32, osversion u32, hwcap u64
/// The new header's flags byte (glibc 2.33+; zero, "unset", before): its byte order.
const ENDIAN_MASK: u8 = 3;
const ENDIAN_UNSET: u8 = 0;
const ENDIAN_LITTLE: u8 = 2;
const ENDIAN_BIG: u8 = 3;

/// The largest cache read or written; a real one is tens of KiB.
pub const MAX_CACHE: usize = 16 << 20;
/// The most entries read or written; a large image has a few thousand.
pub const MAX_ENTRIES: usize = 1 << 16;
/// Longest string (a path, NUL excluded) read or written.
pub const MAX_STRING: usize = 4095;
/// A run of digits the loader's comparison adds up in a C `int`: longer runs could
/// overflow it, and the order it gives would then not be one a sort can reproduce.
const MAX_DIGITS: usize = 9;

/// An ELF library for glibc (`FLAG_ELF_LIBC6`).
pub const FLAG_ELF_LIBC6: i32 = 0x0003;
/// x86-64's 64-bit libraries (`FLAG_X8664_LIB64`).
pub const FLAG_X8664_LIB64: i32 = 0x0300;
/// AArch64's 64-bit libraries (`FLAG_AARCH64_LIB64`).
pub const FLAG_AARCH64_LIB64: i32 = 0x0a00;

/// The flags of a 64-bit library of this build's architecture: what the loader of a
/// 64-bit program here accepts (`_DL_CACHE_DEFAULT_ID`).
pub fn native_flags() -> i32 {
    if cfg!(target_arch = "aarch64") {
        FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64
    } else {
        FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
    }
}

/// One entry: a library name (its soname) and the path the loader opens for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Library type and architecture (`FLAG_*`).
    pub flags: i32,
    /// The name a program asks for (`libcuda.so.1`), without its NUL.
    pub key: &'a [u8],
    /// The file's path, without its NUL.
    pub value: &'a [u8],
    /// Minimum kernel version (unused by glibc 2.33+); copied as read.
    pub osversion: u32,
    /// Hardware capabilities (glibc 2.33+: an index into the extension directory's
    /// `glibc-hwcaps` names when bit 62 is set); zero for a plain entry.
    pub hwcap: u64,
}

/// Why a cache was not read or not written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Neither magic string at the start.
    #[error("not an ld.so.cache (no magic)")]
    NotACache,
    /// The old table alone, which no glibc since 2.2 writes.
    #[error("old-format cache without the new table")]
    OldFormatOnly,
    /// A structure runs past the end of the file or the table.
    #[error("truncated: {0} runs past the end")]
    Truncated(&'static str),
    /// More than the reader or writer accepts.
    #[error("too large: {0}")]
    TooLarge(&'static str),
    /// An offset into the string table that is not inside it.
    #[error("entry {entry}: string offset {offset} is outside the string table")]
    OutOfBounds {
        /// The entry's index.
        entry: usize,
        /// The offset found.
        offset: u32,
    },
    /// A string without its NUL within the table or [`MAX_STRING`].
    #[error("entry {0}: string not terminated")]
    Unterminated(usize),
    /// Something valid that this crate does not reproduce.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A name or path the writer refuses.
    #[error("invalid entry {0:?}: {1}")]
    Invalid(String, &'static str),
}

/// The entries of the new table, in file order. `data` is the whole file.
pub fn parse(data: &[u8]) -> Result<Vec<Entry<'_>>, Error> {
    if data.len() > MAX_CACHE {
        return Err(Error::TooLarge("file size"));
    }
    let start = if data.starts_with(NEW_MAGIC) {
        0
    } else if data.starts_with(OLD_MAGIC) {
        let n = u32_at(data, 12).ok_or(Error::Truncated("old header"))? as usize;
        let end = n
            .checked_mul(OLD_ENTRY)
            .and_then(|b| b.checked_add(OLD_HEADER))
            .filter(|&e| e <= data.len())
            .ok_or(Error::Truncated("old table"))?;
        let start = end.div_ceil(8) * 8;
        if !data.get(start..).is_some_and(|t| t.starts_with(NEW_MAGIC)) {
            return Err(Error::OldFormatOnly);
        }
        start
    } else {
        return Err(Error::NotACache);
    };
    let table = &data[start..];
    if table.len() < NEW_HEADER {
        return Err(Error::Truncated("new header"));
    }
    let endian = table[28] & ENDIAN_MASK;
    let native = if cfg!(target_endian = "little") {
        ENDIAN_LITTLE
    } else {
        ENDIAN_BIG
    };
    if endian != ENDIAN_UNSET && endian != native {
        return Err(Error::Unsupported(format!("byte order flag {endian}")));
    }
    let n = u32_at(table, 20).ok_or(Error::Truncated("new header"))? as usize;
    let len_strings = u32_at(table, 24).ok_or(Error::Truncated("new header"))? as usize;
    if n > MAX_ENTRIES {
        return Err(Error::TooLarge("entry count"));
    }
    // n <= MAX_ENTRIES: no overflow in the sums below.
    let strings_start = NEW_HEADER + n * NEW_ENTRY;
    let strings_end = strings_start
        .checked_add(len_strings)
        .filter(|&e| e <= table.len())
        .ok_or(Error::Truncated("entries and string table"))?;
    // Strings are read only from the string table: never from the header or the entries.
    let strings = &table[..strings_end];
    let string = |entry: usize, offset: u32| -> Result<&[u8], Error> {
        let at = offset as usize;
        if at < strings_start || at >= strings_end {
            return Err(Error::OutOfBounds { entry, offset });
        }
        let rest = &strings[at..strings.len().min(at + MAX_STRING + 1)];
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(Error::Unterminated(entry))?;
        Ok(&rest[..len])
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let e = &table[NEW_HEADER + i * NEW_ENTRY..NEW_HEADER + (i + 1) * NEW_ENTRY];
        let word = |at: usize| u32::from_ne_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]]);
        let mut h = [0u8; 8];
        h.copy_from_slice(&e[16..24]);
        out.push(Entry {
            flags: word(0) as i32,
            key: string(i, word(4))?,
            value: string(i, word(8))?,
            osversion: word(12),
            hwcap: u64::from_ne_bytes(h),
        });
    }
    Ok(out)
}

/// Whether the writer and the loader's order can take `key`.
fn check_key(key: &[u8]) -> Result<(), &'static str> {
    if key.is_empty() {
        return Err("empty name");
    }
    let mut run = 0;
    for &b in key {
        run = if b.is_ascii_digit() { run + 1 } else { 0 };
        if run > MAX_DIGITS {
            return Err("a run of more than 9 digits in the name");
        }
    }
    Ok(())
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// The loader's name order (`_dl_cache_libcmp` in glibc's `elf/dl-cache.c`): byte by byte
/// as C `char` (signed on x86-64, unsigned on AArch64: `c_char` matches), except that runs
/// of digits compare by their value and a digit sorts after any other byte. The cache is
/// sorted from the greatest name to the least (the loader's binary search moves right when
/// the name it looks for compares less). Keys with runs of more than 9 digits are refused
/// before they are compared, so the sums cannot overflow.
pub fn libcmp(a: &[u8], b: &[u8]) -> Ordering {
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    let (mut i, mut j) = (0, 0);
    loop {
        let (c1, c2) = (at(a, i), at(b, j));
        if c1 == 0 {
            return char_cmp(c1, c2);
        }
        match (c1.is_ascii_digit(), c2.is_ascii_digit()) {
            (true, true) => {
                let (mut v1, mut v2) = (0u64, 0u64);
                while at(a, i).is_ascii_digit() {
                    v1 = v1
                        .saturating_mul(10)
                        .saturating_add(u64::from(at(a, i) - b'0'));
                    i += 1;
                }
                while at(b, j).is_ascii_digit() {
                    v2 = v2
                        .saturating_mul(10)
                        .saturating_add(u64::from(at(b, j) - b'0'));
                    j += 1;
                }
                if v1 != v2 {
                    return v1.cmp(&v2);
                }
            }
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            (false, false) if c1 != c2 => return char_cmp(c1, c2),
            (false, false) => {
                i += 1;
                j += 1;
            }
        }
    }
}

fn char_cmp(a: u8, b: u8) -> Ordering {
    use std::ffi::c_char;
    (a as c_char).cmp(&(b as c_char))
}

/// A new-format cache holding `entries`. Among entries with equal names the earlier in
/// `entries` comes first, and the loader takes the first whose flags fit: so put the
/// entries that must win first.
pub fn build(entries: &[Entry<'_>]) -> Result<Vec<u8>, Error> {
    if entries.len() > MAX_ENTRIES {
        return Err(Error::TooLarge("entry count"));
    }
    for e in entries {
        let shown = || String::from_utf8_lossy(e.key).into_owned();
        check_key(e.key).map_err(|why| Error::Invalid(shown(), why))?;
        if e.key.contains(&0) || e.value.contains(&0) {
            return Err(Error::Invalid(shown(), "NUL in the name or path"));
        }
        if e.value.is_empty() || e.key.len() > MAX_STRING || e.value.len() > MAX_STRING {
            return Err(Error::Invalid(shown(), "empty or too long path"));
        }
    }
    let mut sorted: Vec<&Entry<'_>> = entries.iter().collect();
    // Stable: equal names keep the caller's order.
    sorted.sort_by(|x, y| libcmp(y.key, x.key));

    let strings_start = NEW_HEADER + sorted.len() * NEW_ENTRY;
    let mut strings: Vec<u8> = Vec::new();
    let mut table = Vec::with_capacity(sorted.len() * NEW_ENTRY);
    for e in &sorted {
        let key = append(&mut strings, strings_start, e.key)?;
        let value = append(&mut strings, strings_start, e.value)?;
        table.extend_from_slice(&e.flags.to_ne_bytes());
        table.extend_from_slice(&key.to_ne_bytes());
        table.extend_from_slice(&value.to_ne_bytes());
        table.extend_from_slice(&e.osversion.to_ne_bytes());
        table.extend_from_slice(&e.hwcap.to_ne_bytes());
    }
    let mut out = Vec::with_capacity(strings_start + strings.len());
    out.extend_from_slice(NEW_MAGIC);
    out.extend_from_slice(&(sorted.len() as u32).to_ne_bytes());
    out.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
    let endian = if cfg!(target_endian = "little") {
        ENDIAN_LITTLE
    } else {
        ENDIAN_BIG
    };
    // Flags byte, padding, no extension directory, unused.
    out.push(endian);
    out.resize(NEW_HEADER, 0);
    out.extend_from_slice(&table);
    out.extend_from_slice(&strings);
    Ok(out)
}

/// Appends `s` and its NUL to the string table; its offset. Strings are not shared: the
/// size cap bounds what a cache of many entries naming one long string could cost.
fn append(strings: &mut Vec<u8>, strings_start: usize, s: &[u8]) -> Result<u32, Error> {
    let o = strings_start + strings.len();
    if o + s.len() + 1 > MAX_CACHE {
        return Err(Error::TooLarge("string table"));
    }
    strings.extend_from_slice(s);
    strings.push(0);
    Ok(o as u32) // < MAX_CACHE
}

#[cfg(test)]
mod tests;
