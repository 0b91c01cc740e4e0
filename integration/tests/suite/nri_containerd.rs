//! graft-nri against real containerd 2.4.x, 2.2.x and 1.7.24: containers get exactly what their
//! pod's records say, nothing more, and never start half-injected.
//!
//! Needs the testbed (`integration/testbed/setup.sh`) and the workspace binaries
//! (`cargo build --workspace --bins`); the README's test command does both.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use graft_integration::cri::Pod;
use graft_integration::mounts::Scratch;
use graft_integration::records::{char_node, one_device_claim, ro_bind};
use graft_integration::scrape;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::*;
use k8s_cri::v1::ContainerState;
use nix::sys::stat::{major, minor};
use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType, Mount, Spec};
use serde_json::Value;

/// One scenario at a time: the machine has two cores and one runc state root.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Damages a record file on disk.
type Spoiler = Box<dyn Fn(&Path)>;

const LONG: Duration = Duration::from_secs(60);
const DEV_IN_CONTAINER: &str = "/dev/graft-test0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nri_containerd_2_2() {
    let _g = SERIAL.lock().await;
    scenario(Version::V2_2).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nri_containerd_2_4() {
    let _g = SERIAL.lock().await;
    scenario(Version::V2_4).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nri_containerd_1_7() {
    let _g = SERIAL.lock().await;
    scenario(Version::V1_7).await.unwrap();
}

/// A real host character device that the runtime's default device cgroup does not allow,
/// so reading it inside a container proves graft's injected rule.
fn test_device() -> anyhow::Result<(PathBuf, i64, i64)> {
    for p in ["/dev/cpu_dma_latency", "/dev/hwrng"] {
        if let Ok(md) = std::fs::metadata(p) {
            let rdev = md.rdev();
            return Ok((p.into(), major(rdev) as i64, minor(rdev) as i64));
        }
    }
    bail!("no suitable test character device (/dev/cpu_dma_latency) on this machine")
}

fn uid(label: &str, what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{label}-{what}-{}-{nanos:08x}", std::process::id())
}

/// A claim record as the driver would write it: one device for one container of one pod.
fn claim(
    claim_uid: &str,
    pod_uid: &str,
    container: &str,
    major: i64,
    minor: i64,
    conf: &Path,
) -> ClaimRecord {
    let edits = ContainerEdits {
        device_nodes: vec![char_node(DEV_IN_CONTAINER, major, minor, 0o600)],
        mounts: vec![ro_bind(conf, "/etc/graft-test.conf")],
        env: vec![EnvVar {
            name: "GRAFT_TEST_ENV".into(),
            value: "injected".into(),
        }],
        hooks: vec![],
    };
    one_device_claim(
        claim_uid,
        &format!("claim-{container}"),
        pod_uid,
        &[container],
        "testdev-0",
        edits,
    )
}

/// What a container reports about the device, env and mount; then it idles.
fn probe_script(major: i64, minor: i64) -> String {
    format!(
        r#"if [ -c {DEV_IN_CONTAINER} ]; then ls -l {DEV_IN_CONTAINER}; else echo NO_DEVICE; fi
if head -c 4 {DEV_IN_CONTAINER} >/dev/null 2>&1; then echo READ_OK; else echo READ_FAILED; fi
mknod /tmp/probe c {major} {minor} 2>/dev/null
if head -c 4 /tmp/probe >/dev/null 2>&1; then echo PROBE_OPEN_OK; else echo PROBE_OPEN_DENIED; fi
echo "ENV=$GRAFT_TEST_ENV"
if [ -f /etc/graft-test.conf ]; then echo "CONF=$(cat /etc/graft-test.conf)"; else echo NO_CONF; fi
echo DONE
exec sleep 3600"#
    )
}

fn has_device(spec: &Spec, major: i64, minor: i64) -> bool {
    let devices = spec.linux().as_ref().and_then(|l| l.devices().as_ref());
    devices.into_iter().flatten().any(|d| {
        d.path() == Path::new(DEV_IN_CONTAINER)
            && d.typ() == LinuxDeviceType::C
            && d.major() == major
            && d.minor() == minor
    })
}

/// The spec's device cgroup rules, in order.
fn cgroup_rules(spec: &Spec) -> &[LinuxDeviceCgroup] {
    spec.linux()
        .as_ref()
        .and_then(|l| l.resources().as_ref())
        .and_then(|r| r.devices().as_deref())
        .unwrap_or_default()
}

/// Whether the spec's device cgroup rules let a container open c major:minor.
fn cgroup_allows(spec: &Spec, major: i64, minor: i64) -> bool {
    let mut allowed = false;
    for r in cgroup_rules(spec) {
        let kind_ok = matches!(
            r.typ(),
            None | Some(LinuxDeviceType::A | LinuxDeviceType::C)
        );
        let major_ok = r.major().is_none_or(|m| m == major);
        let minor_ok = r.minor().is_none_or(|m| m == minor);
        let access = r.access().as_deref().unwrap_or("");
        if kind_ok && major_ok && minor_ok && (access.contains('r') || access.is_empty()) {
            allowed = r.allow();
        }
    }
    allowed
}

fn env_has(spec: &Spec, kv: &str) -> bool {
    let env = spec.process().as_ref().and_then(|p| p.env().as_ref());
    env.into_iter().flatten().any(|e| e == kv)
}

fn mount_to<'a>(spec: &'a Spec, dest: &str) -> Option<&'a Mount> {
    let mounts = spec.mounts().as_ref();
    mounts
        .into_iter()
        .flatten()
        .find(|m| m.destination() == Path::new(dest))
}

/// The spec's annotation `key`, if set.
fn annotation<'a>(spec: &'a Spec, key: &str) -> Option<&'a str> {
    spec.annotations().as_ref()?.get(key).map(String::as_str)
}

/// Creating container `app` in `pod` must be refused with a message holding every needle.
async fn refused(
    cri: &Cri,
    pod: &Pod,
    script: &str,
    label: &str,
    needles: &[&str],
) -> anyhow::Result<()> {
    match cri.create(pod, "app", script).await {
        Ok(id) => bail!("{label}: the container must be refused, but {id} was created"),
        Err(status) => {
            println!("{label} refused: {}", status.message());
            ensure!(
                needles.iter().all(|n| status.message().contains(n)),
                "{}",
                status.message()
            );
            Ok(())
        }
    }
}

async fn scenario(version: Version) -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    // Short and private: socket paths must stay under 108 bytes.
    let dir = Scratch::new(format!(
        "/tmp/graft-it-{}-{}",
        version.label(),
        std::process::id()
    ))?;
    let mut cd = Containerd::start(&tb, version, &dir)?;
    let state = dir.join("graft-state");
    let store = RecordStore::open(&state)?;
    // The test's own config file is mounted from a directory of its own: an allowed root,
    // as a node would configure one, and root's (nothing below /tmp is served).
    let served = Scratch::new(format!(
        "/run/graft-it-{}-{}",
        version.label(),
        std::process::id()
    ))?;
    let roots = served.to_string_lossy().into_owned();
    let mut nri = GraftNri::start(
        &cd.nri_socket,
        &state,
        &dir.join("logs/graft-nri.log"),
        &[
            "--eviction-grace-ms",
            "1000",
            "--allowed-mount-roots",
            &roots,
        ],
    )?;
    let status = nri.wait_synchronized(LONG)?;
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
    let runtime = cri.version().await?;
    println!(
        "[{}] runtime {runtime}; graft-nri sees {} {}",
        version.label(),
        status.runtime_name,
        status.runtime_version
    );
    ensure!(
        status.runtime_name == "containerd",
        "runtime name {:?}",
        status.runtime_name
    );

    let (host_dev, major, minor) = test_device()?;
    println!(
        "[{}] test device {} = c {major}:{minor}",
        version.label(),
        host_dev.display()
    );
    let conf = served.join("graft-test.conf");
    std::fs::write(&conf, "graft-test-conf\n")?;
    let script = probe_script(major, minor);

    // 1. The container named in the record gets device, cgroup rule, env and mount; its
    //    sibling in the same pod gets nothing; a pod without records is untouched.
    let pod_a_uid = uid("a", "pod");
    store.put_claim(&claim(
        &uid("a", "claim"),
        &pod_a_uid,
        "app",
        major,
        minor,
        &conf,
    ))?;
    let pod_a = cri.run_pod("pod-a", &pod_a_uid).await?;
    let app = cri.create_and_start(&pod_a, "app", &script).await?;
    let sidecar = cri.create_and_start(&pod_a, "sidecar", &script).await?;
    let app_log = cri.wait_log(&pod_a, "app", "DONE", LONG).await?;
    println!("[{}] app log:\n{app_log}", version.label());
    ensure!(
        app_log.contains(&format!("{major}, {minor}")),
        "device node numbers:\n{app_log}"
    );
    ensure!(
        app_log.contains("crw-------"),
        "char device with mode 0600:\n{app_log}"
    );
    ensure!(app_log.contains("READ_OK"), "device readable:\n{app_log}");
    ensure!(app_log.contains("ENV=injected"), "env injected:\n{app_log}");
    ensure!(
        app_log.contains("CONF=graft-test-conf"),
        "mount injected:\n{app_log}"
    );
    let side_log = cri.wait_log(&pod_a, "sidecar", "DONE", LONG).await?;
    ensure!(
        side_log.contains("NO_DEVICE"),
        "sidecar must not see the device:\n{side_log}"
    );
    ensure!(
        side_log.contains("PROBE_OPEN_DENIED"),
        "default cgroup must deny the device:\n{side_log}"
    );
    ensure!(
        side_log.contains("ENV=\n")
            || side_log.ends_with("ENV=")
            || side_log.contains("ENV=\nNO_CONF"),
        "sidecar env:\n{side_log}"
    );
    ensure!(side_log.contains("NO_CONF"), "sidecar mount:\n{side_log}");

    let app_spec = cd.oci_spec(&app)?;
    let side_spec = cd.oci_spec(&sidecar)?;
    ensure!(
        !cgroup_allows(&side_spec, major, minor),
        "the default spec must not already allow c {major}:{minor}"
    );
    ensure!(
        has_device(&app_spec, major, minor),
        "device in app spec: {:?}",
        app_spec.linux().as_ref().map(|l| l.devices())
    );
    ensure!(
        cgroup_allows(&app_spec, major, minor),
        "allow rule in app spec: {:?}",
        cgroup_rules(&app_spec)
    );
    ensure!(env_has(&app_spec, "GRAFT_TEST_ENV=injected"));
    let m = mount_to(&app_spec, "/etc/graft-test.conf").context("mount in app spec")?;
    ensure!(
        m.source().as_deref() == Some(conf.as_path())
            && m.options().iter().flatten().any(|o| o == "ro"),
        "{m:?}"
    );
    let injected = annotation(&app_spec, INJECTED_ANNOTATION).context("annotation")?;
    ensure!(
        injected.contains("default/claim-app") && injected.contains("testdev-0"),
        "{injected}"
    );
    ensure!(!has_device(&side_spec, major, minor));
    ensure!(annotation(&side_spec, INJECTED_ANNOTATION).is_none());
    ensure!(!env_has(&side_spec, "GRAFT_TEST_ENV=injected"));
    ensure!(mount_to(&side_spec, "/etc/graft-test.conf").is_none());

    let pod_b = cri.run_pod("pod-b", &uid("b", "pod")).await?;
    let plain = cri.create_and_start(&pod_b, "app", &script).await?;
    let plain_spec = cd.oci_spec(&plain)?;
    ensure!(
        !has_device(&plain_spec, major, minor)
            && annotation(&plain_spec, INJECTED_ANNOTATION).is_none()
    );

    // 1b. The metrics say so: one injected, the sidecar and the plain pod's container
    //     skipped, each CreateContainer timed; synchronized and ready.
    let m = nri.metrics()?;
    ensure!(
        scrape::need(&m, "graft_nri_containers_injected_total")? >= 1.0,
        "{m}"
    );
    ensure!(
        scrape::need(&m, "graft_nri_containers_skipped_total")? >= 2.0,
        "{m}"
    );
    let created = "graft_nri_request_duration_seconds_count{event=\"create_container\"}";
    ensure!(scrape::need(&m, created)? >= 3.0, "{m}");
    ensure!(scrape::need(&m, "graft_nri_synchronized")? == 1.0, "{m}");
    ensure!(scrape::need(&m, "graft_nri_connected")? == 1.0, "{m}");
    ensure!(m.contains("graft_nri_build_info{version="), "{m}");
    let ready = scrape::wait_ready(&nri.health_socket(), LONG)?;
    ensure!(ready.contains("synchronized"), "{ready}");

    // 2. A corrupt, unknown-version or invalid record refuses the container, with a message
    //    naming the problem; the container never starts half-injected.
    let bad_cases: [(&str, Spoiler, &str); 3] = [
        (
            "corrupt",
            Box::new(|p: &Path| std::fs::write(p, b"{\"version\": 1, \"claim\": {").unwrap()),
            "corrupt",
        ),
        (
            "future",
            Box::new(|p: &Path| {
                let mut v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
                v["version"] = 99.into();
                std::fs::write(p, v.to_string()).unwrap()
            }),
            "unknown version 99",
        ),
        (
            "outside-dev",
            Box::new(|p: &Path| {
                let mut v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
                v["devices"][0]["edits"]["device_nodes"][0]["path"] = "/etc/passwd".into();
                std::fs::write(p, v.to_string()).unwrap()
            }),
            "not a clean path under /dev",
        ),
    ];
    for (what, spoil, expect) in bad_cases {
        let pod_uid = uid(what, "pod");
        let claim_uid = uid(what, "claim");
        store.put_claim(&claim(&claim_uid, &pod_uid, "app", major, minor, &conf))?;
        spoil(&state.join("claims").join(format!("{claim_uid}.json")));
        let pod = cri.run_pod(&format!("pod-{what}"), &pod_uid).await?;
        let label = format!("[{}] {what} record", version.label());
        refused(&cri, &pod, &script, &label, &["graft", expect]).await?;
        cri.remove_pod(&pod).await?;
    }

    // 2b. A device graft-driver found gone since the claim was prepared refuses the claim's
    //     new containers; back, it no longer does.
    let (pod_uid, claim_uid) = (uid("absent", "pod"), uid("absent", "claim"));
    store.put_claim(&claim(&claim_uid, &pod_uid, "app", major, minor, &conf))?;
    graft_record::absent::write_absent(&state, &["testdev-0".to_string()].into())?;
    let pod = cri.run_pod("pod-absent", &pod_uid).await?;
    let label = format!("[{}] absent device", version.label());
    let needles = ["device testdev-0 of claim", "is gone from the node"];
    refused(&cri, &pod, &script, &label, &needles).await?;
    // The refusal is journaled for graft-driver's Event on the pod: pod, container, claim,
    // reason, every field valid.
    let until = Instant::now() + Duration::from_secs(5);
    let entry = loop {
        let all = graft_record::refusals::read_all(&state)?;
        let mine = all.into_iter().filter_map(|e| e.refusal.ok());
        if let Some(e) = mine.into_iter().find(|r| r.pod.uid == pod_uid) {
            break e;
        }
        ensure!(Instant::now() < until, "{label}: no refusal journaled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    ensure!(
        entry.pod.name == "pod-absent"
            && entry.pod.uid == pod_uid
            && entry.container == "app"
            && entry.claims.len() == 1
            && entry.reason.contains("is gone from the node"),
        "{entry:?}"
    );
    // The log line carries the container's span (written by graft-nri's log thread, a moment
    // after the refusal).
    let spanned = |l: &str| {
        l.contains("refusing to create")
            && l.contains("pod=default/pod-absent")
            && l.contains("container=app")
            && l.contains("container_id=")
    };
    let start = Instant::now();
    while !nri.log_text().lines().any(spanned) {
        ensure!(start.elapsed() < LONG, "{}", nri.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    for e in graft_record::refusals::read_all(&state)? {
        graft_record::refusals::remove(&state, &e.name)?;
    }
    graft_record::absent::write_absent(&state, &Default::default())?;
    cri.create(&pod, "app", &script).await?;
    cri.remove_pod(&pod).await?;
    store.remove_claim(&claim_uid)?;
    let m = nri.metrics()?;
    let refused = |reason: &str| {
        scrape::need(
            &m,
            &format!("graft_nri_containers_refused_total{{reason=\"{reason}\"}}"),
        )
    };
    ensure!(refused("device_absent")? >= 1.0, "{m}");
    ensure!(
        refused("record_unreadable")? + refused("record_rejected")? >= 3.0,
        "{m}"
    );
    ensure!(refused("internal")? == 0.0, "{m}");

    // 3. containerd restarts: graft-nri reconnects, resynchronizes (finding nothing amiss
    //    with the running injected container), and injects the next container.
    let verified = nri.wait_synchronized(LONG)?.verified_syncs;
    let before = Instant::now();
    cd.restart()?;
    wait_resynced(&mut nri, before)?;
    let status = wait_verified(&mut nri, verified + 1)?;
    ensure!(
        status.uninjected_found == 0,
        "an injected container must not be flagged: {status:?}"
    );
    let m = nri.metrics()?;
    ensure!(
        scrape::need(&m, "graft_nri_reconnects_total")? >= 1.0,
        "{m}"
    );
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
    let pod_d_uid = uid("d", "pod");
    store.put_claim(&claim(
        &uid("d", "claim"),
        &pod_d_uid,
        "app",
        major,
        minor,
        &conf,
    ))?;
    let pod_d = cri.run_pod("pod-d", &pod_d_uid).await?;
    let after_restart = cri.create_and_start(&pod_d, "app", &script).await?;
    ensure!(cri
        .wait_log(&pod_d, "app", "DONE", LONG)
        .await?
        .contains("READ_OK"));
    ensure!(has_device(&cd.oci_spec(&after_restart)?, major, minor));
    ensure!(
        cri.state(&app).await? == ContainerState::ContainerRunning,
        "injected container survives the restart"
    );

    // 4. A container started while graft-nri was away runs without its devices; the next
    //    Synchronize finds it, reports it and has it evicted.
    nri.stop()?;
    let pod_e_uid = uid("e", "pod");
    store.put_claim(&claim(
        &uid("e", "claim"),
        &pod_e_uid,
        "app",
        major,
        minor,
        &conf,
    ))?;
    let pod_e = cri.run_pod("pod-e", &pod_e_uid).await?;
    let missed = cri.create_and_start(&pod_e, "app", &script).await?;
    ensure!(
        cri.wait_log(&pod_e, "app", "DONE", LONG)
            .await?
            .contains("NO_DEVICE"),
        "plugin away: no injection"
    );
    nri.spawn()?;
    nri.wait_synchronized(LONG)?;
    let status = wait_verified(&mut nri, 1)?;
    ensure!(
        status.uninjected_found == 1,
        "exactly the missed container is found: {status:?}"
    );
    nri.wait_log(&missed, LONG)?;
    println!("[{}] found at Synchronize: {missed}", version.label());
    // Either the runtime stops it, or (containerd up to 2.2 drops plugin evictions) graft
    // says in its log that the runtime did not act.
    let deadline = Instant::now() + LONG;
    let outcome = loop {
        if cri.state(&missed).await? != ContainerState::ContainerRunning {
            break "stopped by the runtime";
        }
        if nri
            .log_text()
            .contains("did not act on the eviction request")
        {
            break "runtime did not act; reported in the log";
        }
        if Instant::now() > deadline {
            bail!("neither evicted nor reported:\n{}", nri.log_text());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "[{}] eviction of the missed container: {outcome}",
        version.label()
    );
    ensure!(
        cri.state(&app).await? == ContainerState::ContainerRunning,
        "the injected container is left alone"
    );

    // 5. A rolling update: the new instance waits for the old one's lock, and is ready
    //    meanwhile (the node is served), saying so; once the old one exits it takes over.
    let mut next = GraftNri::start(
        &cd.nri_socket,
        &state,
        &dir.join("logs/graft-nri-next.log"),
        &["--allowed-mount-roots", &roots],
    )?;
    let standby = scrape::wait_ready(&next.health_socket(), LONG)?;
    ensure!(standby.contains("standby"), "{standby}");
    next.wait_log("waiting for it to exit", LONG)?;
    nri.stop()?;
    next.wait_synchronized(LONG)?;
    let ready = scrape::wait_ready(&next.health_socket(), LONG)?;
    ensure!(!ready.contains("standby"), "{ready}");
    ensure!(scrape::need(&next.metrics()?, "graft_nri_synchronized")? == 1.0);

    drop(next);
    drop(nri);
    drop(cd);
    Ok(())
}

/// Waits for a Synchronize that happened after `since`.
/// Waits until graft-nri has verified `n` Synchronize requests (it checks the running
/// containers after its answer).
fn wait_verified(nri: &mut GraftNri, n: u64) -> anyhow::Result<NriStatus> {
    let start = Instant::now();
    loop {
        let s = nri.wait_synchronized(LONG)?;
        if s.verified_syncs >= n {
            return Ok(s);
        }
        if start.elapsed() > LONG {
            bail!("Synchronize {n} not verified: {s:?}\n{}", nri.log_text());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_resynced(nri: &mut GraftNri, since: Instant) -> anyhow::Result<NriStatus> {
    let since_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64
        - since.elapsed().as_millis() as u64;
    let start = Instant::now();
    loop {
        let s = nri.wait_synchronized(LONG)?;
        if s.updated_ms >= since_ms {
            return Ok(s);
        }
        if start.elapsed() > LONG {
            bail!("no Synchronize after the restart:\n{}", nri.log_text());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
