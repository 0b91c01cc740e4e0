//! A fake sysfs in the kernel's layout (class/drm entries linking into the PCI tree) and a
//! /dev with real character nodes (mknod: these tests need root, as graft's suite does).

use std::os::unix::fs::symlink;

use nix::sys::stat::{makedev, mknod, Mode, SFlag};

use super::*;

struct Node {
    _dir: tempfile::TempDir,
    sys: PathBuf,
    dev: PathBuf,
}

const GPU: &str = "devices/pci0000:00/0000:00:02.0";

/// sysfs' entry `renderD<n>` (or `card<n>`) of the PCI GPU, with device number `numbers`.
fn entry(node: &Node, name: &str, numbers: &str) {
    let own = node.sys.join(GPU).join("drm").join(name);
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("dev"), format!("{numbers}\n")).unwrap();
    symlink("../../../0000:00:02.0", own.join("device")).unwrap();
    symlink(
        format!("../../{GPU}/drm/{name}"),
        node.sys.join("class/drm").join(name),
    )
    .unwrap();
}

fn char_node(node: &Node, name: &str, maj: u64, min: u64) {
    let path = node.dev.join("dri").join(name);
    mknod(
        &path,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(maj, min),
    )
    .expect("mknod (graft's tests run as root)");
    // As udev leaves render nodes: open to every user (mknod's mode is cut by the umask).
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
}

fn node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    let dev = dir.path().join("dev");
    std::fs::create_dir_all(sys.join("class/drm")).unwrap();
    std::fs::create_dir_all(sys.join("bus/pci/drivers/i915")).unwrap();
    std::fs::create_dir_all(dev.join("dri")).unwrap();
    let gpu = sys.join(GPU);
    std::fs::create_dir_all(&gpu).unwrap();
    std::fs::write(gpu.join("vendor"), "0x8086\n").unwrap();
    std::fs::write(gpu.join("device"), "0x56a0\n").unwrap();
    symlink("../../../bus/pci/drivers/i915", gpu.join("driver")).unwrap();
    Node {
        _dir: dir,
        sys,
        dev,
    }
}

fn discovery(node: &Node) -> RenderDiscovery {
    RenderDiscovery::new(node.sys.clone(), node.dev.clone())
}

#[test]
fn a_render_node_with_what_sysfs_says_of_its_gpu() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (mknod for the render nodes)");
        return;
    }
    let n = node();
    entry(&n, "renderD128", "226:128");
    entry(&n, "card0", "226:0");
    char_node(&n, "renderD128", 226, 128);
    char_node(&n, "card0", 226, 0);
    let d = discovery(&n);
    let devices = d.discover().unwrap();
    assert_eq!(devices.len(), 1, "{devices:#?}");
    let dev = &devices[0];
    assert_eq!(dev.name, "render-0000-00-02-0");
    assert_eq!(dev.kind, Kind::Char);
    let s = |k: &str| dev.string_attribute(k).map(str::to_string);
    assert_eq!(s("type").as_deref(), Some("render"));
    assert_eq!(s("path").as_deref(), Some("/dev/dri/renderD128"));
    assert_eq!(s("vendorID").as_deref(), Some("0x8086"));
    assert_eq!(s("deviceID").as_deref(), Some("0x56a0"));
    assert_eq!(s("driver").as_deref(), Some("i915"));
    assert_eq!(s("pciBusID").as_deref(), Some("0000:00:02.0"));
    assert_eq!(s(PCIE_ROOT_ATTRIBUTE).as_deref(), Some("pci0000:00"));
    assert_eq!(dev.int_attribute("minor"), Some(128));
    let node = &dev.edits.device_nodes[0];
    assert_eq!(
        (node.path.as_str(), node.kind, node.major, node.minor),
        ("/dev/dri/renderD128", DeviceKind::Char, 226, 128)
    );
    assert_eq!(node.file_mode, Some(0o666));
    assert!(d.unavailable().is_empty());
    assert_eq!(
        d.watch_paths(),
        vec![n.sys.join("class/drm"), n.dev.join("dri")]
    );
}

#[test]
fn a_node_that_is_missing_swapped_or_a_symlink_is_not_offered() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (mknod for the render nodes)");
        return;
    }
    let n = node();
    entry(&n, "renderD128", "226:128");
    entry(&n, "renderD129", "226:129");
    entry(&n, "renderD130", "226:130");
    entry(&n, "renderD131", "226:131");
    // 128 is missing; 129 has another device's number; 130 is a symlink to a real
    // character device; 131 is a regular file.
    char_node(&n, "renderD129", 1, 3);
    symlink("/dev/null", n.dev.join("dri/renderD130")).unwrap();
    std::fs::write(n.dev.join("dri/renderD131"), "").unwrap();
    let d = discovery(&n);
    assert!(d.discover().unwrap().is_empty());
    let why: Vec<String> = d.unavailable().into_iter().map(|u| u.message).collect();
    assert_eq!(why.len(), 4, "{why:#?}");
    assert!(
        why[0].contains("renderD128") && why[0].contains("No such file"),
        "{why:#?}"
    );
    assert!(why[1].contains("is 1:3, sysfs says 226:129"), "{why:#?}");
    assert!(why[2].contains("not a character device"), "{why:#?}");
    assert!(why[3].contains("not a character device"), "{why:#?}");
}

#[test]
fn a_node_without_drm_or_pci_still_scans() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (mknod for the render nodes)");
        return;
    }
    let n = node();
    // No class/drm at all: no devices, no failure.
    let bare = RenderDiscovery::new(n.sys.join("nowhere"), n.dev.clone());
    assert!(bare.discover().unwrap().is_empty());
    // A virtual GPU (vgem): not on PCI, named by its minor, no PCI attributes.
    let own = n.sys.join("devices/platform/vgem/drm/renderD140");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("dev"), "226:140\n").unwrap();
    symlink("../../../vgem", own.join("device")).unwrap();
    symlink(
        "../../devices/platform/vgem/drm/renderD140",
        n.sys.join("class/drm/renderD140"),
    )
    .unwrap();
    char_node(&n, "renderD140", 226, 140);
    let devices = discovery(&n).discover().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].name, "render-140");
    assert_eq!(devices[0].string_attribute("pciBusID"), None);
    assert_eq!(devices[0].string_attribute("vendorID"), None);
}

#[test]
fn names_and_numbers_are_read_strictly() {
    assert!(is_render_entry("renderD128"));
    for bad in [
        "renderD",
        "renderDx",
        "card0",
        "renderD1/../x",
        "renderD12345678901",
    ] {
        assert!(!is_render_entry(bad), "{bad}");
    }
    assert_eq!(parse_dev("226:128"), Some((226, 128)));
    assert_eq!(parse_dev("226"), None);
    assert_eq!(parse_dev("a:b"), None);
    assert!(is_hex_id("0x1002"));
    assert!(!is_hex_id("0x10021") && !is_hex_id("1002") && !is_hex_id("0xzzzz"));
}
