//! Property tests for graft-driver's decoders of outside input: the HTTP/2 + HPACK rewriter
//! on the kubelet's connection (`plugin::authority`), opaque claim configuration
//! (`opaque::resolve`), the device list (`discovery::char`), glibc's ld.so.cache and the
//! NVIDIA /proc files (both in `discovery::nvidia::driver_files`).
//! graft-driver runs as root: no input may make it panic, hang, or allocate what a header
//! merely claims.
//!
//! Inputs are arbitrary bytes and structure-aware mutations of valid instances (generated
//! frames, header blocks, caches, configs and files, then bytes flipped, inserted, deleted,
//! duplicated or cut, or fields and lengths replaced). Every test is bounded: explicit case
//! counts, no failure persistence, and timeouts around everything asynchronous.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use graft_driver::discovery::char::CharDiscovery;
use graft_driver::discovery::config::load_config;
use graft_driver::discovery::nvidia::driver_files as procfs;
use graft_driver::discovery::nvidia::driver_files::{parse_ldcache, LdCacheEntry};
use graft_driver::discovery::Discovery;
use graft_driver::plugin::authority::AuthorityFix;
use graft_driver::{limits, opaque};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "../../record/tests/support/mutate.rs"]
mod mutate;
use mutate::Mutation;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        max_shrink_iters: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn run<S: Strategy>(cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    if let Err(e) = TestRunner::new(config(cases)).run(&strategy, test) {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------
// The largest single allocation made on the current thread while tracking is on.

struct Tracking;

thread_local! {
    static TRACK: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = TRACK.try_with(|t| {
        if t.get() {
            let _ = LARGEST.try_with(|m| m.set(m.get().max(size)));
        }
    });
}

// SAFETY: forwards to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|m| m.set(0));
    TRACK.with(|t| t.set(true));
    let out = f();
    TRACK.with(|t| t.set(false));
    (out, LARGEST.with(|m| m.get()))
}

// ---------------------------------------------------------------------------------------
// Byte-level mutation.

const TOKENS: &[&[u8]] = &[
    b"\0",
    b"\n",
    b":",
    b" ",
    b"\"",
    b"'",
    b"=",
    b"[",
    b"]",
    b"{",
    b"}",
    b"[[devices]]\n",
    b"*",
    b"**",
    b"..",
    b"/",
    b"-1",
    b"0",
    b"4294967296",
    b"99999999999999999999",
    b"0o7777",
    b"0x",
    b"1e999",
    b"nan",
    b"inf",
    b"true",
    b"\xff\xfe",
    b"\xc3\xa4",
    &[0x80],
    &[0xff, 0xff, 0xff, 0xff],
    &[0x00, 0x00, 0x00, 0x00],
    &[0x01, 0x00, 0x00, 0x00],
];

fn mutation() -> impl Strategy<Value = Mutation> {
    mutate::mutation(
        TOKENS.len(),
        mutate::Mix {
            flip: 2,
            set: 2,
            token: 2,
            delete_max: 32,
            duplicate_max: 64,
        },
    )
}

fn apply(data: &mut Vec<u8>, m: &Mutation) {
    mutate::apply(data, m, TOKENS)
}

fn mutated(data: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    mutate::mutated(data, muts, TOKENS)
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 0..4)
}

/// Fails the case if `f` takes longer than `limit` (a debug build, so generous).
fn timed<T>(limit: Duration, what: &str, f: impl FnOnce() -> T) -> Result<T, TestCaseError> {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    prop_assert!(took <= limit, "{what} took {took:?}");
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// 1. ld.so.cache.

const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const NEW_HEADER: usize = 48;
const NEW_ENTRY: usize = 24;

fn native() -> i32 {
    if cfg!(target_arch = "aarch64") {
        0x0a03
    } else {
        0x0303
    }
}

/// A cache in the new layout, like ldconfig writes it.
fn build_cache(entries: &[(i32, String, String)]) -> Vec<u8> {
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

/// The old table (`nlibs` zeroed entries) in front of a new one.
fn with_old_table(new: Vec<u8>, nlibs: u32) -> Vec<u8> {
    let mut out = OLD_MAGIC.to_vec();
    out.resize(12, 0);
    out.extend_from_slice(&nlibs.to_ne_bytes());
    out.resize(16 + nlibs as usize * 12, 0);
    out.resize(out.len().div_ceil(8) * 8, 0);
    out.extend(new);
    out
}

fn cache_entry() -> impl Strategy<Value = (i32, String, String)> {
    (
        prop_oneof![
            6 => Just(native()),
            1 => Just(0x0003),
            1 => Just(0x0303),
            1 => Just(0x0a03),
            1 => any::<i32>(),
        ],
        prop_oneof![
            3 => "lib[a-z-]{1,10}\\.so\\.[0-9]{1,3}",
            1 => Just("libcuda.so.1".to_string()),
            1 => Just("libnvidia-ml.so.1".to_string()),
            1 => "[^\\x00]{0,12}",
        ],
        prop_oneof![
            3 => "/usr/lib(64)?/[a-z0-9_.-]{1,16}",
            1 => "[^\\x00]{0,20}",
        ],
    )
}

#[derive(Debug, Clone)]
enum CacheEdit {
    /// Replace the u32 at `field` of entry `i` (0 flags, 1 key, 2 value) or of the header
    /// (entry `None`: 0 nlibs, 1 string table length).
    Field(Option<usize>, usize, u32),
    Bytes(Vec<Mutation>),
}

fn cache_edit() -> impl Strategy<Value = CacheEdit> {
    let value = prop_oneof![
        Just(0u32),
        Just(1),
        Just(47),
        Just(48),
        Just(u32::MAX),
        Just(0x0aaa_aaaa),
        Just(0x7fff_ffff),
        0u32..4096,
        any::<u32>(),
    ];
    prop_oneof![
        3 => (prop::option::of(0usize..8), 0usize..3, value)
            .prop_map(|(i, f, v)| CacheEdit::Field(i, f, v)),
        2 => prop::collection::vec(mutation(), 1..4).prop_map(CacheEdit::Bytes),
    ]
}

fn edit_cache(data: &mut Vec<u8>, base: usize, e: &CacheEdit) {
    match e {
        CacheEdit::Field(entry, field, v) => {
            let at = match entry {
                None => base + 20 + 4 * (field % 2),
                Some(i) => base + NEW_HEADER + i * NEW_ENTRY + 4 * field,
            };
            if at + 4 <= data.len() {
                data[at..at + 4].copy_from_slice(&v.to_ne_bytes());
            }
        }
        CacheEdit::Bytes(ms) => ms.iter().for_each(|m| apply(data, m)),
    }
}

/// No panic, bounded time, no allocation beyond a small multiple of the input, and every
/// entry's strings lie in the input.
fn check_ldcache(data: &[u8]) -> Result<Option<Vec<LdCacheEntry>>, TestCaseError> {
    let (out, largest) = largest_allocation(|| {
        timed(Duration::from_secs(2), "parse_ldcache", || {
            parse_ldcache(data)
        })
    });
    let out = out?;
    prop_assert!(
        largest <= 4 * data.len() + 64 * 1024,
        "allocated {largest} bytes at once for {} bytes of input",
        data.len()
    );
    if let Some(entries) = &out {
        for e in entries {
            let found = |s: &str| {
                let mut needle = s.as_bytes().to_vec();
                needle.push(0);
                data.windows(needle.len()).any(|w| w == needle)
            };
            prop_assert!(found(&e.name) && found(&e.path), "{e:?} not in the input");
        }
    }
    Ok(out)
}

#[test]
fn ldcache_arbitrary_bytes() {
    let input = prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..256),
        1 => prop::collection::vec(any::<u8>(), 0..256)
            .prop_map(|b| [NEW_MAGIC, &b[..]].concat()),
        1 => prop::collection::vec(any::<u8>(), 0..256)
            .prop_map(|b| [OLD_MAGIC, &b[..]].concat()),
    ];
    run(3000, input, |data| check_ldcache(&data).map(|_| ()));
}

/// A cache as ldconfig writes it parses back to its native entries, in order.
#[test]
fn ldcache_round_trip() {
    let input = (
        prop::collection::vec(cache_entry(), 0..8),
        prop::option::of(0u32..5),
    );
    run(1000, input, |(entries, old)| {
        let mut data = build_cache(&entries);
        if let Some(n) = old {
            data = with_old_table(data, n);
        }
        let got = check_ldcache(&data)?.expect("a valid cache");
        let want: Vec<(String, String)> = entries
            .iter()
            .filter(|(f, _, _)| f & 0xffff == native())
            .map(|(_, n, p)| (n.clone(), p.clone()))
            .collect();
        let got: Vec<(String, String)> = got.into_iter().map(|e| (e.name, e.path)).collect();
        prop_assert_eq!(got, want);
        Ok(())
    });
}

#[test]
fn ldcache_mutated_caches() {
    let input = (
        prop::collection::vec(cache_entry(), 0..8),
        prop::option::of(0u32..5),
        prop::collection::vec(cache_edit(), 1..4),
    );
    run(2000, input, |(entries, old, edits)| {
        let mut data = build_cache(&entries);
        let mut base = 0;
        if let Some(n) = old {
            let len = data.len();
            data = with_old_table(data, n);
            base = data.len() - len;
        }
        for e in &edits {
            edit_cache(&mut data, base, e);
        }
        check_ldcache(&data).map(|_| ())
    });
}

/// A header that claims 4 billion entries is refused (or read as far as the data goes)
/// without reserving room for them.
#[test]
fn ldcache_huge_entry_count_is_not_allocated() {
    for n in [u32::MAX, 0x0aaa_aaaa, 0x0100_0000] {
        let mut data = build_cache(&[(native(), "libc.so.6".into(), "/lib/libc.so.6".into())]);
        data[20..24].copy_from_slice(&n.to_ne_bytes());
        let (_, largest) = largest_allocation(|| parse_ldcache(&data));
        assert!(
            largest < 64 * 1024,
            "{n} entries: allocated {largest} bytes"
        );
    }
}

/// Many entries pointing at one long string cost neither quadratic time nor quadratic
/// memory: strings end within PATH_MAX or the cache is refused, so the output is at most
/// two paths per entry.
#[test]
fn ldcache_shared_long_strings_are_bounded() {
    for (n, len) in [(20_000usize, 1usize << 20), (2_000, 4000)] {
        let strings_at = NEW_HEADER + n * NEW_ENTRY;
        let mut data = NEW_MAGIC.to_vec();
        data.extend_from_slice(&(n as u32).to_ne_bytes());
        data.resize(NEW_HEADER, 0);
        for _ in 0..n {
            data.extend_from_slice(&native().to_ne_bytes());
            data.extend_from_slice(&(strings_at as u32).to_ne_bytes());
            data.extend_from_slice(&(strings_at as u32).to_ne_bytes());
            data.extend_from_slice(&[0u8; 12]);
        }
        data.extend(std::iter::repeat_n(b'a', len));
        data.push(0);
        let start = Instant::now();
        let out = parse_ldcache(&data);
        let took = start.elapsed();
        let total: usize = out
            .iter()
            .flatten()
            .map(|e| e.name.len() + e.path.len())
            .sum();
        assert!(took < Duration::from_secs(10), "took {took:?}");
        assert!(
            total <= n * 2 * 4096,
            "{total} bytes of strings for {n} entries"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 2. /proc/devices, mig-minors and capability files.

fn proc_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just("Character devices:".to_string()),
        Just("Block devices:".to_string()),
        Just(String::new()),
        (0u32..600, "[a-z-]{1,24}").prop_map(|(m, n)| format!("{m:3} {n}")),
        ("[a-z0-9/]{1,24}", 0u32..600).prop_map(|(n, m)| format!("{n} {m}")),
        (
            prop_oneof![
                Just("DeviceFileMinor"),
                Just("DeviceFileMode"),
                Just("DeviceFileModify")
            ],
            prop_oneof![
                (0u32..1000).prop_map(|v| v.to_string()),
                Just("-1".into()),
                Just("4294967296".into()),
                Just(String::new()),
                "[ -~]{0,8}"
            ]
        )
            .prop_map(|(k, v)| format!("{k}: {v}")),
        any::<String>(),
    ];
    prop_oneof![
        3 => prop::collection::vec(line, 0..12).prop_map(|l| l.join("\n")),
        1 => any::<String>(),
    ]
}

fn mutated_text(text: String, muts: &[Mutation]) -> String {
    String::from_utf8_lossy(&mutated(text.into_bytes(), muts)).into_owned()
}

#[test]
fn procfs_parsers_arbitrary_and_mutated() {
    run(2000, (proc_text(), mutations()), |(text, muts)| {
        let text = mutated_text(text, &muts);
        let majors = procfs::char_majors(&text);
        for name in majors.keys() {
            prop_assert!(!name.is_empty() && !name.contains(char::is_whitespace));
        }
        let minors = procfs::mig_minors(&text);
        for name in minors.keys() {
            prop_assert!(!name.contains(' '));
        }
        if let Some(c) = procfs::capability_file(&text) {
            prop_assert!(text.contains("DeviceFileMinor"));
            let _ = c.mode;
        }
        Ok(())
    });
}

/// What the kernel writes parses back to what it said.
#[test]
fn procfs_round_trips() {
    let input = (
        prop::collection::btree_map("[a-z][a-z0-9_-]{0,20}", any::<u32>(), 0..8),
        prop::collection::btree_map("[a-z][a-z0-9_-]{0,20}", any::<u32>(), 0..4),
        prop::collection::btree_map("[a-z0-9/]{1,24}", any::<u32>(), 0..8),
        any::<u32>(),
        prop::option::of(any::<u32>()),
    );
    run(1000, input, |(chars, blocks, caps, minor, mode)| {
        let mut text = String::from("Character devices:\n");
        for (n, m) in &chars {
            text += &format!("{m:3} {n}\n");
        }
        text += "\nBlock devices:\n";
        for (n, m) in &blocks {
            text += &format!("{m:3} {n}\n");
        }
        prop_assert_eq!(procfs::char_majors(&text), chars);
        let text: String = caps.iter().map(|(n, m)| format!("{n} {m}\n")).collect();
        prop_assert_eq!(procfs::mig_minors(&text), caps);
        let mut text = format!("DeviceFileMinor: {minor}\n");
        if let Some(m) = mode {
            text += &format!("DeviceFileMode: {m}\n");
        }
        text += "DeviceFileModify: 1\n";
        let c = procfs::capability_file(&text).expect("a capability file");
        prop_assert_eq!((c.minor, c.mode), (minor, mode.unwrap_or(0o444)));
        Ok(())
    });
}

#[test]
fn procfs_mig_access_cap_over_mutated_files() {
    let input = (
        proc_text(),
        proc_text(),
        mutations(),
        0u32..4,
        0u32..4,
        prop::option::of(0u32..4),
    );
    run(300, input, |(cap, minors, muts, parent, gi, ci)| {
        let proc = tempfile::tempdir().unwrap();
        let dir = proc
            .path()
            .join(format!("driver/nvidia/capabilities/gpu{parent}/mig/gi{gi}"));
        std::fs::create_dir_all(dir.join("ci0")).unwrap();
        let cap = mutated(cap.into_bytes(), &muts);
        std::fs::write(dir.join("access"), &cap).unwrap();
        std::fs::write(dir.join("ci0/access"), &cap).unwrap();
        std::fs::create_dir_all(proc.path().join("driver/nvidia-caps")).unwrap();
        std::fs::write(proc.path().join("driver/nvidia-caps/mig-minors"), minors).unwrap();
        let _ = procfs::mig_access_cap(proc.path(), parent, gi, ci);
        let _ = procfs::read_char_majors(proc.path());
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// 3. The device list (`char` backend).

fn toml_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("x".repeat(100)),
        Just("a\0b".to_string()),
        Just("LD_PRELOAD".to_string()),
        Just("A=B".to_string()),
        "[a-z0-9_.-]{1,10}",
        any::<String>(),
    ]
}

fn device_path() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just("/dev/null".to_string()),
        2 => Just("/dev/zero".to_string()),
        2 => Just("/dev/net/tun".to_string()),
        3 => Just("/dev/ttyUSB*".to_string()),
        2 => Just("/dev/tty[A-Z]*".to_string()),
        1 => Just("/dev/[".to_string()),
        2 => Just("/dev/**/*".to_string()),
        1 => Just("/dev/notadev".to_string()),
        1 => Just("/dev/dangling".to_string()),
        2 => Just("/dev/sub/*".to_string()),
        1 => Just("/dev/".to_string()),
        1 => Just("/etc/passwd".to_string()),
        2 => "/dev/[a-zA-Z0-9_*?/-]{1,12}",
        1 => toml_string(),
    ]
}

fn attribute_value() -> impl Strategy<Value = toml::Value> {
    prop_oneof![
        3 => any::<bool>().prop_map(toml::Value::Boolean),
        3 => any::<i64>().prop_map(toml::Value::Integer),
        6 => "[a-z0-9 ]{0,12}".prop_map(toml::Value::String),
        1 => toml_string().prop_map(toml::Value::String),
        3 => prop_oneof![
            Just("1.2.3".to_string()),
            Just("01.2.3".to_string()),
            Just("1.2.3-rc.1+b.5".to_string()),
            toml_string()
        ]
        .prop_map(|v| {
            let mut t = toml::map::Map::new();
            t.insert("version".into(), toml::Value::String(v));
            toml::Value::Table(t)
        }),
        1 => any::<f64>().prop_map(toml::Value::Float),
        1 => prop::collection::vec(any::<i64>().prop_map(toml::Value::Integer), 0..2)
            .prop_map(toml::Value::Array),
    ]
}

fn char_entry() -> impl Strategy<Value = toml::Value> {
    (
        device_path(),
        prop::option::weighted(
            0.3,
            prop_oneof![
                4 => Just("nul".to_string()),
                4 => "[a-z][a-z0-9-]{0,10}",
                1 => toml_string()
            ],
        ),
        prop::option::weighted(
            0.2,
            prop_oneof![
                6 => Just("/dev/graft-null".to_string()),
                1 => Just("/dev/../etc/x".to_string()),
                1 => toml_string()
            ],
        ),
        prop::option::weighted(0.4, prop_oneof![9 => 0i64..0o7777, 1 => any::<i64>()]),
        prop::option::weighted(0.2, prop_oneof![9 => 0i64..65536, 1 => any::<i64>()]),
        prop::collection::btree_map(
            prop_oneof![
                8 => Just("type".to_string()),
                4 => Just("vendor".to_string()),
                2 => Just("a.b/c".to_string()),
                1 => Just("bad name!".to_string()),
                2 => Just("resource.kubernetes.io/pcieRoot".to_string()),
                1 => toml_string()
            ],
            attribute_value(),
            0..4,
        ),
        prop::collection::btree_map(
            prop_oneof![9 => "[A-Z_][A-Z0-9_]{0,8}", 1 => toml_string()],
            prop_oneof![9 => "[ -~]{0,12}", 1 => toml_string()],
            0..3,
        ),
        prop::option::weighted(0.05, toml_string()),
    )
        .prop_map(|(path, name, cpath, mode, gid, attrs, env, unknown)| {
            let mut t = toml::map::Map::new();
            t.insert("path".into(), toml::Value::String(path));
            if let Some(n) = name {
                t.insert("name".into(), toml::Value::String(n));
            }
            if let Some(c) = cpath {
                t.insert("container_path".into(), toml::Value::String(c));
            }
            if let Some(m) = mode {
                t.insert("mode".into(), toml::Value::Integer(m));
            }
            if let Some(g) = gid {
                t.insert("gid".into(), toml::Value::Integer(g));
            }
            if !attrs.is_empty() {
                t.insert(
                    "attributes".into(),
                    toml::Value::Table(attrs.into_iter().collect()),
                );
            }
            if !env.is_empty() {
                t.insert(
                    "env".into(),
                    toml::Value::Table(
                        env.into_iter()
                            .map(|(k, v)| (k, toml::Value::String(v)))
                            .collect(),
                    ),
                );
            }
            if let Some(u) = unknown {
                t.insert("colour".into(), toml::Value::String(u));
            }
            toml::Value::Table(t)
        })
}

fn char_config_text() -> impl Strategy<Value = Vec<u8>> {
    let generated = prop::collection::vec(char_entry(), 0..3)
        .prop_map(|entries| {
            let mut root = toml::map::Map::new();
            root.insert("devices".into(), toml::Value::Array(entries));
            toml::to_string(&toml::Value::Table(root))
                .unwrap_or_default()
                .into_bytes()
        })
        .boxed();
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..200),
        3 => generated.clone(),
        3 => (generated, mutations()).prop_map(|(t, m)| mutated(t, &m)),
    ]
}

/// A host root with a small /dev: char devices (through symlinks to the real ones), a
/// regular file, a directory, and a sysfs root without PCI.
struct Host {
    root: tempfile::TempDir,
    sysfs: tempfile::TempDir,
}

fn host() -> Host {
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("dev");
    std::fs::create_dir_all(dev.join("net")).unwrap();
    std::fs::create_dir_all(dev.join("sub/deeper")).unwrap();
    for (link, target) in [
        ("null", "/dev/null"),
        ("zero", "/dev/zero"),
        ("net/tun", "/dev/null"),
        ("ttyUSB0", "/dev/null"),
        ("ttyUSB1", "/dev/zero"),
        ("ttyA", "/dev/null"),
        ("sub/x", "/dev/null"),
        ("sub/deeper/y", "/dev/zero"),
        ("dangling", "/nonexistent/graft"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link)).unwrap();
    }
    std::fs::write(dev.join("notadev"), b"").unwrap();
    let sysfs = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(sysfs.path().join("devices")).unwrap();
    Host { root, sysfs }
}

#[test]
fn char_config_arbitrary_and_mutated() {
    let host = host();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("devices.toml");
    run(800, char_config_text(), |text| {
        std::fs::write(&cfg, &text).unwrap();
        let loaded = timed(Duration::from_secs(2), "load_config", || load_config(&cfg))?;
        let Ok(config) = loaded else {
            prop_assert!(CharDiscovery::new(
                cfg.clone(),
                host.sysfs.path().into(),
                host.root.path().into()
            )
            .is_err());
            return Ok(());
        };
        // A path with `..` is looked up outside the host root (see the report); keep the
        // discovery inside the temporary tree.
        if config.devices.iter().any(|d| d.path.contains("..")) {
            return Ok(());
        }
        let discovery = CharDiscovery::new(
            cfg.clone(),
            host.sysfs.path().into(),
            host.root.path().into(),
        )
        .map_err(|e| TestCaseError::fail(format!("loaded but new failed: {e}")))?;
        let _ = discovery.watch_paths();
        let found = timed(Duration::from_secs(5), "discover", || discovery.discover())?;
        if let Ok(devices) = found {
            let mut names = std::collections::BTreeSet::new();
            for d in &devices {
                prop_assert!(names.insert(d.name.clone()), "duplicate {}", d.name);
                limits::check_device(d).map_err(|e| TestCaseError::fail(e.to_string()))?;
                graft_record::validate_edits(&d.name, &d.edits)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                for n in &d.edits.device_nodes {
                    prop_assert!(n.path.starts_with("/dev/"));
                }
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// 4. Opaque claim configuration.

fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("graft.dev/v1alpha1".to_string()),
        Just("DeviceConfig".to_string()),
        Just("TimeSlicing".to_string()),
        Just("Long".to_string()),
        Just("LD_PRELOAD".to_string()),
        Just("NVIDIA_VISIBLE_DEVICES".to_string()),
        Just("A=B".to_string()),
        Just("a\0b".to_string()),
        Just("x".repeat(40_000)),
        "[a-zA-Z_][a-zA-Z0-9_]{0,8}",
        any::<String>(),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u64..0o1000).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        json_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("apiVersion".to_string()),
                    Just("kind".to_string()),
                    Just("env".to_string()),
                    Just("fileMode".to_string()),
                    Just("uid".to_string()),
                    Just("gid".to_string()),
                    Just("sharing".to_string()),
                    Just("strategy".to_string()),
                    Just("timeSlicing".to_string()),
                    Just("interval".to_string()),
                    json_string()
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid DeviceConfig, then fields replaced, removed or added.
fn device_config_params() -> impl Strategy<Value = Value> {
    let valid = (
        prop::collection::btree_map("[A-Z][A-Z0-9_]{0,8}", "[ -~]{0,12}", 0..3),
        prop::option::of(0u32..0o1000),
        prop::option::of(any::<u32>()),
        prop::option::of(prop_oneof![
            Just("Default"),
            Just("Short"),
            Just("Medium"),
            Just("Long")
        ]),
    )
        .prop_map(|(env, mode, uid, interval)| {
            let mut v =
                json!({"apiVersion": opaque::API_VERSION, "kind": opaque::KIND, "env": env});
            if let Some(m) = mode {
                v["fileMode"] = m.into();
            }
            if let Some(u) = uid {
                v["uid"] = u.into();
            }
            if let Some(i) = interval {
                v["sharing"] = json!({"strategy": "TimeSlicing", "timeSlicing": {"interval": i}});
            }
            v
        });
    let edit = (
        prop_oneof![
            Just("apiVersion"),
            Just("kind"),
            Just("env"),
            Just("fileMode"),
            Just("uid"),
            Just("gid"),
            Just("sharing"),
            Just("colour")
        ],
        prop::option::of(json_value()),
    );
    (valid, prop::collection::vec(edit, 0..3)).prop_map(|(mut v, edits)| {
        for (k, new) in edits {
            match new {
                Some(x) => v[k] = x,
                None => {
                    v.as_object_mut().unwrap().remove(k);
                }
            }
        }
        v
    })
}

fn allocation_config() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just("FromClass"), Just("FromClaim"), Just("")],
        prop::option::of(prop::collection::vec(
            prop_oneof![
                Just("dev".to_string()),
                Just("dev/sub".to_string()),
                json_string()
            ],
            0..3,
        )),
        prop_oneof![
            6 => Just(graft_driver::DEFAULT_DRIVER_NAME.to_string()),
            1 => json_string()
        ],
        prop_oneof![3 => device_config_params(), 1 => json_value()],
        any::<bool>(),
    )
        .prop_map(|(source, requests, driver, params, with_opaque)| {
            let mut c = json!({"source": source});
            if let Some(r) = requests {
                c["requests"] = json!(r);
            }
            if with_opaque {
                c["opaque"] = json!({"driver": driver, "parameters": params});
            }
            c
        })
}

#[test]
fn opaque_resolve_never_panics() {
    let input = (
        prop::collection::vec(allocation_config(), 0..4),
        prop_oneof![
            Just("dev".to_string()),
            Just("dev/sub".to_string()),
            json_string()
        ],
    );
    let families = graft_driver::families::opaque();
    run(1500, input, |(configs, request)| {
        let configs: Vec<k8s_openapi::api::resource::v1::DeviceAllocationConfiguration> =
            serde_json::from_value(Value::Array(configs)).expect("allocation configs");
        let _ = opaque::resolve(
            graft_driver::DEFAULT_DRIVER_NAME,
            &configs,
            &request,
            &families,
        );
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// 5. The HTTP/2 `:authority` rewriter on the kubelet's connection.

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;

/// RFC 7541 Appendix B codes of the characters a socket path is made of.
const HUFFMAN: &[(u8, u32, u32)] = &[
    (b'0', 0x0, 5),
    (b'1', 0x1, 5),
    (b'2', 0x2, 5),
    (b'a', 0x3, 5),
    (b'c', 0x4, 5),
    (b'e', 0x5, 5),
    (b'i', 0x6, 5),
    (b'o', 0x7, 5),
    (b's', 0x8, 5),
    (b't', 0x9, 5),
    (b' ', 0x14, 6),
    (b'%', 0x15, 6),
    (b'-', 0x16, 6),
    (b'.', 0x17, 6),
    (b'/', 0x18, 6),
    (b'3', 0x19, 6),
    (b'4', 0x1a, 6),
    (b'5', 0x1b, 6),
    (b'6', 0x1c, 6),
    (b'7', 0x1d, 6),
    (b'8', 0x1e, 6),
    (b'9', 0x1f, 6),
    (b'=', 0x20, 6),
    (b'A', 0x21, 6),
    (b'_', 0x22, 6),
    (b'b', 0x23, 6),
    (b'd', 0x24, 6),
    (b'f', 0x25, 6),
    (b'g', 0x26, 6),
    (b'h', 0x27, 6),
    (b'l', 0x28, 6),
    (b'm', 0x29, 6),
    (b'n', 0x2a, 6),
    (b'p', 0x2b, 6),
    (b'r', 0x2c, 6),
    (b'u', 0x2d, 6),
    (b':', 0x5c, 7),
    (b'B', 0x5d, 7),
    (b'C', 0x5e, 7),
    (b'D', 0x5f, 7),
    (b'E', 0x60, 7),
    (b'F', 0x61, 7),
    (b'G', 0x62, 7),
    (b'H', 0x63, 7),
    (b'I', 0x64, 7),
    (b'J', 0x65, 7),
    (b'K', 0x66, 7),
    (b'L', 0x67, 7),
    (b'M', 0x68, 7),
    (b'N', 0x69, 7),
    (b'O', 0x6a, 7),
    (b'P', 0x6b, 7),
    (b'Q', 0x6c, 7),
    (b'R', 0x6d, 7),
    (b'S', 0x6e, 7),
    (b'T', 0x6f, 7),
    (b'U', 0x70, 7),
    (b'V', 0x71, 7),
    (b'W', 0x72, 7),
    (b'Y', 0x73, 7),
    (b'j', 0x74, 7),
    (b'k', 0x75, 7),
    (b'q', 0x76, 7),
    (b'v', 0x77, 7),
    (b'w', 0x78, 7),
    (b'x', 0x79, 7),
    (b'y', 0x7a, 7),
    (b'z', 0x7b, 7),
    (b'X', 0xfc, 8),
    (b'Z', 0xfd, 8),
];

fn huffman_encode(s: &[u8]) -> Vec<u8> {
    let mut bits: Vec<bool> = Vec::new();
    for c in s {
        let &(_, code, n) = HUFFMAN.iter().find(|(x, _, _)| x == c).expect("codable");
        for k in (0..n).rev() {
            bits.push((code >> k) & 1 == 1);
        }
    }
    while !bits.len().is_multiple_of(8) {
        bits.push(true);
    }
    bits.chunks(8)
        .map(|b| b.iter().fold(0u8, |acc, &x| (acc << 1) | x as u8))
        .collect()
}

fn authority_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~' | b':')
}

fn hpack_int(out: &mut Vec<u8>, first: u8, prefix: u32, mut v: usize) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

#[derive(Debug, Clone)]
enum Name {
    Index(usize),
    Literal(Vec<u8>, bool),
}

#[derive(Debug, Clone)]
enum Field {
    Indexed(usize),
    SizeUpdate(usize),
    Literal {
        /// 0x40 incremental (6-bit index), 0x00 without / 0x10 never indexing (4-bit).
        first: u8,
        name: Name,
        value: Vec<u8>,
        huffman: bool,
    },
}

/// Per literal value of a header block: its range in the block and the bytes expected there
/// after the rewrite.
type Expected = Vec<(std::ops::Range<usize>, Vec<u8>)>;

/// A header block and what its values must become.
fn encode_block(fields: &[Field]) -> (Vec<u8>, Expected) {
    let mut out = Vec::new();
    let mut expect = Vec::new();
    for f in fields {
        match f {
            Field::Indexed(i) => hpack_int(&mut out, 0x80, 7, *i),
            Field::SizeUpdate(n) => hpack_int(&mut out, 0x20, 5, *n),
            Field::Literal {
                first,
                name,
                value,
                huffman,
            } => {
                let prefix = if *first == 0x40 { 6 } else { 4 };
                let is_authority = match name {
                    Name::Index(i) => {
                        hpack_int(&mut out, *first, prefix, *i);
                        *i == 1
                    }
                    Name::Literal(n, h) => {
                        hpack_int(&mut out, *first, prefix, 0);
                        let enc = if *h { huffman_encode(n) } else { n.clone() };
                        hpack_int(&mut out, if *h { 0x80 } else { 0 }, 7, enc.len());
                        out.extend_from_slice(&enc);
                        !*h && n == b":authority"
                    }
                };
                let fixed: Vec<u8> = if is_authority {
                    value
                        .iter()
                        .map(|&c| if authority_byte(c) { c } else { b'-' })
                        .collect()
                } else {
                    value.clone()
                };
                let (enc, want) = if *huffman {
                    (huffman_encode(value), huffman_encode(&fixed))
                } else {
                    (value.clone(), fixed)
                };
                hpack_int(&mut out, if *huffman { 0x80 } else { 0 }, 7, enc.len());
                expect.push((out.len()..out.len() + enc.len(), want));
                out.extend_from_slice(&enc);
            }
        }
    }
    (out, expect)
}

fn codable() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"/var/lib/kubelet/plugins_registry/graft.dev-reg.sock".to_vec()),
        Just(b"localhost".to_vec()),
        Just(b"/".to_vec()),
        "[0-9a-zA-Z %./=_:-]{0,40}".prop_map(String::into_bytes),
    ]
}

fn field() -> impl Strategy<Value = Field> {
    let name = prop_oneof![
        4 => Just(Name::Index(1)),
        2 => (2usize..62).prop_map(Name::Index),
        1 => (62usize..100).prop_map(Name::Index),
        2 => Just(Name::Literal(b":authority".to_vec(), false)),
        1 => Just(Name::Literal(b":authority".to_vec(), true)),
        1 => "[a-z:-]{1,12}".prop_map(|n| Name::Literal(n.into_bytes(), false)),
    ];
    let literal = (
        prop_oneof![Just(0x40u8), Just(0x00), Just(0x10)],
        name,
        prop_oneof![
            3 => codable().prop_map(|v| (v, true)),
            3 => codable().prop_map(|v| (v, false)),
            1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(|v| (v, false)),
        ],
    )
        .prop_map(|(first, name, (value, huffman))| Field::Literal {
            first,
            name,
            value,
            huffman,
        });
    prop_oneof![
        2 => (1usize..200).prop_map(Field::Indexed),
        1 => (0usize..5000).prop_map(Field::SizeUpdate),
        6 => literal,
    ]
}

/// One HEADERS frame with a whole header block (optionally padded and with priority).
fn headers_frame(block: &[u8], stream: u32, pad: Option<u8>, priority: bool) -> (Vec<u8>, usize) {
    let mut payload = Vec::new();
    let mut flags = END_HEADERS;
    if let Some(p) = pad {
        flags |= 0x8;
        payload.push(p);
    }
    if priority {
        flags |= 0x20;
        payload.extend_from_slice(&[0, 0, 0, 0, 16]);
    }
    let block_at = 9 + payload.len();
    payload.extend_from_slice(block);
    if let Some(p) = pad {
        payload.extend(std::iter::repeat_n(0u8, p as usize));
    }
    (frame(HEADERS, flags, stream, &payload), block_at)
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Streams `input` through an AuthorityFix in `chunks`, reading with buffers of
/// `read_sizes`, until end of stream.
fn through_fix(input: &[u8], chunks: &[usize], read_sizes: &[usize]) -> Result<Vec<u8>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let input = input.to_vec();
    let chunks = chunks.to_vec();
    let read_sizes = read_sizes.to_vec();
    rt.block_on(async move {
        let (mut client, server) = tokio::io::duplex(1024);
        let writer = tokio::spawn(async move {
            let mut at = 0;
            for n in chunks.iter().cycle() {
                if at >= input.len() {
                    break;
                }
                let n = (*n).min(input.len() - at);
                client.write_all(&input[at..at + n]).await.unwrap();
                at += n;
            }
            client.shutdown().await.unwrap();
        });
        let mut fixed = AuthorityFix::new(server);
        let read = async {
            let mut out = Vec::new();
            for n in read_sizes.iter().cycle() {
                let mut buf = vec![0u8; *n];
                let got = fixed.read(&mut buf).await.map_err(|e| e.to_string())?;
                if got == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..got]);
            }
            Ok::<_, String>(out)
        };
        let out = tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .map_err(|_| "AuthorityFix did not reach end of stream".to_string())??;
        writer.await.map_err(|e| e.to_string())?;
        Ok(out)
    })
}

/// Byte positions the rewriter may touch: the payloads of whole HEADERS and CONTINUATION
/// frames after a whole preface.
fn rewritable(stream: &[u8]) -> Vec<bool> {
    let mut mask = vec![false; stream.len()];
    if stream.len() < PREFACE.len() {
        return mask;
    }
    let mut at = PREFACE.len();
    while stream.len() - at >= 9 {
        let len = (usize::from(stream[at]) << 16)
            | (usize::from(stream[at + 1]) << 8)
            | usize::from(stream[at + 2]);
        if stream.len() - at < 9 + len {
            break;
        }
        if matches!(stream[at + 3], HEADERS | CONTINUATION) {
            mask[at + 9..at + 9 + len]
                .iter_mut()
                .for_each(|m| *m = true);
        }
        at += 9 + len;
    }
    mask
}

fn chunking() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    (
        prop::collection::vec(1usize..200, 1..4),
        prop::collection::vec(1usize..300, 1..4),
    )
}

/// Properties of any stream: it comes out whole (same length, and nothing but whole
/// HEADERS/CONTINUATION payloads changed), whatever the chunking, and a second pass
/// changes nothing.
fn check_fix(
    input: &[u8],
    (chunks, reads): &(Vec<usize>, Vec<usize>),
) -> Result<Vec<u8>, TestCaseError> {
    let out = through_fix(input, chunks, reads).map_err(TestCaseError::fail)?;
    prop_assert_eq!(out.len(), input.len());
    let mask = rewritable(input);
    for (i, (a, b)) in input.iter().zip(&out).enumerate() {
        prop_assert!(mask[i] || a == b, "byte {i} outside a header block changed");
    }
    let whole = through_fix(input, &[usize::MAX], &[1 << 16]).map_err(TestCaseError::fail)?;
    prop_assert_eq!(&whole, &out, "the result depends on how the stream was cut");
    let again = through_fix(&out, &[usize::MAX], &[1 << 16]).map_err(TestCaseError::fail)?;
    prop_assert_eq!(&again, &out, "a second pass changed the stream");
    Ok(out)
}

/// Whole header blocks in one HEADERS frame: every `:authority` value (raw or Huffman,
/// by static index or by literal name) has each byte an authority cannot hold turned into
/// `-`, and every other value is untouched.
#[test]
fn authority_fix_rewrites_only_authority_values() {
    let input = (
        prop::collection::vec(prop::collection::vec(field(), 0..6), 1..4),
        prop::option::weighted(0.2, 0u8..20),
        any::<bool>(),
        chunking(),
    );
    run(600, input, |(blocks, pad, priority, cut)| {
        let mut stream = PREFACE.to_vec();
        stream.extend(frame(0x4, 0, 0, &[])); // SETTINGS
        let mut expect = Vec::new();
        for (i, fields) in blocks.iter().enumerate() {
            let (block, values) = encode_block(fields);
            let (f, block_at) = headers_frame(&block, 2 * i as u32 + 1, pad, priority);
            let base = stream.len() + block_at;
            for (r, want) in values {
                expect.push((base + r.start..base + r.end, want));
            }
            stream.extend(f);
            stream.extend(frame(0x0, 0x1, 2 * i as u32 + 1, b"data /a/b"));
        }
        let out = check_fix(&stream, &cut)?;
        for (r, want) in &expect {
            prop_assert_eq!(&out[r.clone()], &want[..], "value at {:?}", r);
        }
        // Everything but the values is as it was.
        let mut rest_in = stream.clone();
        let mut rest_out = out.clone();
        for (r, _) in &expect {
            rest_in[r.clone()].fill(0);
            rest_out[r.clone()].fill(0);
        }
        prop_assert_eq!(rest_in, rest_out);
        Ok(())
    });
}

/// A header block split over HEADERS and CONTINUATION frames: values that are not
/// `:authority` must come through untouched wherever the cut falls.
#[test]
fn authority_fix_split_header_blocks_keep_other_values() {
    let input = (
        prop::collection::vec(field(), 1..6),
        prop::collection::vec(any::<prop::sample::Index>(), 1..3),
        chunking(),
    );
    run(600, input, |(fields, cuts, cut)| {
        let (block, values) = encode_block(&fields);
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(block.len() + 1)).collect();
        points.sort();
        points.dedup();
        let mut pieces = Vec::new();
        let mut last = 0;
        for p in points {
            pieces.push(&block[last..p]);
            last = p;
        }
        pieces.push(&block[last..]);
        let mut stream = PREFACE.to_vec();
        let mut starts = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            let flags = if i + 1 == pieces.len() {
                END_HEADERS
            } else {
                0
            };
            starts.push(stream.len() + 9);
            stream.extend(frame(kind, flags, 1, piece));
        }
        let out = check_fix(&stream, &cut)?;
        // Map block offsets to stream offsets.
        let mut map = Vec::with_capacity(block.len());
        for (piece, start) in pieces.iter().zip(&starts) {
            map.extend(*start..*start + piece.len());
        }
        let fields_expect: Vec<_> = fields
            .iter()
            .filter(|f| matches!(f, Field::Literal { .. }))
            .zip(&values)
            .collect();
        for (f, (r, want)) in fields_expect {
            let got: Vec<u8> = r.clone().map(|i| out[map[i]]).collect();
            let is_authority = matches!(
                f,
                Field::Literal {
                    name: Name::Index(1),
                    ..
                }
            ) || matches!(
                f,
                Field::Literal { name: Name::Literal(n, false), .. } if n == b":authority"
            );
            let orig: Vec<u8> = r.clone().map(|i| stream[map[i]]).collect();
            if is_authority {
                // Split over frames, each piece is rewritten on its own: every byte is the
                // original or a dash.
                prop_assert!(
                    got.iter().zip(&orig).all(|(g, o)| g == o || *g == b'-') || &got == want,
                    "{f:?}: {got:?}"
                );
            } else {
                prop_assert_eq!(&got, &orig, "{:?} was rewritten", f);
            }
        }
        Ok(())
    });
}

#[derive(Debug, Clone)]
struct RawFrame {
    kind: u8,
    flags: u8,
    payload: Vec<u8>,
    declared: Option<u32>,
}

fn raw_frame() -> impl Strategy<Value = RawFrame> {
    (
        prop_oneof![
            4 => Just(HEADERS),
            2 => Just(CONTINUATION),
            1 => Just(0u8),
            1 => Just(4u8),
            1 => any::<u8>(),
        ],
        prop_oneof![
            Just(END_HEADERS),
            Just(0x8 | END_HEADERS),
            Just(0x20 | END_HEADERS),
            Just(0x28),
            any::<u8>()
        ],
        prop_oneof![
            3 => prop::collection::vec(field(), 0..4).prop_map(|f| encode_block(&f).0),
            1 => prop::collection::vec(any::<u8>(), 0..64),
        ],
        prop_oneof![
            8 => Just(None),
            1 => Just(Some(0xff_ffff)),
            1 => (0u32..80).prop_map(Some),
        ],
    )
        .prop_map(|(kind, flags, payload, declared)| RawFrame {
            kind,
            flags,
            payload,
            declared,
        })
}

fn raw_stream(frames: &[RawFrame]) -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    for f in frames {
        let len = f.declared.unwrap_or(f.payload.len() as u32) as usize;
        out.extend_from_slice(&[
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            f.kind,
            f.flags,
        ]);
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(&f.payload);
    }
    out
}

#[test]
fn authority_fix_arbitrary_and_mutated_streams() {
    let input = (
        prop_oneof![
            1 => prop::collection::vec(any::<u8>(), 0..200),
            1 => prop::collection::vec(any::<u8>(), 0..200)
                .prop_map(|b| [PREFACE, &b[..]].concat()),
            4 => (prop::collection::vec(raw_frame(), 0..6), mutations())
                .prop_map(|(f, m)| mutated(raw_stream(&f), &m)),
        ],
        chunking(),
    );
    run(800, input, |(stream, cut)| {
        check_fix(&stream, &cut).map(|_| ())
    });
}

/// The kubelet's own GetInfo header block (captured from grpc-go) comes out with its
/// socket-path authority dashed, through the public adapter.
#[test]
fn authority_fix_kubelet_block() {
    let unhex = |s: &str| -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    let from = unhex("8386459c62ba2d98d558598c84d83498f52fb4b31909b06931ea63115392a94f41c063b8ec628346c75b632d054b15d16cc6a91158598c84d9e989ac1ca95e42f75999424146e8d6048d156686dc6b3c472459d2bd2be3046120a45ac2ccba0e4ebf5f8b1d75d0620d263d4c4d65647a8a9acac8b4c7602bba25c140027465864d833505b11f");
    let dashed = unhex("8386459c62ba2d98d558598c84d83498f52fb4b31909b06931ea63115392a94f41c05bb8ec5a8346b75b632d054ad5d16cc6a91158598c84d9e969ac1ca95e42f75999424146e8d6048d156686dc6b3c472459d2bd2be3046120a45ac2ccba0e4ebf5f8b1d75d0620d263d4c4d65647a8a9acac8b4c7602bba25c140027465864d833505b11f");
    let mut stream = PREFACE.to_vec();
    stream.extend(frame(HEADERS, END_HEADERS, 1, &from));
    let out = through_fix(&stream, &[7], &[100]).unwrap();
    assert_eq!(&out[PREFACE.len() + 9..], &dashed[..]);
}
