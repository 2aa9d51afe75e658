//! kube-rs (the client the agent and provider use) against kube-sim, and against a real
//! cluster when asked (`TargetCluster::all`): watcher resume, a Controller on a CRD, leader election
//! through a Lease, error shapes, pagination and selectors.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, CustomResource, CustomResourceExt, ResourceExt};
use kube_sim::{Options, TargetCluster};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use common::wait_for_async;

/// The ConfigMap a real kube-controller-manager puts in every namespace.
const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

fn targets(opts: Options) -> Vec<TargetCluster> {
    TargetCluster::all(opts).expect("start kube-sim")
}

/// A throwaway namespace (deleted in the background at the end).
async fn namespace(client: &Client, prefix: &str) -> String {
    let name = format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .expect("create namespace");
    name
}

async fn drop_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
}

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "watch"}}, "data": {"v": v}}),
    )
    .unwrap()
}

fn api_code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_sees_every_event_in_order_across_a_resume() {
    for t in targets(Options::default()) {
        let client = t.client().await.unwrap();
        let ns = namespace(&client, "ks-watcher").await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let seen: Arc<Mutex<Vec<(String, String, String)>>> = Default::default();
        let inits = Arc::new(Mutex::new(0usize));
        // The server ends each watch after 2 s, so the watcher must resume from the last
        // resourceVersion it saw, without re-listing and without losing anything.
        let stream = watcher(api.clone(), watcher::Config::default().timeout(2));
        let (s2, i2) = (seen.clone(), inits.clone());
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Init) => *i2.lock().unwrap() += 1,
                    // A real controller-manager publishes the cluster CA into every
                    // namespace (kube-sim does not: docs/kube-sim.md); not the test's object.
                    Ok(watcher::Event::Apply(o)) if o.name_any() == ROOT_CA_CONFIGMAP => {}
                    Ok(watcher::Event::Apply(o)) => s2.lock().unwrap().push((
                        "apply".into(),
                        o.name_any(),
                        o.data
                            .unwrap_or_default()
                            .get("v")
                            .cloned()
                            .unwrap_or_default(),
                    )),
                    Ok(watcher::Event::Delete(o)) => {
                        s2.lock()
                            .unwrap()
                            .push(("delete".into(), o.name_any(), String::new()))
                    }
                    Ok(_) => {}
                    Err(e) => panic!("watcher error: {e}"),
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut expected = Vec::new();
        for i in 0..4 {
            api.create(&PostParams::default(), &cm(&format!("c{i}"), "1"))
                .await
                .unwrap();
            expected.push(("apply".to_string(), format!("c{i}"), "1".to_string()));
        }
        tokio::time::sleep(Duration::from_millis(2600)).await;
        for i in 0..4 {
            api.patch(
                &format!("c{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": "2"}})),
            )
            .await
            .unwrap();
            expected.push(("apply".to_string(), format!("c{i}"), "2".to_string()));
        }
        tokio::time::sleep(Duration::from_millis(2300)).await;
        api.delete("c0", &DeleteParams::default()).await.unwrap();
        expected.push(("delete".to_string(), "c0".to_string(), String::new()));
        let want = expected.len();
        wait_for_async("all watch events", Duration::from_secs(20), || {
            let n = seen.lock().unwrap().len();
            async move { (n >= want).then_some(()) }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        task.abort();
        assert_eq!(
            *seen.lock().unwrap(),
            expected,
            "[{}] events in order, none lost or repeated",
            t.name()
        );
        assert_eq!(
            *inits.lock().unwrap(),
            1,
            "[{}] resumed without re-listing",
            t.name()
        );
        drop_namespace(&client, &ns).await;
    }
}

/// When the resourceVersion a watch resumes from has been compacted away, the server
/// answers 410 Gone and the watcher re-lists. Compaction is a sim-only hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_relists_after_410_gone() {
    let t = TargetCluster::sim_with(Options::default()).unwrap();
    let sim = t.sim().unwrap();
    let client = t.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("before", "1"))
        .await
        .unwrap();
    let rv = api.get("before").await.unwrap().resource_version().unwrap();
    api.create(&PostParams::default(), &cm("after", "1"))
        .await
        .unwrap();
    sim.store().compact();
    // A raw watch from the compacted version gets 410 Expired.
    let stream = api.watch(&kube::api::WatchParams::default(), &rv).await;
    let err = match stream {
        Ok(s) => Box::pin(s).try_next().await,
        Err(e) => Err(e),
    };
    match err {
        Ok(Some(kube::api::WatchEvent::Error(s))) => assert_eq!(s.code, 410),
        Err(e) => assert_eq!(api_code(&e).0, 410),
        other => panic!("expected 410, got {other:?}"),
    }
    let inits = Arc::new(Mutex::new(0usize));
    let i2 = inits.clone();
    // With a backoff, as every watcher in the agent has: without one a watcher whose
    // requests fail at once retries in a tight loop (a loaded run once spun here for
    // minutes, printing an error per turn into the test's captured output).
    let stream = watcher(api.clone(), watcher::Config::default().timeout(1)).default_backoff();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut errors = 0usize;
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Init) => *i2.lock().unwrap() += 1,
                Ok(_) => {}
                Err(e) => {
                    errors += 1;
                    if errors <= 3 {
                        eprintln!("watcher error {errors} (one expected): {e}");
                    }
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    sim.store().compact();
    wait_for_async("a re-list after 410", Duration::from_secs(10), || {
        let n = *inits.lock().unwrap();
        async move { (n >= 2).then_some(()) }
    })
    .await;
    task.abort();
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "kubesim.joiner.dev",
    version = "v1",
    kind = "Doubler",
    namespaced,
    status = "DoublerStatus"
)]
pub struct DoublerSpec {
    pub input: i64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct DoublerStatus {
    pub output: i64,
}

async fn ensure_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Doubler::crd();
    let pp = PatchParams::apply("kube-sim-tests").force();
    crds.patch(&crd.name_any(), &pp, &Patch::Apply(&crd))
        .await
        .expect("apply CRD");
    let name = crd.name_any();
    wait_for_async("CRD established", Duration::from_secs(30), || {
        let crds = crds.clone();
        let name = name.clone();
        async move {
            let c = crds.get(&name).await.ok()?;
            c.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        }
    })
    .await;
    // Discovery can lag the Established condition on a real server.
    tokio::time::sleep(Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_reconciles_a_crd_object() {
    for t in targets(Options::default()) {
        let client = t.client().await.unwrap();
        ensure_crd(&client).await;
        let ns = namespace(&client, "ks-ctrl").await;
        let api: Api<Doubler> = Api::namespaced(client.clone(), &ns);
        let reconciled = Arc::new(Mutex::new(0usize));
        struct Ctx {
            api: Api<Doubler>,
            count: Arc<Mutex<usize>>,
        }
        async fn reconcile(obj: Arc<Doubler>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
            *ctx.count.lock().unwrap() += 1;
            let status = json!({"status": {"output": obj.spec.input * 2}});
            ctx.api
                .patch_status(
                    &obj.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(status),
                )
                .await?;
            Ok(Action::await_change())
        }
        fn error_policy(_: Arc<Doubler>, _: &kube::Error, _: Arc<Ctx>) -> Action {
            Action::requeue(Duration::from_millis(200))
        }
        let ctx = Arc::new(Ctx {
            api: api.clone(),
            count: reconciled.clone(),
        });
        let controller = tokio::spawn(
            Controller::new(api.clone(), watcher::Config::default())
                .run(reconcile, error_policy, ctx)
                .for_each(|_| async {}),
        );
        let d = Doubler::new("d1", DoublerSpec { input: 21 });
        api.create(&PostParams::default(), &d).await.unwrap();
        let out = |api: Api<Doubler>, want: i64| async move {
            let d = api.get("d1").await.ok()?;
            (d.status.as_ref()?.output == want).then_some(d)
        };
        let d = wait_for_async("status.output = 42", Duration::from_secs(20), || {
            out(api.clone(), 42)
        })
        .await;
        assert_eq!(
            d.metadata.generation,
            Some(1),
            "[{}] status writes do not bump generation",
            t.name()
        );
        api.patch(
            "d1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"input": 5}})),
        )
        .await
        .unwrap();
        let d = wait_for_async("status.output = 10", Duration::from_secs(20), || {
            out(api.clone(), 10)
        })
        .await;
        assert_eq!(
            d.metadata.generation,
            Some(2),
            "[{}] spec change bumps generation",
            t.name()
        );
        // The main resource ignores status; the status subresource ignores spec.
        api.patch(
            "d1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"output": 999}})),
        )
        .await
        .unwrap();
        api.patch_status(
            "d1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"input": 999}})),
        )
        .await
        .unwrap();
        let d = api.get("d1").await.unwrap();
        assert_eq!(d.spec.input, 5, "[{}]", t.name());
        assert_ne!(d.status.unwrap().output, 999, "[{}]", t.name());
        controller.abort();
        assert!(*reconciled.lock().unwrap() >= 2);
        drop_namespace(&client, &ns).await;
    }
}

/// One round of Lease-based leader election, as client-go's leaderelection does it: take
/// the lease if it is free or expired, renew it if held; optimistic concurrency (409 on a
/// stale resourceVersion) decides races. Returns whether `me` leads afterwards.
async fn try_lead(api: &Api<Lease>, name: &str, me: &str, duration_s: i32) -> bool {
    let now = jiff::Timestamp::now();
    let micro = |t: jiff::Timestamp| MicroTime(t);
    match api.get_opt(name).await.expect("get lease") {
        None => {
            let lease: Lease = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
                "holderIdentity": me, "leaseDurationSeconds": duration_s, "leaseTransitions": 0}}))
            .unwrap();
            let mut lease = lease;
            let spec = lease.spec.as_mut().unwrap();
            spec.acquire_time = Some(micro(now));
            spec.renew_time = Some(micro(now));
            api.create(&PostParams::default(), &lease).await.is_ok()
        }
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            let holder = spec.holder_identity.clone().unwrap_or_default();
            let renewed = spec.renew_time.as_ref().map(|t| t.0).unwrap_or(now);
            let expired = now.as_millisecond() - renewed.as_millisecond()
                > i64::from(spec.lease_duration_seconds.unwrap_or(duration_s)) * 1000;
            if holder != me && !expired {
                return false;
            }
            if holder != me {
                spec.holder_identity = Some(me.to_string());
                spec.acquire_time = Some(micro(now));
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.renew_time = Some(micro(now));
            match api.replace(name, &PostParams::default(), &lease).await {
                Ok(_) => true,
                Err(e) => {
                    assert_eq!(api_code(&e).0, 409, "a lost race is a 409 Conflict");
                    false
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_through_a_lease_with_two_contenders() {
    for t in targets(Options::default()) {
        let client = t.client().await.unwrap();
        let ns = namespace(&client, "ks-lease").await;
        let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let leaders: Arc<Mutex<Vec<(String, u128)>>> = Default::default();
        let stop_a = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let start = std::time::Instant::now();
        let mut tasks = Vec::new();
        for me in ["a", "b"] {
            let api = api.clone();
            let leaders = leaders.clone();
            let stop_a = stop_a.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    if me == "a" && stop_a.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    if try_lead(&api, "leader", me, 2).await {
                        leaders
                            .lock()
                            .unwrap()
                            .push((me.to_string(), start.elapsed().as_millis()));
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let first: Vec<String> = leaders
            .lock()
            .unwrap()
            .iter()
            .map(|(w, _)| w.clone())
            .collect();
        assert!(!first.is_empty(), "[{}] someone leads", t.name());
        assert!(
            first.iter().all(|w| *w == first[0]),
            "[{}] one leader at a time while it renews: {first:?}",
            t.name()
        );
        let original = first[0].clone();
        if original == "a" {
            stop_a.store(true, std::sync::atomic::Ordering::SeqCst);
        } else {
            for task in &tasks[1..] {
                task.abort();
            }
        }
        // After the lease expires (2 s), the other contender takes over.
        let other = if original == "a" { "b" } else { "a" };
        wait_for_async(
            "failover to the other contender",
            Duration::from_secs(15),
            || {
                let got = leaders.lock().unwrap().iter().any(|(w, _)| w == other);
                async move { got.then_some(()) }
            },
        )
        .await;
        for task in tasks {
            task.abort();
        }
        let lease = api.get("leader").await.unwrap();
        assert_eq!(
            lease.spec.as_ref().unwrap().holder_identity.as_deref(),
            Some(other)
        );
        assert!(lease.spec.unwrap().lease_transitions.unwrap_or(0) >= 1);
        drop_namespace(&client, &ns).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_kubernetes_statuses() {
    for t in targets(Options::default()) {
        let client = t.client().await.unwrap();
        let ns = namespace(&client, "ks-err").await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let e = api.get("missing").await.unwrap_err();
        assert_eq!(api_code(&e), (404, "NotFound".into()), "[{}]", t.name());
        api.create(&PostParams::default(), &cm("x", "1"))
            .await
            .unwrap();
        let e = api
            .create(&PostParams::default(), &cm("x", "1"))
            .await
            .unwrap_err();
        assert_eq!(
            api_code(&e),
            (409, "AlreadyExists".into()),
            "[{}]",
            t.name()
        );
        let mut stale = api.get("x").await.unwrap();
        api.patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
        stale.data = Some([("v".to_string(), "3".to_string())].into());
        let e = api
            .replace("x", &PostParams::default(), &stale)
            .await
            .unwrap_err();
        assert_eq!(
            api_code(&e),
            (409, "Conflict".into()),
            "[{}] stale update",
            t.name()
        );
        let e = api
            .create(&PostParams::default(), &cm("Bad_Name", "1"))
            .await
            .unwrap_err();
        assert_eq!(api_code(&e), (422, "Invalid".into()), "[{}]", t.name());
        let deploys: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(client.clone(), &ns);
        let bad = serde_json::from_value(json!({"metadata": {"name": "d"}, "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
        .unwrap();
        let e = deploys
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err();
        assert_eq!(
            api_code(&e),
            (422, "Invalid".into()),
            "[{}] selector must match labels",
            t.name()
        );
        drop_namespace(&client, &ns).await;
        let nss: Api<Namespace> = Api::all(client.clone());
        let e = nss
            .delete("kube-system", &DeleteParams::default())
            .await
            .unwrap_err();
        assert_eq!(
            api_code(&e),
            (403, "Forbidden".into()),
            "[{}] system namespaces stay",
            t.name()
        );
        if let Some(sim) = t.sim() {
            let viewer = sim.viewer_client().await.unwrap();
            let vapi: Api<ConfigMap> = Api::namespaced(viewer, "default");
            assert!(vapi.list(&ListParams::default()).await.is_ok());
            let e = vapi
                .create(&PostParams::default(), &cm("y", "1"))
                .await
                .unwrap_err();
            assert_eq!(api_code(&e), (403, "Forbidden".into()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_and_selectors() {
    for t in targets(Options::default()) {
        let client = t.client().await.unwrap();
        let ns = namespace(&client, "ks-page").await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        for i in 0..23 {
            let mut c = cm(&format!("p{i:02}"), "1");
            c.metadata.labels = Some(
                [(
                    "parity".to_string(),
                    if i % 2 == 0 { "even" } else { "odd" }.to_string(),
                )]
                .into(),
            );
            api.create(&PostParams::default(), &c).await.unwrap();
        }
        let mut names = Vec::new();
        let mut lp = ListParams::default().limit(10);
        let mut pages = 0;
        loop {
            let page = api.list(&lp).await.unwrap();
            pages += 1;
            names.extend(page.items.iter().map(|c| c.name_any()));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp = ListParams::default().limit(10).continue_token(&token),
                None => break,
            }
        }
        assert_eq!(pages, 3, "[{}]", t.name());
        names.retain(|n| n != ROOT_CA_CONFIGMAP);
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 23, "[{}] every item exactly once", t.name());
        let even = api
            .list(&ListParams::default().labels("parity=even"))
            .await
            .unwrap();
        assert_eq!(even.items.len(), 12);
        let set = api
            .list(&ListParams::default().labels("parity in (odd),parity!=even"))
            .await
            .unwrap();
        assert_eq!(set.items.len(), 11);
        let one = api
            .list(&ListParams::default().fields("metadata.name=p07"))
            .await
            .unwrap();
        assert_eq!(one.items.len(), 1);
        assert_eq!(one.items[0].name_any(), "p07");
        drop_namespace(&client, &ns).await;
    }
}

/// Eviction through kube-rs: allowed while the budget has room, then 429 TooManyRequests.
/// Needs running pods, hence fake nodes: sim only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_honours_the_budget() {
    let t = TargetCluster::sim_with(Options::default()).unwrap();
    common::add_fake_node(&t, "n1", "8", "16Gi", &[]);
    // kube-rs retries 429s by default (up to 15 times with exponential backoff), and the
    // PDB 429 carries no Retry-After, exactly as on a real server: a drain loop must turn
    // that retry off and pace itself, as this client does.
    let kc = kube::config::Kubeconfig::read_from(t.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        let p = serde_json::from_value(json!({"metadata": {"name": format!("e{i}"), "labels": {"app": "e"}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), "default");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "e"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "e"}}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    wait_for_async(
        "3 running pods and PDB status",
        Duration::from_secs(15),
        || {
            let pdbs = pdbs.clone();
            async move {
                let s = pdbs.get("e").await.ok()?.status?;
                (s.current_healthy == 3 && s.disruptions_allowed == 1).then_some(())
            }
        },
    )
    .await;
    pods.evict("e0", &Default::default())
        .await
        .expect("first eviction fits the budget");
    let e = pods.evict("e1", &Default::default()).await.unwrap_err();
    match &e {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
            let causes = s.details.as_ref().unwrap().causes.clone();
            assert!(
                causes[0]
                    .message
                    .contains("needs 2 healthy pods and has 2 currently"),
                "{causes:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// The scheduler honours requests, nodeSelector, taints, required affinity and topology
/// spread, and reports what the agent keys on when nothing fits. Sim only (fake nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_places_and_explains() {
    let t = TargetCluster::sim_with(Options::default()).unwrap();
    for (name, zone) in [("z1", "a"), ("z2", "b")] {
        common::add_fake_node(
            &t,
            name,
            "2",
            "4Gi",
            &[
                ("topology.kubernetes.io/zone", zone),
                ("kubernetes.io/hostname", name),
            ],
        );
    }
    common::add_fake_node(
        &t,
        "gpu",
        "8",
        "32Gi",
        &[("topology.kubernetes.io/zone", "a"), ("kind", "gpu")],
    );
    common::kubectl_ok(&t, &["taint", "node", "gpu", "dedicated=gpu:NoSchedule"]);
    let client = t.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mk = |name: &str, extra: serde_json::Value| -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                s.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"app": "s"}}, "spec": spec}),
        )
        .unwrap()
    };
    // Spread: 4 pods over zones a/b with maxSkew 1 on nodes z1/z2 (gpu is tainted).
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "s"}}}]});
    for i in 0..4 {
        pods.create(
            &PostParams::default(),
            &mk(&format!("s{i}"), spread.clone()),
        )
        .await
        .unwrap();
    }
    pods.create(&PostParams::default(), &mk("on-gpu", json!({"nodeSelector": {"kind": "gpu"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}))).await.unwrap();
    pods.create(
        &PostParams::default(),
        &mk("no-toleration", json!({"nodeSelector": {"kind": "gpu"}})),
    )
    .await
    .unwrap();
    pods.create(&PostParams::default(), &mk("affinity-b", json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}]}]}}}}))).await.unwrap();
    let mut huge = mk("huge", json!({}));
    huge.spec.as_mut().unwrap().containers[0].resources =
        Some(serde_json::from_value(json!({"requests": {"cpu": "64"}})).unwrap());
    pods.create(&PostParams::default(), &huge).await.unwrap();
    let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
    wait_for_async("placements", Duration::from_secs(15), || {
        let pods = pods.clone();
        async move {
            let all = pods.list(&ListParams::default()).await.ok()?;
            let bound = all
                .items
                .iter()
                .filter(|p| p.spec.as_ref().unwrap().node_name.is_some())
                .count();
            (bound == 6).then_some(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let all = pods.list(&ListParams::default()).await.unwrap();
    let by: std::collections::HashMap<String, Pod> =
        all.items.into_iter().map(|p| (p.name_any(), p)).collect();
    let zones: Vec<String> = (0..4)
        .map(|i| node_of(&by[&format!("s{i}")]).unwrap())
        .collect();
    assert_eq!(
        zones.iter().filter(|n| *n == "z1").count(),
        2,
        "spread evenly: {zones:?}"
    );
    assert_eq!(node_of(&by["on-gpu"]).as_deref(), Some("gpu"));
    assert_eq!(node_of(&by["affinity-b"]).as_deref(), Some("z2"));
    for name in ["no-toleration", "huge"] {
        let p = &by[name];
        assert_eq!(node_of(p), None);
        let cond = p
            .status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "PodScheduled")
            .unwrap()
            .clone();
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_deref()),
            ("False", Some("Unschedulable")),
            "{name}"
        );
        let msg = cond.message.unwrap();
        assert!(msg.starts_with("0/3 nodes are available"), "{msg}");
        if name == "huge" {
            assert!(msg.contains("Insufficient cpu"), "{msg}");
        } else {
            assert!(msg.contains("node(s) had untolerated taint(s)"), "{msg}");
        }
    }
    // Bound pods on Ready nodes run.
    let running = by["on-gpu"].status.as_ref().unwrap().phase.clone();
    assert_eq!(running.as_deref(), Some("Running"));
}
