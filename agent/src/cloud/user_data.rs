//! User data that makes an instance join the cluster, per AMI family.
//!
//! - **AL2023** boots with `nodeadm`, which reads `NodeConfig` documents
//!   (`apiVersion: node.eks.aws/v1alpha1`) from a MIME multipart archive. We write one part
//!   with the cluster's endpoint, CA and service CIDR, the kubelet settings of the NodeClass,
//!   and the node's labels and taints as kubelet flags (`--node-labels`,
//!   `--register-with-taints`), so the node registers already labelled and tainted and no pod
//!   lands on it before the agent has seen it. The NodeClass's own user data is merged as
//!   Karpenter does: its MIME parts (or the whole of it, as one part, when it is not MIME)
//!   come first and our NodeConfig last; nodeadm merges the documents in order.
//! - **Bottlerocket** reads TOML settings. The NodeClass's TOML is kept, and the keys the
//!   agent owns (`settings.kubernetes` cluster fields, node labels and taints, the kubelet's
//!   max pods, reservations and eviction settings) are set on top, replacing the user's
//!   values for those keys only.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::api::node_class::KubeletConfiguration;
use crate::taints::Taint;

/// What an instance needs to know about its cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ClusterInfo {
    pub name: String,
    /// `https://...`
    pub endpoint: String,
    /// The cluster CA, base64-encoded PEM (as DescribeCluster returns it).
    pub certificate_authority: String,
    /// The Service CIDR (`10.100.0.0/16`); nodeadm derives the cluster DNS IP from it.
    pub service_cidr: Option<String>,
    /// `major.minor`, for the public AMI parameters.
    pub version: String,
}

/// How an AMI family joins the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AmiFamily {
    Al2023,
    Bottlerocket,
}

impl AmiFamily {
    pub fn as_str(&self) -> &'static str {
        match self {
            AmiFamily::Al2023 => "al2023",
            AmiFamily::Bottlerocket => "bottlerocket",
        }
    }
}

/// The node-specific inputs.
#[derive(Debug, Clone, Copy)]
pub struct NodeBootstrap<'a> {
    pub cluster: &'a ClusterInfo,
    pub labels: &'a BTreeMap<String, String>,
    /// Taints and startup taints together: both are registered by the kubelet.
    pub taints: &'a [Taint],
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// The NodeClass's `userData`.
    pub custom: Option<&'a str>,
    /// `instanceStorePolicy: RAID0`: the node stripes its instance store and puts the
    /// kubelet's and containerd's data there.
    pub instance_store_raid0: bool,
}

/// MIME boundary of the archive we write; chosen so it cannot appear in base64 or YAML.
const BOUNDARY: &str = "//joiner//";

/// Renders the user data (plain text; the launch template wants it base64-encoded).
pub fn render(family: AmiFamily, node: &NodeBootstrap<'_>) -> String {
    match family {
        AmiFamily::Al2023 => al2023(node),
        AmiFamily::Bottlerocket => bottlerocket(node),
    }
}

/// `key=value,key2=value2` for `--node-labels`.
pub fn labels_flag(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `key=value:Effect,key2:Effect` for `--register-with-taints`.
pub fn taints_flag(taints: &[Taint]) -> String {
    taints
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn al2023(node: &NodeBootstrap<'_>) -> String {
    let c = node.cluster;
    let mut cluster = Map::new();
    cluster.insert("name".into(), json!(c.name));
    cluster.insert("apiServerEndpoint".into(), json!(c.endpoint));
    cluster.insert(
        "certificateAuthority".into(),
        json!(c.certificate_authority),
    );
    if let Some(cidr) = &c.service_cidr {
        cluster.insert("cidr".into(), json!(cidr));
    }
    let mut kubelet = Map::new();
    let config = kubelet_config(node.kubelet);
    if !config.is_empty() {
        kubelet.insert("config".into(), Value::Object(config));
    }
    let mut flags = Vec::new();
    if !node.labels.is_empty() {
        flags.push(json!(format!("--node-labels={}", labels_flag(node.labels))));
    }
    if !node.taints.is_empty() {
        flags.push(json!(format!(
            "--register-with-taints={}",
            taints_flag(node.taints)
        )));
    }
    if !flags.is_empty() {
        kubelet.insert("flags".into(), Value::Array(flags));
    }
    let mut spec = Map::new();
    spec.insert("cluster".into(), Value::Object(cluster));
    // nodeadm's `localStorage` (NodeConfig `spec.instance`), as Karpenter's
    // `bootstrap/nodeadm.go` sets it for RAID0.
    if node.instance_store_raid0 {
        spec.insert(
            "instance".into(),
            json!({"localStorage": {"strategy": "RAID0"}}),
        );
    }
    if !kubelet.is_empty() {
        spec.insert("kubelet".into(), Value::Object(kubelet));
    }
    let doc = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": Value::Object(spec),
    });
    let yaml = serde_yaml::to_string(&doc).unwrap_or_default();

    let mut parts: Vec<(String, String)> = node.custom.map(custom_parts).unwrap_or_default();
    parts.push(("application/node.eks.aws".into(), yaml));
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for (content_type, body) in parts {
        out.push_str(&format!("--{BOUNDARY}\nContent-Type: {content_type}\n\n"));
        out.push_str(body.trim_end_matches('\n'));
        out.push('\n');
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    out
}

fn kubelet_config(k: Option<&KubeletConfiguration>) -> Map<String, Value> {
    let mut m = Map::new();
    let Some(k) = k else { return m };
    if let Some(v) = k.max_pods {
        m.insert("maxPods".into(), json!(v));
    }
    if let Some(v) = k.pods_per_core {
        m.insert("podsPerCore".into(), json!(v));
    }
    if let Some(v) = &k.cluster_dns {
        m.insert("clusterDNS".into(), json!(v));
    }
    for (key, map) in [
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
        ("evictionSoftGracePeriod", &k.eviction_soft_grace_period),
    ] {
        if !map.is_empty() {
            m.insert(key.into(), json!(map));
        }
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        m.insert("evictionMaxPodGracePeriod".into(), json!(v));
    }
    m
}

/// The NodeClass's user data as (content type, body) parts: a MIME archive's own parts, or
/// the whole text as one part typed by its look (NodeConfig YAML, cloud-config, shell).
pub fn custom_parts(text: &str) -> Vec<(String, String)> {
    if let Some(parts) = parse_mime(text) {
        return parts;
    }
    let t = text.trim_start();
    let content_type = if t.contains("kind: NodeConfig") {
        "application/node.eks.aws"
    } else if t.starts_with("#cloud-config") {
        "text/cloud-config; charset=\"us-ascii\""
    } else {
        "text/x-shellscript; charset=\"us-ascii\""
    };
    vec![(content_type.to_string(), text.to_string())]
}

/// Splits a MIME multipart archive into its parts; None when `text` is not one.
pub fn parse_mime(text: &str) -> Option<Vec<(String, String)>> {
    let text = text.replace("\r\n", "\n");
    let (headers, body) = text.split_once("\n\n")?;
    if !headers
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("mime-version"))
    {
        return None;
    }
    let ct = headers
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("content-type:"))?;
    let boundary = ct.split(';').find_map(|p| {
        let p = p.trim();
        p.strip_prefix("boundary=")
            .map(|b| b.trim_matches('"').to_string())
    })?;
    let delim = format!("--{boundary}");
    let mut parts = Vec::new();
    for chunk in body.split(&delim).skip(1) {
        if chunk.starts_with("--") {
            break;
        }
        let chunk = chunk.trim_start_matches('\n');
        let (h, b) = chunk.split_once("\n\n").unwrap_or((chunk, ""));
        let content_type = h
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| "text/x-shellscript".into());
        parts.push((content_type, b.trim_end_matches('\n').to_string()));
    }
    Some(parts)
}

fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn bottlerocket(node: &NodeBootstrap<'_>) -> String {
    let c = node.cluster;
    // Table -> (key -> value line), in the order we write them.
    let mut ours: Vec<(&str, Vec<(String, String)>)> = Vec::new();
    let mut k8s = vec![
        ("cluster-name".to_string(), toml_str(&c.name)),
        ("api-server".to_string(), toml_str(&c.endpoint)),
        (
            "cluster-certificate".to_string(),
            toml_str(&c.certificate_authority),
        ),
    ];
    if let Some(k) = node.kubelet {
        if let Some(m) = k.max_pods {
            k8s.push(("max-pods".into(), m.to_string()));
        }
        if let Some(dns) = k.cluster_dns.as_ref().and_then(|d| d.first()) {
            k8s.push(("cluster-dns-ip".into(), toml_str(dns)));
        }
        if let Some(v) = k.eviction_max_pod_grace_period {
            k8s.push(("eviction-max-pod-grace-period".into(), v.to_string()));
        }
    }
    ours.push(("settings.kubernetes", k8s));
    // The reservations and eviction thresholds shape the node's allocatable, which the
    // scheduler packed against: each is a table of Bottlerocket's settings, as Karpenter
    // writes them.
    if let Some(k) = node.kubelet {
        for (table, map) in [
            ("settings.kubernetes.system-reserved", &k.system_reserved),
            ("settings.kubernetes.kube-reserved", &k.kube_reserved),
            ("settings.kubernetes.eviction-hard", &k.eviction_hard),
            ("settings.kubernetes.eviction-soft", &k.eviction_soft),
            (
                "settings.kubernetes.eviction-soft-grace-period",
                &k.eviction_soft_grace_period,
            ),
        ] {
            if !map.is_empty() {
                ours.push((
                    table,
                    map.iter()
                        .map(|(k, v)| (toml_str(k), toml_str(v)))
                        .collect(),
                ));
            }
        }
    }
    // Bottlerocket formats and mounts the instance store from a bootstrap command, as
    // Karpenter's `bootstrap/bottlerocket.go` writes it: `ephemeral-storage init` builds the
    // array, `bind` moves the kubelet's, containerd's and the pods' log directories onto it.
    if node.instance_store_raid0 {
        ours.push((
            "settings.bootstrap-commands.000-mount-instance-storage",
            vec![
                (
                    "commands".into(),
                    "[[\"apiclient\", \"ephemeral-storage\", \"init\"], [\"apiclient\", \
                     \"ephemeral-storage\", \"bind\", \"--dirs\", \"/var/lib/containerd\", \
                     \"/var/lib/kubelet\", \"/var/log/pods\"]]"
                        .into(),
                ),
                ("essential".into(), "true".into()),
                ("mode".into(), toml_str("always")),
            ],
        ));
    }
    if !node.labels.is_empty() {
        ours.push((
            "settings.kubernetes.node-labels",
            node.labels
                .iter()
                .map(|(k, v)| (toml_str(k), toml_str(v)))
                .collect(),
        ));
    }
    if !node.taints.is_empty() {
        let mut by_key: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for t in node.taints {
            by_key.entry(&t.key).or_default().push(toml_str(&format!(
                "{}:{}",
                t.value,
                t.effect.as_str()
            )));
        }
        ours.push((
            "settings.kubernetes.node-taints",
            by_key
                .into_iter()
                .map(|(k, v)| (toml_str(k), format!("[{}]", v.join(", "))))
                .collect(),
        ));
    }
    merge_toml(node.custom.unwrap_or(""), &ours)
}

/// Sets `ours` keys into the user's TOML: within a table we own, the user's lines for the
/// same keys are dropped and ours appended; other tables and keys pass through untouched.
/// Line-based: enough for the flat `key = value` tables Bottlerocket settings use.
fn merge_toml<'a>(custom: &str, ours: &'a [(&'a str, Vec<(String, String)>)]) -> String {
    let norm_key = |k: &str| k.trim().trim_matches('"').to_string();
    let mut out = String::new();
    let mut written: Vec<&'a str> = Vec::new();
    let mut current: Option<&'a str> = None;
    fn flush<'a>(
        ours: &'a [(&'a str, Vec<(String, String)>)],
        table: Option<&str>,
        out: &mut String,
        written: &mut Vec<&'a str>,
    ) {
        if let Some((name, kvs)) = table.and_then(|t| ours.iter().find(|(n, _)| *n == t)) {
            for (k, v) in kvs {
                out.push_str(&format!("{k} = {v}\n"));
            }
            written.push(name);
        }
    }
    for line in custom.lines() {
        let t = line.trim();
        if t.starts_with('[') && !t.starts_with("[[") {
            flush(ours, current, &mut out, &mut written);
            let name = t.trim_matches(|c| c == '[' || c == ']').trim();
            current = ours.iter().find(|(n, _)| *n == name).map(|(n, _)| *n);
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if let (Some(table), Some((k, _))) = (current, t.split_once('=')) {
            let owned = ours
                .iter()
                .find(|(n, _)| *n == table)
                .is_some_and(|(_, kvs)| kvs.iter().any(|(ok, _)| norm_key(ok) == norm_key(k)));
            if owned {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    flush(ours, current, &mut out, &mut written);
    for (name, kvs) in ours {
        if written.contains(name) {
            continue;
        }
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(&format!("[{name}]\n"));
        for (k, v) in kvs {
            out.push_str(&format!("{k} = {v}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taints::Effect;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "prod".into(),
            endpoint: "https://ABC.gr7.us-east-1.eks.amazonaws.com".into(),
            certificate_authority: "LS0tLS1CRUdJTg==".into(),
            service_cidr: Some("10.100.0.0/16".into()),
            version: "1.33".into(),
        }
    }

    fn labels() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("joiner.dev/nodepool".to_string(), "general".to_string()),
            ("team".to_string(), "platform".to_string()),
        ])
    }

    #[test]
    fn al2023_node_config_carries_cluster_kubelet_labels_and_taints() {
        let c = cluster();
        let l = labels();
        let taints = vec![
            Taint::new("dedicated", "gpu", Effect::NoSchedule),
            Taint::new("joiner.dev/unready", "", Effect::NoExecute),
        ];
        let kubelet = KubeletConfiguration {
            max_pods: Some(110),
            cluster_dns: Some(vec!["10.100.0.10".into()]),
            ..Default::default()
        };
        let ud = render(
            AmiFamily::Al2023,
            &NodeBootstrap {
                cluster: &c,
                labels: &l,
                taints: &taints,
                kubelet: Some(&kubelet),
                custom: None,
                instance_store_raid0: false,
            },
        );
        let parts = parse_mime(&ud).expect("a MIME archive");
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].0, "application/node.eks.aws");
        let doc: serde_yaml::Value = serde_yaml::from_str(&parts[0].1).unwrap();
        assert_eq!(doc["kind"], "NodeConfig");
        let spec = &doc["spec"];
        assert_eq!(spec["cluster"]["name"], "prod");
        assert_eq!(spec["cluster"]["apiServerEndpoint"], c.endpoint.as_str());
        assert_eq!(spec["cluster"]["certificateAuthority"], "LS0tLS1CRUdJTg==");
        assert_eq!(spec["cluster"]["cidr"], "10.100.0.0/16");
        assert_eq!(spec["kubelet"]["config"]["maxPods"], 110);
        assert_eq!(spec["kubelet"]["config"]["clusterDNS"][0], "10.100.0.10");
        let flags: Vec<&str> = spec["kubelet"]["flags"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(
            flags,
            [
                "--node-labels=joiner.dev/nodepool=general,team=platform",
                "--register-with-taints=dedicated=gpu:NoSchedule,joiner.dev/unready:NoExecute",
            ]
        );
    }

    #[test]
    fn al2023_custom_user_data_comes_first() {
        let c = cluster();
        let l = BTreeMap::new();
        let script = "#!/bin/bash\necho hello\n";
        let ud = render(
            AmiFamily::Al2023,
            &NodeBootstrap {
                cluster: &c,
                labels: &l,
                taints: &[],
                kubelet: None,
                custom: Some(script),
                instance_store_raid0: false,
            },
        );
        let parts = parse_mime(&ud).unwrap();
        assert_eq!(parts.len(), 2);
        assert!(parts[0].0.starts_with("text/x-shellscript"));
        assert_eq!(parts[0].1, "#!/bin/bash\necho hello");
        assert_eq!(parts[1].0, "application/node.eks.aws");

        let mime = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BB\"\n\n\
                    --BB\nContent-Type: application/node.eks.aws\n\n\
                    apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  \
                    instance:\n    localStorage:\n      strategy: RAID0\n\
                    --BB\nContent-Type: text/x-shellscript\n\necho two\n--BB--\n";
        let ud = render(
            AmiFamily::Al2023,
            &NodeBootstrap {
                cluster: &c,
                labels: &l,
                taints: &[],
                kubelet: None,
                custom: Some(mime),
                instance_store_raid0: false,
            },
        );
        let parts = parse_mime(&ud).unwrap();
        assert_eq!(parts.len(), 3, "{ud}");
        assert!(parts[0].1.contains("RAID0"));
        assert_eq!(parts[1].1, "echo two");
        assert!(parts[2].1.contains("apiServerEndpoint"));
    }

    #[test]
    fn bottlerocket_settings_override_only_owned_keys() {
        let c = cluster();
        let l = labels();
        let taints = vec![
            Taint::new("dedicated", "gpu", Effect::NoSchedule),
            Taint::new("dedicated", "gpu", Effect::NoExecute),
        ];
        let custom = "[settings.kubernetes]\ncluster-name = \"wrong\"\nimage-gc-high-threshold-percent = 85\n\n[settings.host-containers.admin]\nenabled = true\n";
        let ud = render(
            AmiFamily::Bottlerocket,
            &NodeBootstrap {
                cluster: &c,
                labels: &l,
                taints: &taints,
                kubelet: Some(&KubeletConfiguration {
                    max_pods: Some(58),
                    ..Default::default()
                }),
                custom: Some(custom),
                instance_store_raid0: false,
            },
        );
        assert!(!ud.contains("wrong"), "{ud}");
        assert!(ud.contains("cluster-name = \"prod\""), "{ud}");
        assert!(ud.contains("image-gc-high-threshold-percent = 85"), "{ud}");
        assert!(ud.contains("[settings.host-containers.admin]\nenabled = true"));
        assert!(ud.contains("max-pods = 58"));
        assert!(ud.contains("[settings.kubernetes.node-labels]\n\"joiner.dev/nodepool\" = \"general\"\n\"team\" = \"platform\""), "{ud}");
        assert!(
            ud.contains("\"dedicated\" = [\"gpu:NoSchedule\", \"gpu:NoExecute\"]"),
            "{ud}"
        );
        assert_eq!(ud.matches("[settings.kubernetes]").count(), 1, "{ud}");
    }

    #[test]
    fn bottlerocket_carries_the_reservations_and_eviction_settings() {
        let c = cluster();
        let l = labels();
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let kubelet = KubeletConfiguration {
            system_reserved: map(&[("cpu", "100m"), ("memory", "200Mi")]),
            kube_reserved: map(&[("memory", "1Gi")]),
            eviction_hard: map(&[("memory.available", "5%")]),
            eviction_soft: map(&[("nodefs.available", "15%")]),
            eviction_soft_grace_period: map(&[("nodefs.available", "1m")]),
            eviction_max_pod_grace_period: Some(60),
            ..Default::default()
        };
        let ud = render(
            AmiFamily::Bottlerocket,
            &NodeBootstrap {
                cluster: &c,
                labels: &l,
                taints: &[],
                kubelet: Some(&kubelet),
                custom: Some("[settings.kubernetes.kube-reserved]\ncpu = \"1\"\n"),
                instance_store_raid0: false,
            },
        );
        for table in [
            "[settings.kubernetes.system-reserved]\n\"cpu\" = \"100m\"\n\"memory\" = \"200Mi\"",
            "[settings.kubernetes.eviction-hard]\n\"memory.available\" = \"5%\"",
            "[settings.kubernetes.eviction-soft]\n\"nodefs.available\" = \"15%\"",
            "[settings.kubernetes.eviction-soft-grace-period]\n\"nodefs.available\" = \"1m\"",
        ] {
            assert!(ud.contains(table), "{table} in {ud}");
        }
        // The user's key we do not set survives in the table we also write.
        assert!(
            ud.contains("[settings.kubernetes.kube-reserved]\ncpu = \"1\"\n\"memory\" = \"1Gi\""),
            "{ud}"
        );
        assert!(ud.contains("eviction-max-pod-grace-period = 60"), "{ud}");
    }

    #[test]
    fn raid0_mounts_the_instance_store_in_either_family() {
        let (c, l) = (cluster(), labels());
        let node = |raid0| NodeBootstrap {
            cluster: &c,
            labels: &l,
            taints: &[],
            kubelet: None,
            custom: None,
            instance_store_raid0: raid0,
        };
        let al = render(AmiFamily::Al2023, &node(true));
        assert!(
            al.contains("instance:\n    localStorage:\n      strategy: RAID0"),
            "{al}"
        );
        assert!(!render(AmiFamily::Al2023, &node(false)).contains("localStorage"));
        let br = render(AmiFamily::Bottlerocket, &node(true));
        for line in [
            "[settings.bootstrap-commands.000-mount-instance-storage]",
            "commands = [[\"apiclient\", \"ephemeral-storage\", \"init\"], [\"apiclient\", \"ephemeral-storage\", \"bind\", \"--dirs\", \"/var/lib/containerd\", \"/var/lib/kubelet\", \"/var/log/pods\"]]",
            "essential = true",
            "mode = \"always\"",
        ] {
            assert!(br.lines().any(|l| l == line), "{line} in {br}");
        }
        assert!(!render(AmiFamily::Bottlerocket, &node(false)).contains("bootstrap-commands"));
    }
}
