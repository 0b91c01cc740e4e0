//! The chart's observability pack: the metrics Service follows the metrics addresses, the
//! ServiceMonitor, PrometheusRule and dashboard are off by default, and every metric an
//! alert or the dashboard uses is one graft serves, of the type its suffix says (read from
//! graft-driver's, graft-nri's and graft-scheduler-extender's own registries, so that a
//! renamed metric fails here).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{ensure, Context};
use graft_integration::Testbed;
use prometheus_client::registry::Registry;
use serde_json::Value;

use super::pools::{find, render};
use super::{chart, top};

const ALL_ON: [&str; 6] = [
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "metrics.dashboard.enabled=true",
];

/// Every metric graft-driver, graft-nri and graft-scheduler-extender register, with its
/// type (`# TYPE` lines).
fn served() -> anyhow::Result<BTreeMap<String, String>> {
    let mut registry = Registry::default();
    graft_driver::metrics::DriverMetrics::default().register(&mut registry);
    graft_nri::metrics::NriMetrics::default().register(&mut registry);
    let extender = graft_scheduler_extender::metrics::Metrics::register(&mut registry);
    // One pool, so that the per-pool gauges have a series and are encoded with their type.
    extender.fleet.set(&BTreeMap::from([(
        "x".to_string(),
        graft_scheduler_extender::index::PoolGpus::default(),
    )]));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').context("TYPE line")?;
            out.insert(name.to_string(), kind.to_string());
        }
    }
    Ok(out)
}

/// The `graft_...` names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("graft_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // Not inside another word (a label value such as nvidia_graft_x).
        let before = rest[..i].chars().next_back();
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// Whether `used` (a name as a query writes it) is a metric graft serves: a counter as
/// `_total`, a histogram as `_bucket`/`_sum`/`_count`, a gauge as itself. A labelled family
/// with no series yet is not encoded at all, and the build information is registered by the
/// binaries themselves: those are looked up as quoted names in the sources instead (the
/// suffix a counter gets stripped), without their type.
fn is_served(used: &str, served: &BTreeMap<String, String>, sources: &str) -> bool {
    let typed = |suffix: &str, kind: &str| {
        used.strip_suffix(suffix)
            .is_some_and(|base| served.get(base).is_some_and(|k| k == kind))
    };
    let quoted =
        |name: &str| !served.contains_key(name) && sources.contains(&format!("\"{name}\""));
    typed("_total", "counter")
        || ["_bucket", "_sum", "_count"]
            .iter()
            .any(|s| typed(s, "histogram"))
        || served.get(used).is_some_and(|k| k == "gauge")
        || quoted(used)
        || used.strip_suffix("_total").is_some_and(quoted)
}

/// The Rust sources of graft-driver (its core and families too), graft-nri and
/// graft-scheduler-extender, concatenated.
fn sources() -> anyhow::Result<String> {
    let mut all = String::new();
    let mut dirs = vec![
        top().join("driver/src"),
        top().join("driver-core/src"),
        top().join("families"),
        top().join("nri-plugin/src"),
        top().join("scheduler-extender/src"),
    ];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                all.push_str(&std::fs::read_to_string(&path)?);
            }
        }
    }
    Ok(all)
}

#[test]
fn alerts_and_dashboard_use_metrics_graft_serves() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let served = served()?;
    ensure!(served.len() > 10, "{served:?}");
    let sources = sources()?;
    let objs = render(&tb, &ALL_ON)?;
    let rule = find(&objs, "PrometheusRule", "graft").context("no PrometheusRule")?;
    let rules = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .context("rules")?;
    let alerts: BTreeSet<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    for want in [
        "GraftNriDisconnected",
        "GraftPrepareErrors",
        "GraftUnhealthyDevices",
        "GraftSlicePublishErrors",
        "GraftNriDeadlineExceeded",
    ] {
        ensure!(alerts.contains(want), "{want} missing: {alerts:?}");
    }
    let mut used = BTreeSet::new();
    for r in rules {
        let expr = r["expr"].as_str().context("expr")?;
        let names = metric_names(expr);
        // `up` is Prometheus' own, of graft's scrape job.
        ensure!(!names.is_empty() || expr.starts_with("up{"), "{expr}");
        used.extend(names);
    }
    let dashboard = std::fs::read_to_string(chart().join("files/dashboard.json"))?;
    let json: Value = serde_json::from_str(&dashboard).context("dashboard.json")?;
    ensure!(json["panels"].as_array().is_some_and(|p| p.len() >= 8));
    used.extend(metric_names(&dashboard));
    // The ConfigMap carries the file as it is.
    let cm = find(&objs, "ConfigMap", "graft-dashboard").context("no dashboard ConfigMap")?;
    ensure!(
        cm["metadata"]["labels"]["grafana_dashboard"] == "1",
        "{cm:#}"
    );
    ensure!(cm["data"]["graft.json"].as_str() == Some(dashboard.trim_end()));
    let unknown: Vec<_> = used
        .iter()
        .filter(|u| !is_served(u, &served, &sources))
        .collect();
    ensure!(
        unknown.is_empty(),
        "not served by graft (as written): {unknown:?}; served: {served:?}"
    );
    Ok(())
}

/// The dashboard shows the scheduler extender's free GPUs and fragmentation ratio per
/// node pool.
#[test]
fn dashboard_shows_fragmentation() -> anyhow::Result<()> {
    let dashboard = std::fs::read_to_string(chart().join("files/dashboard.json"))?;
    let json: Value = serde_json::from_str(&dashboard).context("dashboard.json")?;
    let exprs: Vec<&str> = json["panels"]
        .as_array()
        .context("panels")?
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    for want in [
        "graft_scheduler_extender_free_gpus",
        "graft_scheduler_extender_fragmentation_ratio",
    ] {
        ensure!(
            exprs
                .iter()
                .any(|e| metric_names(e).contains(want) && e.contains("by (pool)")),
            "no dashboard query shows {want} per pool: {exprs:?}"
        );
    }
    Ok(())
}

#[test]
fn metrics_service_follows_the_addresses() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let ports = |objs: &[Value]| -> Vec<(String, i64)> {
        find(objs, "Service", "graft-metrics")
            .and_then(|s| s["spec"]["ports"].as_array())
            .map(|p| {
                p.iter()
                    .map(|p| {
                        (
                            p["name"].as_str().unwrap_or_default().to_string(),
                            p["port"].as_i64().unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    // Shipped: the Service on, the operator's objects off (their CRDs may be missing).
    let objs = render(&tb, &[])?;
    let svc = find(&objs, "Service", "graft-metrics").context("no metrics Service")?;
    ensure!(svc["spec"]["clusterIP"] == "None", "{svc:#}");
    ensure!(svc["spec"]["selector"]["app.kubernetes.io/name"] == "graft");
    ensure!(svc["spec"]["selector"]["app.kubernetes.io/instance"] == "graft");
    ensure!(
        ports(&objs)
            == [
                ("driver-metrics".into(), 9477),
                ("nri-metrics".into(), 9478)
            ],
        "{svc:#}"
    );
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        ensure!(!objs.iter().any(|o| o["kind"] == kind), "{kind} rendered");
    }
    ensure!(find(&objs, "ConfigMap", "graft-dashboard").is_none());
    // Other ports, one daemon off.
    let objs = render(
        &tb,
        &[
            "--set",
            "metrics.driverAddr=:9100",
            "--set",
            "metrics.nriAddr=off",
        ],
    )?;
    ensure!(ports(&objs) == [("driver-metrics".into(), 9100)]);
    // The ServiceMonitor selects the Service (and only it: the pods do not carry its
    // component), and scrapes the ports it has.
    let mut args = ALL_ON.to_vec();
    args.extend([
        "--set",
        "metrics.serviceMonitor.labels.release=prom",
        "--set",
        "metrics.serviceMonitor.interval=15s",
    ]);
    let objs = render(&tb, &args)?;
    let sm = find(&objs, "ServiceMonitor", "graft").context("no ServiceMonitor")?;
    let svc = find(&objs, "Service", "graft-metrics").context("no Service")?;
    let sel = sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .context("selector")?;
    ensure!(
        sel.iter().all(|(k, v)| &svc["metadata"]["labels"][k] == v),
        "{sm:#}"
    );
    let pod = &find(&objs, "DaemonSet", "graft").context("no DaemonSet")?["spec"]["template"];
    ensure!(!sel.iter().all(|(k, v)| &pod["metadata"]["labels"][k] == v));
    ensure!(sm["metadata"]["labels"]["release"] == "prom", "{sm:#}");
    let endpoints = sm["spec"]["endpoints"].as_array().context("endpoints")?;
    let names: Vec<_> = endpoints.iter().map(|e| e["port"].clone()).collect();
    ensure!(names == ["driver-metrics", "nri-metrics"], "{sm:#}");
    ensure!(endpoints.iter().all(|e| e["interval"] == "15s"), "{sm:#}");
    Ok(())
}
