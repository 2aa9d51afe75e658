//! EKS operations against the emulator (moto) through the real SDK, and against a
//! scripted endpoint for the APIs moto lacks (add-ons) and the waits the local world cannot
//! show (a version upgrade in progress): there we assert the exact request we send.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use joiner_test_support::MotoServer;
use tokio::time::Instant;

use super::addon::{self, AddonOutcome};
use super::cluster::{self, ClusterSpec};
use super::fargate::{self, ProfileSpec, Selector};
use super::oidc;
use super::recording::{eks_client, ScriptedEndpoint};
use super::wait::PollInterval;
use crate::aws::client::{http_client, AwsClients};

const FAST: PollInterval = PollInterval(Duration::from_millis(20));

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

pub(crate) async fn moto_clients(moto: &MotoServer) -> AwsClients {
    let config = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .endpoint_url(moto.endpoint())
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_credential_types::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await;
    AwsClients::from_config(config)
}

/// A role EKS may assume, two subnets in a fresh VPC and a security group.
async fn prerequisites(aws: &AwsClients) -> (String, Vec<String>, String) {
    let role = aws
        .iam()
        .create_role()
        .role_name("eks-cluster")
        .assume_role_policy_document(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"eks.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
        )
        .send()
        .await
        .unwrap();
    let ec2 = aws.ec2();
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
    let mut subnets = Vec::new();
    for (cidr, az) in [("10.0.1.0/24", "us-east-1a"), ("10.0.2.0/24", "us-east-1b")] {
        let s = ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(cidr)
            .availability_zone(az)
            .send()
            .await
            .unwrap();
        subnets.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
    }
    let sg = ec2
        .create_security_group()
        .group_name("extra")
        .description("extra")
        .vpc_id(&vpc_id)
        .send()
        .await
        .unwrap();
    (
        role.role().unwrap().arn().to_string(),
        subnets,
        sg.group_id().unwrap().to_string(),
    )
}

fn spec(role_arn: &str, subnets: &[String], sg: &str) -> ClusterSpec {
    ClusterSpec {
        name: "groupless".into(),
        // EKS's default (the local world's calendar decides which, as EKS does).
        version: None,
        role_arn: role_arn.into(),
        subnet_ids: subnets.to_vec(),
        security_group_ids: vec![sg.into()],
        endpoint_public_access: true,
        endpoint_private_access: true,
        public_access_cidrs: vec!["203.0.113.0/24".into()],
        kms_key_arn: Some(
            "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab".into(),
        ),
        log_types: ["api", "audit"].iter().map(|s| s.to_string()).collect(),
        tags: [("joiner.dev/discovery".to_string(), "groupless".to_string())].into(),
        authentication_mode: Some("API_AND_CONFIG_MAP".into()),
        bootstrap_creator_admin: Some(false),
    }
}

#[tokio::test]
async fn cluster_lifecycle_against_the_emulator() {
    let moto = MotoServer::start();
    let aws = moto_clients(&moto).await;
    let (role, subnets, sg) = prerequisites(&aws).await;
    let eks = aws.eks();
    let want = spec(&role, &subnets, &sg);

    cluster::create(&eks, &want, deadline()).await.unwrap();
    let info = cluster::wait_active(&eks, "groupless", deadline(), FAST)
        .await
        .unwrap();
    assert_created_as_specified(&eks, &info, &want).await;
    let issuer = info.oidc_issuer.clone().expect("an OIDC issuer");
    authentication_mode_moves_forward_only(&eks).await;
    in_place_updates(&eks, &want, &info).await;
    irsa_provider_is_adopted_not_duplicated(&aws, &issuer, &want.tags).await;

    // Delete, and deleting again (after out-of-band deletion) is not an error.
    cluster::delete(&eks, "groupless", deadline(), FAST)
        .await
        .unwrap();
    assert!(cluster::describe(&eks, "groupless", deadline())
        .await
        .unwrap()
        .is_none());
    cluster::delete(&eks, "groupless", deadline(), FAST)
        .await
        .unwrap();
}

/// The new cluster is active with everything the spec asked for, on EKS's default version.
async fn assert_created_as_specified(
    eks: &aws_sdk_eks::Client,
    info: &cluster::ClusterInfo,
    want: &ClusterSpec,
) {
    assert_eq!(info.status, "ACTIVE");
    let calendar = cluster::versions(eks, deadline()).await.unwrap();
    let default = calendar
        .iter()
        .find(|v| v.default)
        .expect("a default version");
    assert_eq!(info.version.as_deref(), Some(default.version.as_str()));
    assert_eq!(info.role_arn.as_deref(), Some(want.role_arn.as_str()));
    assert_eq!(info.subnet_ids, want.subnet_ids);
    assert_eq!(info.security_group_ids, want.security_group_ids);
    assert_eq!(info.endpoint_public_access, Some(true));
    assert_eq!(info.endpoint_private_access, Some(true));
    assert_eq!(info.public_access_cidrs, ["203.0.113.0/24"]);
    assert_eq!(info.kms_key_arn, want.kms_key_arn);
    assert_eq!(info.log_types, want.log_types);
    assert_eq!(info.tags, want.tags);
    assert!(info.arn.ends_with(":cluster/groupless"), "{}", info.arn);
    assert!(info
        .endpoint
        .as_deref()
        .unwrap_or("")
        .starts_with("https://"));
    assert!(info.certificate_authority.is_some());
    assert!(info.oidc_issuer.is_some(), "an OIDC issuer");
    assert_eq!(
        info.authentication_mode.as_deref(),
        Some("API_AND_CONFIG_MAP")
    );
    assert_eq!(info.bootstrap_creator_admin, Some(false));
}

/// The authentication mode moves forward in place (followed through DescribeUpdate); EKS
/// refuses the way back, and the error names the operation and code.
async fn authentication_mode_moves_forward_only(eks: &aws_sdk_eks::Client) {
    let after = cluster::update_authentication_mode(eks, "groupless", "API", deadline(), FAST)
        .await
        .unwrap();
    assert_eq!(after.authentication_mode.as_deref(), Some("API"));
    let back = cluster::update_authentication_mode(
        eks,
        "groupless",
        "API_AND_CONFIG_MAP",
        deadline(),
        FAST,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(back.contains("eks:UpdateClusterConfig"), "{back}");
    assert!(back.contains("InvalidParameterException"), "{back}");
}

/// In-place updates EKS allows: logging, endpoint access (the subnets kept), and tags
/// added then taken back.
async fn in_place_updates(
    eks: &aws_sdk_eks::Client,
    want: &ClusterSpec,
    info: &cluster::ClusterInfo,
) {
    let fewer: BTreeSet<String> = ["audit".to_string()].into();
    let after = cluster::update_logging(eks, "groupless", &fewer, deadline(), FAST)
        .await
        .unwrap();
    assert_eq!(after.log_types, fewer);
    let private_only = ClusterSpec {
        endpoint_public_access: false,
        ..want.clone()
    };
    let after = cluster::update_endpoint_access(eks, &private_only, deadline(), FAST)
        .await
        .unwrap();
    assert_eq!(after.endpoint_public_access, Some(false));
    assert_eq!(after.subnet_ids, want.subnet_ids, "the subnets are kept");
    let new_tags: BTreeMap<String, String> = [
        ("joiner.dev/discovery".to_string(), "groupless".to_string()),
        ("team".to_string(), "platform".to_string()),
    ]
    .into();
    cluster::sync_tags(eks, &info.arn, &info.tags, &new_tags, deadline())
        .await
        .unwrap();
    let tagged = cluster::describe(eks, "groupless", deadline())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tagged.tags, new_tags);
    cluster::sync_tags(eks, &info.arn, &new_tags, &info.tags, deadline())
        .await
        .unwrap();
    let untagged = cluster::describe(eks, "groupless", deadline())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(untagged.tags, info.tags);
}

/// IRSA: the OIDC provider, adopted rather than duplicated when it already exists; deleting
/// it twice is not an error.
async fn irsa_provider_is_adopted_not_duplicated(
    aws: &AwsClients,
    issuer: &str,
    tags: &BTreeMap<String, String>,
) {
    let iam = aws.iam();
    let thumbs = vec![oidc::EKS_OIDC_ROOT_CA_THUMBPRINT.to_string()];
    let arn = oidc::ensure_provider(&iam, issuer, &thumbs, tags, deadline())
        .await
        .unwrap();
    assert!(
        arn.ends_with(&format!(
            ":oidc-provider/{}",
            oidc::issuer_host_path(issuer)
        )),
        "{arn}"
    );
    let got = iam
        .get_open_id_connect_provider()
        .open_id_connect_provider_arn(&arn)
        .send()
        .await
        .unwrap();
    assert_eq!(got.client_id_list(), [oidc::STS_AUDIENCE]);
    assert_eq!(got.thumbprint_list(), thumbs.as_slice());
    let again = oidc::ensure_provider(&iam, issuer, &thumbs, tags, deadline())
        .await
        .unwrap();
    assert_eq!(again, arn);
    assert!(oidc::exists(&iam, &arn, deadline()).await.unwrap());
    oidc::delete(&iam, &arn, deadline()).await.unwrap();
    assert!(!oidc::exists(&iam, &arn, deadline()).await.unwrap());
    oidc::delete(&iam, &arn, deadline()).await.unwrap();
}

/// EKS's version calendar as the local world serves it (DescribeClusterVersions, every
/// page), and EKS's refusals: a version past its end of extended support on CreateCluster,
/// a skipped minor version on UpdateClusterVersion. Versions are taken from the calendar,
/// so the test holds whatever today is.
#[tokio::test]
async fn version_calendar_and_the_versions_eks_refuses() {
    let moto = MotoServer::start();
    let aws = moto_clients(&moto).await;
    let (role, subnets, sg) = prerequisites(&aws).await;
    let eks = aws.eks();
    let calendar = cluster::versions(&eks, deadline()).await.unwrap();
    let defaults: Vec<_> = calendar.iter().filter(|v| v.default).collect();
    assert_eq!(defaults.len(), 1, "{calendar:?}");
    let default = defaults[0].version.clone();
    // includeAll: versions past their end of support are listed, with their dates.
    let v131 = calendar.iter().find(|v| v.version == "1.31").expect("1.31");
    assert_eq!(v131.status.as_deref(), Some("UNSUPPORTED"));
    let ended = aws_smithy_types::DateTime::from_str(
        "2026-11-26T00:00:00Z",
        aws_smithy_types::date_time::Format::DateTime,
    )
    .unwrap();
    assert_eq!(v131.end_of_extended_support, Some(ended.secs()));

    let refused = cluster::create(
        &eks,
        &ClusterSpec {
            version: Some("1.31".into()),
            ..spec(&role, &subnets, &sg)
        },
        deadline(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(refused.contains("eks:CreateCluster"), "{refused}");
    assert!(refused.contains("InvalidParameterException"), "{refused}");
    assert!(
        refused.contains("unsupported Kubernetes version 1.31"),
        "{refused}"
    );

    // The minor version before the default, upgraded in place to the default.
    let (major, minor) = default.split_once('.').unwrap();
    let previous = format!("{major}.{}", minor.parse::<u32>().unwrap() - 1);
    cluster::create(
        &eks,
        &ClusterSpec {
            version: Some(previous.clone()),
            ..spec(&role, &subnets, &sg)
        },
        deadline(),
    )
    .await
    .unwrap();
    let up = cluster::update_version(&eks, "groupless", &default, deadline(), FAST)
        .await
        .unwrap();
    assert_eq!(up.version.as_deref(), Some(default.as_str()));
    let again = cluster::update_version(&eks, "groupless", &previous, deadline(), FAST)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        again.contains(&format!(
            "Unsupported Kubernetes minor version update from {default} to {previous}"
        )),
        "{again}"
    );
}

/// A cluster of the same name that this provider did not make (no `joiner.dev/created-by`
/// tag) is refused, naming the operation and code; one it made, whose create did not
/// finish (the provider killed meanwhile), is adopted by the next create.
#[tokio::test]
async fn create_errors_name_the_operation_and_code() {
    let moto = MotoServer::start();
    let aws = moto_clients(&moto).await;
    let (role, subnets, sg) = prerequisites(&aws).await;
    let eks = aws.eks();
    eks.create_cluster()
        .name("groupless")
        .role_arn(&role)
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .set_subnet_ids(Some(subnets.clone()))
                .build(),
        )
        .send()
        .await
        .expect("eks:CreateCluster by someone else");
    let err = cluster::create(&eks, &spec(&role, &subnets, &sg), deadline())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("eks:CreateCluster failed: ResourceInUseException"),
        "{text}"
    );
    cluster::delete(&eks, "groupless", deadline(), FAST)
        .await
        .unwrap();

    let first = cluster::create(&eks, &spec(&role, &subnets, &sg), deadline())
        .await
        .unwrap();
    let again = cluster::create(&eks, &spec(&role, &subnets, &sg), deadline())
        .await
        .expect("its own cluster is adopted");
    assert_eq!(again.arn, first.arn);
    assert!(
        !again.tags.contains_key("joiner.dev/created-by"),
        "the provider's tag is not reported: {:?}",
        again.tags
    );
}

#[tokio::test]
async fn fargate_profiles_for_one_cluster_are_created_and_deleted() {
    let moto = MotoServer::start();
    let aws = moto_clients(&moto).await;
    let (role, subnets, sg) = prerequisites(&aws).await;
    let eks = aws.eks();
    cluster::create(&eks, &spec(&role, &subnets, &sg), deadline())
        .await
        .unwrap();

    let profile = |name: &str, namespace: &str, labels: &[(&str, &str)]| ProfileSpec {
        cluster_name: "groupless".into(),
        profile_name: name.into(),
        pod_execution_role_arn: role.clone(),
        subnet_ids: subnets.clone(),
        selectors: vec![Selector {
            namespace: namespace.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }],
        tags: [("owner".to_string(), "joiner".to_string())].into(),
    };
    let system = profile("kube-system", "kube-system", &[]);
    let agent = profile(
        "joiner",
        "joiner",
        &[("app.kubernetes.io/name", "joiner-agent")],
    );
    // Terraform creates both at once; the per-cluster lock serialises them.
    let (a, b) = tokio::join!(
        fargate::create(&eks, &system, deadline(), FAST),
        fargate::create(&eks, &agent, deadline(), FAST)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.status, "ACTIVE");
    assert_eq!(a.spec, system);
    assert_eq!(b.spec, agent);
    assert!(
        b.arn.contains(":fargateprofile/groupless/joiner/"),
        "{}",
        b.arn
    );

    let (x, y) = tokio::join!(
        fargate::delete(&eks, "groupless", "kube-system", deadline(), FAST),
        fargate::delete(&eks, "groupless", "joiner", deadline(), FAST)
    );
    x.unwrap();
    y.unwrap();
    assert!(fargate::describe(&eks, "groupless", "joiner", deadline())
        .await
        .unwrap()
        .is_none());
    fargate::delete(&eks, "groupless", "joiner", deadline(), FAST)
        .await
        .unwrap();
}

/// The local world serves EKS's add-on API (moto alone answers it with a bare 404): the
/// request we send, captured on the wire by an SDK interceptor, creates the add-on; a
/// second switch finds it installed and updates it; DescribeAddon then reports Fargate.
#[tokio::test]
async fn coredns_addon_request_against_the_local_world() {
    let moto = MotoServer::start();
    let aws = moto_clients(&moto).await;
    let (role, subnets, sg) = prerequisites(&aws).await;
    cluster::create(&aws.eks(), &spec(&role, &subnets, &sg), deadline())
        .await
        .unwrap();
    let (eks, recorder) = eks_client(&moto.endpoint());
    assert_eq!(
        addon::coredns_is_on_fargate(&eks, "groupless", deadline())
            .await
            .unwrap(),
        Some(false),
        "no add-on yet"
    );
    let outcome = addon::ensure_coredns_on_fargate(&eks, "groupless", deadline())
        .await
        .unwrap();
    assert_eq!(
        outcome,
        AddonOutcome::Accepted {
            status: Some("ACTIVE".into())
        }
    );
    let sent = recorder.sent();
    let create = sent.last().unwrap();
    assert_eq!(create.method, "POST");
    assert_eq!(create.path, "/clusters/groupless/addons");
    let body = create.json();
    assert_eq!(body["addonName"], "coredns");
    assert_eq!(body["configurationValues"], r#"{"computeType":"Fargate"}"#);
    assert_eq!(body["resolveConflicts"], "OVERWRITE");
    assert!(body["clientRequestToken"]
        .as_str()
        .is_some_and(|t| t.len() == 32));

    // Already installed: CreateAddon is refused (ResourceInUseException), UpdateAddon follows.
    addon::ensure_coredns_on_fargate(&eks, "groupless", deadline())
        .await
        .unwrap();
    let sent = recorder.sent();
    assert_eq!(
        sent.last().unwrap().path,
        "/clusters/groupless/addons/coredns/update"
    );
    assert_eq!(
        addon::coredns_is_on_fargate(&eks, "groupless", deadline())
            .await
            .unwrap(),
        Some(true)
    );

    // Released with preserve: the add-on is gone from EKS's view.
    addon::release_coredns(&eks, "groupless", deadline())
        .await
        .unwrap();
    assert_eq!(
        addon::coredns_is_on_fargate(&eks, "groupless", deadline())
            .await
            .unwrap(),
        Some(false)
    );
    // A cluster that does not exist is an error naming the operation, not a warning.
    let err = addon::ensure_coredns_on_fargate(&eks, "nope", deadline())
        .await
        .unwrap_err();
    assert!(format!("{err}").contains("eks:CreateAddon"), "{err}");
}

/// An endpoint with no add-on API answers with a bare HTML 404: that comes back as
/// `Unsupported` (a warning for the user), not as success and not as a hard error.
#[tokio::test]
async fn coredns_addon_on_an_endpoint_without_the_api() {
    let bare = ScriptedEndpoint::start(|_| (404, "<html>Not Found</html>".into())).await;
    let (eks, _) = eks_client(&bare.url);
    let outcome = addon::ensure_coredns_on_fargate(&eks, "groupless", deadline())
        .await
        .unwrap();
    let AddonOutcome::Unsupported(err) = &outcome else {
        panic!("expected the bare 404 to be reported as unsupported, got {outcome:?}");
    };
    assert_eq!(err.status, Some(404));
    let (summary, detail) = outcome.warning("groupless").unwrap();
    assert!(
        summary.contains("CoreDNS was not switched to Fargate"),
        "{summary}"
    );
    assert!(detail.contains("eks:CreateAddon"), "{detail}");
    assert!(detail.contains("coredns_on_fargate = false"), "{detail}");
    assert!(detail.contains("HTTP 404"), "{detail}");
    assert!(
        !detail.contains('<'),
        "no raw HTML body in the warning: {detail}"
    );
    assert_eq!(
        addon::coredns_is_on_fargate(&eks, "groupless", deadline())
            .await
            .unwrap(),
        None,
        "without the API nothing can be said about drift"
    );
}

/// The real API's answers, scripted: a first CreateAddon succeeds; on a cluster that
/// already has the add-on, CreateAddon says ResourceInUseException and we UpdateAddon.
#[tokio::test]
async fn coredns_addon_success_and_update_paths() {
    let fresh = ScriptedEndpoint::start(|_| {
        (200, r#"{"addon":{"addonName":"coredns","clusterName":"c","status":"CREATING","configurationValues":"{\"computeType\":\"Fargate\"}"}}"#.into())
    })
    .await;
    let (eks, _) = eks_client(&fresh.url);
    let outcome = addon::ensure_coredns_on_fargate(&eks, "c", deadline())
        .await
        .unwrap();
    assert_eq!(
        outcome,
        AddonOutcome::Accepted {
            status: Some("CREATING".into())
        }
    );
    assert!(outcome.warning("c").is_none());

    let existing = ScriptedEndpoint::start(|req| {
        if req.path.ends_with("/addons") {
            (
                409,
                r#"{"__type":"ResourceInUseException","message":"Addon already exists."}"#.into(),
            )
        } else {
            (
                200,
                r#"{"update":{"id":"u-1","status":"InProgress","type":"AddonUpdate"}}"#.into(),
            )
        }
    })
    .await;
    let (eks, _) = eks_client(&existing.url);
    let outcome = addon::ensure_coredns_on_fargate(&eks, "c", deadline())
        .await
        .unwrap();
    assert_eq!(
        outcome,
        AddonOutcome::Accepted {
            status: Some("InProgress".into())
        }
    );
    let sent = existing.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].method, "POST");
    assert_eq!(sent[1].path, "/clusters/c/addons/coredns/update");
    assert_eq!(
        sent[1].json()["configurationValues"],
        r#"{"computeType":"Fargate"}"#
    );
    assert_eq!(sent[1].json()["resolveConflicts"], "OVERWRITE");

    // Turning the option off keeps CoreDNS running.
    let release = ScriptedEndpoint::start(|_| {
        (
            200,
            r#"{"addon":{"addonName":"coredns","status":"DELETING"}}"#.into(),
        )
    })
    .await;
    let (eks, _) = eks_client(&release.url);
    addon::release_coredns(&eks, "c", deadline()).await.unwrap();
    let sent = release.sent();
    assert_eq!(sent[0].method, "DELETE");
    assert_eq!(sent[0].path, "/clusters/c/addons/coredns");
}

/// UpdateClusterVersion as on EKS, where the update stays InProgress for a while (the local
/// world finishes it at once): assert the request, then follow the update (DescribeUpdate)
/// to Successful and the cluster back to ACTIVE.
#[tokio::test]
async fn version_upgrade_request_and_wait() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let polls = std::sync::Arc::new(AtomicU32::new(0));
    let p = polls.clone();
    let endpoint = ScriptedEndpoint::start(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/clusters/c/updates") => (
            200,
            r#"{"update":{"id":"upd-1","status":"InProgress","type":"VersionUpdate"}}"#.into(),
        ),
        ("GET", "/clusters/c/updates/upd-1") => {
            let status = if p.fetch_add(1, Ordering::SeqCst) < 2 { "InProgress" } else { "Successful" };
            (200, format!(r#"{{"update":{{"id":"upd-1","status":"{status}","type":"VersionUpdate"}}}}"#))
        }
        ("GET", "/clusters/c") => (
            200,
            r#"{"cluster":{"name":"c","arn":"arn:aws:eks:us-east-1:123456789012:cluster/c","status":"ACTIVE","version":"1.32","platformVersion":"eks.3"}}"#.into(),
        ),
        _ => (404, String::new()),
    })
    .await;
    let (eks, _) = eks_client(&endpoint.url);
    let info = cluster::update_version(&eks, "c", "1.32", deadline(), FAST)
        .await
        .unwrap();
    assert_eq!(info.version.as_deref(), Some("1.32"));
    assert_eq!(polls.load(Ordering::SeqCst), 3);
    let sent = endpoint.sent();
    assert_eq!(sent[0].method, "POST");
    assert_eq!(sent[0].path, "/clusters/c/updates");
    assert_eq!(sent[0].json()["version"], "1.32");

    // A failed update surfaces EKS's own error detail.
    let failing = ScriptedEndpoint::start(|req| match req.method.as_str() {
        "POST" => (200, r#"{"update":{"id":"u","status":"InProgress"}}"#.into()),
        _ => (
            200,
            r#"{"update":{"id":"u","status":"Failed","errors":[{"errorCode":"SubnetNotFound","errorMessage":"subnet-1 not found"}]}}"#.into(),
        ),
    })
    .await;
    let (eks, _) = eks_client(&failing.url);
    let err = cluster::update_version(&eks, "c", "1.32", deadline(), FAST)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("SubnetNotFound: subnet-1 not found"),
        "{err}"
    );
}

/// The access-entry calls as they go on the wire, against a scripted EKS: create with the
/// node type and no identity inputs, a STANDARD entry with groups, a policy association
/// with its scope, the read (DescribeAccessEntry, then ListAssociatedAccessPolicies for
/// STANDARD only), update, disassociate and delete, in that exact order.
#[tokio::test]
async fn access_entry_requests_in_order() {
    let endpoint = scripted_access_entries().await;
    let (eks, _) = eks_client(&endpoint.url);
    node_and_admin_entry_calls(&eks).await;

    let sent = endpoint.sent();
    // The SDK percent-encodes the ARN in the path; decode for readability.
    let calls: Vec<String> = sent
        .iter()
        .map(|s| {
            format!(
                "{} {}",
                s.method,
                s.path.replace("%3A", ":").replace("%2F", "/")
            )
        })
        .collect();
    let admin_path = format!("/clusters/prod/access-entries/{ADMIN_ROLE}");
    assert_eq!(
        calls,
        [
            "POST /clusters/prod/access-entries".to_string(),
            format!("GET /clusters/prod/access-entries/{NODE_ROLE}"),
            "POST /clusters/prod/access-entries".to_string(),
            format!("POST {admin_path}/access-policies"),
            format!("GET {admin_path}"),
            format!("GET {admin_path}/access-policies"),
            format!("POST {admin_path}"),
            format!("DELETE {admin_path}/access-policies/{ADMIN_POLICY}"),
            format!("DELETE {admin_path}"),
        ]
    );
    assert_access_entry_bodies(&sent);
}

const NODE_ROLE: &str = "arn:aws:iam::123456789012:role/prod-node";
const ADMIN_ROLE: &str = "arn:aws:iam::123456789012:role/ops/admin";
const ADMIN_POLICY: &str = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy";

/// A scripted EKS answering the access-entry calls for cluster `prod`: the node role's
/// entry is EC2_LINUX, the admin's STANDARD with a namespace-scoped policy.
async fn scripted_access_entries() -> ScriptedEndpoint {
    ScriptedEndpoint::start(|req| {
        let entry = |principal: &str, kind: &str, groups: &str| {
            format!(
                r#"{{"accessEntry":{{"clusterName":"prod","principalArn":"{principal}","type":"{kind}","kubernetesGroups":{groups},"username":"u","accessEntryArn":"arn:aws:eks:us-east-1:123456789012:access-entry/prod/role/x","tags":{{}}}}}}"#
            )
        };
        let node = req.path.contains("prod-node");
        match req.method.as_str() {
            "POST" if req.path.ends_with("/access-policies") => (
                200,
                format!(r#"{{"clusterName":"prod","principalArn":"{ADMIN_ROLE}","associatedAccessPolicy":{{"policyArn":"{ADMIN_POLICY}","accessScope":{{"type":"namespace","namespaces":["apps"]}}}}}}"#),
            ),
            "POST" if req.path == "/clusters/prod/access-entries" => {
                let body = req.json();
                let p = body["principalArn"].as_str().unwrap_or("").to_string();
                let kind = body["type"].as_str().unwrap_or("STANDARD").to_string();
                (200, entry(&p, &kind, "[]"))
            }
            "GET" if req.path.ends_with("/access-policies") => (
                200,
                format!(r#"{{"associatedAccessPolicies":[{{"policyArn":"{ADMIN_POLICY}","accessScope":{{"type":"namespace","namespaces":["apps"]}}}}]}}"#),
            ),
            "GET" if node => (200, entry(NODE_ROLE, "EC2_LINUX", r#"["system:nodes"]"#)),
            "GET" => (200, entry(ADMIN_ROLE, "STANDARD", r#"["ops"]"#)),
            "POST" => (200, entry(ADMIN_ROLE, "STANDARD", r#"["ops","viewers"]"#)),
            "DELETE" => (200, "{}".into()),
            _ => (404, String::new()),
        }
    })
    .await
}

/// A node entry created and read back; an admin entry created, given a policy, read back
/// with it, updated, and then its policy and the entry removed.
async fn node_and_admin_entry_calls(eks: &aws_sdk_eks::Client) {
    use super::access_entry::{self, EntrySpec, PolicySpec};
    let node = EntrySpec {
        cluster_name: "prod".into(),
        principal_arn: NODE_ROLE.into(),
        kind: "EC2_LINUX".into(),
        ..Default::default()
    };
    access_entry::create(eks, &node, deadline()).await.unwrap();
    let read = access_entry::describe(eks, "prod", NODE_ROLE, deadline())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.kind, "EC2_LINUX");
    assert!(read.policies.is_empty());
    let admin = EntrySpec {
        cluster_name: "prod".into(),
        principal_arn: ADMIN_ROLE.into(),
        kind: "STANDARD".into(),
        kubernetes_groups: ["ops".to_string()].into(),
        tags: [("team".to_string(), "platform".to_string())].into(),
        ..Default::default()
    };
    access_entry::create(eks, &admin, deadline()).await.unwrap();
    let policy = PolicySpec {
        policy_arn: ADMIN_POLICY.into(),
        scope: "namespace".into(),
        namespaces: ["apps".to_string()].into(),
    };
    access_entry::associate(eks, "prod", ADMIN_ROLE, &policy, deadline())
        .await
        .unwrap();
    let read = access_entry::describe(eks, "prod", ADMIN_ROLE, deadline())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.policies.into_iter().collect::<Vec<_>>(), [policy]);
    let more = EntrySpec {
        kubernetes_groups: ["ops".to_string(), "viewers".to_string()].into(),
        ..admin.clone()
    };
    access_entry::update(eks, &more, deadline()).await.unwrap();
    access_entry::disassociate(eks, "prod", ADMIN_ROLE, ADMIN_POLICY, deadline())
        .await
        .unwrap();
    access_entry::delete(eks, "prod", ADMIN_ROLE, deadline())
        .await
        .unwrap();
}

/// What the create, associate and update calls sent: a node entry has no identity inputs
/// and a client token; the admin's carries its groups, tags and policy scope.
fn assert_access_entry_bodies(sent: &[super::recording::Sent]) {
    let create_node = sent[0].json();
    assert_eq!(create_node["principalArn"], NODE_ROLE);
    assert_eq!(create_node["type"], "EC2_LINUX");
    assert!(
        create_node.get("kubernetesGroups").is_none(),
        "{create_node}"
    );
    assert!(create_node.get("username").is_none(), "{create_node}");
    assert!(create_node["clientRequestToken"]
        .as_str()
        .is_some_and(|t| t.len() == 32));
    let create_admin = sent[2].json();
    assert_eq!(create_admin["kubernetesGroups"], serde_json::json!(["ops"]));
    assert_eq!(create_admin["tags"]["team"], "platform");
    let assoc = sent[3].json();
    assert_eq!(assoc["policyArn"], ADMIN_POLICY);
    assert_eq!(
        assoc["accessScope"],
        serde_json::json!({"type": "namespace", "namespaces": ["apps"]})
    );
    assert_eq!(
        sent[6].json()["kubernetesGroups"],
        serde_json::json!(["ops", "viewers"])
    );
}

/// The emulator's EKS refusals come back naming the operation and EKS's error code: an
/// entry on a CONFIG_MAP cluster, and a node entry carrying groups.
#[tokio::test]
async fn access_entry_refusals_name_the_operation_and_code() {
    use super::access_entry::{self, EntrySpec};
    let moto = MotoServer::start();
    let aws = moto_clients(&moto).await;
    let (role, subnets, sg) = prerequisites(&aws).await;
    let eks = aws.eks();
    let config_map = ClusterSpec {
        authentication_mode: Some("CONFIG_MAP".into()),
        bootstrap_creator_admin: Some(true),
        ..spec(&role, &subnets, &sg)
    };
    cluster::create(&eks, &config_map, deadline())
        .await
        .unwrap();
    let entry = EntrySpec {
        cluster_name: "groupless".into(),
        principal_arn: role.clone(),
        kind: "EC2_LINUX".into(),
        ..Default::default()
    };
    let err = access_entry::create(&eks, &entry, deadline())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("eks:CreateAccessEntry"), "{err}");
    assert!(err.contains("InvalidRequestException"), "{err}");
    cluster::update_authentication_mode(&eks, "groupless", "API_AND_CONFIG_MAP", deadline(), FAST)
        .await
        .unwrap();
    let grouped = EntrySpec {
        kubernetes_groups: ["ops".to_string()].into(),
        ..entry.clone()
    };
    let err = access_entry::create(&eks, &grouped, deadline())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("InvalidParameterException"), "{err}");
    let made = access_entry::create(&eks, &entry, deadline())
        .await
        .unwrap();
    assert_eq!(made.kind, "EC2_LINUX");
    assert_eq!(made.username, "system:node:{{EC2PrivateDNSName}}");
}
