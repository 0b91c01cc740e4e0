use super::*;
use crate::testutil::{fake_elf, Fixture};

const LIB: &str = "/usr/lib/x86_64-linux-gnu";

fn elf(f: &Fixture, at: &str, soname: Option<&str>) {
    let p = f.in_root(at);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, fake_elf(soname)).unwrap();
}

fn cache(f: &Fixture) -> Vec<(String, String)> {
    let data = std::fs::read(f.in_root("etc/ld.so.cache")).unwrap();
    graft_ldcache::parse(&data)
        .unwrap()
        .iter()
        .map(|e| {
            let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            (s(e.key), s(e.value))
        })
        .collect()
}

fn rebuild_in(f: &Fixture, folders: &[&str]) -> Outcome {
    let root = inroot::open_root(&f.root).unwrap();
    let folders: Vec<String> = folders.iter().map(|s| s.to_string()).collect();
    rebuild(&root, &folders).unwrap()
}

fn pair(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

#[test]
fn the_driver_libraries_are_keyed_by_soname_and_point_at_their_links() {
    let f = Fixture::new();
    elf(
        &f,
        &format!("{LIB}/libcuda.so.580.95.05"),
        Some("libcuda.so.1"),
    );
    f.link(&format!("{LIB}/libcuda.so.1"), "libcuda.so.580.95.05");
    f.link(&format!("{LIB}/libcuda.so"), "libcuda.so.1");
    elf(
        &f,
        &format!("{LIB}/libnvidia-glcore.so.580.95.05"),
        Some("libnvidia-glcore.so.580.95.05"),
    );
    elf(&f, &format!("{LIB}/libnosoname.so.2"), None);
    f.write(&format!("{LIB}/libtext.so.1"), "not an ELF");
    elf(&f, &format!("{LIB}/README.so"), Some("libreadme.so.1"));
    f.link(&format!("{LIB}/libelsewhere.so.1"), "/{D}/lib/libx.so.1");
    let out = rebuild_in(&f, &[LIB, "/not/there"]);
    assert_eq!(
        out,
        Outcome::Written {
            driver: 3,
            image: 0
        }
    );
    assert_eq!(
        cache(&f),
        [
            pair(
                "libnvidia-glcore.so.580.95.05",
                &format!("{LIB}/libnvidia-glcore.so.580.95.05")
            ),
            pair("libnosoname.so.2", &format!("{LIB}/libnosoname.so.2")),
            pair("libcuda.so.1", &format!("{LIB}/libcuda.so.1")),
        ]
    );
}

#[test]
fn the_images_entries_are_kept_and_the_drivers_win_over_its_own() {
    let f = Fixture::new();
    let flags = graft_ldcache::native_flags();
    let e = |k: &'static str, v: &'static str| graft_ldcache::Entry {
        flags,
        key: k.as_bytes(),
        value: v.as_bytes(),
        osversion: 0,
        hwcap: 0,
    };
    let image = graft_ldcache::build(&[
        e("libz.so.1", "/lib/libz.so.1"),
        e("libcuda.so.1", "/usr/local/cuda/compat/stale/libcuda.so.1"),
        graft_ldcache::Entry {
            flags: 0x0003,
            ..e("libcuda.so.1", "/lib32/libcuda.so.1")
        },
    ])
    .unwrap();
    std::fs::create_dir_all(f.in_root("etc")).unwrap();
    std::fs::write(f.in_root("etc/ld.so.cache"), image).unwrap();
    // The compat folder first: its libcuda wins over the driver's.
    elf(
        &f,
        "/usr/local/cuda/compat/libcuda.so.590.1.1",
        Some("libcuda.so.1"),
    );
    elf(
        &f,
        &format!("{LIB}/libcuda.so.580.95.05"),
        Some("libcuda.so.1"),
    );
    let out = rebuild_in(&f, &["/usr/local/cuda/compat", LIB]);
    assert_eq!(
        out,
        Outcome::Written {
            driver: 2,
            image: 2
        }
    );
    let got = cache(&f);
    assert_eq!(got[0], pair("libz.so.1", "/lib/libz.so.1"));
    assert_eq!(
        got[1],
        pair("libcuda.so.1", "/usr/local/cuda/compat/libcuda.so.590.1.1")
    );
    assert_eq!(
        got[2],
        pair("libcuda.so.1", &format!("{LIB}/libcuda.so.580.95.05"))
    );
    assert_eq!(got[3], pair("libcuda.so.1", "/lib32/libcuda.so.1"));
    assert_eq!(got.len(), 4);
}

/// A cache graft-hook does not merge is left as it is for ldconfig, which replaces it.
#[test]
fn symlinked_special_or_malformed_caches_fall_back_and_are_left_alone() {
    type Plant = fn(&Fixture);
    let make: [(&str, Plant); 4] = [
        ("symlink", |f| f.link("etc/ld.so.cache", "/{D}/lib/cache")),
        ("fifo", |f| {
            nix::unistd::mkfifo(
                &f.in_root("etc/ld.so.cache"),
                Mode::from_bits_truncate(0o644),
            )
            .unwrap()
        }),
        ("dir", |f| f.mkdir("etc/ld.so.cache")),
        ("truncated", |f| {
            f.write("etc/ld.so.cache", "glibc-ld.so.cache1.1\x05\0\0\0")
        }),
    ];
    for (what, plant) in make {
        let f = Fixture::new();
        f.mkdir("etc");
        std::fs::write(f.decoy.join("lib/cache"), "decoy").unwrap();
        plant(&f);
        let before = crate::testutil::snapshot(&f.root);
        elf(&f, &format!("{LIB}/libcuda.so.580"), Some("libcuda.so.1"));
        let out = rebuild_in(&f, &[LIB]);
        assert!(matches!(out, Outcome::Fallback(_)), "{what}: {out:?}");
        std::fs::remove_dir_all(f.in_root("usr")).unwrap();
        assert_eq!(crate::testutil::snapshot(&f.root), before, "{what}");
        assert_eq!(
            std::fs::read_to_string(f.decoy.join("lib/cache")).unwrap(),
            "decoy"
        );
    }
}

#[test]
fn a_folder_reached_through_a_link_out_of_the_root_stays_inside() {
    let f = Fixture::new();
    std::fs::write(
        f.decoy.join("lib/libdecoy.so.1"),
        fake_elf(Some("libdecoy.so.1")),
    )
    .unwrap();
    f.link(LIB, "/{D}/lib");
    let out = rebuild_in(&f, &[LIB]);
    assert_eq!(
        out,
        Outcome::Written {
            driver: 0,
            image: 0
        }
    );
    assert!(cache(&f).is_empty());
}
