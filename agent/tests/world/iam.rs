//! The agent under enforced IAM, with only the policy `joiner_agent_role` renders: a full
//! provisioning round trip (launch, register, consolidate, terminate, delete the NodeClass's
//! launch templates) is refused nothing; and with one statement removed, the refused action
//! is reported (log, Event, metric) while the agent's other loops keep working.

use std::collections::BTreeSet;
use std::time::Duration;

use joiner_agent::api::{NodeClaim, NodeClass};
use joiner_agent_world::{wait_for, Opts, World};
use kube::api::{Api, DeleteParams};
use kube::ResourceExt;

/// The actions the agent used, from the local world's decisions.
fn actions_used(w: &World) -> BTreeSet<String> {
    w.iam_decisions()["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["action"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_policy_allows_every_call_of_a_provisioning_round_trip() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_pool("general", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&[]).await;
    w.deployment("app", 2, "500m", "512Mi").await;
    wait_for("2 pods Running", Duration::from_secs(90), || async {
        // A refused launch never ends in a timeout: it names what was refused.
        let refused = w.iam_refused();
        assert!(
            refused.is_empty(),
            "refused while provisioning: {refused:?}"
        );
        (w.running("app").await == 2).then_some(())
    })
    .await;
    // Scale to zero: consolidation removes the empty nodes (TerminateInstances).
    w.scale("app", 0).await;
    wait_for("no NodeClaim left", Duration::from_secs(120), || async {
        w.claims().await.is_empty().then_some(())
    })
    .await;
    // Deleting the NodeClass deletes its launch templates (DeleteLaunchTemplate).
    let classes: Api<NodeClass> = Api::all(w.client.clone());
    classes
        .delete("default", &DeleteParams::default())
        .await
        .expect("delete NodeClass");
    wait_for("the NodeClass gone", Duration::from_secs(60), || async {
        classes
            .get_opt("default")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    agent.stop().await.expect("agent stops cleanly");

    let d = w.iam_decisions();
    assert_eq!(w.iam_refused(), Vec::<String>::new(), "{d:#}");
    assert_eq!(d["unmodelled"], serde_json::json!([]), "{d:#}");
    let used = actions_used(&w);
    println!(
        "agent calls under enforced IAM: {} decisions, 0 refused; actions: {used:?}",
        d["calls"]
    );
    for needed in [
        "ec2:CreateFleet",
        // Each launch of an instant fleet is authorized as RunInstances too.
        "ec2:RunInstances",
        "ec2:CreateLaunchTemplate",
        "ec2:CreateTags",
        "ec2:TerminateInstances",
        "ec2:DeleteLaunchTemplate",
        "iam:PassRole",
    ] {
        assert!(used.contains(needed), "{needed} never used: {used:?}");
    }
    // Every call the agent made is held in the fidelity ledger.
    let missing = joiner_test_support::calls_missing_from_ledger(used.iter().map(String::as_str));
    assert!(
        missing.is_empty(),
        "agent calls docs/aws-fidelity.md does not name: {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_permission_is_reported_and_the_other_loops_keep_working() {
    let w = World::start(Opts::default()).await;
    // The agent may no longer terminate instances nor delete launch templates.
    w.remove_agent_statement("DeleteOwn").await;
    w.node_class("default").await;
    w.node_pool("general", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&[]).await;
    w.deployment("first", 1, "500m", "512Mi").await;
    wait_for("the first pod Running", Duration::from_secs(90), || async {
        (w.running("first").await == 1).then_some(())
    })
    .await;
    let claim = w.claims().await.remove(0);
    let claims: Api<NodeClaim> = Api::all(w.client.clone());
    claims
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
        .expect("delete the NodeClaim");

    // An Event on the claim names the action, the code and the instance's ARN.
    let event = wait_for(
        "a TerminationFailed Event on the claim",
        Duration::from_secs(60),
        || async {
            w.events_for("default", &claim.name_any())
                .await
                .into_iter()
                .find(|e| e.starts_with("TerminationFailed: "))
        },
    )
    .await;
    assert!(
        event.contains("ec2:TerminateInstances failed: UnauthorizedOperation"),
        "{event}"
    );
    assert!(
        event.contains("is not authorized to perform: ec2:TerminateInstances on resource: arn:aws:ec2:us-east-1:123456789012:instance/i-"),
        "{event}"
    );
    // The metric counts it by operation and code.
    let metrics = w.metrics(agent.metrics).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("joiner_cloud_errors_total{")
                && l.contains("operation=\"ec2:TerminateInstances\"")
                && l.contains("code=\"UnauthorizedOperation\"")),
        "{metrics}"
    );

    // Provisioning still works: a second deployment gets a node.
    w.deployment("second", 1, "500m", "512Mi").await;
    wait_for(
        "the second pod Running",
        Duration::from_secs(90),
        || async { (w.running("second").await == 1).then_some(()) },
    )
    .await;
    // Only the removed statement's action was refused.
    let refused: BTreeSet<String> = w
        .iam_refused()
        .into_iter()
        .map(|r| r.split(" on ").next().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        refused,
        BTreeSet::from(["ec2:TerminateInstances".to_string()])
    );
    agent.stop().await.expect("agent stops cleanly");
}

/// The agent's policy for an SSE-KMS interruption queue, as `terraform-provider-joiner
/// policy agent` renders it with or without the queue's key.
fn agent_policy_for(queue: &str, key: Option<&str>) -> String {
    use joiner_agent_world::{ACCOUNT, CLUSTER, NODE_ROLE};
    let mut args = vec![
        "policy".to_string(),
        "agent".into(),
        format!("arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{CLUSTER}"),
        format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{queue}"),
        format!("arn:aws:iam::{ACCOUNT}:role/{NODE_ROLE}"),
    ];
    args.extend(key.map(str::to_string));
    let out = std::process::Command::new(joiner_test_support::provider_bin())
        .args(&args)
        .output()
        .expect("run terraform-provider-joiner policy agent");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Reading a queue encrypted with a customer managed key is a `kms:Decrypt` that SQS makes
/// as the reader: without the key in its policy the agent is refused (naming the KMS
/// action), and `joiner_agent_role.queue_kms_key_arn` grants it through SQS only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_kms_queue_is_read_only_with_its_key_in_the_policy() {
    use joiner_agent_world::{sdk_config, sdk_config_as, ACCOUNT};
    const QUEUE: &str = "agent-test-interruptions";
    let key = format!("arn:aws:kms:us-east-1:{ACCOUNT}:key/0f3c3e2a-5b7d-4f0e-9a51-6d2b8c1e7a90");
    let moto = joiner_test_support::MotoServer::start_enforced();
    let admin = sdk_config(&moto.endpoint()).await;
    let sqs = aws_sdk_sqs::Client::new(&admin);
    let url = sqs
        .create_queue()
        .queue_name(QUEUE)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::KmsMasterKeyId, &key)
        .send()
        .await
        .expect("sqs:CreateQueue")
        .queue_url
        .expect("a queue URL");
    sqs.send_message()
        .queue_url(&url)
        .message_body("{}")
        .send()
        .await
        .expect("sqs:SendMessage as the admin");
    let iam = aws_sdk_iam::Client::new(&admin);
    let trust = serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:user/local-admin")},
        "Action": "sts:AssumeRole"}]});
    iam.create_role()
        .role_name("kms-reader")
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .expect("iam:CreateRole");
    let receive_as_agent = |policy: String| {
        let (iam, admin, url) = (iam.clone(), admin.clone(), url.clone());
        let endpoint = moto.endpoint();
        async move {
            iam.put_role_policy()
                .role_name("kms-reader")
                .policy_name("joiner-agent")
                .policy_document(policy)
                .send()
                .await
                .expect("iam:PutRolePolicy");
            let c = aws_sdk_sts::Client::new(&admin)
                .assume_role()
                .role_arn(format!("arn:aws:iam::{ACCOUNT}:role/kms-reader"))
                .role_session_name("joiner-agent")
                .send()
                .await
                .expect("sts:AssumeRole")
                .credentials
                .expect("credentials");
            let creds = aws_credential_types::Credentials::new(
                c.access_key_id(),
                c.secret_access_key(),
                Some(c.session_token().to_string()),
                None,
                "assumed",
            );
            aws_sdk_sqs::Client::new(&sdk_config_as(&endpoint, creds).await)
                .receive_message()
                .queue_url(url)
                .send()
                .await
        }
    };
    let refused = receive_as_agent(agent_policy_for(QUEUE, None))
        .await
        .expect_err("no kms:Decrypt on the queue's key");
    let said = format!("{:?}", aws_sdk_sqs::error::DisplayErrorContext(&refused));
    assert!(
        said.contains("kms:Decrypt") && said.contains(&key),
        "the refusal names the KMS action and key: {said}"
    );
    let got = receive_as_agent(agent_policy_for(QUEUE, Some(&key)))
        .await
        .expect("sqs:ReceiveMessage with the key granted");
    assert_eq!(got.messages().len(), 1, "the message is read");
}
