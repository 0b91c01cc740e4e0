//! Reader for glibc's `/etc/ld.so.cache`: which library paths the dynamic linker knows,
//! used to find the driver's libraries wherever a distribution put them.
//!
//! Two layouts exist: the old `ld.so-1.7.0` table, optionally followed by the new
//! `glibc-ld.so.cache1.1` one, or the new one alone (glibc 2.32 and later). Only the new
//! table is read when present; string offsets in it count from its own start.

const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const OLD_HEADER: usize = 16; // magic (11) padded to 12, nlibs u32
const OLD_ENTRY: usize = 12; // flags i32, key u32, value u32
const NEW_HEADER: usize = 48;
const NEW_ENTRY: usize = 24; // flags i32, key, value, osversion u32, hwcap u64

const FLAG_TYPE_MASK: i32 = 0x00ff;
const FLAG_ELF_LIBC6: i32 = 0x0003;
const FLAG_ARCH_MASK: i32 = 0xff00;
const FLAG_X8664_LIB64: i32 = 0x0300;
const FLAG_AARCH64_LIB64: i32 = 0x0a00;
/// Longest string read from the cache: a path of at most PATH_MAX bytes, NUL included.
const MAX_STRING: usize = 4096;

/// One library: its name (the soname) and full path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The soname (`libnvidia-ml.so.1`).
    pub name: String,
    /// Where the cache says it is.
    pub path: String,
}

/// The 64-bit ELF entries of this machine's architecture. `None` when the data is not a
/// cache this reader understands.
pub fn parse(data: &[u8]) -> Option<Vec<Entry>> {
    let new_start = if data.starts_with(NEW_MAGIC) {
        0
    } else if data.starts_with(OLD_MAGIC) {
        let n = u32_at(data, 12)? as usize;
        let end = OLD_HEADER.checked_add(n.checked_mul(OLD_ENTRY)?)?;
        // The new table follows, aligned to 8 bytes.
        let start = end.div_ceil(8) * 8;
        if !data.get(start..)?.starts_with(NEW_MAGIC) {
            return None;
        }
        start
    } else {
        return None;
    };
    let table = data.get(new_start..)?;
    let n = u32_at(table, 20)? as usize;
    let want_arch = if cfg!(target_arch = "aarch64") {
        FLAG_AARCH64_LIB64
    } else {
        FLAG_X8664_LIB64
    };
    // The count is the file's word: reserve no more than the table can hold.
    let mut out = Vec::with_capacity(n.min(table.len() / NEW_ENTRY));
    for i in 0..n {
        let at = NEW_HEADER.checked_add(i.checked_mul(NEW_ENTRY)?)?;
        let flags = u32_at(table, at)? as i32;
        let key = u32_at(table, at + 4)? as usize;
        let value = u32_at(table, at + 8)? as usize;
        if flags & FLAG_TYPE_MASK != FLAG_ELF_LIBC6 || flags & FLAG_ARCH_MASK != want_arch {
            continue;
        }
        out.push(Entry {
            name: c_str_at(table, key)?,
            path: c_str_at(table, value)?,
        });
    }
    Some(out)
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn c_str_at(data: &[u8], at: usize) -> Option<String> {
    let rest = data.get(at..)?;
    // Bounded, so that entries sharing one long string cost neither quadratic time nor
    // quadratic memory.
    let rest = &rest[..rest.len().min(MAX_STRING)];
    let end = rest.iter().position(|&b| b == 0)?;
    String::from_utf8(rest[..end].to_vec()).ok()
}

#[cfg(test)]
pub mod tests;
