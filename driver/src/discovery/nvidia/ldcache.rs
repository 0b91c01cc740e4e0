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
    pub name: String,
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
pub(crate) mod tests {
    use super::*;

    /// A cache in the new layout holding `entries` (flags, name, path).
    pub(crate) fn build(entries: &[(i32, &str, &str)]) -> Vec<u8> {
        let strings_at = NEW_HEADER + entries.len() * NEW_ENTRY;
        let mut strings = Vec::new();
        let mut table = Vec::new();
        for (flags, name, path) in entries {
            let key = strings_at + strings.len();
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
            let value = strings_at + strings.len();
            strings.extend_from_slice(path.as_bytes());
            strings.push(0);
            table.extend_from_slice(&flags.to_ne_bytes());
            table.extend_from_slice(&(key as u32).to_ne_bytes());
            table.extend_from_slice(&(value as u32).to_ne_bytes());
            table.extend_from_slice(&0u32.to_ne_bytes());
            table.extend_from_slice(&0u64.to_ne_bytes());
        }
        let mut out = NEW_MAGIC.to_vec();
        out.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
        out.resize(NEW_HEADER, 0);
        out.extend(table);
        out.extend(strings);
        out
    }

    pub(crate) fn native() -> i32 {
        if cfg!(target_arch = "aarch64") {
            FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64
        } else {
            FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
        }
    }

    #[test]
    fn new_layout_keeps_native_64_bit_elf_entries() {
        let data = build(&[
            (native(), "libcuda.so.1", "/usr/lib64/libcuda.so.1"),
            (FLAG_ELF_LIBC6, "libcuda.so.1", "/usr/lib/libcuda.so.1"),
            (
                native(),
                "libnvidia-ml.so.1",
                "/usr/lib64/libnvidia-ml.so.1",
            ),
        ]);
        let e = parse(&data).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].name, "libnvidia-ml.so.1");
        assert_eq!(e[1].path, "/usr/lib64/libnvidia-ml.so.1");
    }

    #[test]
    fn old_layout_followed_by_new() {
        let mut data = OLD_MAGIC.to_vec();
        data.resize(12, 0);
        data.extend_from_slice(&1u32.to_ne_bytes());
        data.extend_from_slice(&[0; OLD_ENTRY]);
        data.resize(32, 0);
        data.extend(build(&[(native(), "libcuda.so.1", "/lib/libcuda.so.1")]));
        assert_eq!(parse(&data).unwrap()[0].path, "/lib/libcuda.so.1");
    }

    #[test]
    fn garbage_is_refused_not_panicked_on() {
        assert_eq!(parse(b"nonsense"), None);
        let mut data = build(&[(native(), "a", "b")]);
        data.truncate(60);
        assert_eq!(parse(&data), None);
    }

    /// Found by driver/tests/props.rs: the entry count sized the output vector before any
    /// entry was read, so a 48-byte header claiming 4 billion entries aborted the driver
    /// (`memory allocation of 124614374544 bytes failed`).
    #[test]
    fn a_huge_entry_count_is_not_reserved() {
        let mut data = build(&[(native(), "libc.so.6", "/lib/libc.so.6")]);
        data[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(parse(&data), None);
    }

    /// Many entries pointing at one long string: refused past PATH_MAX instead of copied
    /// once per entry.
    #[test]
    fn strings_are_bounded_by_path_max() {
        let n = 1000;
        let strings_at = (NEW_HEADER + n * NEW_ENTRY) as u32;
        let mut data = NEW_MAGIC.to_vec();
        data.extend_from_slice(&(n as u32).to_ne_bytes());
        data.resize(NEW_HEADER, 0);
        for _ in 0..n {
            data.extend_from_slice(&native().to_ne_bytes());
            data.extend_from_slice(&strings_at.to_ne_bytes());
            data.extend_from_slice(&strings_at.to_ne_bytes());
            data.extend_from_slice(&[0; 12]);
        }
        data.extend(std::iter::repeat_n(b'a', MAX_STRING));
        data.push(0);
        assert_eq!(parse(&data), None);
        let long = "a".repeat(MAX_STRING - 1);
        let e = parse(&build(&[(native(), "libx.so.1", &long)])).unwrap();
        assert_eq!(e[0].path, long);
    }

    /// The host's own cache, when there is one, parses and lists libc.
    #[test]
    fn the_hosts_cache_parses() {
        let Ok(data) = std::fs::read("/etc/ld.so.cache") else {
            return;
        };
        let e = parse(&data).expect("host cache");
        assert!(e.iter().any(|e| e.name.starts_with("libc.so")), "{e:?}");
    }
}
