//! Why an EKS API server refused the provider's token (401), in words a user can act on.
//!
//! The API server never says why it answers 401. EKS refuses a token when its principal has
//! no access entry on the cluster (or, in CONFIG_MAP mode, no line in `aws-auth`), when it
//! was signed more than 15 minutes before the server's clock (or too far ahead of it), or
//! when it was presigned for another cluster (`x-k8s-aws-id`). The provider checks what it
//! can locally: its clock against the server's `Date` header, and the cluster name it
//! signed for; it names the principal it signed as, and says which cause it ruled out.

use std::time::{Duration, SystemTime};

/// What the provider knows about the token it sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EksSigning {
    /// The EKS cluster the token was presigned for (`x-k8s-aws-id`), the one whose endpoint
    /// DescribeCluster returned.
    pub cluster: String,
    pub region: String,
    pub signed_at: SystemTime,
}

/// EKS honours a token this long after its X-Amz-Date (aws-iam-authenticator's rule).
pub const EKS_TOKEN_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Clock differences below this are not worth mentioning as a cause.
const SKEW_TOLERANCE: Duration = Duration::from_secs(60);

/// The principal an access entry names for a caller ARN: the role for an assumed-role
/// session (`arn:aws:sts::A:assumed-role/R/S` -> `arn:aws:iam::A:role/R`; a role with a
/// path needs that path, which the session ARN does not carry), the ARN itself otherwise.
pub fn access_entry_principal(caller_arn: &str) -> String {
    let parts: Vec<&str> = caller_arn.splitn(6, ':').collect();
    if parts.len() == 6 && parts[2] == "sts" {
        if let Some(rest) = parts[5].strip_prefix("assumed-role/") {
            if let Some((role, _session)) = rest.split_once('/') {
                return format!("arn:{}:iam::{}:role/{role}", parts[1], parts[4]);
            }
        }
    }
    caller_arn.to_string()
}

/// The explanation for a 401 from `endpoint`. `caller` is the ARN the token was signed as
/// (sts:GetCallerIdentity with the same credentials), or why it is unknown; `server_date`
/// the API server's `Date` header, when it sent one; `now` this machine's clock when it did.
pub fn explain(
    signing: &EksSigning,
    endpoint: &str,
    caller: Result<&str, &str>,
    server_date: Option<SystemTime>,
    now: SystemTime,
) -> String {
    let cluster = &signing.cluster;
    let mut out = match caller {
        Ok(arn) => format!(
            "the API server of EKS cluster {cluster:?} ({endpoint}) refused the token the \
             provider presigned as {arn} (401 Unauthorized). The server does not say why; "
        ),
        Err(why) => format!(
            "the API server of EKS cluster {cluster:?} ({endpoint}) refused the token the \
             provider presigned with its AWS credentials (401 Unauthorized; who they belong to \
             is unknown: {why}). The server does not say why; "
        ),
    };
    let principal = caller.ok().map(access_entry_principal);
    let mut likely = Vec::new();
    let mut ruled_out = Vec::new();

    // Clock: the token's X-Amz-Date is this machine's clock at signing.
    match server_date {
        Some(server) => {
            let (ahead, skew) = match now.duration_since(server) {
                Ok(d) => (true, d),
                Err(e) => (false, e.duration()),
            };
            let age_at_server = server
                .duration_since(signing.signed_at)
                .unwrap_or(Duration::ZERO);
            if skew > SKEW_TOLERANCE {
                let dir = if ahead { "ahead of" } else { "behind" };
                likely.push(format!(
                    "clock skew: this machine's clock is {} s {dir} the API server's (its Date \
                     header); EKS refuses a token signed more than 15 minutes before its own \
                     clock{}. Synchronise the clock (NTP) and apply again",
                    skew.as_secs(),
                    if !ahead && age_at_server > EKS_TOKEN_WINDOW {
                        ", and this one was, by the server's clock"
                    } else {
                        ""
                    }
                ));
            } else {
                ruled_out.push(format!(
                    "an expired token or clock skew: the token was signed at this machine's \
                     time, which is within {} s of the API server's clock (its Date header)",
                    skew.as_secs().max(1)
                ));
            }
        }
        None => likely.push(
            "clock skew or an expired token: the API server sent no Date header to compare \
             this machine's clock with; EKS refuses a token signed more than 15 minutes before \
             its own clock"
                .to_string(),
        ),
    }

    // Access: the usual cause, and not checkable without the cluster's access entries.
    likely.insert(
        0,
        match &principal {
            Some(p) => format!(
                "no access entry for {p} on cluster {cluster:?}: give it one (a \
                 joiner_access_entry resource with principal_arn = {p:?} and an access policy, \
                 or `aws eks create-access-entry --cluster-name {cluster} --principal-arn {p}`); \
                 a cluster in CONFIG_MAP authentication mode reads the aws-auth ConfigMap \
                 instead"
            ),
            None => format!(
                "no access entry on cluster {cluster:?} for the principal of the provider's \
                 credentials (a joiner_access_entry resource adds one)"
            ),
        },
    );

    ruled_out.push(format!(
        "a token for another cluster: it was presigned for {cluster:?} (x-k8s-aws-id), the \
         cluster whose endpoint eks:DescribeCluster returned in {}; unless that endpoint \
         serves another cluster (a proxy or DNS pointing elsewhere)",
        signing.region
    ));

    out.push_str("possible causes:");
    for l in &likely {
        out.push_str("\n  - ");
        out.push_str(l);
    }
    out.push_str("\nruled out:");
    for r in &ruled_out {
        out.push_str("\n  - ");
        out.push_str(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signing(at: SystemTime) -> EksSigning {
        EksSigning {
            cluster: "demo".into(),
            region: "us-east-1".into(),
            signed_at: at,
        }
    }

    const URL: &str = "https://demo.gr7.us-east-1.eks.amazonaws.com";

    #[test]
    fn names_cluster_principal_and_the_access_entry_fix() {
        let now = SystemTime::now();
        let text = explain(
            &signing(now),
            URL,
            Ok("arn:aws:iam::123456789012:user/ci"),
            Some(now),
            now,
        );
        assert!(text.contains("EKS cluster \"demo\""), "{text}");
        assert!(text.contains(URL), "{text}");
        assert!(
            text.contains("presigned as arn:aws:iam::123456789012:user/ci"),
            "{text}"
        );
        assert!(
            text.contains(
                "no access entry for arn:aws:iam::123456789012:user/ci on cluster \"demo\""
            ),
            "{text}"
        );
        assert!(text.contains("joiner_access_entry"), "{text}");
        let (causes, ruled) = text.split_once("ruled out:").unwrap();
        assert!(!causes.contains("clock skew"), "{text}");
        assert!(ruled.contains("an expired token or clock skew"), "{text}");
        assert!(ruled.contains("a token for another cluster"), "{text}");
    }

    #[test]
    fn a_slow_clock_is_named_as_the_likely_cause() {
        let server = SystemTime::now();
        let now = server - Duration::from_secs(20 * 60);
        let text = explain(
            &signing(now),
            URL,
            Ok("arn:aws:sts::123456789012:assumed-role/deploy/ci-42"),
            Some(server),
            now,
        );
        let (causes, ruled) = text.split_once("ruled out:").unwrap();
        assert!(
            causes.contains("clock skew: this machine's clock is 1200 s behind"),
            "{text}"
        );
        assert!(causes.contains("and this one was"), "{text}");
        assert!(!ruled.contains("clock skew"), "{text}");
        // An assumed role's entry is for the role, not the session.
        assert!(
            causes.contains("no access entry for arn:aws:iam::123456789012:role/deploy on"),
            "{text}"
        );
    }

    #[test]
    fn unknown_caller_and_no_date_still_explain() {
        let now = SystemTime::now();
        let text = explain(&signing(now), URL, Err("sts unreachable"), None, now);
        assert!(text.contains("unknown: sts unreachable"), "{text}");
        assert!(text.contains("sent no Date header"), "{text}");
        assert!(text.contains("cluster \"demo\""), "{text}");
    }

    #[test]
    fn principals_of_sessions_are_their_roles() {
        assert_eq!(
            access_entry_principal("arn:aws:sts::1:assumed-role/r/s"),
            "arn:aws:iam::1:role/r"
        );
        assert_eq!(
            access_entry_principal("arn:aws-cn:sts::1:assumed-role/r/i-0abc"),
            "arn:aws-cn:iam::1:role/r"
        );
        assert_eq!(
            access_entry_principal("arn:aws:iam::1:user/u"),
            "arn:aws:iam::1:user/u"
        );
    }
}
