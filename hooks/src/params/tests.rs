//! What `disable_modification` does, its mounts made by the recording double: which copy
//! is mounted over which file, with which flags, and what is left on the host. No root
//! needed; the same runs with the kernel's mounts are in `params_kernel_tests.rs`.

use nix::mount::MsFlags;

use super::*;
use crate::recording_mounter::{Call, Recording};
use crate::testutil::*;

pub const ON: &str = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n";

#[test]
fn only_modify_device_files_changes() {
    assert_eq!(
        rewrite(ON).unwrap(),
        "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\n"
    );
    assert_eq!(rewrite("ModifyDeviceFiles: 0\n"), None);
    assert_eq!(rewrite(""), None);
}

#[test]
fn container_ids_are_checked() {
    let base = Path::new("/var/lib/graft/nvidia/params");
    assert_eq!(
        copy_path(base, "abc-1_2").unwrap(),
        Path::new("/var/lib/graft/nvidia/params.abc-1_2")
    );
    let long = "a".repeat(129);
    for bad in ["", "../x", "a/b", ".", "a b", "a\0b", "a.b", long.as_str()] {
        assert!(copy_path(base, bad).is_err(), "{bad:?}");
        let root = tempfile::tempdir().unwrap();
        // Refused even when there would be nothing to do.
        let none = Path::new("/nonexistent/params");
        assert!(disable_modification(root.path(), none, base, bad).is_err());
    }
    assert!(copy_path(base, &"a".repeat(128)).is_ok());
}

/// A root with the driver's params at `at` (`{D}` as in `Fixture::in_root`), a host params
/// file with `text`, and the copy's base in a state directory that does not exist yet.
pub struct Setup {
    pub f: Fixture,
    pub host: PathBuf,
    pub base: PathBuf,
}

pub fn setup(at: &str, host_text: &str) -> Setup {
    let f = Fixture::new();
    f.write(at, ON);
    let host = f.root.parent().unwrap().join("host-params");
    std::fs::write(&host, host_text).unwrap();
    let base = f.root.parent().unwrap().join("state/nvidia/params");
    Setup { f, host, base }
}

impl Setup {
    /// With the kernel's mounts.
    pub fn run(&self, id: &str) -> anyhow::Result<()> {
        disable_modification(&self.f.root, &self.host, &self.base, id)
    }

    /// With `m`'s.
    pub fn run_with(&self, m: &Recording, id: &str) -> anyhow::Result<()> {
        disable_modification_with(m, &self.f.root, &self.host, &self.base, id)
    }

    /// The copy of container `id` (with `suffix`), as the kernel names it.
    pub fn copy(&self, id: &str, suffix: &str) -> PathBuf {
        let copy = copy_path(&self.base, id).unwrap();
        PathBuf::from(format!("{}{suffix}", copy.display()))
    }

    pub fn state_dir(&self) -> PathBuf {
        self.base.parent().unwrap().to_path_buf()
    }
}

#[test]
fn nothing_to_do_without_a_driver_a_change_or_a_target() {
    let s = setup("proc/driver/nvidia/params", ON);
    let none = Path::new("/nonexistent/params");
    disable_modification(&s.f.root, none, &s.base, "c1").unwrap();
    std::fs::write(&s.host, "ModifyDeviceFiles: 0\n").unwrap();
    s.run("c1").unwrap();
    assert!(!s.state_dir().exists());
    let s = setup("elsewhere", ON);
    s.run("c1").unwrap();
    assert!(!s.state_dir().exists());
}

#[test]
fn a_target_that_is_not_a_regular_file_is_refused() {
    let s = setup("elsewhere", ON);
    s.f.mkdir("proc/driver/nvidia/params");
    let err = format!("{:#}", s.run("c1").unwrap_err());
    assert!(
        err.contains("/proc/driver/nvidia/params") && err.contains("regular"),
        "{err}"
    );
}

const PARAMS: &str = "proc/driver/nvidia/params";

/// mount_setattr(2): MOUNT_ATTR_RDONLY | NOSUID | NODEV | NOEXEC, from <linux/mount.h>.
const READ_ONLY: u64 = 0x01 | 0x02 | 0x04 | 0x08;

/// The attach of container `id`'s copy (`suffix`) over `at` in the root, holding `text`.
fn attach(s: &Setup, id: &str, suffix: &str, at: &str, text: &str) -> Call {
    Call::AttachClone {
        source: s.copy(id, suffix),
        target: s.f.in_root(at),
        attr_set: READ_ONLY,
        // MS_PRIVATE, from <linux/fs.h>.
        propagation: 1 << 18,
        text: text.to_string(),
    }
}

/// Nothing is left in the state directory, which only root may enter.
fn left_nothing(s: &Setup) {
    let left: Vec<_> = std::fs::read_dir(s.state_dir()).unwrap().collect();
    assert!(left.is_empty(), "left on the host: {left:?}");
    let mode = std::fs::metadata(s.state_dir()).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );
}

#[test]
fn mounts_a_read_only_copy_and_leaves_nothing_on_the_host() {
    let s = setup(PARAMS, ON);
    let m = Recording::new();
    s.run_with(&m, "c1").unwrap();
    let rewritten = rewrite(ON).unwrap();
    assert_eq!(m.calls(), [attach(&s, "c1", "", PARAMS, &rewritten)]);
    assert_eq!(
        std::fs::read_to_string(s.f.in_root(PARAMS)).unwrap(),
        rewritten
    );
    left_nothing(&s);
    // A second run sees the container's params already say 0.
    s.run_with(&m, "c1").unwrap();
    assert_eq!(m.calls().len(), 1);
}

#[test]
fn a_leftover_copy_is_replaced_not_followed() {
    let s = setup(PARAMS, ON);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(s.state_dir())
        .unwrap();
    std::os::unix::fs::symlink(s.f.decoy.join("lib/libdecoy.so"), s.copy("c1", "")).unwrap();
    let before = s.f.decoy_snapshot();
    let m = Recording::new();
    s.run_with(&m, "c1").unwrap();
    assert_eq!(
        m.calls(),
        [attach(&s, "c1", "", PARAMS, &rewrite(ON).unwrap())]
    );
    left_nothing(&s);
    assert_eq!(before, s.f.decoy_snapshot());
}

#[test]
fn containers_in_parallel_each_get_their_own_copy() {
    let state = tempfile::tempdir_in("/tmp").unwrap();
    let base = state.path().join("nvidia/params");
    let runs: Vec<_> = (0..8)
        .map(|i| {
            let mut s = setup(PARAMS, &format!("{ON}Tag: {i}\n"));
            s.base = base.clone();
            std::thread::spawn(move || {
                let m = Recording::new();
                let id = format!("container-{i}");
                for _ in 0..10 {
                    s.run_with(&m, &id).unwrap();
                }
                let text = rewrite(&format!("{ON}Tag: {i}\n")).unwrap();
                assert_eq!(m.calls(), [attach(&s, &id, "", PARAMS, &text)]);
                s
            })
        })
        .collect();
    let done: Vec<Setup> = runs.into_iter().map(|t| t.join().unwrap()).collect();
    for s in &done {
        left_nothing(s);
    }
}

#[test]
fn a_symlinked_proc_still_mounts_inside_the_root() {
    let variants = [
        ("/{D}/proc", "{D}/proc/driver/nvidia/params"),
        (
            "../../../../../../../../../../{D}/proc",
            "{D}/proc/driver/nvidia/params",
        ),
        ("/x/../../{D}/proc", "{D}/proc/driver/nvidia/params"),
    ];
    for (link, inside) in variants {
        let s = setup(inside, ON);
        s.f.mkdir("x");
        s.f.link("proc", link);
        let before = s.f.decoy_snapshot();
        let m = Recording::new();
        s.run_with(&m, "c1").unwrap();
        let want = attach(&s, "c1", "", inside, &rewrite(ON).unwrap());
        assert_eq!(m.calls(), [want], "{link}");
        assert_eq!(before, s.f.decoy_snapshot(), "{link}: the decoy changed");
    }
    // Dangling inside the root: nothing to mount, nothing touched.
    let s = setup("elsewhere", ON);
    s.f.link("proc", "/{D}/proc");
    let before = s.f.decoy_snapshot();
    let m = Recording::new();
    s.run_with(&m, "c1").unwrap();
    assert_eq!(m.calls(), []);
    assert_eq!(before, s.f.decoy_snapshot());
}

/// Without open_tree, mount_setattr and move_mount: a bind, then a remount of the mount
/// found at the path again, read-only, nosuid, nodev, noexec.
#[test]
fn the_fallback_binds_then_remounts_read_only() {
    let s = setup(PARAMS, ON);
    let m = Recording::old_kernel(true);
    s.run_with(&m, "c1").unwrap();
    let flags = MsFlags::MS_BIND
        | MsFlags::MS_REMOUNT
        | MsFlags::MS_RDONLY
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV
        | MsFlags::MS_NOEXEC;
    let target = s.f.in_root(PARAMS);
    assert_eq!(
        m.calls(),
        [
            attach(&s, "c1", "", PARAMS, &rewrite(ON).unwrap()),
            Call::Bind {
                source: s.copy("c1", ""),
                target: target.clone(),
            },
            Call::Remount { target, flags },
        ]
    );
    left_nothing(&s);
}

/// When the path does not lead to the new bind mount afterwards (something else is
/// there), it is not remounted, and the copy is still removed.
#[test]
fn the_fallback_remounts_only_its_own_bind() {
    let s = setup(PARAMS, ON);
    let m = Recording::old_kernel(false);
    let err = format!("{:#}", s.run_with(&m, "c1").unwrap_err());
    assert!(err.contains("is not the new bind mount"), "{err}");
    let calls = m.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(matches!(calls[1], Call::Bind { .. }), "{calls:?}");
    left_nothing(&s);
}

/// The MIG `config` and `monitor` capability files get their `DeviceFileModify` hidden
/// the same way; a capability file the host says 0 for is left alone.
#[test]
fn the_mig_capability_files_are_hidden_too() {
    const CAP_ON: &str = "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n";
    let s = setup(PARAMS, ON);
    let caps = "proc/driver/nvidia/capabilities/mig";
    s.f.write(&format!("{caps}/config"), CAP_ON);
    s.f.write(&format!("{caps}/monitor"), CAP_ON);
    let host_caps = s.host.parent().unwrap().join("capabilities/mig");
    std::fs::create_dir_all(&host_caps).unwrap();
    std::fs::write(host_caps.join("config"), CAP_ON).unwrap();
    let cap_off = CAP_ON.replace("Modify: 1", "Modify: 0");
    std::fs::write(host_caps.join("monitor"), &cap_off).unwrap();
    let m = Recording::new();
    s.run_with(&m, "c1").unwrap();
    assert_eq!(
        m.calls(),
        [
            attach(&s, "c1", "", PARAMS, &rewrite(ON).unwrap()),
            attach(&s, "c1", ".mig-config", &format!("{caps}/config"), &cap_off),
        ]
    );
    left_nothing(&s);
}
