//! The cluster's Fargate profiles, read with `eks:ListFargateProfiles` and
//! `eks:DescribeFargateProfile` (both scoped to this cluster in the agent's policy).

use super::aws::CloudResultExt;
use super::ec2::Ec2Cloud;
use super::CloudError;
use crate::fargate::{FargateProfile, FargateSelector};

impl Ec2Cloud {
    /// ACTIVE profiles only: one still CREATING admits no pod yet.
    pub(crate) async fn active_fargate_profiles(&self) -> Result<Vec<FargateProfile>, CloudError> {
        let cluster = &self.options.cluster_name;
        let mut names = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .eks
                .list_fargate_profiles()
                .cluster_name(cluster)
                .set_next_token(token.take())
                .send()
                .await
                .cloud("eks:ListFargateProfiles")?;
            names.extend(out.fargate_profile_names().iter().cloned());
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        let mut profiles = Vec::with_capacity(names.len());
        for name in names {
            let out = self
                .eks
                .describe_fargate_profile()
                .cluster_name(cluster)
                .fargate_profile_name(&name)
                .send()
                .await
                .cloud("eks:DescribeFargateProfile")?;
            let Some(p) = out.fargate_profile() else {
                continue;
            };
            if p.status()
                .is_some_and(|s| *s != aws_sdk_eks::types::FargateProfileStatus::Active)
            {
                continue;
            }
            profiles.push(FargateProfile {
                name,
                selectors: p
                    .selectors()
                    .iter()
                    .map(|s| FargateSelector {
                        namespace: s.namespace().unwrap_or_default().to_string(),
                        labels: s
                            .labels()
                            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                            .unwrap_or_default(),
                    })
                    .collect(),
            });
        }
        Ok(profiles)
    }
}
