//! IAM enforced in the local world (`tests/aws-local/joiner_local/iam_enforce.py`), driven
//! with the real AWS SDK for Rust: what a least-privilege principal may and may not do, and
//! that every refusal answers with the code and message the real service sends.

use aws_credential_types::Credentials;
use joiner_e2e::{Aws, MotoServer};
use kube_sim::runner::identity::SigningKey;
use serde_json::{json, Value};

const ACCOUNT: &str = "123456789012";
const ADMIN: &str = "arn:aws:iam::123456789012:user/local-admin";

fn admin_trust() -> String {
    json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": ADMIN}, "Action": "sts:AssumeRole"}]})
    .to_string()
}

/// A role with `policy` inline, trusted by the admin, and clients signing as its session.
fn role_session(moto: &MotoServer, admin: &Aws, name: &str, policy: Value) -> Aws {
    let iam = aws_sdk_iam::Client::new(admin.sdk_config());
    admin
        .block_on(
            iam.create_role()
                .role_name(name)
                .assume_role_policy_document(admin_trust())
                .send(),
        )
        .expect("iam:CreateRole");
    admin
        .block_on(
            iam.put_role_policy()
                .role_name(name)
                .policy_name("scoped")
                .policy_document(policy.to_string())
                .send(),
        )
        .expect("iam:PutRolePolicy");
    let out = admin
        .block_on(
            admin
                .sts()
                .assume_role()
                .role_arn(format!("arn:aws:iam::{ACCOUNT}:role/{name}"))
                .role_session_name("under-test")
                .send(),
        )
        .expect("sts:AssumeRole by the admin, whom the trust names");
    let c = out.credentials().expect("credentials");
    Aws::with_credentials(
        moto,
        Credentials::new(
            c.access_key_id(),
            c.secret_access_key(),
            Some(c.session_token().to_string()),
            None,
            "role-session",
        ),
    )
}

fn ec2(aws: &Aws) -> aws_sdk_ec2::Client {
    aws_sdk_ec2::Client::new(aws.sdk_config())
}

fn run_instance(admin: &Aws, tags: &[(&str, &str)]) -> String {
    let ec2 = ec2(admin);
    let image = admin
        .block_on(
            ec2.describe_images()
                .owners("amazon")
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("name")
                        .values("al2022-ami-*")
                        .build(),
                )
                .send(),
        )
        .unwrap()
        .images()[0]
        .image_id()
        .unwrap()
        .to_string();
    let out = admin
        .block_on(
            ec2.run_instances()
                .image_id(image)
                .min_count(1)
                .max_count(1)
                .send(),
        )
        .unwrap();
    let id = out.instances()[0].instance_id().unwrap().to_string();
    if !tags.is_empty() {
        let mut req = ec2.create_tags().resources(&id);
        for (k, v) in tags {
            req = req.tags(aws_sdk_ec2::types::Tag::builder().key(*k).value(*v).build());
        }
        admin.block_on(req.send()).unwrap();
    }
    id
}

fn decisions(moto: &MotoServer, principal: &str) -> Value {
    serde_json::from_str(&moto.iam_decisions(principal)).expect("decisions are JSON")
}

const SESSION: &str = "arn:aws:sts::123456789012:assumed-role/";

/// The agent's shape of permissions: terminate only what carries the cluster tag, create
/// launch templates only tagged for the cluster; an explicit Deny wins over an Allow.
#[test]
fn scoped_role_is_allowed_its_resources_and_refused_the_rest_with_aws_messages() {
    let moto = MotoServer::start_enforced();
    let admin = Aws::new(&moto);
    let tagged = run_instance(&admin, &[("joiner.dev/cluster", "c1")]);
    let other = run_instance(&admin, &[("joiner.dev/cluster", "c2")]);
    let protected = run_instance(&admin, &[("joiner.dev/cluster", "c1"), ("keep", "yes")]);
    let role = role_session(
        &moto,
        &admin,
        "agent",
        json!({"Version": "2012-10-17", "Statement": [
            {"Sid": "Read", "Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"},
            {"Sid": "DeleteOwn", "Effect": "Allow", "Action": "ec2:TerminateInstances",
             "Resource": "arn:aws:ec2:us-east-1:123456789012:instance/*",
             "Condition": {"StringEquals": {"aws:ResourceTag/joiner.dev/cluster": "c1"}}},
            {"Sid": "NeverKept", "Effect": "Deny", "Action": "ec2:TerminateInstances",
             "Resource": "*", "Condition": {"StringEquals": {"ec2:ResourceTag/keep": "yes"}}},
            {"Sid": "CreateTagged", "Effect": "Allow",
             "Action": ["ec2:CreateLaunchTemplate", "ec2:CreateTags"],
             "Resource": "arn:aws:ec2:us-east-1:123456789012:launch-template/*",
             "Condition": {"StringEquals": {"aws:RequestTag/joiner.dev/cluster": "c1"}}},
        ]}),
    );
    let ec2 = ec2(&role);
    let principal = format!("{SESSION}agent/under-test");

    // Describe* on "*" is allowed.
    role.block_on(ec2.describe_instances().send())
        .expect("ec2:DescribeInstances is granted");
    // The tagged instance may be terminated...
    role.block_on(ec2.terminate_instances().instance_ids(&tagged).send())
        .expect("terminate an instance tagged for c1");
    // ...another cluster's may not: UnauthorizedOperation naming the action and the ARN.
    let err = role
        .block_on(ec2.terminate_instances().instance_ids(&other).send())
        .expect_err("another cluster's instance");
    let svc = err.into_service_error();
    let meta = aws_sdk_ec2::error::ProvideErrorMetadata::meta(&svc);
    assert_eq!(meta.code(), Some("UnauthorizedOperation"));
    let expected = format!(
        "You are not authorized to perform this operation. User: {principal} is not authorized to perform: ec2:TerminateInstances on resource: arn:aws:ec2:us-east-1:{ACCOUNT}:instance/{other} because no identity-based policy allows the ec2:TerminateInstances action. Encoded authorization failure message: "
    );
    assert!(
        meta.message().unwrap_or("").starts_with(&expected),
        "{:?}",
        meta.message()
    );
    // An explicit Deny beats the Allow that also matches.
    let err = role
        .block_on(ec2.terminate_instances().instance_ids(&protected).send())
        .expect_err("the Deny on keep=yes");
    let msg = aws_sdk_ec2::error::ProvideErrorMetadata::message(&err.into_service_error())
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains(
            "with an explicit deny in an identity-based policy: role/agent:scoped#NeverKept"
        ),
        "{msg}"
    );

    // Tag-on-create: a launch template tagged for c1 may be created, an untagged one not.
    let data = aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
        .build();
    let spec = |v: &str| {
        aws_sdk_ec2::types::TagSpecification::builder()
            .resource_type(aws_sdk_ec2::types::ResourceType::LaunchTemplate)
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key("joiner.dev/cluster")
                    .value(v)
                    .build(),
            )
            .build()
    };
    role.block_on(
        ec2.create_launch_template()
            .launch_template_name("ok")
            .launch_template_data(data.clone())
            .tag_specifications(spec("c1"))
            .send(),
    )
    .expect("a launch template tagged for c1");
    let err = role
        .block_on(
            ec2.create_launch_template()
                .launch_template_name("wrong")
                .launch_template_data(data)
                .tag_specifications(spec("c2"))
                .send(),
        )
        .expect_err("a launch template tagged for another cluster");
    let msg = aws_sdk_ec2::error::ProvideErrorMetadata::message(&err.into_service_error())
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains(&format!("ec2:CreateLaunchTemplate on resource: arn:aws:ec2:us-east-1:{ACCOUNT}:launch-template/*")),
        "{msg}"
    );

    // Query protocol (SQS's JSON protocol is query-compatible): AccessDenied.
    let err = role
        .block_on(role.sqs().list_queues().send())
        .expect_err("no SQS grant");
    let svc = err.into_service_error();
    let meta = aws_sdk_sqs::error::ProvideErrorMetadata::meta(&svc);
    assert_eq!(meta.code(), Some("AccessDenied"), "{svc:?}");
    assert_eq!(
        meta.message(),
        Some(format!("User: {principal} is not authorized to perform: sqs:ListQueues on resource: * because no identity-based policy allows the sqs:ListQueues action").as_str())
    );
    // REST-JSON (EKS): AccessDeniedException, the cluster's ARN as the resource.
    let eks = aws_sdk_eks::Client::new(role.sdk_config());
    let err = role
        .block_on(eks.describe_cluster().name("nope").send())
        .expect_err("no EKS grant");
    let svc = err.into_service_error();
    let meta = aws_sdk_eks::error::ProvideErrorMetadata::meta(&svc);
    assert_eq!(meta.code(), Some("AccessDeniedException"), "{svc:?}");
    assert!(meta.message().unwrap_or("").contains(&format!(
        "eks:DescribeCluster on resource: arn:aws:eks:us-east-1:{ACCOUNT}:cluster/nope"
    )));
    // IAM (query XML): AccessDenied.
    let iam = aws_sdk_iam::Client::new(role.sdk_config());
    let err = role
        .block_on(iam.get_role().role_name("agent").send())
        .expect_err("no IAM grant");
    assert_eq!(
        aws_sdk_iam::error::ProvideErrorMetadata::code(&err.into_service_error()),
        Some("AccessDenied")
    );

    // Every decision is recorded with the statement that decided it.
    let d = decisions(&moto, &principal);
    assert_eq!(d["refused"], 6, "{d:#}");
    let rows = d["decisions"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["action"] == "ec2:TerminateInstances"
        && r["allowed"] == true
        && r["decided_by"] == "role/agent:scoped#DeleteOwn"));
    assert!(rows.iter().any(|r| r["action"] == "ec2:CreateTags"
        && r["allowed"] == true
        && r["resource"] == format!("arn:aws:ec2:us-east-1:{ACCOUNT}:launch-template/*")));
    assert_eq!(d["unmodelled"], json!([]), "{d:#}");
}

/// AssumeRole needs the role's trust to admit the caller; a bad signature is refused.
#[test]
fn assume_role_checks_the_trust_and_signatures_are_verified() {
    let moto = MotoServer::start_enforced();
    let admin = Aws::new(&moto);
    let iam = aws_sdk_iam::Client::new(admin.sdk_config());
    let trust_other = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:user/someone")},
        "Action": "sts:AssumeRole"}]});
    admin
        .block_on(
            iam.create_role()
                .role_name("closed")
                .assume_role_policy_document(trust_other.to_string())
                .send(),
        )
        .unwrap();
    let err = admin
        .block_on(
            admin
                .sts()
                .assume_role()
                .role_arn(format!("arn:aws:iam::{ACCOUNT}:role/closed"))
                .role_session_name("nope")
                .send(),
        )
        .expect_err("the trust does not name the admin");
    let svc = err.into_service_error();
    let meta = aws_sdk_sts::error::ProvideErrorMetadata::meta(&svc);
    assert_eq!(meta.code(), Some("AccessDenied"));
    assert_eq!(
        meta.message(),
        Some(format!("User: {ADMIN} is not authorized to perform: sts:AssumeRole on resource: arn:aws:iam::{ACCOUNT}:role/closed").as_str())
    );

    let forged = Aws::with_credentials(
        &moto,
        Credentials::new("testing", "wrong-secret", None, None, "forged"),
    );
    let err = forged
        .block_on(forged.sqs().list_queues().send())
        .expect_err("a signature made with the wrong secret");
    let code = aws_sdk_sqs::error::ProvideErrorMetadata::code(&err.into_service_error())
        .map(str::to_string);
    assert_eq!(code.as_deref(), Some("SignatureDoesNotMatch"));
}

/// A projected ServiceAccount token's claims, signed by `key`.
fn token(key: &SigningKey, iss: &str, sub: &str, aud: &str, exp_offset: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    key.sign(&json!({"iss": iss, "sub": sub, "aud": [aud], "iat": now, "exp": now + exp_offset}))
}

/// Publishes the issuer's keys to the local world, as kube-sim does for its issuer.
fn publish(moto: &MotoServer, issuer: &str, key: &SigningKey) {
    let (status, body) = moto
        .request(
            "POST",
            "/joiner-local/oidc/keys",
            &json!({"issuer": issuer, "jwks": key.jwks()}).to_string(),
        )
        .expect("reach the emulator");
    assert_eq!(status, 200, "publish the issuer's keys: {body}");
}

/// IRSA: AssumeRoleWithWebIdentity needs an OIDC provider for the issuer, a token signed by
/// a key the issuer published, unexpired, for an audience the provider lists, and a trust
/// whose sub/aud conditions hold.
#[test]
fn web_identity_checks_provider_expiry_audience_and_trust_conditions() {
    let moto = MotoServer::start_enforced();
    let admin = Aws::new(&moto);
    let iam = aws_sdk_iam::Client::new(admin.sdk_config());
    let issuer = "https://oidc.eks.us-east-1.amazonaws.com/id/ABCDEF";
    let host = issuer.trim_start_matches("https://");
    admin
        .block_on(
            iam.create_open_id_connect_provider()
                .url(issuer)
                .client_id_list("sts.amazonaws.com")
                .thumbprint_list("9e99a48a9960b14926bb7f3b02e22da2b0ab7280")
                .send(),
        )
        .unwrap();
    let trust = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Principal": {"Federated": format!("arn:aws:iam::{ACCOUNT}:oidc-provider/{host}")},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {
            format!("{host}:sub"): "system:serviceaccount:joiner:joiner-agent",
            format!("{host}:aud"): "sts.amazonaws.com"}}}]});
    admin
        .block_on(
            iam.create_role()
                .role_name("irsa")
                .assume_role_policy_document(trust.to_string())
                .send(),
        )
        .unwrap();
    let role_arn = format!("arn:aws:iam::{ACCOUNT}:role/irsa");
    let key = SigningKey::generate();
    publish(&moto, issuer, &key);
    let sts = admin.sts();
    let code_and_message = |e: aws_sdk_sts::error::SdkError<_>| {
        let svc: aws_sdk_sts::operation::assume_role_with_web_identity::AssumeRoleWithWebIdentityError =
            e.into_service_error();
        let m = aws_sdk_sts::error::ProvideErrorMetadata::meta(&svc);
        (
            m.code().unwrap_or_default().to_string(),
            m.message().unwrap_or_default().to_string(),
        )
    };
    let assume = |t: String| {
        admin
            .block_on(
                sts.assume_role_with_web_identity()
                    .role_arn(&role_arn)
                    .role_session_name("pod")
                    .web_identity_token(t)
                    .send(),
            )
            .map_err(code_and_message)
    };
    let ok = assume(token(
        &key,
        issuer,
        "system:serviceaccount:joiner:joiner-agent",
        "sts.amazonaws.com",
        3600,
    ))
    .expect("the agent's ServiceAccount may assume the role");
    assert!(ok
        .assumed_role_user()
        .unwrap()
        .arn()
        .ends_with("assumed-role/irsa/pod"));

    let (code, msg) = assume(token(
        &key,
        issuer,
        "system:serviceaccount:default:other",
        "sts.amazonaws.com",
        3600,
    ))
    .unwrap_err();
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "AccessDenied",
            "Not authorized to perform sts:AssumeRoleWithWebIdentity"
        )
    );
    let (code, msg) = assume(token(
        &key,
        "https://oidc.eks.us-east-1.amazonaws.com/id/OTHER",
        "system:serviceaccount:joiner:joiner-agent",
        "sts.amazonaws.com",
        3600,
    ))
    .unwrap_err();
    assert_eq!(code, "InvalidIdentityToken");
    assert_eq!(
        msg,
        "No OpenIDConnect provider found in your account for https://oidc.eks.us-east-1.amazonaws.com/id/OTHER"
    );
    let (code, _) = assume(token(
        &key,
        issuer,
        "system:serviceaccount:joiner:joiner-agent",
        "sts.amazonaws.com",
        -60,
    ))
    .unwrap_err();
    assert_eq!(code, "ExpiredTokenException");
    let (code, msg) = assume(token(
        &key,
        issuer,
        "system:serviceaccount:joiner:joiner-agent",
        "somebody-else",
        3600,
    ))
    .unwrap_err();
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("InvalidIdentityToken", "Incorrect token audience")
    );

    // The signature: a token whose claims were changed after signing, one signed by a key
    // the issuer never published, and one from an issuer that published no keys at all.
    let good = token(
        &key,
        issuer,
        "system:serviceaccount:joiner:joiner-agent",
        "sts.amazonaws.com",
        3600,
    );
    let parts: Vec<&str> = good.split('.').collect();
    let forged = token(
        &SigningKey::generate(),
        issuer,
        "system:serviceaccount:joiner:joiner-agent",
        "sts.amazonaws.com",
        7200,
    );
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        forged.split('.').nth(1).unwrap(),
        parts[2]
    );
    let bad_signature = (
        "InvalidIdentityToken".to_string(),
        "The web identity token that was passed could not be validated by AWS. Get a new identity token from the identity provider and then retry the request.".to_string(),
    );
    let no_key = (
        "InvalidIdentityToken".to_string(),
        "Couldn't retrieve verification key from your identity provider,  please reference AssumeRoleWithWebIdentity documentation for requirements".to_string(),
    );
    assert_eq!(assume(tampered).unwrap_err(), bad_signature);
    assert_eq!(assume(forged).unwrap_err(), no_key, "an unknown kid");
    let silent = "https://oidc.eks.us-east-1.amazonaws.com/id/NOKEYS";
    admin
        .block_on(
            iam.create_open_id_connect_provider()
                .url(silent)
                .client_id_list("sts.amazonaws.com")
                .thumbprint_list("9e99a48a9960b14926bb7f3b02e22da2b0ab7280")
                .send(),
        )
        .unwrap();
    let silent_token = token(
        &key,
        silent,
        "system:serviceaccount:joiner:joiner-agent",
        "sts.amazonaws.com",
        3600,
    );
    assert_eq!(
        assume(silent_token).unwrap_err(),
        no_key,
        "an issuer with no keys"
    );
    assert!(assume(good).is_ok(), "the untampered token still passes");

    let d = decisions(&moto, "web-identity:");
    assert_eq!(d["calls"], 9, "{d:#}");
    assert_eq!(d["refused"], 7, "{d:#}");
}

/// The public AMI parameters an agent resolves an alias through are served at their real
/// names (moto refuses to store anything under `/aws/`), each naming an image the emulator
/// has, and a role reads them with exactly the grant the agent's policy carries; a form body
/// is verified as it was signed (the Rust SDK encodes a space as `%20`).
#[test]
fn public_ami_parameters_are_served_and_form_bodies_are_verified_as_signed() {
    let moto = MotoServer::start_enforced();
    let admin = Aws::new(&moto);
    let reader = role_session(
        &moto,
        &admin,
        "ami-reader",
        json!({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "ssm:GetParameter",
             "Resource": "arn:aws:ssm:us-east-1::parameter/aws/service/*"},
            {"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"}]}),
    );
    let ssm = aws_sdk_ssm::Client::new(reader.sdk_config());
    for (name, arch) in [
        (
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id",
            "x86_64",
        ),
        (
            "/aws/service/bottlerocket/aws-k8s-1.33/arm64/latest/image_id",
            "arm64",
        ),
    ] {
        let image = reader
            .block_on(ssm.get_parameter().name(name).send())
            .unwrap_or_else(|e| panic!("ssm:GetParameter {name}: {e:?}"))
            .parameter()
            .and_then(|p| p.value())
            .expect("a value")
            .to_string();
        let images = reader
            .block_on(ec2(&reader).describe_images().image_ids(&image).send())
            .expect("ec2:DescribeImages");
        assert_eq!(images.images().len(), 1, "{name} names an image moto has");
        assert_eq!(
            images.images()[0].architecture().map(|a| a.as_str()),
            Some(arch)
        );
    }
    let err = reader
        .block_on(ssm.get_parameter().name("/joiner/private").send())
        .expect_err("a parameter of the account is outside the grant")
        .into_service_error();
    assert_eq!(
        aws_sdk_ssm::error::ProvideErrorMetadata::code(&err),
        Some("AccessDeniedException")
    );

    let ec2 = ec2(&admin);
    let vpc = admin
        .block_on(ec2.create_vpc().cidr_block("10.0.0.0/16").send())
        .expect("ec2:CreateVpc")
        .vpc()
        .and_then(|v| v.vpc_id())
        .unwrap()
        .to_string();
    admin
        .block_on(
            ec2.create_security_group()
                .group_name("nodes")
                .description("joiner nodes, with spaces")
                .vpc_id(vpc)
                .send(),
        )
        .expect("a signed form body with %20 verifies");
}

/// The cluster, templates and fleets of the instant-fleet test.
const FLEET_CLUSTER: &str = "fleet";

/// What an instant fleet needs, made by the admin: a subnet and an image for the overrides,
/// and two launch templates tagged for the cluster as the agent tags its own (a security
/// group, the network interface tagged at launch); the Spot one also tags the Spot request.
struct FleetInputs {
    subnet: String,
    image: String,
    on_demand_template: String,
    spot_template: String,
}

fn cluster_tag(value: &str) -> aws_sdk_ec2::types::Tag {
    aws_sdk_ec2::types::Tag::builder()
        .key("joiner.dev/cluster")
        .value(value)
        .build()
}

fn fleet_inputs(admin: &Aws) -> FleetInputs {
    use aws_sdk_ec2::types::{
        Filter, LaunchTemplateTagSpecificationRequest, RequestLaunchTemplateData, ResourceType,
        TagSpecification,
    };
    let ec2 = ec2(admin);
    let subnet = admin
        .block_on(ec2.describe_subnets().send())
        .expect("ec2:DescribeSubnets")
        .subnets()[0]
        .subnet_id()
        .unwrap()
        .to_string();
    let image = admin
        .block_on(
            ec2.describe_images()
                .owners("amazon")
                .filters(
                    Filter::builder()
                        .name("name")
                        .values("al2022-ami-*")
                        .build(),
                )
                .send(),
        )
        .expect("ec2:DescribeImages")
        .images()[0]
        .image_id()
        .unwrap()
        .to_string();
    let group = admin
        .block_on(
            ec2.describe_security_groups()
                .filters(
                    Filter::builder()
                        .name("group-name")
                        .values("default")
                        .build(),
                )
                .send(),
        )
        .expect("ec2:DescribeSecurityGroups")
        .security_groups()[0]
        .group_id()
        .unwrap()
        .to_string();
    let template = |name: &str, kinds: &[ResourceType]| {
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(&image)
            .security_group_ids(&group);
        for kind in kinds {
            data = data.tag_specifications(
                LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(kind.clone())
                    .tags(cluster_tag(FLEET_CLUSTER))
                    .build(),
            );
        }
        admin
            .block_on(
                ec2.create_launch_template()
                    .launch_template_name(name)
                    .launch_template_data(data.build())
                    .tag_specifications(
                        TagSpecification::builder()
                            .resource_type(ResourceType::LaunchTemplate)
                            .tags(cluster_tag(FLEET_CLUSTER))
                            .build(),
                    )
                    .send(),
            )
            .expect("ec2:CreateLaunchTemplate")
            .launch_template()
            .and_then(|t| t.launch_template_id())
            .unwrap()
            .to_string()
    };
    FleetInputs {
        on_demand_template: template("on-demand", &[ResourceType::NetworkInterface]),
        spot_template: template(
            "spot",
            &[
                ResourceType::NetworkInterface,
                ResourceType::SpotInstancesRequest,
            ],
        ),
        subnet,
        image,
    }
}

type FleetAnswer = Result<
    aws_sdk_ec2::operation::create_fleet::CreateFleetOutput,
    Box<aws_sdk_ec2::error::SdkError<aws_sdk_ec2::operation::create_fleet::CreateFleetError>>,
>;

/// An instant fleet of one instance from `template`, with two overrides, its instances,
/// volumes and itself tagged for `cluster` as the agent tags them.
fn instant_fleet(
    aws: &Aws,
    inputs: &FleetInputs,
    template: &str,
    spot: bool,
    cluster: &str,
) -> FleetAnswer {
    use aws_sdk_ec2::types::{
        DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
        FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest, FleetType,
        InstanceType, ResourceType, TagSpecification, TargetCapacitySpecificationRequest,
    };
    let overrides = [InstanceType::M5Large, InstanceType::C5Large].map(|t| {
        FleetLaunchTemplateOverridesRequest::builder()
            .instance_type(t)
            .subnet_id(&inputs.subnet)
            .image_id(&inputs.image)
            .build()
    });
    let mut req = ec2(aws)
        .create_fleet()
        .r#type(FleetType::Instant)
        .launch_template_configs(
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_id(template)
                        .version("$Latest")
                        .build(),
                )
                .set_overrides(Some(overrides.to_vec()))
                .build(),
        )
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(if spot {
                    DefaultTargetCapacityType::Spot
                } else {
                    DefaultTargetCapacityType::OnDemand
                })
                .build(),
        );
    for kind in [
        ResourceType::Instance,
        ResourceType::Volume,
        ResourceType::Fleet,
    ] {
        req = req.tag_specifications(
            TagSpecification::builder()
                .resource_type(kind)
                .tags(cluster_tag(cluster))
                .build(),
        );
    }
    aws.block_on(req.send()).map_err(Box::new)
}

/// The error messages of a fleet that launched nothing: one per override.
fn refused_overrides(answer: FleetAnswer) -> Vec<String> {
    let out = answer.expect("a refused launch is not a refused call: HTTP 200");
    assert!(out.instances().is_empty(), "nothing is launched: {out:?}");
    let errors: Vec<String> = out
        .errors()
        .iter()
        .map(|e| {
            assert_eq!(e.error_code(), Some("UnauthorizedOperation"), "{e:?}");
            let o = e
                .launch_template_and_overrides()
                .and_then(|l| l.overrides());
            assert!(o.and_then(|o| o.instance_type()).is_some(), "{e:?}");
            e.error_message().unwrap_or_default().to_string()
        })
        .collect();
    assert_eq!(errors.len(), 2, "an error per override: {errors:?}");
    errors
}

fn launched(answer: FleetAnswer, lifecycle: &str) {
    let out = answer.expect("CreateFleet");
    assert!(out.errors().is_empty(), "{:?}", out.errors());
    assert_eq!(out.instances().len(), 1, "{out:?}");
    assert_eq!(
        out.instances()[0].lifecycle().map(|l| l.as_str()),
        Some(lifecycle)
    );
}

/// The launch grants of a tag-scoped policy for `FLEET_CLUSTER`: `launch` on what a launch
/// creates (with the request tag) and uses, and tag-on-create under `create_actions`.
fn launch_policy(launch: &[&str], create_actions: &[&str]) -> Value {
    let arn = |kind: &str| format!("arn:aws:ec2:us-east-1:{ACCOUNT}:{kind}/*");
    let created: Vec<String> = [
        "instance",
        "volume",
        "network-interface",
        "spot-instances-request",
        "fleet",
    ]
    .iter()
    .map(|k| arn(k))
    .collect();
    json!({"Version": "2012-10-17", "Statement": [
        {"Sid": "CreateTagged", "Effect": "Allow", "Action": launch, "Resource": created,
         "Condition": {"StringEquals": {"aws:RequestTag/joiner.dev/cluster": FLEET_CLUSTER}}},
        {"Sid": "TagOnCreate", "Effect": "Allow", "Action": "ec2:CreateTags", "Resource": created,
         "Condition": {"StringEquals": {"aws:RequestTag/joiner.dev/cluster": FLEET_CLUSTER,
                                        "ec2:CreateAction": create_actions}}},
        {"Sid": "LaunchFromOwnTemplates", "Effect": "Allow", "Action": launch,
         "Resource": arn("launch-template"),
         "Condition": {"StringEquals": {"aws:ResourceTag/joiner.dev/cluster": FLEET_CLUSTER}}},
        {"Sid": "LaunchInputs", "Effect": "Allow", "Action": launch, "Resource": [
            "arn:aws:ec2:us-east-1::image/*",
            "arn:aws:ec2:us-east-1:*:subnet/*",
            "arn:aws:ec2:us-east-1:*:security-group/*"]},
        {"Sid": "ReadOnly", "Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"},
    ]})
}

/// An instant fleet launches in the caller's own security context (the EC2 Fleet user
/// guide: it needs no service-linked role), and the resources its launch template names are
/// authorized under `ec2:RunInstances`, not `ec2:CreateFleet` (the Service Authorization
/// Reference's CreateFleet entry). So each launch is authorized as RunInstances for the
/// caller, Spot requests included, and a launch refused that way comes back as AWS answers
/// it: HTTP 200, an `UnauthorizedOperation` per override, no instance. The agent's rendered
/// policy launches Spot and on-demand with nothing refused.
#[test]
fn an_instant_fleet_is_authorized_as_run_instances_for_what_it_launches() {
    let moto = MotoServer::start_enforced();
    let admin = Aws::new(&moto);
    let inputs = fleet_inputs(&admin);

    // CreateFleet alone: the call is allowed, every launch refused as RunInstances.
    let fleet_only = role_session(
        &moto,
        &admin,
        "fleet-only",
        launch_policy(&["ec2:CreateFleet"], &["CreateFleet"]),
    );
    for message in refused_overrides(instant_fleet(
        &fleet_only,
        &inputs,
        &inputs.on_demand_template,
        false,
        FLEET_CLUSTER,
    )) {
        assert!(
            message.starts_with(&format!("You are not authorized to perform this operation. User: {SESSION}fleet-only/under-test is not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:us-east-1:{ACCOUNT}:instance/* because no identity-based policy allows the ec2:RunInstances action. Encoded authorization failure message: ")),
            "{message}"
        );
    }
    // The call itself refused (its fleet tagged for another cluster): HTTP 403.
    let err = instant_fleet(
        &fleet_only,
        &inputs,
        &inputs.on_demand_template,
        false,
        "other",
    )
    .expect_err("a fleet tagged for another cluster");
    let svc = (*err).into_service_error();
    let meta = aws_sdk_ec2::error::ProvideErrorMetadata::meta(&svc);
    assert_eq!(meta.code(), Some("UnauthorizedOperation"));
    assert!(
        meta.message().unwrap_or_default().contains(&format!(
            "ec2:CreateFleet on resource: arn:aws:ec2:us-east-1:{ACCOUNT}:fleet/*"
        )),
        "{:?}",
        meta.message()
    );

    // RunInstances granted, but not tag-on-create under it: the template's network
    // interface tags are applied by RunInstances.
    let no_run_tags = role_session(
        &moto,
        &admin,
        "no-run-tags",
        launch_policy(&["ec2:CreateFleet", "ec2:RunInstances"], &["CreateFleet"]),
    );
    for message in refused_overrides(instant_fleet(
        &no_run_tags,
        &inputs,
        &inputs.on_demand_template,
        false,
        FLEET_CLUSTER,
    )) {
        assert!(
            message.contains(&format!(
                "ec2:CreateTags on resource: arn:aws:ec2:us-east-1:{ACCOUNT}:network-interface/*"
            )),
            "{message}"
        );
    }

    // Everything granted: an on-demand launch; a Spot one only from the template that tags
    // the Spot request, since the grant on spot-instances-request needs the cluster tag.
    let launcher = role_session(
        &moto,
        &admin,
        "launcher",
        launch_policy(
            &["ec2:CreateFleet", "ec2:RunInstances"],
            &["CreateFleet", "RunInstances"],
        ),
    );
    launched(
        instant_fleet(
            &launcher,
            &inputs,
            &inputs.on_demand_template,
            false,
            FLEET_CLUSTER,
        ),
        "on-demand",
    );
    for message in refused_overrides(instant_fleet(
        &launcher,
        &inputs,
        &inputs.on_demand_template,
        true,
        FLEET_CLUSTER,
    )) {
        assert!(
            message.contains(&format!(
                "ec2:RunInstances on resource: arn:aws:ec2:us-east-1:{ACCOUNT}:spot-instances-request/*"
            )),
            "{message}"
        );
    }
    launched(
        instant_fleet(
            &launcher,
            &inputs,
            &inputs.spot_template,
            true,
            FLEET_CLUSTER,
        ),
        "spot",
    );

    // The agent's policy as `joiner_agent_role` renders it: both launches, nothing refused.
    let agent = role_session(
        &moto,
        &admin,
        "agent",
        rendered_agent_policy(
            FLEET_CLUSTER,
            &format!("{FLEET_CLUSTER}-interruptions"),
            &format!("{FLEET_CLUSTER}-node"),
        ),
    );
    launched(
        instant_fleet(&agent, &inputs, &inputs.spot_template, true, FLEET_CLUSTER),
        "spot",
    );
    launched(
        instant_fleet(
            &agent,
            &inputs,
            &inputs.on_demand_template,
            false,
            FLEET_CLUSTER,
        ),
        "on-demand",
    );
    let d = decisions(&moto, &format!("{SESSION}agent/under-test"));
    assert_eq!(d["refused"], 0, "{d:#}");
    assert_eq!(d["unmodelled"], json!([]), "{d:#}");
    let actions: std::collections::BTreeSet<&str> = d["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    assert!(
        actions.is_superset(&["ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateTags"].into()),
        "{actions:?}"
    );
}

/// A cluster whose secrets are encrypted with a KMS key: the caller of CreateCluster needs
/// kms:DescribeKey and kms:CreateGrant on the key (EKS uses it through the grant), and is
/// refused without them, naming the action and the key.
#[test]
fn create_cluster_with_a_secrets_key_needs_the_callers_grant_rights_on_it() {
    let moto = MotoServer::start_enforced();
    let admin = Aws::new(&moto);
    let key = format!("arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab");
    let subnets: Vec<String> = admin.block_on(async {
        let ec2 = ec2(&admin);
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.60.0.0/16")
            .send()
            .await
            .expect("ec2:CreateVpc");
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let mut out = Vec::new();
        for (i, zone) in ["us-east-1a", "us-east-1b"].iter().enumerate() {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .availability_zone(*zone)
                .cidr_block(format!("10.60.{i}.0/24"))
                .send()
                .await
                .expect("ec2:CreateSubnet");
            out.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
        }
        out
    });
    let cluster_role = format!("arn:aws:iam::{ACCOUNT}:role/enc-cluster");
    let base = vec![
        json!({"Effect": "Allow", "Action": "eks:CreateCluster", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "iam:PassRole", "Resource": cluster_role}),
    ];
    let create = |aws: &Aws, name: &str| {
        aws.block_on(
            aws_sdk_eks::Client::new(aws.sdk_config())
                .create_cluster()
                .name(name)
                .role_arn(&cluster_role)
                .resources_vpc_config(
                    aws_sdk_eks::types::VpcConfigRequest::builder()
                        .set_subnet_ids(Some(subnets.clone()))
                        .build(),
                )
                .encryption_config(
                    aws_sdk_eks::types::EncryptionConfig::builder()
                        .provider(
                            aws_sdk_eks::types::Provider::builder()
                                .key_arn(&key)
                                .build(),
                        )
                        .build(),
                )
                .send(),
        )
        .map(|_| ())
        .map_err(|e| format!("{}", aws_sdk_eks::error::DisplayErrorContext(&e)))
    };

    let without = role_session(
        &moto,
        &admin,
        "no-kms",
        json!({"Version": "2012-10-17", "Statement": base}),
    );
    let text = create(&without, "enc1").expect_err("no kms rights on the key");
    assert!(
        text.contains("AccessDenied") && text.contains("kms:") && text.contains(&key),
        "{text}"
    );

    let mut granted = base.clone();
    granted.push(json!({"Effect": "Allow", "Action": ["kms:DescribeKey", "kms:CreateGrant"], "Resource": key}));
    let with = role_session(
        &moto,
        &admin,
        "with-kms",
        json!({"Version": "2012-10-17", "Statement": granted}),
    );
    create(&with, "enc2").expect("eks:CreateCluster with the caller's rights on the key");
}

/// A symmetric customer managed key in the world's KMS, made by the admin with boto3 (the
/// emulator's own Python; the workspace has no Rust KMS client); its ARN.
fn customer_managed_key(moto: &MotoServer) -> String {
    joiner_test_support::create_kms_key(&moto.endpoint(), "a volume key")
}

/// The agent policy `terraform-provider-joiner policy agent` renders for this account's
/// cluster, queue and node role of these names.
fn rendered_agent_policy(cluster: &str, queue: &str, node_role: &str) -> Value {
    let out = std::process::Command::new(joiner_e2e::provider_bin())
        .args([
            "policy",
            "agent",
            &format!("arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{cluster}"),
            &format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{queue}"),
            &format!("arn:aws:iam::{ACCOUNT}:role/{node_role}"),
        ])
        .output()
        .expect("terraform-provider-joiner policy agent");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the policy is JSON")
}

/// The agent policy's two EBS key statements, as `terraform-provider-joiner policy agent`
/// renders them.
fn rendered_ebs_key_statements() -> Vec<Value> {
    let policy = rendered_agent_policy("c", "q", "nodes");
    let statements: Vec<Value> = policy["Statement"]
        .as_array()
        .expect("statements")
        .iter()
        .filter(|s| {
            s["Sid"]
                .as_str()
                .is_some_and(|s| s.starts_with("EbsVolumeKey"))
        })
        .cloned()
        .collect();
    assert_eq!(statements.len(), 2, "{policy}");
    statements
}

/// RunInstances with a volume under `key` (None: no mapping); the instance's ID.
fn launch_encrypted(aws: &Aws, image: &str, key: Option<&str>) -> String {
    let mut req = ec2(aws)
        .run_instances()
        .image_id(image)
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(1)
        .max_count(1);
    if let Some(key) = key {
        req = req.block_device_mappings(
            aws_sdk_ec2::types::BlockDeviceMapping::builder()
                .device_name("/dev/xvdb")
                .ebs(
                    aws_sdk_ec2::types::EbsBlockDevice::builder()
                        .volume_size(20)
                        .encrypted(true)
                        .kms_key_id(key)
                        .build(),
                )
                .build(),
        );
    }
    let out = aws
        .block_on(req.send())
        .expect("ec2:RunInstances is not refused");
    let i = &out.instances()[0];
    // EC2 answers before it creates the volumes: the instance is pending.
    assert_eq!(
        i.state().and_then(|s| s.name()).map(|n| n.as_str()),
        Some("pending")
    );
    i.instance_id().expect("an instance ID").to_string()
}

/// The instance once terminated (a terminal state, so waiting cannot miss it): its reason.
fn terminated_reason(admin: &Aws, id: &str) -> (String, String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = admin
            .block_on(ec2(admin).describe_instances().instance_ids(id).send())
            .expect("ec2:DescribeInstances");
        let i = &out.reservations()[0].instances()[0];
        if i.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("terminated") {
            let r = i.state_reason().expect("a state reason");
            return (
                r.code().unwrap_or_default().to_string(),
                r.message().unwrap_or_default().to_string(),
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{id} never terminated"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Asserts that instance `id` is not terminated once the emulator's failed-launch delay
/// (0.3 s after RunInstances answers, `ebs_keys.py`) has passed: an absence, so the test
/// waits out that window (three times over) rather than for an event.
fn assert_still_running(admin: &Aws, id: &str) {
    std::thread::sleep(std::time::Duration::from_secs(1));
    let state = admin
        .block_on(ec2(admin).describe_instances().instance_ids(id).send())
        .expect("ec2:DescribeInstances");
    assert_ne!(
        state.reservations()[0].instances()[0]
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str()),
        Some("terminated"),
        "{id} was ended at launch"
    );
}

/// KMS decisions on `key` recorded for `principal`: (action, allowed).
fn key_decisions(moto: &MotoServer, principal: &str, key: &str) -> Vec<(String, bool)> {
    decisions(moto, principal)["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| {
            d["resource"] == key && d["action"].as_str().is_some_and(|a| a.starts_with("kms:"))
        })
        .map(|d| {
            (
                d["action"].as_str().unwrap_or_default().to_string(),
                d["allowed"] == true,
            )
        })
        .collect()
}

/// EC2 does not refuse a launch whose volume's customer managed key the caller may not use:
/// it answers pending, then terminates the instance with `Client.InternalError`. The same
/// for the account's EBS default key under encryption by default. The AWS managed key needs
/// no grant, and the agent policy's EBS key statements are enough for a customer key.
#[test]
fn a_volume_key_the_caller_may_not_use_ends_the_instance_at_launch() {
    let moto = MotoServer::start_enforced();
    let admin = Aws::new(&moto);
    let key = customer_managed_key(&moto);
    let image = admin
        .block_on(ec2(&admin).describe_images().owners("amazon").send())
        .expect("ec2:DescribeImages")
        .images()[0]
        .image_id()
        .expect("an image")
        .to_string();
    let launch = vec![
        json!({"Effect": "Allow", "Action": ["ec2:RunInstances", "ec2:Describe*"], "Resource": "*"}),
    ];
    let without = role_session(
        &moto,
        &admin,
        "no-kms",
        json!({"Version": "2012-10-17", "Statement": launch}),
    );
    let no_kms = format!("{SESSION}no-kms/");

    let id = launch_encrypted(&without, &image, Some(&key));
    assert_eq!(
        terminated_reason(&admin, &id),
        (
            "Client.InternalError".to_string(),
            "Client.InternalError: Client error on launch".to_string()
        )
    );
    assert_eq!(
        key_decisions(&moto, &no_kms, &key),
        [("kms:CreateGrant".to_string(), false)]
    );

    // The AWS managed key: no KMS request is judged, and the instance stays.
    let managed = launch_encrypted(&without, &image, Some("alias/aws/ebs"));
    let all = decisions(&moto, &no_kms);
    assert!(
        all["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["resource"] == key.as_str()
                || !d["action"].as_str().unwrap_or_default().starts_with("kms:")),
        "{all:#}"
    );
    assert_still_running(&admin, &managed);

    // With the agent policy's statements, every request EC2 makes on the key is allowed.
    let mut granted = launch.clone();
    granted.extend(rendered_ebs_key_statements());
    let with = role_session(
        &moto,
        &admin,
        "with-kms",
        json!({"Version": "2012-10-17", "Statement": granted}),
    );
    let granted_id = launch_encrypted(&with, &image, Some(&key));
    let judged = key_decisions(&moto, &format!("{SESSION}with-kms/"), &key);
    assert_eq!(judged.len(), 4, "{judged:?}");
    assert!(judged.iter().all(|(_, allowed)| *allowed), "{judged:?}");
    assert_still_running(&admin, &granted_id);

    // Encryption by default with the key as the account's default: every launch uses it.
    admin
        .block_on(ec2(&admin).enable_ebs_encryption_by_default().send())
        .expect("ec2:EnableEbsEncryptionByDefault");
    admin
        .block_on(
            ec2(&admin)
                .modify_ebs_default_kms_key_id()
                .kms_key_id(&key)
                .send(),
        )
        .expect("ec2:ModifyEbsDefaultKmsKeyId");
    let id = launch_encrypted(&without, &image, None);
    assert_eq!(terminated_reason(&admin, &id).0, "Client.InternalError");
}
