use super::*;

fn text(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
    out
}

#[test]
fn fleet_gauges_show_each_pool_and_drop_pools_gone() {
    let mut registry = Registry::default();
    let m = Metrics::register(&mut registry);
    let pools = BTreeMap::from([
        (
            "h100".to_string(),
            PoolGpus {
                gpus: 16,
                free: 10,
                stranded: 2,
            },
        ),
        (
            "none".to_string(),
            PoolGpus {
                gpus: 8,
                free: 0,
                stranded: 0,
            },
        ),
    ]);
    m.fleet.set(&pools);
    let t = text(&registry);
    assert!(
        t.contains("graft_scheduler_extender_gpus{pool=\"h100\"} 16"),
        "{t}"
    );
    assert!(
        t.contains("graft_scheduler_extender_free_gpus{pool=\"h100\"} 10"),
        "{t}"
    );
    assert!(
        t.contains("graft_scheduler_extender_fragmentation_ratio{pool=\"h100\"} 0.2"),
        "{t}"
    );
    assert!(
        t.contains("graft_scheduler_extender_fragmentation_ratio{pool=\"none\"} 0.0"),
        "{t}"
    );
    m.fleet
        .set(&BTreeMap::from([("h100".to_string(), PoolGpus::default())]));
    let t = text(&registry);
    assert!(!t.contains("pool=\"none\""), "{t}");
    assert!(
        t.contains("graft_scheduler_extender_free_gpus{pool=\"h100\"} 0"),
        "{t}"
    );
}
