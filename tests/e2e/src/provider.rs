//! The provider's addresses and the configuration blocks tests write (the binaries under
//! test are located by `joiner_test_support::binaries`).

/// The source address configurations use in `required_providers`.
pub const PROVIDER_SOURCE: &str = "joiner/joiner";
/// The fully qualified address Terraform keys reattached providers by.
pub const PROVIDER_ADDRESS: &str = "registry.terraform.io/joiner/joiner";
pub(crate) const BINARY_NAME: &str = "terraform-provider-joiner";

/// A `provider "joiner"` block reaching a Kubernetes API server with a bearer token (the
/// Kubernetes-half tests' kube-sim), in us-east-1.
pub fn kubernetes_provider_block(host: &str, ca_pem: &str, token: &str) -> String {
    format!(
        r#"provider "joiner" {{
  region = "us-east-1"
  kubernetes {{
    host                   = "{host}"
    cluster_ca_certificate = <<-PEM
{}
PEM
    token = "{token}"
  }}
}}
"#,
        ca_pem.trim_end()
    )
}
