//! The reader against hostile files, the writer against the reader, and the order against
//! the cases glibc's comparison defines.

use super::*;

fn entry<'a>(key: &'a str, value: &'a str) -> Entry<'a> {
    Entry {
        flags: native_flags(),
        key: key.as_bytes(),
        value: value.as_bytes(),
        osversion: 0,
        hwcap: 0,
    }
}

fn sample() -> Vec<u8> {
    build(&[
        entry("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
        entry("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        entry("libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"),
    ])
    .unwrap()
}

fn put_u32(data: &mut [u8], at: usize, v: u32) {
    data[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

#[test]
fn written_caches_read_back_sorted_greatest_first() {
    let data = sample();
    let got = parse(&data).unwrap();
    let keys: Vec<&[u8]> = got.iter().map(|e| e.key).collect();
    assert_eq!(
        keys,
        [&b"libz.so.1"[..], b"libcuda.so.1", b"libc.so.6"],
        "descending"
    );
    assert_eq!(got[1].value, b"/usr/lib/x86_64-linux-gnu/libcuda.so.1");
    assert!(got
        .iter()
        .all(|e| e.hwcap == 0 && e.flags == native_flags()));
    assert_eq!(&data[..20], NEW_MAGIC);
}

#[test]
fn equal_names_keep_the_callers_order() {
    let data = build(&[
        entry("libcuda.so.1", "/first"),
        entry("libcuda.so.1", "/second"),
    ])
    .unwrap();
    let got = parse(&data).unwrap();
    assert_eq!(
        (got[0].value, got[1].value),
        (&b"/first"[..], &b"/second"[..])
    );
}

#[test]
fn the_order_compares_digit_runs_by_value() {
    use Ordering::*;
    assert_eq!(libcmp(b"libfoo.so.10", b"libfoo.so.9"), Greater);
    assert_eq!(libcmp(b"libfoo.so.010", b"libfoo.so.10"), Equal);
    assert_eq!(
        libcmp(b"lib1", b"liba"),
        Greater,
        "a digit sorts after a letter"
    );
    assert_eq!(libcmp(b"liba", b"lib1"), Less);
    assert_eq!(libcmp(b"lib", b"lib1"), Less);
    assert_eq!(libcmp(b"lib1", b"lib"), Greater);
    assert_eq!(libcmp(b"libA", b"liba"), Less);
    assert_eq!(libcmp(b"libc.so.6", b"libc.so.6"), Equal);
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        libcmp(b"lib\xc3", b"liba"),
        Less,
        "char is signed on x86-64"
    );
}

#[test]
fn old_and_new_layout_is_read_from_the_new_table() {
    let new = sample();
    // An old table of 2 entries (16 + 24 = 40 bytes, 8-aligned), then the new table.
    let mut data = b"ld.so-1.7.0\0".to_vec();
    data.extend_from_slice(&2u32.to_ne_bytes());
    data.resize(40, 0);
    data.extend_from_slice(&new);
    assert_eq!(parse(&data).unwrap(), parse(&new).unwrap());
    // The new magic not where the old count puts it.
    put_u32(&mut data, 12, 3);
    assert_eq!(parse(&data), Err(Error::OldFormatOnly));
    put_u32(&mut data, 12, u32::MAX);
    assert_eq!(parse(&data), Err(Error::Truncated("old table")));
}

#[test]
fn truncated_files_are_refused_at_every_length() {
    let data = sample();
    for len in 0..data.len() {
        assert!(parse(&data[..len]).is_err(), "accepted {len} bytes");
    }
    assert_eq!(parse(b"\x7fELF...."), Err(Error::NotACache));
}

#[test]
fn huge_counts_are_refused_without_allocating() {
    let mut data = sample();
    put_u32(&mut data, 20, u32::MAX);
    assert_eq!(parse(&data), Err(Error::TooLarge("entry count")));
    put_u32(&mut data, 20, (MAX_ENTRIES) as u32);
    assert_eq!(
        parse(&data),
        Err(Error::Truncated("entries and string table"))
    );
    let mut data = sample();
    put_u32(&mut data, 24, u32::MAX);
    assert!(matches!(parse(&data), Err(Error::Truncated(_))));
    assert_eq!(
        parse(&vec![0u8; MAX_CACHE + 1]),
        Err(Error::TooLarge("file size"))
    );
}

#[test]
fn offsets_into_the_header_or_entries_or_past_the_strings_are_refused() {
    let data = sample();
    let strings_start = (NEW_HEADER + 3 * NEW_ENTRY) as u32;
    let end = data.len() as u32;
    for (field, offset) in [
        (4, 0),                 // the magic: overlaps the header
        (8, 20),                // the count
        (4, NEW_HEADER as u32), // the first entry
        (8, strings_start - 1),
        (4, end),
        (8, u32::MAX),
    ] {
        let mut bad = data.clone();
        put_u32(&mut bad, NEW_HEADER + NEW_ENTRY + field, offset);
        assert_eq!(
            parse(&bad),
            Err(Error::OutOfBounds { entry: 1, offset }),
            "{field} {offset}"
        );
    }
    // A string table whose last string has no NUL inside the table.
    let mut bad = data.clone();
    let last = bad.len() - 1;
    bad[last] = b'x';
    assert!(matches!(parse(&bad), Err(Error::Unterminated(_))));
    // The same, hidden by a len_strings one byte short.
    let mut bad = data.clone();
    let len = u32::from_ne_bytes(bad[24..28].try_into().unwrap());
    put_u32(&mut bad, 24, len - 1);
    assert!(parse(&bad).is_err());
}

#[test]
fn hwcap_entries_are_read_and_long_digit_runs_or_a_foreign_byte_order_refused() {
    let mut data = sample();
    data[NEW_HEADER + 16] = 1;
    assert_eq!(parse(&data).unwrap()[0].hwcap, 1);
    let mut data = sample();
    data[28] = if cfg!(target_endian = "little") { 3 } else { 2 };
    assert!(matches!(parse(&data), Err(Error::Unsupported(_))));
    let long = build(&[entry("libx.so.1234567890", "/x")]);
    assert!(matches!(long, Err(Error::Invalid(..))));
}

#[test]
fn the_writer_refuses_what_the_format_cannot_hold() {
    for (k, v) in [
        ("", "/x"),
        ("a\0b", "/x"),
        ("libx.so", ""),
        ("libx.so", "/a\0b"),
    ] {
        assert!(build(&[entry(k, v)]).is_err(), "{k:?} {v:?}");
    }
    let many: Vec<Entry<'_>> = (0..=MAX_ENTRIES).map(|_| entry("l", "/l")).collect();
    assert_eq!(build(&many), Err(Error::TooLarge("entry count")));
}

#[test]
fn many_entries_naming_one_long_string_stop_at_the_size_cap() {
    let path = "/p".repeat(2000);
    let many: Vec<Entry<'_>> = (0..5000).map(|_| entry("libx.so.1", &path)).collect();
    assert_eq!(build(&many), Err(Error::TooLarge("string table")));
    assert_eq!(parse(&build(&many[..100]).unwrap()).unwrap().len(), 100);
}

/// The host's own cache, written by its ldconfig, where there is one: read whole, and in
/// the order this crate writes.
#[test]
fn the_hosts_cache_reads_and_is_in_libcmp_order() {
    let Ok(data) = std::fs::read("/etc/ld.so.cache") else {
        return;
    };
    let got = parse(&data).unwrap();
    assert!(!got.is_empty());
    for w in got.windows(2) {
        assert_ne!(libcmp(w[0].key, w[1].key), Ordering::Less, "{w:?}");
    }
}
