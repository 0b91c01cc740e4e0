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
    rebuild(&root, &folders, None).unwrap()
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
    let make: [(&str, Plant); 5] = [
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
        ("hwcap", |f| {
            let e = graft_ldcache::Entry {
                flags: graft_ldcache::native_flags(),
                key: b"libz.so.1",
                value: b"/lib/glibc-hwcaps/x86-64-v3/libz.so.1",
                osversion: 0,
                hwcap: 1 << 62,
            };
            let data = graft_ldcache::build(&[e]).unwrap();
            std::fs::write(f.in_root("etc/ld.so.cache"), data).unwrap()
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

fn chroot(root: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new("chroot")
        .arg(root)
        .args(args)
        .env_clear()
        .env("PATH", crate::ldcache::LDCONFIG_PATH)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text.into_owned())
}

/// glibc's own loaders (and ldconfig -p) read what graft-hook writes, merged into the cache
/// each glibc's ldconfig wrote: the roots of `hooks/glibc-check/roots.sh`, one per glibc.
#[test]
#[ignore = "needs root and GRAFT_GLIBC_ROOTS, the output of hooks/glibc-check/roots.sh"]
fn glibc_loaders_find_the_merged_libraries() {
    let dir = std::env::var("GRAFT_GLIBC_ROOTS").expect("GRAFT_GLIBC_ROOTS");
    let mut checked = 0;
    for root in std::fs::read_dir(dir).unwrap() {
        let root = root.unwrap().path();
        let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
            .into_iter()
            .find(|l| root.join(&l[1..]).exists())
            .unwrap();
        // The image's own cache, as its ldconfig wrote it; put back afterwards.
        let cache_path = root.join("etc/ld.so.cache");
        let image = std::fs::read(&cache_path).unwrap();
        assert_eq!(chroot(&root, &["/prog-gt"]).0, Some(127), "{root:?}");
        let r = rebuild(
            &inroot::open_root(&root).unwrap(),
            &["/opt/gt".into()],
            None,
        )
        .unwrap();
        assert!(
            matches!(r, Outcome::Written { driver: 1, image } if image > 1),
            "{root:?}: {r:?}"
        );
        assert_eq!(chroot(&root, &["/prog-gt"]).0, Some(42), "{root:?}");
        assert_eq!(chroot(&root, &["/prog-img"]).0, Some(43), "{root:?}");
        let (code, listed) = chroot(&root, &[ldconfig, "-p"]);
        assert_eq!(code, Some(0), "{root:?}: {listed}");
        assert!(
            listed.contains("libgt.so.1 (libc6,x86-64) => /opt/gt/libgt.so.1"),
            "{root:?}: {listed}"
        );
        // Thousands of names that differ in digit runs, letters and case, around the two
        // the programs need: the loader's binary search must agree with the writer's order.
        let names: Vec<String> = (0..4000u32)
            .map(|i| {
                let stem = ["gs", "gt", "gu", "G", "g1", "im", "img", "imh", "a-b", "z_"];
                let s = stem[(i % 10) as usize];
                format!("lib{s}{}.so.{}", i % 7, i.wrapping_mul(2654435761) % 1000)
            })
            .collect();
        let flags = graft_ldcache::native_flags();
        let mut entries: Vec<_> = names
            .iter()
            .map(|n| graft_ldcache::Entry {
                flags,
                key: n.as_bytes(),
                value: b"/nonexistent",
                osversion: 0,
                hwcap: 0,
            })
            .collect();
        entries.push(graft_ldcache::Entry {
            key: b"libimg.so.1",
            value: b"/opt/img/libimg.so.1",
            ..entries[0].clone()
        });
        std::fs::write(&cache_path, graft_ldcache::build(&entries).unwrap()).unwrap();
        let r = rebuild(
            &inroot::open_root(&root).unwrap(),
            &["/opt/gt".into()],
            None,
        )
        .unwrap();
        assert!(
            matches!(
                r,
                Outcome::Written {
                    driver: 1,
                    image: 4001
                }
            ),
            "{r:?}"
        );
        assert_eq!(chroot(&root, &["/prog-gt"]).0, Some(42), "{root:?}");
        assert_eq!(chroot(&root, &["/prog-img"]).0, Some(43), "{root:?}");

        std::fs::write(&cache_path, image).unwrap();
        eprintln!("{}: ok", root.display());
        checked += 1;
    }
    assert!(checked > 0);
}

#[test]
fn prepared_copies_are_found_and_named_by_their_usual_path() {
    let f = Fixture::new();
    let copies = "/usr/lib/graft-nvidia";
    elf(
        &f,
        &format!("{copies}{LIB}/libcuda.so.580.95.05"),
        Some("libcuda.so.1"),
    );
    // What graft-hook linked: the usual path to the copy, the soname link beside it.
    f.link(
        &format!("{LIB}/libcuda.so.580.95.05"),
        &format!("{copies}{LIB}/libcuda.so.580.95.05"),
    );
    f.link(&format!("{LIB}/libcuda.so.1"), "libcuda.so.580.95.05");
    let root = inroot::open_root(&f.root).unwrap();
    let out = rebuild(&root, &[LIB.to_string()], Some(copies)).unwrap();
    assert_eq!(
        out,
        Outcome::Written {
            driver: 1,
            image: 0
        }
    );
    assert_eq!(
        cache(&f),
        [pair("libcuda.so.1", &format!("{LIB}/libcuda.so.580.95.05"))]
    );
}

#[test]
fn a_copies_folder_the_image_links_out_of_the_root_is_read_inside_it() {
    // The runtime's bind covers the real path; should it not, the image's link leads
    // inside the root, where the decoy's library is not.
    let f = Fixture::new();
    let before = f.decoy_snapshot();
    f.link("/usr/lib/graft-nvidia", "/{D}");
    std::fs::write(
        f.decoy.join("lib/libdecoy.so"),
        fake_elf(Some("libcuda.so.1")),
    )
    .unwrap();
    let root = inroot::open_root(&f.root).unwrap();
    let out = rebuild(&root, &["/lib".to_string()], Some("/usr/lib/graft-nvidia")).unwrap();
    assert_eq!(
        out,
        Outcome::Written {
            driver: 0,
            image: 0
        }
    );
    assert!(cache(&f).is_empty());
    std::fs::write(f.decoy.join("lib/libdecoy.so"), "decoy library").unwrap();
    assert_eq!(f.decoy_snapshot(), before);
}
