//! The instance type fixture (`agent/fixtures/ec2-instance-types.json`) is a dump of the AWS
//! emulator's DescribeInstanceTypes and DescribeInstanceTypeOfferings (availability-zone)
//! answers, fetched with the real SDK. This test fetches them again and checks the
//! committed file matches; `UPDATE_FIXTURE=1 cargo test -p joiner-agent --test ec2_fixture`
//! rewrites it. It also checks that the live answer goes through `Catalog::from_ec2`.

use std::path::PathBuf;

use aws_sdk_ec2::types::LocationType;
use joiner_agent::catalog::{Catalog, Ec2Dump, InstanceTypeRecord, OfferingRecord};
use joiner_test_support::MotoServer;

async fn client(moto: &MotoServer) -> aws_sdk_ec2::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .endpoint_url(moto.endpoint())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await;
    aws_sdk_ec2::Client::new(&conf)
}

async fn fetch(
    ec2: &aws_sdk_ec2::Client,
) -> (
    Vec<aws_sdk_ec2::types::InstanceTypeInfo>,
    Vec<aws_sdk_ec2::types::InstanceTypeOffering>,
) {
    let mut types = Vec::new();
    let mut pages = ec2
        .describe_instance_types()
        .max_results(100)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.expect("DescribeInstanceTypes");
        types.extend(page.instance_types().iter().cloned());
    }
    let mut offerings = Vec::new();
    let mut pages = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .max_results(1000)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.expect("DescribeInstanceTypeOfferings");
        offerings.extend(page.instance_type_offerings().iter().cloned());
    }
    (types, offerings)
}

#[tokio::test]
async fn fixture_matches_the_emulator() {
    let moto = MotoServer::start();
    let ec2 = client(&moto).await;
    let (types, offerings) = fetch(&ec2).await;
    assert!(
        types.len() > 1000,
        "the emulator lists its instance types ({})",
        types.len()
    );

    let mut dump = Ec2Dump {
        instance_types: types
            .iter()
            .filter_map(InstanceTypeRecord::from_ec2)
            .collect(),
        offerings: offerings
            .iter()
            .filter_map(OfferingRecord::from_ec2)
            .collect(),
    };
    dump.instance_types.sort_by(|a, b| a.name.cmp(&b.name));
    dump.offerings.sort();
    let json = serde_json::to_string_pretty(&dump).unwrap() + "\n";

    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/ec2-instance-types.json");
    if std::env::var_os("UPDATE_FIXTURE").is_some_and(|v| v == "1") {
        std::fs::write(&path, &json).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == json,
        "agent/fixtures/ec2-instance-types.json differs from the emulator's answer; regenerate it with \
         `UPDATE_FIXTURE=1 cargo test -p joiner-agent --test ec2_fixture` and commit it"
    );

    // The live SDK values go through the same conversion as the fixture.
    let live = Catalog::from_ec2(&types, &offerings);
    let from_fixture = Catalog::from_dump_json(&committed, &Default::default()).unwrap();
    assert_eq!(live.len(), from_fixture.len());
    assert!(
        live.len() > 500,
        "most emulator types have a price ({})",
        live.len()
    );
    let m5 = live.get("m5.large").expect("m5.large");
    assert_eq!(m5.capacity.pods, 29);
    assert_eq!(m5.record.vcpus, 2);
    assert!(
        live.zones().len() >= 3,
        "offerings span zones: {:?}",
        live.zones()
    );
}
