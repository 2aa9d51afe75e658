//! Fixtures for the e2e tests that need an EKS cluster made outside Terraform.

use joiner_e2e::Aws;

/// An EKS cluster in the emulator with what a Fargate profile needs: a pod execution role
/// and two subnets in two zones (sorted, as the provider stores them).
pub struct EksFixture {
    pub role_arn: String,
    pub subnets: Vec<String>,
}

/// Makes the cluster `name` with the SDK (for tests about what comes after the cluster),
/// its VPC at `10.<octet>.0.0/16` and the role `<role_name>`.
pub fn eks_with_fargate_role(aws: &Aws, name: &str, role_name: &str, octet: u8) -> EksFixture {
    aws.block_on(async {
        let iam = aws_sdk_iam::Client::new(aws.sdk_config());
        let ec2 = aws_sdk_ec2::Client::new(aws.sdk_config());
        let eks = aws_sdk_eks::Client::new(aws.sdk_config());
        let role_arn = iam
            .create_role()
            .role_name(role_name)
            .assume_role_policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"eks-fargate-pods.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
            )
            .send()
            .await
            .expect("iam:CreateRole")
            .role()
            .and_then(|r| r.arn().into())
            .map(str::to_string)
            .expect("role ARN");
        let vpc = ec2
            .create_vpc()
            .cidr_block(format!("10.{octet}.0.0/16"))
            .send()
            .await
            .expect("ec2:CreateVpc");
        let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).expect("VPC id").to_string();
        let mut subnets = Vec::new();
        for (i, az) in ["us-east-1a", "us-east-1b"].iter().enumerate() {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("10.{octet}.{i}.0/24"))
                .availability_zone(*az)
                .send()
                .await
                .expect("ec2:CreateSubnet");
            subnets.push(s.subnet().and_then(|s| s.subnet_id()).expect("subnet id").to_string());
        }
        subnets.sort();
        eks.create_cluster()
            .name(name)
            .role_arn(&role_arn)
            .resources_vpc_config(
                aws_sdk_eks::types::VpcConfigRequest::builder()
                    .set_subnet_ids(Some(subnets.clone()))
                    .build(),
            )
            // As joiner_cluster creates it: access entries allowed (nodes join by them).
            .access_config(
                aws_sdk_eks::types::CreateAccessConfigRequest::builder()
                    .authentication_mode(aws_sdk_eks::types::AuthenticationMode::ApiAndConfigMap)
                    .bootstrap_cluster_creator_admin_permissions(false)
                    .build(),
            )
            .send()
            .await
            .expect("eks:CreateCluster");
        EksFixture { role_arn, subnets }
    })
}
