//! Which pods belong to Fargate: EKS Fargate profiles' selectors, matched as EKS matches them.
//!
//! EKS decides at admission whether a pod runs on Fargate: a pod that a profile selects gets
//! `schedulerName: fargate-scheduler`, and the agent ignores it for that scheduler name. A pod
//! created *before* a profile selected it (CoreDNS created with the cluster, before the
//! kube-system profile) keeps the default scheduler and stays Pending: it is still Fargate's,
//! and launching EC2 capacity for it would put system pods on the nodes the agent manages
//! (and, on a Spot node, under the agent's own interruptions). So the agent leaves such pods
//! alone too and says why. A pod annotated `eks.amazonaws.com/compute-type: ec2` asked for
//! EC2 and is not Fargate's whatever the profiles select.
//!
//! Pure: profiles and pods in, a profile name out.

use std::collections::BTreeMap;

/// The annotation with which a pod opts out of Fargate (value `ec2`).
pub const COMPUTE_TYPE_ANNOTATION: &str = "eks.amazonaws.com/compute-type";

/// One ACTIVE Fargate profile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FargateProfile {
    pub name: String,
    pub selectors: Vec<FargateSelector>,
}

/// A namespace pattern (`*` and `?` wildcards) and labels the pod must carry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FargateSelector {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}

/// The profile that selects a pod, if any (first by name, as EKS breaks ties).
pub fn selecting_profile<'a>(
    profiles: &'a [FargateProfile],
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Option<&'a str> {
    if annotations.get(COMPUTE_TYPE_ANNOTATION).map(String::as_str) == Some("ec2") {
        return None;
    }
    let mut names: Vec<&FargateProfile> = profiles
        .iter()
        .filter(|p| {
            p.selectors.iter().any(|s| {
                glob(&s.namespace, namespace)
                    && s.labels
                        .iter()
                        .all(|(k, v)| labels.get(k).is_some_and(|actual| glob(v, actual)))
            })
        })
        .collect();
    names.sort_by(|a, b| a.name.cmp(&b.name));
    names.first().map(|p| p.name.as_str())
}

/// `*` matches any run of characters, `?` exactly one.
fn glob(pattern: &str, s: &str) -> bool {
    fn go(p: &[char], s: &[char]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&p[1..], s) || (!s.is_empty() && go(p, &s[1..])),
            (Some('?'), Some(_)) => go(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &s[1..]),
            _ => false,
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = s.chars().collect();
    go(&p, &s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn profile(name: &str, ns: &str, labels: &[(&str, &str)]) -> FargateProfile {
        FargateProfile {
            name: name.into(),
            selectors: vec![FargateSelector {
                namespace: ns.into(),
                labels: map(labels),
            }],
        }
    }

    #[test]
    fn selectors_match_namespace_globs_and_labels() {
        let ps = [
            profile("system", "kube-*", &[]),
            profile("web", "web", &[("tier", "front?")]),
        ];
        let none = BTreeMap::new();
        assert_eq!(
            selecting_profile(&ps, "kube-system", &none, &none),
            Some("system")
        );
        assert_eq!(selecting_profile(&ps, "default", &none, &none), None);
        assert_eq!(
            selecting_profile(&ps, "web", &map(&[("tier", "front1")]), &none),
            Some("web")
        );
        assert_eq!(
            selecting_profile(&ps, "web", &map(&[("tier", "back")]), &none),
            None
        );
        assert_eq!(selecting_profile(&ps, "web", &none, &none), None);
    }

    #[test]
    fn the_ec2_annotation_opts_out() {
        let ps = [profile("system", "kube-system", &[])];
        let ec2 = map(&[(COMPUTE_TYPE_ANNOTATION, "ec2")]);
        assert_eq!(
            selecting_profile(&ps, "kube-system", &BTreeMap::new(), &ec2),
            None
        );
    }

    #[test]
    fn ties_go_to_the_first_profile_by_name() {
        let ps = [profile("b", "*", &[]), profile("a", "x", &[])];
        assert_eq!(
            selecting_profile(&ps, "x", &BTreeMap::new(), &BTreeMap::new()),
            Some("a")
        );
    }
}
