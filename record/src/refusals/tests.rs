use super::*;
use std::os::unix::fs::symlink;

fn refusal(reason: &str) -> Refusal {
    Refusal::new(
        PodRef {
            namespace: "ns".into(),
            name: "pod-1".into(),
            uid: "0b1c-22".into(),
        },
        "main",
        "abc123",
        &["ns/gpu".into()],
        reason,
    )
}

#[test]
fn round_trip_and_remove() {
    let d = tempfile::tempdir().unwrap();
    assert!(read_all(d.path()).unwrap().is_empty());
    let r = refusal("device gpu-0 is absent");
    let path = append(d.path(), &r).unwrap();
    let mode = std::fs::metadata(&path).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let all = read_all(d.path()).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].refusal.as_ref().unwrap(), &r);
    remove(d.path(), &all[0].name).unwrap();
    remove(d.path(), &all[0].name).unwrap();
    assert!(read_all(d.path()).unwrap().is_empty());
}

#[test]
fn bounded_count_oldest_dropped_and_long_reasons_cut() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..COUNT_MAX + 10 {
        let mut r = refusal(&format!("r{i}"));
        r.at_ms = 1000 + i as u64;
        append(d.path(), &r).unwrap();
    }
    let all = read_all(d.path()).unwrap();
    assert_eq!(all.len(), COUNT_MAX);
    assert_eq!(all[0].refusal.as_ref().unwrap().reason, "r10");
    let long = refusal(&"é\n".repeat(REASON_MAX));
    assert!(long.reason.len() <= REASON_MAX && !long.reason.contains('\n'));
    long.validate().unwrap();
    let many: Vec<String> = (0..40).map(|i| format!("ns/c{i}")).collect();
    let r = Refusal::new(refusal("x").pod, "main", "abc", &many, "x");
    assert_eq!(r.claims.len(), CLAIMS_MAX);
}

#[test]
fn hostile_entries_are_skipped_not_followed() {
    let d = tempfile::tempdir().unwrap();
    append(d.path(), &refusal("real")).unwrap();
    let dir = journal_dir(d.path());
    let secret = d.path().join("secret");
    std::fs::write(&secret, serde_json::to_vec(&refusal("leaked")).unwrap()).unwrap();
    symlink(&secret, dir.join("0000000000001-1.json")).unwrap();
    std::fs::write(dir.join("0000000000002-1.json"), vec![b' '; ENTRY_MAX + 1]).unwrap();
    std::fs::write(dir.join("0000000000003-1.json"), b"{garbage").unwrap();
    let mut bad = refusal("x");
    bad.pod.name = "../../etc".into();
    std::fs::write(
        dir.join("0000000000004-1.json"),
        serde_json::to_vec(&bad).unwrap(),
    )
    .unwrap();
    let mut ctl = refusal("x");
    ctl.reason = "line\u{1b}[31m".into();
    std::fs::write(
        dir.join("0000000000005-1.json"),
        serde_json::to_vec(&ctl).unwrap(),
    )
    .unwrap();
    std::fs::create_dir(dir.join("0000000000006-1.json")).unwrap();
    std::fs::write(dir.join("other-name"), b"{}").unwrap();
    let all = read_all(d.path()).unwrap();
    let errs: Vec<(&str, String)> = all
        .iter()
        .filter_map(|e| Some((e.name.as_str(), e.refusal.as_ref().err()?.to_string())))
        .collect();
    assert_eq!(errs.len(), 7, "{errs:?}");
    let why = |n: &str| errs.iter().find(|(name, _)| *name == n).unwrap().1.as_str();
    assert!(why("0000000000001-1.json").contains("symlink"));
    assert!(why("0000000000002-1.json").contains("more than"));
    assert!(why("0000000000003-1.json").contains("not a refusal"));
    assert!(why("0000000000004-1.json").contains("pod.name"));
    assert!(why("0000000000005-1.json").contains("reason"));
    assert!(why("0000000000006-1.json").contains("regular file"));
    assert!(why("other-name").contains("name"));
    let good: Vec<&Refusal> = all.iter().filter_map(|e| e.refusal.as_ref().ok()).collect();
    assert_eq!(good.len(), 1);
    assert_eq!(good[0].reason, "real");
    for e in &all {
        remove(d.path(), &e.name).unwrap();
    }
    assert!(read_all(d.path()).unwrap().is_empty());
    // The link went, its target stayed.
    assert!(secret.exists());
}

#[test]
fn a_symlinked_journal_directory_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, journal_dir(d.path())).unwrap();
    assert!(append(d.path(), &refusal("x")).is_err());
    assert!(read_all(d.path()).is_err());
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[test]
fn a_write_in_progress_is_left_to_its_writer_and_a_stale_one_removed() {
    let d = tempfile::tempdir().unwrap();
    append(d.path(), &refusal("one")).unwrap();
    let dir = journal_dir(d.path());
    // Only the renamed entry is visible: append leaves no temporary behind.
    assert_eq!(names(&dir).unwrap().len(), 1);
    std::fs::write(dir.join(".w-1-1"), b"{\"half").unwrap();
    std::fs::write(dir.join(".w-1-2"), b"{\"half").unwrap();
    let old = std::fs::File::options()
        .write(true)
        .open(dir.join(".w-1-2"))
        .unwrap();
    old.set_modified(SystemTime::now() - std::time::Duration::from_secs(TMP_STALE_SECS as u64 + 5))
        .unwrap();
    let all = read_all(d.path()).unwrap();
    let seen: Vec<&str> = all.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        !seen.contains(&".w-1-1"),
        "a fresh write must not be read: {seen:?}"
    );
    assert!(
        seen.contains(&".w-1-2"),
        "an abandoned write is offered for removal: {seen:?}"
    );
    assert!(all.iter().any(|e| e.name == ".w-1-2" && e.refusal.is_err()));
}

#[test]
fn a_reader_racing_the_writer_never_sees_a_partial_entry() {
    // The driver drains the journal as soon as inotify reports a create; before entries
    // were renamed into place it could read one empty and delete it as invalid.
    let d = tempfile::tempdir().unwrap();
    create_dir(d.path()).unwrap();
    let root = d.path().to_path_buf();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (root, stop) = (root.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut bad = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for e in read_all(&root).unwrap() {
                    if let Err(why) = e.refusal {
                        bad.push(format!("{}: {why}", e.name));
                    }
                }
            }
            bad
        })
    };
    for i in 0..300 {
        append(&root, &refusal(&format!("reason {i}"))).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let bad = reader.join().unwrap();
    assert!(bad.is_empty(), "{bad:?}");
}
