//! GPU sharing through MPS on the cluster (helpers in mps_support.rs): one namespace at a
//! time per GPU, each tenancy isolated from the next and from the host whatever its tenants
//! do, limits held on the server side, non-root clients served; and the daemons graft-mps
//! runs live through a rollout of graft's own DaemonSet.

use std::path::Path;

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::GpuValues;
use graft_integration::cluster::workloads::{phase, wait_running};
use graft_integration::cluster::{wait_until, workloads, Cluster};
use graft_integration::fake_gpu::FakeNode;

use super::mps_support::*;

/// The chart's values for these tests: MPS on for one GPU, a small /dev/shm.
pub fn values() -> GpuValues {
    GpuValues {
        mps: MPS_GPU.into(),
        helm: vec!["--set".into(), format!("nvidia.mpsShmSize={SHM_SIZE}")],
        ..Default::default()
    }
}

/// [`values`] with the tenancy taint off: prepare's refusal, the last guard, alone keeps
/// two namespaces apart (mps_scheduling.rs tests the scheduler's part).
pub fn guard_values() -> GpuValues {
    let mut v = values();
    v.helm
        .extend(["--set".into(), "nvidia.mpsTenantTaint=false".into()]);
    v
}

const HOLD: &str = "echo DONE; sleep 3600";

pub fn tenants_are_isolated(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    import_probe_image(node)?;
    graft_mps_ready(c)?;
    let before = graft_state(c)?;

    // A's share runs CUDA through MPS and leaves a file in its /dev/shm.
    c.apply(&share_pod(
        "a",
        "mps-a1",
        40,
        "30Gi",
        None,
        &format!("graft-cuda-probe; echo a-secret > /dev/shm/a-secret; {HOLD}"),
    ))?;
    wait_running(c, "a", "mps-a1")?;
    let log = workloads::wait_log_in(c, "a", "mps-a1", "app", "DONE")?;
    ensure!(log.contains("PROBE PASS"), "{log}");
    let gpu = gpu_dir()?;
    let t = tenancy(&gpu)?;
    ensure!(
        server_log(&t).contains("uid 0 active_thread_percentage 40 pinned_mem_limit 0=30720M"),
        "{}",
        server_log(&t)
    );
    // The chart's graft-mps (privileged, host PID) runs the daemon in the sandbox: no
    // no_new_privs escape, none of the capabilities that lead out through /proc/1/root.
    crate::mps_escape::daemon_was_sandboxed(&control_log(&t))?;

    // B's share of the same GPU is refused while A holds it, and the Event says why.
    c.apply(&share_pod(
        "b",
        "mps-b1",
        10,
        "1Gi",
        None,
        &format!(
            "if cat /dev/shm/a-secret; then echo SAW-A; else echo NO-A; fi; graft-cuda-probe; {HOLD}"
        ),
    ))?;
    wait_until("no Event said why b's share waits", || {
        Ok(pod_events(c, "b", "mps-b1")?.contains("MPS cannot keep two namespaces apart"))
    })?;
    println!(
        "b's share refused: {}",
        pod_events(c, "b", "mps-b1")?.trim()
    );
    ensure!(phase(c, "b", "mps-b1") == "Pending");

    // A client that unsets its limit variables still gets the server's: its namespace's.
    let out = exec(
        c,
        "a",
        "mps-a1",
        "env -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT graft-cuda-probe",
    )?;
    ensure!(out.contains("PROBE PASS"), "{out}");
    let want = "active_thread_percentage 40 pinned_mem_limit 0=30720M (server 40 0=30720M; client asked - -)";
    ensure!(
        server_log(&t).contains(want),
        "{want:?} not in\n{}",
        server_log(&t)
    );

    // The worst A can do to its own tenancy: fill its /dev/shm, plant a symlink and a FIFO
    // in its pipe directory, quit the daemon. Nothing on the host changes.
    let victim = Path::new("/var/lib/graft-cluster/mps-victim");
    std::fs::write(victim, "keep")?;
    let out = exec(
        c,
        "a",
        "mps-a1",
        &format!(
            "dd if=/dev/zero of=/dev/shm/fill bs=1M count=64; rm -f /dev/shm/fill; \
             rm -f /tmp/nvidia-mps/nvidia-cuda-mps-control.pid; \
             ln -s {} /tmp/nvidia-mps/nvidia-cuda-mps-control.pid; mkfifo /tmp/nvidia-mps/fifo; \
             echo quit | nvidia-cuda-mps-control; echo SENT",
            victim.display()
        ),
    )?;
    ensure!(
        out.contains("No space left") && out.contains("SENT"),
        "{out}"
    );
    wait_until("graft-mps did not start A's daemon again", || {
        Ok(control_log(&t).matches("Startup").count() == 2)
    })?;
    wait_until("A's limits were not set again", || {
        Ok(control_log(&t)
            .rsplit("Startup")
            .next()
            .is_some_and(|l| l.contains("set_default_active_thread_percentage 40")))
    })?;
    ensure!(
        std::fs::read_to_string(victim)? == "keep",
        "the victim file changed"
    );
    for e in std::fs::read_dir(t.join("pipe"))?.flatten() {
        let ft = e.file_type()?;
        ensure!(!ft.is_symlink(), "{} left", e.path().display());
        ensure!(
            !std::os::unix::fs::FileTypeExt::is_fifo(&ft),
            "{} left",
            e.path().display()
        );
    }
    let out = exec(c, "a", "mps-a1", "graft-cuda-probe")?;
    ensure!(out.contains("PROBE PASS"), "after the quit: {out}");
    workloads::graft_ready(c)?;
    ensure!(
        graft_state(c)? == before,
        "graft restarted: {:?}",
        graft_state(c)?
    );

    // A non-root pod of A runs its share through MPS (a server of its UID).
    c.apply(&share_pod(
        "a",
        "mps-a2",
        20,
        "10Gi",
        Some(1000),
        &format!("graft-cuda-probe; {HOLD}"),
    ))?;
    wait_running(c, "a", "mps-a2")?;
    let log = workloads::wait_log_in(c, "a", "mps-a2", "app", "DONE")?;
    ensure!(log.contains("PROBE PASS"), "{log}");
    ensure!(
        server_log(&t).contains("uid 1000 active_thread_percentage 20 pinned_mem_limit 0=10240M"),
        "{}",
        server_log(&t)
    );

    // A gone: its tenancy goes with its file; B's share runs on a fresh one.
    c.kubectl(&[
        "-n",
        "a",
        "delete",
        "pod",
        "mps-a1",
        "mps-a2",
        "--wait=true",
    ])?;
    wait_running(c, "b", "mps-b1")?;
    let log = workloads::wait_log_in(c, "b", "mps-b1", "app", "DONE")?;
    ensure!(log.contains("NO-A") && log.contains("PROBE PASS"), "{log}");
    ensure!(!t.exists(), "A's tenancy {} outlived it", t.display());
    let tb = tenancy(&gpu)?;
    ensure!(
        server_log(&tb).contains("active_thread_percentage 10"),
        "{}",
        server_log(&tb)
    );

    c.kubectl(&["-n", "b", "delete", "pod", "mps-b1", "--wait=true"])?;
    wait_all_gone(c)?;
    ensure!(std::fs::read_to_string(victim)? == "keep");
    ensure!(
        graft_state(c)? == before,
        "graft restarted: {:?}",
        graft_state(c)?
    );
    Ok(())
}

/// Probe runs of a looping client: passed and failed.
fn runs(c: &Cluster, pod: &str) -> (usize, usize) {
    let log = workloads::logs_in(c, "a", pod, "app");
    (log.matches("ok\n").count(), log.matches("FAIL").count())
}

pub fn survives_a_graft_rollout(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    import_probe_image(node)?;
    graft_mps_ready(c)?;
    let before = graft_state(c)?;
    let looping = "while true; do if graft-cuda-probe >/dev/null 2>&1; then echo ok; \
                   else echo FAIL; fi; sleep 1; done";
    for pod in ["mps-r1", "mps-r2"] {
        c.apply(&share_pod("a", pod, 30, "20Gi", None, looping))?;
    }
    for pod in ["mps-r1", "mps-r2"] {
        wait_running(c, "a", pod)?;
        wait_until(&format!("{pod} never ran a probe"), || {
            Ok(runs(c, pod).0 > 0)
        })?;
    }
    let t = tenancy(&gpu_dir()?)?;
    let server = server_log(&t)
        .lines()
        .find_map(|l| {
            l.split("Server ")
                .nth(1)?
                .split(' ')
                .next()
                .map(str::to_string)
        })
        .context("no server started")?;
    ensure!(
        control_log(&t).matches("Startup").count() == 1,
        "{}",
        control_log(&t)
    );

    // graft's DaemonSet rolls (a new pod beside the old one, then the old one goes): the
    // same daemon and server keep serving both shares throughout.
    let at_start = [runs(c, "mps-r1"), runs(c, "mps-r2")];
    workloads::roll_graft(c)?;
    workloads::graft_ready(c)?;
    wait_until("the probes stopped passing after the rollout", || {
        Ok(runs(c, "mps-r1").0 >= at_start[0].0 + 3 && runs(c, "mps-r2").0 >= at_start[1].0 + 3)
    })?;
    for pod in ["mps-r1", "mps-r2"] {
        ensure!(
            runs(c, pod).1 == 0,
            "{pod}: {}",
            workloads::logs_in(c, "a", pod, "app")
        );
    }
    ensure!(
        control_log(&t).matches("Startup").count() == 1,
        "{}",
        control_log(&t)
    );
    ensure!(
        server_log(&t).matches(" ready").count() == 1,
        "{}",
        server_log(&t)
    );
    let (_, mps_pod) = graft_state(c)?;
    ensure!(
        mps_pod == before.1,
        "graft-mps was replaced: {mps_pod} vs {}",
        before.1
    );
    println!(
        "through the rollout: probes {at_start:?} -> {:?}",
        [runs(c, "mps-r1"), runs(c, "mps-r2")]
    );

    // A new share after the rollout joins the same server, its limits counted.
    c.apply(&share_pod(
        "a",
        "mps-r3",
        20,
        "10Gi",
        None,
        &format!("graft-cuda-probe; {HOLD}"),
    ))?;
    wait_running(c, "a", "mps-r3")?;
    let log = workloads::wait_log_in(c, "a", "mps-r3", "app", "DONE")?;
    ensure!(log.contains("PROBE PASS"), "{log}");
    let control = control_log(&t);
    ensure!(control.matches("Startup").count() == 1, "{control}");
    ensure!(
        server_log(&t).matches(" ready").count() == 1,
        "{}",
        server_log(&t)
    );
    for want in [
        "Command set_default_active_thread_percentage 80\n".to_string(),
        format!("Command set_active_thread_percentage {server} 80\n"),
        format!("Command set_device_pinned_mem_limit {server} 0 51200M\n"),
    ] {
        ensure!(control.contains(&want), "{want:?} not in\n{control}");
    }
    c.kubectl(&[
        "-n",
        "a",
        "delete",
        "pod",
        "mps-r1",
        "mps-r2",
        "mps-r3",
        "--wait=true",
    ])?;
    wait_all_gone(c)
}
