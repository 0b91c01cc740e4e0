use std::time::Duration;

use super::*;
use crate::cache::SETTLED;

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Waits until a file written now is old enough to be kept.
fn settle() {
    std::thread::sleep(SETTLED + Duration::from_millis(50));
}

#[test]
fn round_trip_and_missing() {
    let dir = tempfile::tempdir().unwrap();
    assert!(read_absent(dir.path()).unwrap().is_empty());
    let listed = set(&["serial-0", "seat-2"]);
    write_absent(dir.path(), &listed).unwrap();
    assert_eq!(read_absent(dir.path()).unwrap(), listed);
    write_absent(dir.path(), &BTreeSet::new()).unwrap();
    assert!(!dir.path().join(ABSENT_FILE).exists());
    assert!(read_absent(dir.path()).unwrap().is_empty());
}

#[test]
fn garbage_is_refused_naming_the_file_and_never_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(ABSENT_FILE);
    let shown = path.display().to_string();
    let cache = AbsentCache::new();
    std::fs::write(&path, b"{\"version\": 9, \"devices\": []}").unwrap();
    let e = read_absent(dir.path()).unwrap_err().to_string();
    assert!(e.contains("version 9") && e.contains(&shown), "{e}");
    std::fs::write(&path, b"\xff").unwrap();
    settle();
    for _ in 0..2 {
        let e = read_absent(dir.path()).unwrap_err().to_string();
        assert!(e.contains(&shown), "{e}");
        let e = cache.read(dir.path()).unwrap_err().to_string();
        assert!(e.contains(&shown), "{e}");
    }
    write_absent(dir.path(), &set(&["serial-0"])).unwrap();
    assert_eq!(*cache.read(dir.path()).unwrap(), set(&["serial-0"]));
}

#[test]
fn a_symlink_is_refused_even_after_a_kept_list() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let cache = AbsentCache::new();
    write_absent(dir.path(), &set(&["serial-0"])).unwrap();
    settle();
    assert_eq!(*cache.read(dir.path()).unwrap(), set(&["serial-0"]));
    write_absent(elsewhere.path(), &set(&["seat-9"])).unwrap();
    let path = dir.path().join(ABSENT_FILE);
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join(ABSENT_FILE), &path).unwrap();
    let shown = path.display().to_string();
    let e = read_absent(dir.path()).unwrap_err().to_string();
    assert!(e.contains(&shown) && e.contains("symlink"), "{e}");
    let e = cache.read(dir.path()).unwrap_err().to_string();
    assert!(e.contains(&shown) && e.contains("symlink"), "{e}");
}

#[test]
fn a_file_over_the_cap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(ABSENT_FILE);
    // A valid list, padded past the cap: refused for its size alone.
    let mut data = b"{\"version\": 1, \"devices\": [\"serial-0\"]}".to_vec();
    data.resize(SMALL_FILE_CAP as usize + 1, b' ');
    std::fs::write(&path, &data).unwrap();
    let shown = path.display().to_string();
    let e = read_absent(dir.path()).unwrap_err().to_string();
    assert!(e.contains(&shown) && e.contains("larger than"), "{e}");
    let e = AbsentCache::new().read(dir.path()).unwrap_err().to_string();
    assert!(e.contains(&shown) && e.contains("larger than"), "{e}");
}

#[test]
fn the_cache_follows_each_replacement_and_removal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let cache = AbsentCache::new();
    // No file: the empty list, remembered as such.
    let none = cache.read(root).unwrap();
    assert!(none.is_empty());
    assert!(Arc::ptr_eq(&none, &cache.read(root).unwrap()));
    let first = set(&["serial-0", "seat-2"]);
    write_absent(root, &first).unwrap();
    assert_eq!(*cache.read(root).unwrap(), first);
    settle();
    let kept = cache.read(root).unwrap();
    assert_eq!(*kept, first);
    assert!(
        Arc::ptr_eq(&kept, &cache.read(root).unwrap()),
        "a settled, unchanged file is a hit"
    );
    // Replaced by rename with a list of the same length: only the inode tells them apart.
    let second = set(&["serial-1", "seat-2"]);
    write_absent(root, &second).unwrap();
    assert_eq!(*cache.read(root).unwrap(), second);
    settle();
    assert_eq!(*cache.read(root).unwrap(), second);
    assert_eq!(*cache.read(root).unwrap(), second);
    // Removed (an empty list): none absent.
    write_absent(root, &BTreeSet::new()).unwrap();
    assert!(cache.read(root).unwrap().is_empty());
    write_absent(root, &first).unwrap();
    assert_eq!(*cache.read(root).unwrap(), first);
}
