//! The scheduler's pod capacity for every instance type equals the `maxPods` nodeadm gives
//! that type's kubelet on AL2023: ENIs of the default network card × (IPv4 addresses per
//! ENI − 1) + 2, with no cap (`CalcMaxPods` and `getInstanceInfoFromDescribeResponse` in
//! nodeadm's `internal/kubelet/eni_max_pods.go` and `internal/util/ec2.go`). The figure is
//! derived here the way nodeadm derives it from DescribeInstanceTypes, from the SDK value
//! each record turns back into, and for a few types checked against nodeadm's own table.

use joiner_agent::catalog::{Ec2Dump, InstanceType, KubeletSettings};

/// nodeadm's derivation from EC2's answer: the network card at `DefaultNetworkCardIndex`.
fn nodeadm_max_pods(info: &aws_sdk_ec2::types::InstanceTypeInfo) -> Option<i64> {
    let net = info.network_info()?;
    let default = net.default_network_card_index().unwrap_or(0);
    let enis = net
        .network_cards()
        .iter()
        .find(|c| c.network_card_index() == Some(default))?
        .maximum_network_interfaces()?;
    let ips = net.ipv4_addresses_per_interface()?;
    Some(enis as i64 * (ips as i64 - 1) + 2)
}

#[test]
fn pod_capacity_is_nodeadms_max_pods_for_every_type_in_the_catalogue() {
    let dump: Ec2Dump =
        serde_json::from_str(include_str!("../../fixtures/ec2-instance-types.json")).unwrap();
    assert!(dump.instance_types.len() > 1000);
    let mut multi_card = 0;
    let mut wrong = Vec::new();
    for record in &dump.instance_types {
        let expected = nodeadm_max_pods(&record.to_ec2())
            .unwrap_or_else(|| panic!("{}: no default network card", record.name));
        if record.default_card_enis != record.max_enis {
            multi_card += 1;
        }
        let t = InstanceType::new(record.clone(), Vec::new(), &KubeletSettings::default());
        if t.capacity.pods != expected {
            wrong.push(format!(
                "{}: {} != {expected}",
                record.name, t.capacity.pods
            ));
        }
    }
    assert!(wrong.is_empty(), "pods differ from nodeadm's: {wrong:?}");
    assert!(
        multi_card >= 60,
        "the catalogue has types with several network cards ({multi_card})"
    );

    // nodeadm's own table (`internal/kubelet/instance-info.jsonl`: defaultMaxENIs,
    // ipv4AddressesPerInterface) for types whose other cards the default one is not.
    for (name, enis, ips) in [
        ("m5.large", 3, 10),
        ("c6in.32xlarge", 8, 50),
        ("p5.48xlarge", 2, 50),
        ("trn1.32xlarge", 5, 50),
        ("g6e.48xlarge", 10, 50),
        ("hpc7a.96xlarge", 2, 50),
    ] {
        let record = dump
            .instance_types
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} in the fixture"));
        let t = InstanceType::new(record.clone(), Vec::new(), &KubeletSettings::default());
        assert_eq!(t.capacity.pods, enis * (ips - 1) + 2, "{name}");
    }
}
