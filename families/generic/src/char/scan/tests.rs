use super::*;

fn write(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("devices.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn default_names() {
    assert_eq!(default_name("/dev/net/tun"), "net-tun");
    assert_eq!(default_name("/dev/ttyUSB0"), "ttyusb0");
    assert_eq!(default_name("/dev/bus/usb/001/002"), "bus-usb-001-002");
}

#[test]
fn discovers_real_nodes_with_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        r#"
[[devices]]
path = "/dev/null"
name = "nul"
container_path = "/dev/graft-null"
mode = 0o600
attributes = { type = "test", rank = 3, fast = true, fw = { version = "1.2.3" } }
env = { GRAFT_NULL = "1" }

[[devices]]
path = "/dev/does-not-exist"

[[devices]]
path = "/dev/zer*"
"#,
    );
    let d = CharDiscovery::new(cfg, "/sys".into(), "/".into()).unwrap();
    let devs = d.discover().unwrap();
    let names: Vec<_> = devs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["nul", "zero"]);
    let nul = &devs[0];
    assert_eq!(nul.attributes["type"], Attribute::String("test".into()));
    assert_eq!(nul.attributes["rank"], Attribute::Int(3));
    assert_eq!(nul.attributes["fast"], Attribute::Bool(true));
    assert_eq!(nul.attributes["fw"], Attribute::Version("1.2.3".into()));
    assert_eq!(nul.attributes["major"], Attribute::Int(1));
    let node = &nul.edits.device_nodes[0];
    assert_eq!(
        (node.path.as_str(), node.major, node.minor),
        ("/dev/graft-null", 1, 3)
    );
    assert_eq!(node.file_mode, Some(0o600));
    assert_eq!(nul.edits.env[0].name, "GRAFT_NULL");
}

#[test]
fn host_root_is_looked_through_and_stripped() {
    let host = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(host.path().join("dev/serial")).unwrap();
    std::os::unix::fs::symlink("/dev/null", host.path().join("dev/serial/ttyA")).unwrap();
    let cfg = write(host.path(), "[[devices]]\npath = \"/dev/serial/tty*\"\n");
    let d = CharDiscovery::new(cfg, "/sys".into(), host.path().into()).unwrap();
    let devs = d.discover().unwrap();
    assert_eq!(devs.len(), 1);
    assert_eq!(devs[0].name, "serial-ttya");
    assert_eq!(devs[0].edits.device_nodes[0].path, "/dev/serial/ttyA");
    assert_eq!(
        devs[0].attributes["path"],
        Attribute::String("/dev/serial/ttyA".into())
    );
    assert!(d.watch_paths().contains(&host.path().join("dev/serial")));
}

#[test]
fn config_errors_name_the_entry_and_field() {
    let dir = tempfile::tempdir().unwrap();
    for (text, needle) in [
        (
            "[[devices]]\npath = \"/etc/passwd\"",
            "devices[0] (/etc/passwd): path",
        ),
        ("[[devices]]\npath = \"/dev/tty*\"\nname = \"x\"", "glob"),
        ("[[devices]]\npath = \"/dev/null\"\nmode = 0o17777", "mode"),
        ("[[devices]]\npath = \"/dev/null\"\ncolour = 1", "colour"),
        (
            "[[devices]]\npath = \"/dev/null\"\nattributes = { \"bad name!\" = 1 }",
            "attributes.bad name!",
        ),
        (
            "[[devices]]\npath = \"/dev/null\"\nname = \"Upper_Case\"",
            "name:",
        ),
    ] {
        let cfg = write(dir.path(), text);
        let err = load_config(&cfg).unwrap_err().to_string();
        assert!(err.contains(needle), "{err} should mention {needle}");
    }
}

#[test]
fn watch_paths_cover_device_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "[[devices]]\npath = \"/dev/net/tun\"\n[[devices]]\npath = \"/dev/ttyUSB*\"",
    );
    let d = CharDiscovery::new(cfg.clone(), "/sys".into(), "/".into()).unwrap();
    let w = d.watch_paths();
    assert_eq!(
        w,
        vec![cfg, PathBuf::from("/dev/net"), PathBuf::from("/dev")]
    );
}
