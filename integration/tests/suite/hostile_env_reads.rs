//! Attacks on what a claim's environment and a planted record file can do to other
//! containers, through real containerd 2.2 and runc:
//! - a claim that sets a variable the container's own spec already sets (`HTTPS_PROXY`,
//!   `NODE_OPTIONS`, ...) is refused, not allowed to replace it;
//! - a FIFO planted at a pod's record refuses that pod's containers with a reason, while
//!   300 containers of other pods are created and graft-nri still synchronizes;
//! - a symlinked and an oversized record are refused.
//!
//! Needs root, the testbed and the workspace binaries; the README's test command provides
//! them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use futures::future::join_all;
use graft_integration::cri::Pod;
use graft_integration::mounts::Scratch;
use graft_integration::records::{one_device_claim, plant};
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::{ClaimRecord, ContainerEdits, EnvVar, RecordStore};

/// A scratch directory under /tmp named for this process (socket paths must stay short).
fn scratch(name: &str) -> anyhow::Result<Scratch> {
    Scratch::new(format!("/tmp/ger-{name}-{}", std::process::id()))
}

/// containerd 2.2 with graft-nri.
struct Node {
    cd: Containerd,
    nri: GraftNri,
    cri: Cri,
    store: RecordStore,
    state: PathBuf,
}

async fn node(dir: &Path) -> anyhow::Result<Node> {
    let tb = Testbed::load()?;
    let cd = Containerd::start(&tb, Version::V2_2, &dir.join("c"))?;
    let state = dir.join("state");
    let store = RecordStore::open(&state)?;
    let mut nri = GraftNri::start(&cd.nri_socket, &state, &dir.join("graft-nri.log"), &[])?;
    nri.wait_synchronized(Duration::from_secs(60))?;
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
    Ok(Node {
        cd,
        nri,
        cri,
        store,
        state,
    })
}

/// A claim whose one device gives the listed containers of pod `pod_uid` only `vars`.
fn env_claim(
    claim_uid: &str,
    name: &str,
    pod_uid: &str,
    containers: &[&str],
    vars: &[(&str, &str)],
) -> ClaimRecord {
    let env = vars
        .iter()
        .map(|(n, v)| EnvVar {
            name: n.to_string(),
            value: v.to_string(),
        })
        .collect();
    one_device_claim(
        claim_uid,
        name,
        pod_uid,
        containers,
        "env",
        ContainerEdits {
            env,
            ..Default::default()
        },
    )
}

fn uid(what: &str) -> String {
    format!("{what}-{}", std::process::id())
}

/// A claim's variable that the pod's container sets itself is refused, naming the variable
/// and the claim; the pod's value is what a container of that pod would have had. A claim's
/// variable the pod does not set is still given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_never_replaces_the_pods_own_variable() -> anyhow::Result<()> {
    let dir = scratch("env")?;
    let n = node(&dir).await?;
    // (variable, the claim's value, whether it is the claim's own env: record version 2)
    let cases = [
        ("HTTPS_PROXY", "http://claim-proxy:3128", false),
        ("NODE_OPTIONS", "--require /claim/evil.js", false),
        ("PYTHONPATH", "/claim/site", false),
        ("BASH_ENV", "/claim/rc", false),
        ("KUBERNETES_SERVICE_HOST", "10.9.9.9", false),
        ("HTTPS_PROXY", "http://claim-proxy:3128", true),
    ];
    let mut refused = 0;
    for (i, &(var, claim_value, claim_level)) in cases.iter().enumerate() {
        let pod_uid = uid(&format!("env{i}"));
        let mut rec = env_claim(
            &format!("claim-{pod_uid}"),
            &format!("sets-{}", var.to_lowercase().replace('_', "-")),
            &pod_uid,
            &["app"],
            &[(var, claim_value), ("CLAIM_ONLY", "from-claim")],
        );
        if claim_level {
            rec.env = std::mem::take(&mut rec.devices[0].edits.env);
            rec.version = rec.needed_version();
        }
        n.store.put_claim(&rec)?;
        let pod = n.cri.run_pod(&format!("env{i}"), &pod_uid).await?;
        let r = n
            .cri
            .create_from(
                &pod,
                "app",
                graft_integration::containerd::BUSYBOX_IMAGE,
                "sleep 60",
                &[(var, "pod-value")],
            )
            .await;
        let e = match r {
            Err(e) => e,
            Ok(id) => {
                let spec = n.cd.runtime_spec(&id)?;
                anyhow::bail!(
                    "{var}: the container was created; its env: {}",
                    spec["process"]["env"]
                )
            }
        };
        let msg = e.message();
        ensure!(
            msg.contains(var) && msg.contains("already sets") && msg.contains("default/sets-"),
            "{var}: the refusal does not name the variable, the claim and the pod's own: {msg}"
        );
        ensure!(
            !msg.contains(claim_value),
            "{var}: the refusal shows a value: {msg}"
        );
        refused += 1;
        n.cri.remove_pod(&pod).await?;
    }

    // The same variables, for a container that does not set them itself, are given: one as
    // the claim's own env (version 2), one as its device's.
    let pod_uid = uid("env-free");
    let mut rec = env_claim(
        &format!("claim-{pod_uid}"),
        "sets-proxy",
        &pod_uid,
        &["app"],
        &[
            ("HTTPS_PROXY", "http://claim-proxy:3128"),
            ("CLAIM_ONLY", "from-claim"),
        ],
    );
    rec.env = vec![rec.devices[0].edits.env.remove(0)];
    rec.version = rec.needed_version();
    n.store.put_claim(&rec)?;
    let pod = n.cri.run_pod("env-free", &pod_uid).await?;
    let id = n
        .cri
        .create(
            &pod,
            "app",
            "echo \"P=$HTTPS_PROXY C=$CLAIM_ONLY\"; echo DONE; sleep 60",
        )
        .await
        .context("a container that does not set the claim's variables")?;
    n.cri.start(&id).await?;
    let log = n
        .cri
        .wait_log(&pod, "app", "DONE", Duration::from_secs(30))
        .await?;
    ensure!(
        log.contains("P=http://claim-proxy:3128 C=from-claim"),
        "the claim's variables were not given: {log}"
    );
    n.cri.remove_pod(&pod).await?;
    println!(
        "{refused} of {} overriding claims refused; 0 reached a container",
        cases.len()
    );
    Ok(())
}

/// Replaces a record file with `make` (a FIFO, a symlink, ...), keeping the pod index.
fn replace_record(
    state: &Path,
    claim_uid: &str,
    make: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let path = state.join(format!("claims/{claim_uid}.json"));
    std::fs::remove_file(&path)?;
    make(&path)
}

/// Creates `count` containers in `pods` (round robin), `batch` at a time; returns the ids
/// of those created and the errors of the others.
async fn create_many(
    cri: &Cri,
    pods: &[Pod],
    count: usize,
    batch: usize,
) -> (Vec<String>, Vec<String>) {
    let mut created = Vec::new();
    let mut errors = Vec::new();
    let names: Vec<(usize, String)> = (0..count)
        .map(|i| (i % pods.len(), format!("c{i}")))
        .collect();
    for chunk in names.chunks(batch) {
        let results = join_all(
            chunk
                .iter()
                .map(|(p, name)| cri.create(&pods[*p], name, "echo \"G=$ENV_READS\"; sleep 600")),
        )
        .await;
        for (r, (_, name)) in results.into_iter().zip(chunk) {
            match r {
                Ok(id) => created.push(id),
                Err(e) => errors.push(format!("{name}: {}", e.message())),
            }
        }
    }
    (created, errors)
}

/// A FIFO planted as one pod's record: graft-nri re-registers and synchronizes with it
/// there (its pod has a running container), then 300 containers of 30 other pods are
/// created while that pod's containers are asked for again and again: every one of the
/// 300 is created, and each of the FIFO pod's is refused, saying its record is not a
/// regular file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_fifo_record_refuses_only_its_own_pod() -> anyhow::Result<()> {
    let dir = scratch("fifo")?;
    let mut n = node(&dir).await?;
    let t0 = Instant::now();

    // The FIFO pod runs a container from a good record, then the record becomes a FIFO.
    let fifo_uid = uid("fifo");
    let fifo_claim = format!("claim-{fifo_uid}");
    n.store.put_claim(&env_claim(
        &fifo_claim,
        "fifo",
        &fifo_uid,
        &["before"],
        &[("FIFO_POD", "1")],
    ))?;
    let fifo_pod = n.cri.run_pod("fifo", &fifo_uid).await?;
    n.cri
        .create_and_start(&fifo_pod, "before", "sleep 600")
        .await?;
    replace_record(&n.state, &fifo_claim, |p| {
        nix::unistd::mkfifo(
            p,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )?;
        Ok(())
    })?;

    // A new graft-nri registers; its Synchronize covers the FIFO pod's running container.
    n.nri.stop()?;
    n.nri.spawn()?;
    n.nri
        .wait_synchronized(Duration::from_secs(30))
        .context("graft-nri did not synchronize with a FIFO planted as a record")?;

    // 30 other pods with good records, one claim each giving all ten of its containers.
    let mut pods = Vec::new();
    for i in 0..30 {
        let pod_uid = uid(&format!("other{i}"));
        let names: Vec<String> = (0..300)
            .filter(|c| c % 30 == i)
            .map(|c| format!("c{c}"))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        n.store.put_claim(&env_claim(
            &format!("claim-{pod_uid}"),
            &format!("other{i}"),
            &pod_uid,
            &names,
            &[("ENV_READS", "given")],
        ))?;
        pods.push(n.cri.run_pod(&format!("other{i}"), &pod_uid).await?);
    }
    let hammer = async {
        let mut reasons = Vec::new();
        for round in 0..10 {
            let names: Vec<String> = (0..5).map(|k| format!("after{round}-{k}")).collect();
            let tries = join_all(
                names
                    .iter()
                    .map(|name| n.cri.create(&fifo_pod, name, "sleep 1")),
            )
            .await;
            for t in tries {
                reasons.push(t.err().map(|e| e.message().to_string()));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        reasons
    };
    let ((created, errors), reasons) = tokio::join!(create_many(&n.cri, &pods, 300, 20), hammer);
    ensure!(
        created.len() == 300,
        "{} of 300 containers of other pods created; errors: {errors:?}",
        created.len()
    );
    let attempts = reasons.len();
    for r in reasons {
        let msg = r.context("a container of the FIFO pod was created")?;
        ensure!(
            msg.contains("not a regular file") && msg.contains(&format!("{fifo_claim}.json")),
            "the FIFO pod's refusal does not say why: {msg}"
        );
    }
    // The other pods' containers got their claims' variable.
    for id in [&created[0], &created[299]] {
        let env = n.cd.runtime_spec(id)?["process"]["env"].to_string();
        ensure!(
            env.contains("ENV_READS=given"),
            "{id} lacks its claim's variable: {env}"
        );
    }

    // And still synchronized: once more with the FIFO there and 300 more containers.
    n.nri.stop()?;
    n.nri.spawn()?;
    n.nri
        .wait_synchronized(Duration::from_secs(30))
        .context("graft-nri did not synchronize again")?;

    println!(
        "300 containers of other pods created; {attempts} of the FIFO pod's refused, 0 \
         created; in {:?}",
        t0.elapsed()
    );
    Ok(())
}

/// A record planted as a symlink (to a record naming the pod, outside the state directory)
/// and one over the size cap: each refuses its container, saying why; neither is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinked_and_oversized_records_are_refused() -> anyhow::Result<()> {
    let dir = scratch("planted")?;
    let n = node(&dir).await?;
    let mut planted = 0;
    for (case, why) in [("link", "symlink"), ("big", "larger than")] {
        let pod_uid = uid(case);
        let claim_uid = format!("claim-{pod_uid}");
        let rec = env_claim(&claim_uid, case, &pod_uid, &["app"], &[("PLANTED", "1")]);
        n.store.put_claim(&rec)?;
        replace_record(&n.state, &claim_uid, |p| {
            let mut data = serde_json::to_vec(&rec)?;
            if case == "link" {
                let elsewhere = dir.join(format!("{claim_uid}.json"));
                std::fs::write(&elsewhere, data)?;
                std::os::unix::fs::symlink(&elsewhere, p)?;
            } else {
                data.resize(2 << 20, b' ');
                std::fs::write(p, data)?;
            }
            Ok(())
        })?;
        let pod = n.cri.run_pod(case, &pod_uid).await?;
        let e = n
            .cri
            .create(&pod, "app", "sleep 1")
            .await
            .err()
            .with_context(|| format!("{case}: the container was created"))?;
        ensure!(e.message().contains(why), "{case}: {}", e.message());
        planted += 1;
    }
    println!("{planted} of 2 planted records refused; 0 created");
    Ok(())
}

/// glibc's tunables (`GLIBC_TUNABLES` and the allocator's `MALLOC_*` aliases) steer the C
/// library of every process that inherits them, graft's hooks included: a planted record
/// carrying one is refused by name, as a device's variable or as the claim's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glibc_tunables_in_a_record_are_refused() -> anyhow::Result<()> {
    let dir = scratch("tunables")?;
    let n = node(&dir).await?;
    let cases = [
        ("GLIBC_TUNABLES", "glibc.malloc.check=3", false),
        ("MALLOC_PERTURB_", "165", false),
        ("MALLOC_ARENA_MAX", "1", true),
    ];
    for (i, &(var, value, claim_level)) in cases.iter().enumerate() {
        let pod_uid = uid(&format!("tun{i}"));
        let mut rec = env_claim(
            &format!("claim-{pod_uid}"),
            "tunable",
            &pod_uid,
            &["app"],
            &[(var, value)],
        );
        if claim_level {
            rec.env = std::mem::take(&mut rec.devices[0].edits.env);
            rec.version = rec.needed_version();
        }
        ensure!(
            n.store.put_claim(&rec).is_err(),
            "{var}: the store wrote it"
        );
        plant(&n.state, &rec)?;
        let pod = n.cri.run_pod(&format!("tun{i}"), &pod_uid).await?;
        let e = n
            .cri
            .create(&pod, "app", "sleep 1")
            .await
            .err()
            .with_context(|| format!("{var}: the container was created"))?;
        ensure!(e.message().contains(var), "{var}: {}", e.message());
        n.cri.remove_pod(&pod).await?;
    }
    println!(
        "{} of {} tunable records refused; 0 created",
        cases.len(),
        cases.len()
    );
    Ok(())
}
