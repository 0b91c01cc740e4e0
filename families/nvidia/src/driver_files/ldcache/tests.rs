use super::*;

/// A cache in the new layout holding `entries` (flags, name, path).
pub fn build(entries: &[(i32, &str, &str)]) -> Vec<u8> {
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

/// The flags of this machine's native 64-bit ELF entries.
pub fn native() -> i32 {
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
