//! A ComputeDomain's channel is bound to the domain, against the real prepare path: a
//! tenant's claim that carries its own domain's configuration gets only the channel the
//! domain holds (its slot's number, of its clique), never another slot's or every channel
//! of a `Single` domain; a claim with no domain's configuration gets no channel on a node
//! with ComputeDomains on. A node prepares one domain's IMEX daemon place at a time.

use super::*;

/// A claim of `results` in `ns` with `config`, for pod `p`; its prepare's error.
async fn refused(
    n: &CdNode,
    ns: &str,
    name: &str,
    results: &[(&str, &str)],
    config: serde_json::Value,
    p: &k8s_openapi::api::core::v1::Pod,
) -> anyhow::Result<String> {
    let claim = allocated_claim(&n.c, ns, name, &n.dra.name, results, config, &[p]).await?;
    let e = prepare(&n.dra, &[&claim]).await?[&uid(&claim)]
        .error
        .clone();
    ensure!(
        n.dra.record(&uid(&claim))?.is_none(),
        "{name}: prepared ({results:?})"
    );
    Ok(e)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_channel_is_bound_to_its_domain() -> anyhow::Result<()> {
    const NS: &str = "bind-a";
    let n = cd_node("cd-bind", 3).await?;
    let clique = node_clique(&n.c, "cd-bind").await?;
    namespace(&n.c, NS).await?;
    let domains: Api<ComputeDomain> = Api::namespaced(n.c.clone(), NS);
    let cd = domains
        .create(&PostParams::default(), &domain(NS, "train")?)
        .await?;
    // Its controller placed it in the node's clique at slot 1; Ready on the node.
    controller_writes(&domains, &n.c, "train", placed(&clique, 1, "cd-bind")).await?;
    let p = pod(&n.c, NS, "w", &[("ch", "own")], &[("main", &[("ch", "")])]).await?;
    let single = channel_config(&cd, NS);

    // Its own configuration on another slot's channel: another domain's number.
    let e = refused(
        &n,
        NS,
        "other-slot",
        &[("channel", "imex-channel-2")],
        single.clone(),
        &p,
    )
    .await?;
    ensure!(
        e.contains("imex-channel-2")
            && e.contains("bind-a/train")
            && e.contains("IMEX channel 2 is not the domain's"),
        "{e}"
    );

    // No configuration at all, on the live domain's own number.
    let e = refused(
        &n,
        NS,
        "plain",
        &[("channel", "imex-channel-1")],
        json!([]),
        &p,
    )
    .await?;
    ensure!(
        e.contains("imex-channel-1") && e.contains("ComputeDomains are on"),
        "{e}"
    );

    // Single mode, two channels: its own and another.
    let e = refused(
        &n,
        NS,
        "two",
        &[("channel", "imex-channel-1"), ("channel", "imex-channel-0")],
        single.clone(),
        &p,
    )
    .await?;
    ensure!(
        e.contains("imex-channel-0") && e.contains("IMEX channel 0 is not the domain's"),
        "{e}"
    );

    // Every channel, for a domain made Single.
    let e = refused(
        &n,
        NS,
        "all",
        &[
            ("channel", "imex-channel-0"),
            ("channel", "imex-channel-1"),
            ("channel", "imex-channel-2"),
        ],
        channel_config_mode(&cd, NS, "All"),
        &p,
    )
    .await?;
    ensure!(e.contains("allocationMode is Single"), "{e}");

    // Its own configuration on its own channel: prepared, that channel only.
    let own = allocated_claim(
        &n.c,
        NS,
        "own",
        "cd-bind",
        &[("channel", "imex-channel-1")],
        single,
        &[&p],
    )
    .await?;
    let r = prepare(&n.dra, &[&own]).await?;
    ensure!(r[&uid(&own)].error.is_empty(), "{:?}", r[&uid(&own)]);
    let rec = n.dra.record(&uid(&own))?.expect("the channel's record");
    let paths: Vec<&str> = rec
        .devices
        .iter()
        .flat_map(|d| d.edits.device_nodes.iter().map(|n| n.path.as_str()))
        .collect();
    ensure!(
        paths == ["/dev/nvidia-caps-imex-channels/channel1"],
        "{paths:?}"
    );
    Ok(())
}

/// A domain's IMEX daemon claim, as its controller's template writes it.
fn daemon_config(uid: &str, name: &str, clique: &str) -> serde_json::Value {
    json!([{"source": "FromClaim", "requests": ["daemon"], "opaque": {"driver": "graft.dev",
        "parameters": {"apiVersion": "graft.dev/v1alpha1", "kind": "ComputeDomainDaemonConfig",
            "domainID": uid, "domainName": name, "domainNamespace": "bind-b",
            "cliqueID": clique, "numNodes": 1}}}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_runs_one_domains_imex_daemon() -> anyhow::Result<()> {
    // graft's namespace is its client's: here the kubeconfig's default.
    const HOME: &str = "default";
    const ONE: &str = "0b6f7c1e-5d1a-4f7e-9a43-000000000001";
    const TWO: &str = "0b6f7c1e-5d1a-4f7e-9a43-000000000002";
    let n = cd_node("cd-daemons", 2).await?;
    let clique = node_clique(&n.c, "cd-daemons").await?;
    // No controller-manager: the service account pods need is made by hand.
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(n.c.clone(), HOME);
    let mut a = k8s_openapi::api::core::v1::ServiceAccount::default();
    a.metadata.name = Some("default".into());
    match sa.create(&PostParams::default(), &a).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        r => {
            r?;
        }
    }
    let p = pod(
        &n.c,
        HOME,
        "imex",
        &[("d", "one")],
        &[("main", &[("d", "")])],
    )
    .await?;
    let daemon = async |ns: &str, name: &str, place: &str, config| {
        allocated_claim(
            &n.c,
            ns,
            name,
            "cd-daemons",
            &[("daemon", place)],
            config,
            &[&p],
        )
        .await
    };
    let one = daemon(
        HOME,
        "one",
        "imex-daemon-0",
        daemon_config(ONE, "one", &clique),
    )
    .await?;
    let r = prepare(&n.dra, &[&one]).await?;
    ensure!(r[&uid(&one)].error.is_empty(), "{:?}", r[&uid(&one)]);

    // Another domain's daemon beside it: refused, naming the uid that holds the node.
    let two = daemon(
        HOME,
        "two",
        "imex-daemon-1",
        daemon_config(TWO, "two", &clique),
    )
    .await?;
    let e = prepare(&n.dra, &[&two]).await?[&uid(&two)].error.clone();
    ensure!(
        e.contains("imex-daemon-1")
            && e.contains("bind-b/two")
            && e.contains(&format!(
                "held by another ComputeDomain's daemon (domain uid {ONE})"
            )),
        "{e}"
    );

    // A daemon configuration of another clique than the node's: refused.
    let far = daemon(
        HOME,
        "far",
        "imex-daemon-1",
        daemon_config(ONE, "one", "ffff.9"),
    )
    .await?;
    let e = prepare(&n.dra, &[&far]).await?[&uid(&far)].error.clone();
    ensure!(e.contains("ffff.9") && e.contains("imex-daemon-1"), "{e}");

    // Once the first domain's daemon is gone, the second's is prepared.
    let r = unprepare(&n.dra, &[claim_msg(&one)]).await?;
    ensure!(r.values().all(String::is_empty), "{r:?}");
    let r = prepare(&n.dra, &[&two]).await?;
    ensure!(r[&uid(&two)].error.is_empty(), "{:?}", r[&uid(&two)]);
    let r = unprepare(&n.dra, &[claim_msg(&two)]).await?;
    ensure!(r.values().all(String::is_empty), "{r:?}");

    // A tenant's own claim on a daemon place, with a well-formed daemon configuration:
    // refused, or it would keep every domain's daemon off the node.
    namespace(&n.c, "bind-t").await?;
    let q = pod(
        &n.c,
        "bind-t",
        "squat",
        &[("d", "s")],
        &[("main", &[("d", "")])],
    )
    .await?;
    let squat = allocated_claim(
        &n.c,
        "bind-t",
        "s",
        "cd-daemons",
        &[("daemon", "imex-daemon-0")],
        daemon_config(ONE, "one", &clique),
        &[&q],
    )
    .await?;
    let e = prepare(&n.dra, &[&squat]).await?[&uid(&squat)]
        .error
        .clone();
    ensure!(e.contains("graft's namespace \"default\""), "{e}");
    ensure!(
        n.dra.record(&uid(&squat))?.is_none(),
        "the squat was prepared"
    );
    Ok(())
}
