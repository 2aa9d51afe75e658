//! Encrypted EBS volumes under customer managed KMS keys, with the policy `joiner_agent_role`
//! renders: a NodeClass whose volume names a key, in an account whose EBS default key is
//! another one with encryption by default on, gets a node that registers and runs a pod,
//! EC2's KMS requests for both keys allowed by the policy's EBS key statements. Without the
//! grant statement EC2 (the local world, as AWS) ends each instance at launch with
//! `Client.InternalError`, and the agent says so: a `LaunchFailed` Event naming the state
//! reason and the KMS key grant, and the launch-failure metric by that code.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use joiner_agent::api::NodeClass;
use joiner_agent_world::{security_group_terms, wait_for, Opts, World, CLUSTER, NODE_ROLE};
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;

/// A symmetric customer managed key in the local world's KMS, made by the admin; its ARN.
fn create_key(w: &World, description: &str) -> String {
    joiner_test_support::create_kms_key(&w.moto.endpoint(), description)
}

/// A NodeClass like [`World::node_class`] whose root volume is encrypted with `key`.
async fn encrypted_node_class(w: &World, name: &str, key: &str) {
    let api: Api<NodeClass> = Api::all(w.client.clone());
    let nc: NodeClass = serde_json::from_value(json!({
        "apiVersion": "joiner.dev/v1", "kind": "NodeClass",
        "metadata": {"name": name},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": security_group_terms(),
            "amiSelectorTerms": [{"id": w.image_id}],
            "role": NODE_ROLE,
            "blockDeviceMappings": [{
                "deviceName": "/dev/xvda", "rootVolume": true,
                "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": true, "kmsKeyID": key},
            }],
        }
    }))
    .expect("NodeClass");
    api.create(&PostParams::default(), &nc)
        .await
        .expect("NodeClass create");
}

/// The agent's KMS decisions so far: (action, key ARN, allowed, deciding statement).
fn kms_decisions(w: &World) -> Vec<(String, String, bool, String)> {
    w.iam_decisions()["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["action"].as_str().is_some_and(|a| a.starts_with("kms:")))
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap_or_default().to_string();
            (
                s("action"),
                s("resource"),
                d["allowed"] == true,
                s("decided_by"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_under_customer_managed_keys_get_a_node_with_the_rendered_policy() {
    let w = World::start(Opts::default()).await;
    let volume_key = create_key(&w, "the NodeClass's volume key");
    let default_key = create_key(&w, "the account's EBS default key");
    w.ec2
        .enable_ebs_encryption_by_default()
        .send()
        .await
        .expect("ec2:EnableEbsEncryptionByDefault");
    w.ec2
        .modify_ebs_default_kms_key_id()
        .kms_key_id(&default_key)
        .send()
        .await
        .expect("ec2:ModifyEbsDefaultKmsKeyId");
    encrypted_node_class(&w, "encrypted", &volume_key).await;
    w.node_pool("general", World::general_pool_spec("encrypted"))
        .await;
    let agent = w.agent(&[]).await;
    w.deployment("app", 1, "500m", "512Mi").await;
    wait_for("the pod Running", Duration::from_secs(90), || async {
        let refused = w.iam_refused();
        assert!(refused.is_empty(), "refused: {refused:?}");
        (w.running("app").await == 1).then_some(())
    })
    .await;
    agent.stop().await.expect("agent stops cleanly");

    // The node's instance is alive, with its volumes under both keys: the NodeClass's
    // root volume under its key, the image's device under the account's default.
    let (instance, _, _) = w.live_instances().await.remove(0);
    let volumes = w
        .ec2
        .describe_volumes()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("attachment.instance-id")
                .values(&instance)
                .build(),
        )
        .send()
        .await
        .expect("ec2:DescribeVolumes");
    let keys: std::collections::BTreeSet<String> = volumes
        .volumes()
        .iter()
        .filter(|v| v.encrypted() == Some(true))
        .filter_map(|v| v.kms_key_id().map(str::to_string))
        .collect();
    assert_eq!(
        keys,
        [volume_key.clone(), default_key.clone()].into(),
        "{volumes:?}"
    );
    // Every KMS request EC2 made for the agent was allowed by the EBS key statements.
    let decisions = kms_decisions(&w);
    for key in [&volume_key, &default_key] {
        for action in [
            "kms:CreateGrant",
            "kms:GenerateDataKeyWithoutPlaintext",
            "kms:Decrypt",
            "kms:DescribeKey",
        ] {
            let d = decisions
                .iter()
                .find(|d| d.0 == action && &d.1 == key)
                .unwrap_or_else(|| panic!("no {action} on {key}: {decisions:?}"));
            assert!(d.2, "{d:?}");
            assert!(d.3.contains("#EbsVolumeKey"), "{d:?}");
        }
    }
    let missing =
        joiner_test_support::calls_missing_from_ledger(decisions.iter().map(|d| d.0.as_str()));
    assert!(
        missing.is_empty(),
        "KMS calls the ledger does not name: {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_key_grant_the_instance_ends_at_launch_and_the_agent_says_why() {
    let w = World::start(Opts::default()).await;
    w.remove_agent_statement("EbsVolumeKeyGrants").await;
    let key = create_key(&w, "a key the agent may not grant");
    encrypted_node_class(&w, "encrypted", &key).await;
    w.node_pool("general", World::general_pool_spec("encrypted"))
        .await;
    let agent = w.agent(&[]).await;
    w.deployment("app", 1, "500m", "512Mi").await;

    // The claim's Event names EC2's state reason and the usual cause.
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(w.client.clone(), "default");
    let mut stream = watcher(events, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    let found = async {
        while let Some(e) = stream.try_next().await.expect("watch Events") {
            if e.reason.as_deref() == Some("LaunchFailed") {
                if let Some(m) = e.message.filter(|m| m.contains("EC2 state reason")) {
                    return m;
                }
            }
        }
        panic!("the Event watch ended");
    };
    let message = tokio::time::timeout(Duration::from_secs(90), found)
        .await
        .expect("a LaunchFailed Event naming the state reason within 90 s");
    assert!(
        message.contains(
            "EC2 state reason Client.InternalError: Client.InternalError: Client error on launch"
        ),
        "{message}"
    );
    assert!(message.contains("kms:CreateGrant"), "{message}");
    assert!(message.contains("joiner_agent_role"), "{message}");
    assert_eq!(w.running("app").await, 0);

    // The instance it names is terminated with EC2's state reason.
    let instance = message
        .split_whitespace()
        .nth(1)
        .expect("the instance ID")
        .to_string();
    assert!(instance.starts_with("i-"), "{message}");
    let described = w
        .ec2
        .describe_instances()
        .instance_ids(&instance)
        .send()
        .await
        .expect("ec2:DescribeInstances");
    let i = &described.reservations()[0].instances()[0];
    assert_eq!(
        i.state().and_then(|s| s.name()).map(|n| n.as_str()),
        Some("terminated")
    );
    let reason = i.state_reason().expect("a state reason");
    assert_eq!(reason.code(), Some("Client.InternalError"));
    assert_eq!(
        reason.message(),
        Some("Client.InternalError: Client error on launch")
    );

    // The refused request is EC2's grant on the key, for the agent; the launch call was not.
    let decisions = kms_decisions(&w);
    assert!(
        decisions
            .iter()
            .any(|d| d.0 == "kms:CreateGrant" && d.1 == key && !d.2),
        "{decisions:?}"
    );
    let refused = w.iam_refused();
    assert!(
        refused.iter().all(|r| r.starts_with("kms:CreateGrant on ")),
        "{refused:?}"
    );
    // Counted as a failed launch, by the state reason's code.
    let metrics = w.metrics(agent.metrics).await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("joiner_nodeclaims_launch_failures_total{")
                && l.contains("code=\"Client.InternalError\"")
                && l.contains("nodepool=\"general\"")
        ),
        "{metrics}"
    );
    agent.stop().await.expect("agent stops cleanly");
}
