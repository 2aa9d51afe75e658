//! The bearer token EKS accepts from an IAM identity: `k8s-aws-v1.` followed by the
//! unpadded base64url of a presigned STS `GetCallerIdentity` URL.
//!
//! This is what `aws eks get-token` and aws-iam-authenticator produce. The API server's
//! authenticator replays the URL against STS to learn who signed it, so the signature must
//! cover the `x-k8s-aws-id` header naming the cluster (a token for one cluster is then
//! useless for another). The presigned URL itself expires after 60 s, but EKS honours the
//! token for 15 minutes from its signing time; we refresh well before that.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4;
use base64::Engine;

pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// The header the signature must cover; its value is the EKS cluster name.
pub const CLUSTER_ID_HEADER: &str = "x-k8s-aws-id";
/// How long the presigned URL is valid (what aws-iam-authenticator uses).
const PRESIGN_EXPIRY: Duration = Duration::from_secs(60);
/// EKS accepts a token for 15 minutes; callers refresh after this.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(10 * 60);

/// The STS endpoint whose GetCallerIdentity is presigned (the regional one).
pub fn sts_host(region: &str) -> String {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("sts.{region}.{suffix}")
}

/// Presigns GetCallerIdentity for `cluster` and wraps it as an EKS token.
pub fn token(
    credentials: &Credentials,
    region: &str,
    cluster: &str,
    now: SystemTime,
) -> Result<String, String> {
    let url = presigned_url(credentials, region, cluster, now)?;
    Ok(format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url)
    ))
}

/// The presigned URL inside the token.
pub fn presigned_url(
    credentials: &Credentials,
    region: &str,
    cluster: &str,
    now: SystemTime,
) -> Result<String, String> {
    let host = sts_host(region);
    let base = format!("https://{host}/?Action=GetCallerIdentity&Version=2011-06-15");
    let identity: aws_smithy_runtime_api::client::identity::Identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(PRESIGN_EXPIRY);
    let params: aws_sigv4::http_request::SigningParams = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| format!("presign sts:GetCallerIdentity: {e}"))?
        .into();
    let headers = [("host", host.as_str()), (CLUSTER_ID_HEADER, cluster)];
    let request = SignableRequest::new(
        "GET",
        base.as_str(),
        headers.into_iter(),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| format!("presign sts:GetCallerIdentity: {e}"))?;
    let (instructions, _) = sign(request, &params)
        .map_err(|e| format!("presign sts:GetCallerIdentity: {e}"))?
        .into_parts();
    let mut url = base;
    for (name, value) in instructions.params() {
        url.push('&');
        url.push_str(name);
        url.push('=');
        url.push_str(&encode_query(value));
    }
    Ok(url)
}

/// RFC 3986 query-value encoding, as SigV4 canonicalises it.
fn encode_query(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(session: Option<&str>) -> Credentials {
        Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            session.map(str::to_string),
            None,
            "test",
        )
    }

    fn decode(token: &str) -> String {
        let b64 = token.strip_prefix(TOKEN_PREFIX).expect("prefix");
        assert!(!b64.contains('='), "unpadded");
        String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(b64)
                .unwrap(),
        )
        .unwrap()
    }

    /// The shape EKS's authenticator checks: regional STS host, GetCallerIdentity, a SigV4
    /// query signature whose signed headers include x-k8s-aws-id, 60 s expiry. (No emulator
    /// verifies these signatures, so the test checks the request we send.)
    #[test]
    fn token_is_a_presigned_get_caller_identity() {
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let token = token(&creds(None), "us-east-1", "prod", t).unwrap();
        let url = decode(&token);
        assert!(
            url.starts_with(
                "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&"
            ),
            "{url}"
        );
        assert!(url.contains("X-Amz-Algorithm=AWS4-HMAC-SHA256"), "{url}");
        assert!(
            url.contains(
                "X-Amz-Credential=AKIDEXAMPLE%2F20231114%2Fus-east-1%2Fsts%2Faws4_request"
            ),
            "{url}"
        );
        assert!(url.contains("X-Amz-Date=20231114T221320Z"), "{url}");
        assert!(url.contains("X-Amz-Expires=60"), "{url}");
        assert!(
            url.contains("X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"),
            "{url}"
        );
        let sig = url.split("X-Amz-Signature=").nth(1).unwrap();
        assert_eq!(sig.len(), 64);
        // Deterministic for the same inputs; different for another cluster.
        assert_eq!(
            token,
            super::token(&creds(None), "us-east-1", "prod", t).unwrap()
        );
        assert_ne!(
            token,
            super::token(&creds(None), "us-east-1", "dev", t).unwrap()
        );
    }

    #[test]
    fn session_credentials_carry_the_security_token() {
        let url = decode(
            &token(
                &creds(Some("FwoG/abc+d")),
                "eu-west-1",
                "c",
                SystemTime::now(),
            )
            .unwrap(),
        );
        assert!(url.starts_with("https://sts.eu-west-1.amazonaws.com/"));
        assert!(url.contains("X-Amz-Security-Token=FwoG%2Fabc%2Bd"), "{url}");
    }
}
