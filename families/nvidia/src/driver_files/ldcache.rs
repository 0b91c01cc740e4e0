//! Reader for glibc's `/etc/ld.so.cache`: which library paths the dynamic linker knows,
//! used to find the driver's libraries wherever a distribution put them. The format is
//! read by `graft-ldcache` (old table followed by the new one, or the new one alone; every
//! offset and string checked); this keeps the native 64-bit ELF entries as strings.

#[cfg(test)]
use graft_ldcache::{FLAG_AARCH64_LIB64, FLAG_ELF_LIBC6, FLAG_X8664_LIB64};

/// Longest string the tests count, its NUL included.
#[cfg(test)]
const MAX_STRING: usize = graft_ldcache::MAX_STRING + 1;
#[cfg(test)]
const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
#[cfg(test)]
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
#[cfg(test)]
const OLD_ENTRY: usize = 12; // flags i32, key u32, value u32
#[cfg(test)]
const NEW_HEADER: usize = 48;
#[cfg(test)]
const NEW_ENTRY: usize = 24; // flags i32, key, value, osversion u32, hwcap u64

const FLAG_TYPE_MASK: i32 = 0x00ff;
const FLAG_ARCH_MASK: i32 = 0xff00;

/// One library: its name (the soname) and full path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The soname (`libnvidia-ml.so.1`).
    pub name: String,
    /// Where the cache says it is.
    pub path: String,
}

/// The 64-bit ELF entries of this machine's architecture. `None` when the data is not a
/// cache `graft-ldcache` reads, or one of those entries is not UTF-8.
pub fn parse(data: &[u8]) -> Option<Vec<Entry>> {
    let native = graft_ldcache::native_flags();
    let want = |flags: i32| {
        flags & FLAG_TYPE_MASK == native & FLAG_TYPE_MASK
            && flags & FLAG_ARCH_MASK == native & FLAG_ARCH_MASK
    };
    graft_ldcache::parse(data)
        .ok()?
        .into_iter()
        .filter(|e| want(e.flags))
        .map(|e| {
            Some(Entry {
                name: String::from_utf8(e.key.to_vec()).ok()?,
                path: String::from_utf8(e.value.to_vec()).ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
pub mod tests;
