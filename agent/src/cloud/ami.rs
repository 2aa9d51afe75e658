//! AMIs from a NodeClass's `amiSelectorTerms`: an explicit ID, tags/name/owner through
//! DescribeImages (newest per architecture), or an alias (`al2023@latest`,
//! `bottlerocket@latest`, `al2023@v20240807`, `bottlerocket@v1.20.0`) through the public
//! SSM parameters EKS and Bottlerocket publish for each Kubernetes minor version. Each
//! architecture gets its own image, so arm64 instance types are only offered when an arm64
//! image exists.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

use super::aws::CloudResultExt;
use super::ec2::Ec2Cloud;
pub use super::records::ResolvedAmis;
use super::user_data::AmiFamily;
use super::CloudError;
use crate::api::node_class::AmiSelectorTerm;
use crate::api::NodeClass;

/// The SSM parameter holding an alias's image ID, for an EC2 architecture.
pub fn alias_parameter(alias: &str, k8s_version: &str, arch: &str) -> Result<String, String> {
    let (family, version) = alias.split_once('@').unwrap_or((alias, "latest"));
    match family {
        "al2023" => {
            let leaf = if version == "latest" {
                "recommended".to_string()
            } else {
                format!("amazon-eks-node-al2023-{arch}-standard-{k8s_version}-{version}")
            };
            Ok(format!(
                "/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/standard/{leaf}/image_id"
            ))
        }
        "bottlerocket" => {
            let v = version.trim_start_matches('v');
            Ok(format!(
                "/aws/service/bottlerocket/aws-k8s-{k8s_version}/{arch}/{v}/image_id"
            ))
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
            images: BTreeMap::new(),
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
        for (arch, (_, id)) in newest {
            out.images.entry(arch).or_insert(id);
        }
        if out.images.is_empty() {
            return Err(CloudError::new(
                "ec2:DescribeImages",
                "NoImageFound",
                format!(
                    "NodeClass {}: no AMI matches its amiSelectorTerms {}",
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
        let mut missing = Vec::new();
        for arch in ["x86_64", "arm64"] {
            let name = alias_parameter(alias, &version, arch)
                .map_err(|m| CloudError::new("ssm:GetParameter", "InvalidAlias", m))?;
            let name = match name.strip_prefix("/aws/service") {
                Some(rest) => format!("{}{rest}", self.options.public_parameter_root),
                None => name,
            };
            match self
                .ssm
                .get_parameter()
                .name(&name)
                .send()
                .await
                .cloud("ssm:GetParameter")
            {
                Ok(p) => {
                    if let Some(v) = p.parameter().and_then(|p| p.value()) {
                        out.images.insert(arch.to_string(), v.to_string());
                    }
                }
                Err(e) if e.is_not_found() => missing.push(name),
                Err(e) => return Err(e),
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
        if let Some(owner) = &term.owner {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_parameters() {
        assert_eq!(
            alias_parameter("al2023@latest", "1.33", "x86_64").unwrap(),
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
        assert_eq!(
            alias_parameter("bottlerocket@latest", "1.33", "arm64").unwrap(),
            "/aws/service/bottlerocket/aws-k8s-1.33/arm64/latest/image_id"
        );
        assert_eq!(
            alias_parameter("bottlerocket@v1.20.0", "1.33", "x86_64").unwrap(),
            "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/1.20.0/image_id"
        );
        assert!(alias_parameter("al2023@v20240807", "1.30", "x86_64")
            .unwrap()
            .contains("/amazon-eks-node-al2023-x86_64-standard-1.30-v20240807/"));
        assert!(alias_parameter("windows2022@latest", "1.33", "x86_64").is_err());
    }
}
