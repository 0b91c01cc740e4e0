use super::*;

const V: &str = "580.95.05";

/// A small ELF executable of this machine: the host's `true`.
pub fn host_elf() -> Vec<u8> {
    for p in ["/bin/true", "/usr/bin/true"] {
        if let Ok(b) = std::fs::read(p) {
            return b;
        }
    }
    panic!("no /bin/true to copy as an ELF stand-in");
}

/// Writes `bytes` to `path` with mode 0755.
pub fn write_exe(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An ELF stand-in for a driver binary of `version`: appended bytes keep it an ELF.
pub fn driver_elf(version: &str) -> Vec<u8> {
    let mut b = host_elf();
    b.extend_from_slice(format!("\0NVIDIA driver {version}\0").as_bytes());
    b
}

#[test]
fn an_elf_of_the_version_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nvidia-smi");
    write_exe(&p, &driver_elf(V));
    check_executable(&p, V).unwrap();
}

#[test]
fn scripts_other_versions_and_plain_files_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script");
    write_exe(
        &script,
        format!("#!/bin/sh\n# {V}\nexec x \"$@\"\n").as_bytes(),
    );
    let old = dir.path().join("old");
    write_exe(&old, &driver_elf("570.86.10"));
    let plain = dir.path().join("plain");
    write_exe(&plain, &driver_elf(V));
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut obj = driver_elf(V);
    obj[16] = 1; // e_type ET_REL, little-endian
    obj[17] = 0;
    let rel = dir.path().join("rel");
    write_exe(&rel, &obj);
    let check = |p: &Path| check_executable(p, V).unwrap_err();
    assert!(matches!(check(&script), Rejected::NotElf));
    assert!(matches!(check(&old), Rejected::OtherVersion));
    assert!(matches!(check(&plain), Rejected::NotExecutable));
    assert!(matches!(check(&rel), Rejected::NotAnExecutable(1)));
    assert!(matches!(check(dir.path()), Rejected::NotAFile));
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o755)).unwrap();
    assert!(matches!(check(&fifo), Rejected::NotAFile));
    assert!(matches!(
        check(&dir.path().join("missing")),
        Rejected::Io(_)
    ));
}

#[test]
fn the_version_is_found_across_chunks_and_only_whole() {
    let v = b"550.54.1";
    for chunk in [1, 18, 19, 20, 25, 64] {
        for pad in 0..40 {
            let mut data = vec![b'x'; pad];
            data.extend_from_slice(v);
            data.extend_from_slice(b"xyz");
            let found = |d: &[u8]| contains_version(d, v, 1 << 20, chunk).unwrap();
            assert!(found(&data), "chunk {chunk} pad {pad}");
            // 550.54.14 is another version; 1550.54.1 is nothing.
            let mut longer = vec![b'x'; pad];
            longer.extend_from_slice(b"550.54.14 1550.54.1");
            assert!(!found(&longer), "chunk {chunk} pad {pad}");
            // At the very end of the data.
            let mut end = vec![b'x'; pad];
            end.extend_from_slice(v);
            assert!(found(&end), "chunk {chunk} pad {pad}");
        }
    }
}

#[test]
fn the_scan_is_bounded() {
    let mut data = vec![0u8; 1000];
    data.extend_from_slice(V.as_bytes());
    assert!(!contains_version(&data[..], V.as_bytes(), 1000, 64).unwrap());
    assert!(contains_version(&data[..], V.as_bytes(), 1009, 64).unwrap());
}
