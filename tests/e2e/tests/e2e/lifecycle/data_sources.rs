//! The discovery data sources through the real Terraform CLI against the AWS emulator:
//! `joiner_subnets` and `joiner_security_groups` find what carries the discovery tag (sorted,
//! so plans stay empty), `joiner_instance_types` lists matching types with their on-demand
//! price; and bad inputs are refused at plan time.

use joiner_e2e::{Aws, MotoServer, Workspace};
use serde_json::Value;

struct Tagged {
    vpc_id: String,
    subnets: Vec<String>,
    groups: Vec<String>,
}

fn ec2_tag(
    resource: aws_sdk_ec2::types::ResourceType,
    value: &str,
) -> aws_sdk_ec2::types::TagSpecification {
    aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(resource)
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("joiner.dev/discovery")
                .value(value)
                .build(),
        )
        .build()
}

/// Three subnets and two groups for "prod", and one of each for "other".
fn tagged(aws: &Aws) -> Tagged {
    use aws_sdk_ec2::types::ResourceType;
    aws.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.40.0.0/16")
            .send()
            .await
            .unwrap();
        let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let mut subnets = Vec::new();
        for (i, (az, value)) in [
            ("us-east-1c", "prod"),
            ("us-east-1a", "prod"),
            ("us-east-1b", "other"),
            ("us-east-1a", "prod"),
        ]
        .into_iter()
        .enumerate()
        {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("10.40.{i}.0/24"))
                .availability_zone(az)
                .tag_specifications(ec2_tag(ResourceType::Subnet, value))
                .send()
                .await
                .unwrap();
            if value == "prod" {
                subnets.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
            }
        }
        let mut groups = Vec::new();
        for (name, value) in [("nodes", "prod"), ("extra", "prod"), ("elsewhere", "other")] {
            let g = ec2
                .create_security_group()
                .group_name(name)
                .description(format!("{name} group"))
                .vpc_id(&vpc_id)
                .tag_specifications(ec2_tag(ResourceType::SecurityGroup, value))
                .send()
                .await
                .unwrap();
            if value == "prod" {
                groups.push(g.group_id().unwrap().to_string());
            }
        }
        subnets.sort();
        groups.sort();
        Tagged {
            vpc_id,
            subnets,
            groups,
        }
    })
}

const CONFIG: &str = r#"
data "joiner_subnets" "prod" {
  tags = { "joiner.dev/discovery" = "prod" }
}

data "joiner_subnets" "any" {
  tags   = { "joiner.dev/discovery" = "*" }
  vpc_id = data.joiner_subnets.prod.subnets[0].vpc_id
}

data "joiner_security_groups" "prod" {
  tags = { "joiner.dev/discovery" = "prod" }
}

data "joiner_instance_types" "general" {
  families       = ["m5", "c5", "m6g"]
  sizes          = ["large", "xlarge"]
  architectures  = ["amd64"]
  capacity_types = ["spot"]
  min_vcpus      = 2
  max_memory_mib = 8192
}

output "subnet_ids" { value = data.joiner_subnets.prod.ids }
output "zones"      { value = data.joiner_subnets.prod.availability_zones }
output "subnets"    { value = data.joiner_subnets.prod.subnets }
output "all_count"  { value = length(data.joiner_subnets.any.ids) }
output "group_ids"  { value = data.joiner_security_groups.prod.ids }
output "groups"     { value = data.joiner_security_groups.prod.security_groups }
output "types"      { value = data.joiner_instance_types.general.names }
output "type_rows"  { value = data.joiner_instance_types.general.instance_types }
"#;

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected a list, got {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn discovery_and_instance_types() {
    let moto = MotoServer::start();
    let aws = Aws::new(&moto);
    let want = tagged(&aws);
    let tf = Workspace::new(&moto);
    tf.write_config(CONFIG);
    tf.apply();

    assert_eq!(
        strings(&tf.output("subnet_ids")),
        want.subnets,
        "sorted IDs of the tagged subnets"
    );
    assert_eq!(strings(&tf.output("zones")), ["us-east-1a", "us-east-1c"]);
    let subnets = tf.output("subnets");
    let rows = subnets.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for row in rows {
        assert_eq!(row["vpc_id"], want.vpc_id.as_str());
        assert_eq!(row["tags"]["joiner.dev/discovery"], "prod");
        assert!(row["cidr_block"].as_str().unwrap().starts_with("10.40."));
        assert!(row["available_ip_address_count"].as_i64().unwrap() > 0);
    }
    assert_eq!(
        tf.output("all_count"),
        4,
        "\"*\" matches any value of the key"
    );
    assert_eq!(strings(&tf.output("group_ids")), want.groups);
    let groups = tf.output("groups");
    let names: Vec<&str> = groups
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(
        names.contains(&"nodes") && names.contains(&"extra"),
        "{names:?}"
    );

    // amd64 only (no m6g), at least 2 vCPUs, at most 8 GiB: c5.large, m5.large, c5.xlarge
    // (8 GiB), cheapest on-demand first; m5.xlarge has 16 GiB.
    let types = strings(&tf.output("types"));
    assert_eq!(types, ["c5.large", "m5.large", "c5.xlarge"], "{types:?}");
    let rows = tf.output("type_rows");
    let first = &rows[0];
    assert_eq!(first["name"], "c5.large");
    assert_eq!(first["family"], "c5");
    assert_eq!(first["size"], "large");
    assert_eq!(first["architecture"], "amd64");
    assert_eq!(first["vcpus"], 2);
    assert_eq!(first["memory_mib"], 4096);
    assert!(first["on_demand_price"].as_f64().unwrap() > 0.0);
    assert_eq!(strings(&first["capacity_types"]), ["spot"]);
    assert!(!strings(&first["zones"]).is_empty());
    let prices: Vec<f64> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["on_demand_price"].as_f64().unwrap())
        .collect();
    assert!(prices.windows(2).all(|w| w[0] <= w[1]), "{prices:?}");

    // Deterministic: reading again changes nothing.
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();
}

#[test]
fn bad_inputs_are_refused_at_plan_time_with_their_attribute() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    let cases = [
        (
            r#"data "joiner_subnets" "x" {
  tags = {}
}"#,
            "tags",
            "at least one tag",
        ),
        (
            r#"data "joiner_subnets" "x" {
  tags   = { a = "b" }
  vpc_id = "subnet-0123abcd"
}"#,
            "vpc_id",
            "is not a VPC ID",
        ),
        (
            r#"data "joiner_security_groups" "x" {
  tags = {}
}"#,
            "tags",
            "at least one tag",
        ),
        (
            r#"data "joiner_instance_types" "x" {
  architectures = ["x86_64"]
}"#,
            "architectures",
            "use one of amd64, arm64",
        ),
        (
            r#"data "joiner_instance_types" "x" {
  capacity_types = ["reserved"]
}"#,
            "capacity_types",
            "use one of spot, on-demand",
        ),
        (
            r#"data "joiner_instance_types" "x" {
  min_vcpus = 0
}"#,
            "min_vcpus",
            "at least 1",
        ),
        (
            r#"data "joiner_instance_types" "x" {
  min_memory_mib = 8192
  max_memory_mib = 4096
}"#,
            "max_memory_mib",
            "is less than min_memory_mib",
        ),
    ];
    for (config, attribute, message) in cases {
        tf.write_config(config);
        tf.plan_fails_with(attribute, message);
    }
}
