//! AMIs from a NodeClass's `amiSelectorTerms`: an explicit ID, tags/name/owner through
//! DescribeImages (newest per architecture), or an alias (`al2023@latest`,
//! `bottlerocket@latest`, `al2023@v20240807`, `bottlerocket@v1.20.0`) through the public
//! SSM parameters EKS and Bottlerocket publish for each Kubernetes minor version. Each
//! architecture gets its own image, so arm64 instance types are only offered when an arm64
//! image exists.
//!
//! An alias resolves to a variant per kind of instance type, as Karpenter's
//! `amifamily/al2023.go` and `bottlerocket.go` do: GPU types launch from the image with the
//! NVIDIA driver, Inferentia and Trainium types from the one with the Neuron driver, the
//! rest from the standard image ([`alias_parameters`]). A type no resolved image serves is
//! not offered ([`ResolvedAmis::image_for`]); a parameter AWS does not publish (a variant
//! missing for a version) leaves its types out rather than failing the alias.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

use super::aws::CloudResultExt;
use super::ec2::Ec2Cloud;
pub use super::records::{AmiVariant, ResolvedAmis, ResolvedImage};
use super::user_data::AmiFamily;
use super::CloudError;
use crate::api::node_class::AmiSelectorTerm;
use crate::api::NodeClass;

/// One public parameter an alias reads: its name, the architecture of the image it holds,
/// and the kinds of instance type that image is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasParameter {
    pub name: String,
    pub arch: String,
    pub variants: Vec<AmiVariant>,
}

/// The SSM parameters holding an alias's images, in order of preference.
///
/// - AL2023 (`al2023.go`; EKS user guide, "Retrieve recommended Amazon Linux AMI IDs"):
///   `/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/<variant>/recommended/image_id`
///   (or `.../<variant>/amazon-eks-node-al2023-<arch>-<variant>-<k8s>-<version>/image_id`
///   for a pinned version), `standard` and `nvidia` for x86_64 and arm64, `neuron` for
///   x86_64 only.
/// - Bottlerocket (`bottlerocket.go`): `/aws/service/bottlerocket/aws-k8s-<k8s>/<arch>/<version>/image_id`
///   for standard types, whose x86_64 image also carries the Neuron driver, and
///   `aws-k8s-<k8s>-nvidia` for GPU types on both architectures.
pub fn alias_parameters(alias: &str, k8s_version: &str) -> Result<Vec<AliasParameter>, String> {
    use AmiVariant::{Neuron, Nvidia, Standard};
    let (family, version) = alias.split_once('@').unwrap_or((alias, "latest"));
    let p = |name: String, arch: &str, variants: &[AmiVariant]| AliasParameter {
        name,
        arch: arch.into(),
        variants: variants.to_vec(),
    };
    match family {
        "al2023" => {
            let path = |arch: &str, variant: AmiVariant| {
                let v = variant.as_str();
                let leaf = if version == "latest" {
                    "recommended".to_string()
                } else {
                    format!("amazon-eks-node-al2023-{arch}-{v}-{k8s_version}-{version}")
                };
                format!(
                    "/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/{v}/{leaf}/image_id"
                )
            };
            Ok([
                ("x86_64", Standard),
                ("arm64", Standard),
                ("x86_64", Nvidia),
                ("arm64", Nvidia),
                ("x86_64", Neuron),
            ]
            .into_iter()
            .map(|(arch, v)| p(path(arch, v), arch, &[v]))
            .collect())
        }
        "bottlerocket" => {
            let v = version.trim_start_matches('v');
            let path = |flavour: &str, arch: &str| {
                format!(
                    "/aws/service/bottlerocket/aws-k8s-{k8s_version}{flavour}/{arch}/{v}/image_id"
                )
            };
            Ok(vec![
                p(path("", "x86_64"), "x86_64", &[Standard, Neuron]),
                p(path("", "arm64"), "arm64", &[Standard]),
                p(path("-nvidia", "x86_64"), "x86_64", &[Nvidia]),
                p(path("-nvidia", "arm64"), "arm64", &[Nvidia]),
            ])
        }
        other => Err(format!(
            "unsupported AMI alias family {other:?} (al2023 or bottlerocket)"
        )),
    }
}

fn family_of_alias(alias: &str) -> AmiFamily {
    if alias.starts_with("bottlerocket") {
        AmiFamily::Bottlerocket
    } else {
        AmiFamily::Al2023
    }
}

impl Ec2Cloud {
    /// Resolves the NodeClass's AMI terms. Fails with a clear error when no image is found.
    pub async fn amis_for(&self, node_class: &NodeClass) -> Result<ResolvedAmis, CloudError> {
        let terms = &node_class.spec.ami_selector_terms;
        let key = serde_json::to_string(terms).unwrap_or_default();
        if let Some(a) = self.fresh(&self.amis, &key) {
            return Ok(a);
        }
        let mut out = ResolvedAmis {
            family: AmiFamily::Al2023,
            images: Vec::new(),
        };
        // Newest creation date per architecture across the non-alias terms.
        let mut newest: BTreeMap<String, (String, String)> = BTreeMap::new();
        for term in terms {
            if let Some(alias) = &term.alias {
                out.family = family_of_alias(alias);
                self.resolve_alias(alias, &mut out).await?;
                continue;
            }
            for (arch, id, created, name) in self.describe_images(term).await? {
                if name.to_ascii_lowercase().contains("bottlerocket") {
                    out.family = AmiFamily::Bottlerocket;
                }
                let e = newest.entry(arch).or_insert((String::new(), String::new()));
                if created >= e.0 {
                    *e = (created, id);
                }
            }
        }
        // An alias is the only term (validation), so these are the terms' own images,
        // each serving every type of its architecture.
        for (arch, (_, id)) in newest {
            out.images.push(ResolvedImage {
                id,
                arch,
                variants: None,
            });
        }
        if out.images.is_empty() {
            return Err(CloudError::new(
                "ec2:DescribeImages",
                "NoImageFound",
                format!(
                    "NodeClass {}: no AMI matches its amiSelectorTerms {} (a name term without owner searches only this account's and Amazon's images: set owner for another account's)",
                    node_class.metadata.name.as_deref().unwrap_or(""),
                    key
                ),
            ));
        }
        self.remember(&self.amis, &key, out.clone());
        Ok(out)
    }

    async fn resolve_alias(&self, alias: &str, out: &mut ResolvedAmis) -> Result<(), CloudError> {
        let version = self.cluster_info().await?.version;
        let parameters = alias_parameters(alias, &version)
            .map_err(|m| CloudError::new("ssm:GetParameter", "InvalidAlias", m))?;
        let mut missing = Vec::new();
        for parameter in parameters {
            let name = match parameter.name.strip_prefix("/aws/service") {
                Some(rest) => format!("{}{rest}", self.options.public_parameter_root),
                None => parameter.name,
            };
            let id = match self
                .ssm
                .get_parameter()
                .name(&name)
                .send()
                .await
                .cloud("ssm:GetParameter")
            {
                Ok(p) => match p.parameter().and_then(|p| p.value()) {
                    Some(v) => v.to_string(),
                    None => continue,
                },
                // Not every variant is published for every version and architecture.
                Err(e) if e.is_not_found() => {
                    missing.push(name);
                    continue;
                }
                Err(e) => return Err(e),
            };
            match out
                .images
                .iter_mut()
                .find(|i| i.id == id && i.arch == parameter.arch)
            {
                Some(known) => {
                    let variants = known.variants.get_or_insert_with(Vec::new);
                    for v in parameter.variants {
                        if !variants.contains(&v) {
                            variants.push(v);
                        }
                    }
                }
                None => out.images.push(ResolvedImage {
                    id,
                    arch: parameter.arch,
                    variants: Some(parameter.variants),
                }),
            }
        }
        if out.images.is_empty() {
            return Err(CloudError::new(
                "ssm:GetParameter",
                "ParameterNotFound",
                format!(
                    "AMI alias {alias}: none of the public parameters exist: {}",
                    missing.join(", ")
                ),
            ));
        }
        if !missing.is_empty() {
            tracing::debug!(alias, missing = %missing.join(", "), "AMI alias: parameters not published; their instance types are not offered");
        }
        Ok(())
    }

    /// (architecture, image ID, creation date, name) for the images one term selects.
    async fn describe_images(
        &self,
        term: &AmiSelectorTerm,
    ) -> Result<Vec<(String, String, String, String)>, CloudError> {
        let mut req = self.ec2.describe_images();
        if let Some(id) = &term.id {
            req = req.image_ids(id);
        } else if term.name.is_none() && term.tags.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(name) = &term.name {
            req = req.filters(Filter::builder().name("name").values(name).build());
        }
        for owner in owners(term) {
            req = req.owners(owner);
        }
        for (k, v) in &term.tags {
            let f = if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            };
            req = req.filters(f);
        }
        let out = req.send().await.cloud("ec2:DescribeImages")?;
        Ok(out
            .images()
            .iter()
            .filter(|i| i.state().is_none_or(|s| s.as_str() == "available"))
            .filter_map(|i| {
                Some((
                    i.architecture()?.as_str().to_string(),
                    i.image_id()?.to_string(),
                    i.creation_date().unwrap_or_default().to_string(),
                    i.name().unwrap_or_default().to_string(),
                ))
            })
            .collect())
    }
}

/// The owners a DescribeImages for `term` is limited to. A name term without an owner
/// searches this account's and Amazon's images only, as Karpenter's does
/// (`pkg/providers/amifamily/ami.go`): any account may publish a public image under any
/// name, so the newest image of a name among all public images may be anyone's, and nodes
/// would boot it with the node role. Tags are seen only by the account that set them (EC2
/// user guide, "Share an AMI with specific AWS accounts": tags on a shared AMI are available
/// only to the owner's account), and an ID names one image, so those terms get no default, as in
/// Karpenter.
fn owners(term: &AmiSelectorTerm) -> Vec<&str> {
    match (&term.owner, &term.name) {
        (Some(owner), _) => vec![owner.as_str()],
        (None, Some(_)) if term.id.is_none() => vec!["self", "amazon"],
        (None, _) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_term_without_an_owner_searches_self_and_amazon_only() {
        let term =
            |name: Option<&str>, owner: Option<&str>, tags: &[(&str, &str)]| AmiSelectorTerm {
                name: name.map(str::to_string),
                owner: owner.map(str::to_string),
                tags: tags
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            };
        assert_eq!(owners(&term(Some("eks-*"), None, &[])), ["self", "amazon"]);
        assert_eq!(
            owners(&term(Some("eks-*"), Some("123456789012"), &[])),
            ["123456789012"]
        );
        assert!(owners(&term(None, None, &[("team", "a")])).is_empty());
        assert_eq!(
            owners(&term(None, Some("self"), &[("team", "a")])),
            ["self"]
        );
    }

    fn names(alias: &str, k8s: &str) -> Vec<(String, String, Vec<AmiVariant>)> {
        alias_parameters(alias, k8s)
            .unwrap()
            .into_iter()
            .map(|p| (p.name, p.arch, p.variants))
            .collect()
    }

    #[test]
    fn alias_parameters_name_every_variant() {
        use AmiVariant::{Neuron, Nvidia, Standard};
        let root = "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023";
        assert_eq!(
            names("al2023@latest", "1.33"),
            [
                (
                    format!("{root}/x86_64/standard/recommended/image_id"),
                    "x86_64".into(),
                    vec![Standard]
                ),
                (
                    format!("{root}/arm64/standard/recommended/image_id"),
                    "arm64".into(),
                    vec![Standard]
                ),
                (
                    format!("{root}/x86_64/nvidia/recommended/image_id"),
                    "x86_64".into(),
                    vec![Nvidia]
                ),
                (
                    format!("{root}/arm64/nvidia/recommended/image_id"),
                    "arm64".into(),
                    vec![Nvidia]
                ),
                (
                    format!("{root}/x86_64/neuron/recommended/image_id"),
                    "x86_64".into(),
                    vec![Neuron]
                ),
            ]
        );
        let pinned = names("al2023@v20240807", "1.30");
        assert!(pinned[0].0.ends_with(
            "/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.30-v20240807/image_id"
        ));
        assert!(pinned[4].0.ends_with(
            "/x86_64/neuron/amazon-eks-node-al2023-x86_64-neuron-1.30-v20240807/image_id"
        ));
        let br = "/aws/service/bottlerocket";
        assert_eq!(
            names("bottlerocket@latest", "1.33"),
            [
                (
                    format!("{br}/aws-k8s-1.33/x86_64/latest/image_id"),
                    "x86_64".into(),
                    vec![Standard, Neuron]
                ),
                (
                    format!("{br}/aws-k8s-1.33/arm64/latest/image_id"),
                    "arm64".into(),
                    vec![Standard]
                ),
                (
                    format!("{br}/aws-k8s-1.33-nvidia/x86_64/latest/image_id"),
                    "x86_64".into(),
                    vec![Nvidia]
                ),
                (
                    format!("{br}/aws-k8s-1.33-nvidia/arm64/latest/image_id"),
                    "arm64".into(),
                    vec![Nvidia]
                ),
            ]
        );
        assert_eq!(
            names("bottlerocket@v1.20.0", "1.33")[0].0,
            format!("{br}/aws-k8s-1.33/x86_64/1.20.0/image_id")
        );
        assert!(alias_parameters("windows2022@latest", "1.33").is_err());
    }
}
