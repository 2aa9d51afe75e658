//! How the provider reaches a cluster from what users and EKS hand it: the CA bundle (PEM, or
//! base64 of a PEM as EKS returns it), a kubeconfig document, the ARN behind an EKS token (the
//! access-entry principal), and the presigned EKS token for any region and cluster name.

use std::time::{Duration, SystemTime};

use crate::{split_first, split_nul};
use joiner_provider::kubernetes::{connect, eks_token, unauthorized};

/// One input, as the fuzz target and the seed replay run it.
pub fn run(data: &[u8]) {
    let Some((selector, rest)) = split_first(data) else {
        return;
    };
    match selector % 4 {
        0 => {
            if let Ok(s) = std::str::from_utf8(rest) {
                let _ = connect::pem_to_der(s);
            }
        }
        1 => {
            // Parsing only: resolving a kubeconfig could read files or run exec plugins.
            if let Ok(s) = std::str::from_utf8(rest) {
                if let Ok(kc) = kube::config::Kubeconfig::from_yaml(s) {
                    for c in &kc.clusters {
                        if let Some(ca) = c
                            .cluster
                            .as_ref()
                            .and_then(|c| c.certificate_authority_data.as_ref())
                        {
                            let _ = connect::pem_to_der(ca);
                        }
                    }
                }
            }
        }
        2 => {
            if let Ok(arn) = std::str::from_utf8(rest) {
                let principal = unauthorized::access_entry_principal(arn);
                let signing = unauthorized::EksSigning {
                    cluster: "c".into(),
                    region: "us-east-1".into(),
                    signed_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
                };
                let now = signing.signed_at + Duration::from_secs(1000);
                let _ =
                    unauthorized::explain(&signing, "https://x", Ok(&principal), Some(now), now);
            }
        }
        _ => {
            let (region, cluster) = split_nul(rest);
            let (Ok(region), Ok(cluster)) =
                (std::str::from_utf8(region), std::str::from_utf8(cluster))
            else {
                return;
            };
            let creds =
                aws_credential_types::Credentials::new("AKID", "secret", None, None, "fuzz");
            let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
            if let Ok(token) = eks_token::token(&creds, region, cluster, at) {
                assert!(token.starts_with(eks_token::TOKEN_PREFIX));
            }
        }
    }
}
