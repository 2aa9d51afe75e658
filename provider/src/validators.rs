//! The plan-time checks of the provider's inputs that more than one resource or data source
//! uses: names, ARNs, IDs, tags and versions as AWS and Kubernetes define them.
//!
//! Each check mirrors a rule the service itself enforces, so that a mistake is caught by
//! `terraform plan` with the attribute named, instead of by the API ten minutes into an
//! apply. Messages say what is allowed and echo the offending value. The generic ones
//! (lengths, character sets, ranges, fixed sets) come from the protocol and are handed on
//! here, so that a resource has one place to take its checks from.

use crate::aws::eks::cluster::{AUTHENTICATION_MODES, LOG_TYPES};
use crate::aws::iam;
use crate::policy::arn::Arn;
use crate::protocol::prelude::*;
pub use crate::protocol::schema::validators::{int_between, one_of, string_chars, string_length};

/// EKS cluster names: 1-100 characters, starting with a letter or digit, then letters,
/// digits, `-` and `_` (`^[0-9A-Za-z][A-Za-z0-9\-_]*$`).
pub fn cluster_name(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    let n = s.chars().count();
    if n == 0 || n > 100 {
        return Err(format!(
            "must be 1 to 100 characters long, got {n} characters"
        ));
    }
    if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!("must start with a letter or a digit, got {s:?}"));
    }
    match s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        Some(c) => Err(format!(
            "may contain only letters, digits, \"-\" and \"_\"; found {c:?} in {s:?}"
        )),
        None => Ok(()),
    }
}

/// Fargate profile names follow the same rule as cluster names, with EKS's 1-100 limit.
pub fn profile_name(v: &Value) -> Result<(), String> {
    cluster_name(v)
}

/// `<major>.<minor>` Kubernetes versions as EKS names them, e.g. "1.35".
pub fn parse_version(s: &str) -> Option<(u32, u32)> {
    let (major, minor) = s.split_once('.')?;
    let ok = |p: &str| !p.is_empty() && p.len() <= 3 && p.chars().all(|c| c.is_ascii_digit());
    if !ok(major) || !ok(minor) || (minor.len() > 1 && minor.starts_with('0')) {
        return None;
    }
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The version's form only; whether EKS offers it today is asked of EKS at plan time
/// (`resources::cluster::versions`).
pub fn kubernetes_version(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    match parse_version(s) {
        Some((1, _)) => Ok(()),
        _ => Err(format!(
            "must be a Kubernetes minor version as EKS names it, like \"1.35\" (no patch level, no \"v\"), got {s:?}"
        )),
    }
}

/// An IAM role ARN, `arn:<partition>:iam::<account>:role/<name>`.
pub fn role_arn(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    Arn::expect(s, "iam", "role/").map(|_| ()).map_err(|e| {
        format!("must be an IAM role ARN like arn:aws:iam::123456789012:role/eks-cluster: {e}")
    })
}

/// A KMS key (or alias) ARN for envelope encryption of secrets.
pub fn kms_key_arn(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    Arn::expect(s, "kms", "key/")
        .or_else(|_| Arn::expect(s, "kms", "alias/"))
        .map(|_| ())
        .map_err(|e| {
            format!(
                "must be a KMS key or alias ARN like arn:aws:kms:us-east-1:123456789012:key/<id>: {e}"
            )
        })
}

fn id_with_prefix(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17)
            && hex
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    })
}

/// Every element is an EC2 ID with `prefix` (`subnet-`, `sg-`) and 8 or 17 hex digits.
pub fn ec2_ids(
    prefix: &'static str,
    min: usize,
) -> impl Fn(&Value) -> Result<(), String> + Send + Sync {
    move |v| {
        if !v.is_fully_known() {
            return Ok(());
        }
        let ids = v.as_string_list();
        if ids.len() < min {
            let why = if min >= 2 {
                " (EKS requires subnets in at least two Availability Zones)"
            } else {
                ""
            };
            return Err(format!("needs at least {min} IDs{why}, got {}", ids.len()));
        }
        match ids.iter().find(|s| !id_with_prefix(s, prefix)) {
            Some(bad) => Err(format!("{bad:?} is not a valid ID: expected {prefix} followed by 8 or 17 lower-case hex digits")),
            None => Ok(()),
        }
    }
}

/// Parses an IPv4 CIDR, requiring the host bits to be zero (EKS rejects "10.0.0.1/8").
pub fn parse_cidr(s: &str) -> Result<([u8; 4], u8), String> {
    let (addr, len) = s.split_once('/').ok_or_else(|| {
        format!("{s:?} is not a CIDR block: expected a.b.c.d/n, e.g. 203.0.113.0/24")
    })?;
    let octets: Vec<&str> = addr.split('.').collect();
    let parse_octet = |o: &str| -> Option<u8> {
        if o.is_empty() || o.len() > 3 || !o.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        o.parse().ok()
    };
    let bytes: Option<Vec<u8>> = octets.iter().map(|o| parse_octet(o)).collect();
    let bytes = match bytes {
        Some(b) if b.len() == 4 => [b[0], b[1], b[2], b[3]],
        _ => {
            return Err(format!(
                "{s:?} is not a CIDR block: the address must be four numbers 0-255"
            ))
        }
    };
    let len: u8 = match len.parse() {
        Ok(n) if n <= 32 && !len.starts_with('+') => n,
        _ => {
            return Err(format!(
                "{s:?} is not a CIDR block: the prefix length must be 0 to 32"
            ))
        }
    };
    let ip = u32::from_be_bytes(bytes);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    if ip & !mask != 0 {
        let net = (ip & mask).to_be_bytes();
        return Err(format!(
            "{s:?} has host bits set; did you mean {}.{}.{}.{}/{len}?",
            net[0], net[1], net[2], net[3]
        ));
    }
    Ok((bytes, len))
}

pub fn cidrs(v: &Value) -> Result<(), String> {
    if !v.is_fully_known() {
        return Ok(());
    }
    for s in v.as_string_list() {
        parse_cidr(&s)?;
    }
    Ok(())
}

pub fn log_types(v: &Value) -> Result<(), String> {
    if !v.is_fully_known() {
        return Ok(());
    }
    match v
        .as_string_list()
        .into_iter()
        .find(|t| !LOG_TYPES.contains(&t.as_str()))
    {
        Some(bad) => Err(format!(
            "{bad:?} is not a control-plane log type; allowed: {}",
            LOG_TYPES.join(", ")
        )),
        None => Ok(()),
    }
}

/// One of EKS's authentication modes.
pub fn authentication_mode(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    if AUTHENTICATION_MODES.contains(&s) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not an EKS authentication mode; allowed: {}",
            AUTHENTICATION_MODES.join(", ")
        ))
    }
}

/// AWS resource tags: up to 49 (the provider adds its `joiner.dev/created-by`), keys 1-128 and
/// values up to 256 characters, no `aws:` prefix nor the provider's own key.
pub fn tags(v: &Value) -> Result<(), String> {
    if !v.is_fully_known() {
        return Ok(());
    }
    aws_tags(v)
}

/// The namespace of a Fargate selector: a Kubernetes DNS label (1-63 characters of
/// lower-case letters, digits and `-`, starting and ending with a letter or digit).
pub fn namespace(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else { return Ok(()) };
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "must be a Kubernetes namespace name (1-63 lower-case letters, digits and \"-\", starting and ending with a letter or digit), got {s:?}"
        ))
    }
}

/// `tags` for discovery: at least one, keys non-empty; `"*"` matches any value.
pub fn discovery_tags(v: &Value) -> Result<(), String> {
    // Values known only later (e.g. `var.x` during validate) are checked at plan time.
    if !v.is_fully_known() {
        return Ok(());
    }
    let tags = v.as_string_map();
    if tags.is_empty() {
        return Err(
            "needs at least one tag to match, e.g. { \"joiner.dev/discovery\" = \"my-cluster\" }"
                .into(),
        );
    }
    if tags.keys().any(|k| k.is_empty()) {
        return Err("tag keys cannot be empty".into());
    }
    Ok(())
}

pub fn vpc_id(v: &Value) -> Result<(), String> {
    match v.as_str() {
        Some(s) if !s.starts_with("vpc-") || s.len() < 12 => Err(format!(
            "{s:?} is not a VPC ID: expected vpc- followed by 8 or 17 hex digits"
        )),
        _ => Ok(()),
    }
}

/// IAM role names: 1-64 characters of letters, digits and `+=,.@_-`.
pub fn is_role_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "+=,.@_-".contains(c)
}

pub fn role_name(v: &Value) -> Result<(), String> {
    string_length(1, 64)(v)?;
    string_chars("letters, digits and +=,.@_-", is_role_name_char)(v)
}

/// IAM paths: `/` alone, or `/a/b/`, 1-512 printable ASCII characters.
pub fn iam_path(v: &Value) -> Result<(), String> {
    let Some(p) = v.as_str() else { return Ok(()) };
    if p.is_empty() || p.len() > 512 || !p.starts_with('/') || !p.ends_with('/') {
        return Err(format!(
            "must start and end with \"/\" and be 1 to 512 characters (e.g. \"/\" or \"/eks/\"), got {p:?}"
        ));
    }
    match p.chars().find(|c| !('\u{21}'..='\u{7e}').contains(c)) {
        Some(c) => Err(format!(
            "may contain only printable ASCII characters without spaces; found {c:?}"
        )),
        None => Ok(()),
    }
}

/// A validator for an ARN of `service` with a resource starting with `prefix`.
pub fn arn_of(
    service: &'static str,
    prefix: &'static str,
) -> impl Fn(&Value) -> Result<(), String> + Send + Sync {
    move |v| match v.as_str() {
        Some(s) => Arn::expect(s, service, prefix)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

/// IAM (and EKS) tags: up to 50 with the provider's own `joiner.dev/created-by`, which the
/// configuration may not set (`aws::iam::CREATED_BY_TAG`: what marks an object a later
/// create may adopt); keys 1-128 and values 0-256 characters.
pub fn aws_tags(v: &Value) -> Result<(), String> {
    let tags = v.as_string_map();
    if tags.len() > 49 {
        return Err(format!(
            "at most 49 tags are allowed (AWS allows 50, and the provider adds {}), got {}",
            iam::CREATED_BY_TAG,
            tags.len()
        ));
    }
    for (k, val) in &tags {
        if k == iam::CREATED_BY_TAG {
            return Err(format!(
                "tag key {k:?} is the provider's own: it marks what this provider created"
            ));
        }
        if k.is_empty() || k.chars().count() > 128 {
            return Err(format!("tag key {k:?} must be 1 to 128 characters"));
        }
        if k.starts_with("aws:") {
            return Err(format!("tag key {k:?}: the aws: prefix is reserved"));
        }
        if val.chars().count() > 256 {
            return Err(format!(
                "the value of tag {k:?} must be at most 256 characters"
            ));
        }
    }
    Ok(())
}

/// Kubernetes object names: lowercase DNS-1123 subdomains.
pub fn dns_subdomain(v: &Value) -> Result<(), String> {
    let s = v.as_str().unwrap_or_default();
    if joiner_agent::labels::is_dns_subdomain(s) {
        Ok(())
    } else {
        Err(format!(
            "must be a lowercase DNS-1123 subdomain (a-z, 0-9, '-' and '.', starting and ending \
             with a letter or digit, at most 253 characters), got {s:?}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        Value::string(x)
    }
    fn set(xs: &[&str]) -> Value {
        Value::Set(xs.iter().map(|x| Value::string(*x)).collect())
    }

    #[test]
    fn cluster_names() {
        assert!(cluster_name(&s("prod-eu_1")).is_ok());
        assert!(cluster_name(&s(&"a".repeat(100))).is_ok());
        assert!(cluster_name(&s(&"a".repeat(101)))
            .unwrap_err()
            .contains("1 to 100"));
        assert!(cluster_name(&s("")).unwrap_err().contains("1 to 100"));
        assert!(cluster_name(&s("-x"))
            .unwrap_err()
            .contains("start with a letter"));
        assert!(cluster_name(&s("a.b")).unwrap_err().contains("'.'"));
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("1.31"), Some((1, 31)));
        assert!(kubernetes_version(&s("1.9")).is_ok());
        for bad in ["1.31.2", "v1.31", "1", "1.", "2.0", "1.031", "latest"] {
            assert!(kubernetes_version(&s(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn arns() {
        assert!(role_arn(&s("arn:aws:iam::123456789012:role/eks")).is_ok());
        assert!(role_arn(&s("arn:aws:iam::123456789012:user/eks"))
            .unwrap_err()
            .contains("role/"));
        assert!(role_arn(&s("eks-role")).is_err());
        assert!(kms_key_arn(&s("arn:aws:kms:us-east-1:123456789012:key/abc")).is_ok());
        assert!(kms_key_arn(&s("arn:aws:kms:us-east-1:123456789012:alias/eks")).is_ok());
        assert!(kms_key_arn(&s("arn:aws:kms:::key/abc")).is_err());
    }

    #[test]
    fn ids_and_cidrs() {
        let subnets = ec2_ids("subnet-", 2);
        assert!(subnets(&set(&["subnet-0123abcd", "subnet-0123456789abcdef0"])).is_ok());
        assert!(subnets(&set(&["subnet-0123abcd"]))
            .unwrap_err()
            .contains("at least 2"));
        assert!(subnets(&set(&["subnet-0123abcd", "sg-0123abcd"]))
            .unwrap_err()
            .contains("\"sg-0123abcd\""));
        assert!(cidrs(&set(&["0.0.0.0/0", "203.0.113.0/24", "10.1.2.3/32"])).is_ok());
        assert!(cidrs(&set(&["10.0.0.1/8"]))
            .unwrap_err()
            .contains("did you mean 10.0.0.0/8"));
        assert!(cidrs(&set(&["10.0.0.0/33"])).is_err());
        assert!(cidrs(&set(&["300.0.0.0/8"])).is_err());
        assert!(cidrs(&set(&["10.0.0.0"])).is_err());
    }

    #[test]
    fn log_types_and_namespaces() {
        assert!(log_types(&set(&["api", "scheduler"])).is_ok());
        assert!(log_types(&set(&["API"]))
            .unwrap_err()
            .contains("api, audit, authenticator, controllerManager, scheduler"));
        assert!(namespace(&s("kube-system")).is_ok());
        assert!(namespace(&s("Kube")).is_err());
        assert!(namespace(&s("-a")).is_err());
    }

    #[test]
    fn authentication_modes() {
        for ok in ["CONFIG_MAP", "API_AND_CONFIG_MAP", "API"] {
            assert!(authentication_mode(&s(ok)).is_ok());
        }
        assert!(authentication_mode(&s("api"))
            .unwrap_err()
            .contains("CONFIG_MAP, API_AND_CONFIG_MAP, API"));
    }
}
