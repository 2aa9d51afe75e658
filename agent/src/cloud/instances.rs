//! Finding and terminating the instances this cluster's agent launched, by their tags.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType};

use super::aws::CloudResultExt;
use super::ec2::Ec2Cloud;
use super::{CloudError, Instance, StateReason, TAG_CLUSTER, TAG_NODECLAIM, TAG_NODEPOOL};
use crate::catalog::CapacityType;

/// States of an instance that still exists (or is on its way to).
const LIVE_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];

fn to_instance(i: &aws_sdk_ec2::types::Instance) -> Option<Instance> {
    let id = i.instance_id()?.to_string();
    let zone = i
        .placement()
        .and_then(|p| p.availability_zone())
        .unwrap_or_default()
        .to_string();
    Some(Instance {
        provider_id: format!("aws:///{zone}/{id}"),
        instance_id: id,
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        zone,
        capacity_type: match i.instance_lifecycle() {
            Some(InstanceLifecycleType::Spot) => CapacityType::Spot,
            // Launched into a reservation it targeted (an instance that merely matched an
            // open reservation is on-demand, as Karpenter counts it).
            _ if i.capacity_reservation_id().is_some()
                && i
                    .capacity_reservation_specification()
                    .and_then(|s| s.capacity_reservation_preference())
                    == Some(&aws_sdk_ec2::types::CapacityReservationPreference::CapacityReservationsOnly) =>
            {
                CapacityType::Reserved
            }
            _ => CapacityType::OnDemand,
        },
        image_id: i.image_id().unwrap_or_default().to_string(),
        state: i
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_string())
            .unwrap_or_default(),
        tags: i
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
            .collect::<BTreeMap<_, _>>(),
        launch_time: i.launch_time().map(|t| t.secs()).unwrap_or(0),
    })
}

impl Ec2Cloud {
    async fn describe_tagged(
        &self,
        extra: Option<Filter>,
        states: &[&str],
    ) -> Result<Vec<Instance>, CloudError> {
        let mut req = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name(format!("tag:{TAG_CLUSTER}"))
                    .values(&self.options.cluster_name)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .set_values(Some(states.iter().map(|s| s.to_string()).collect()))
                    .build(),
            );
        if let Some(f) = extra {
            req = req.filters(f);
        }
        let mut out = Vec::new();
        let mut pages = req.into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.cloud("ec2:DescribeInstances")?;
            for r in page.reservations() {
                out.extend(r.instances().iter().filter_map(to_instance));
            }
        }
        out.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        Ok(out)
    }

    pub(crate) async fn cluster_instances(&self) -> Result<Vec<Instance>, CloudError> {
        self.describe_tagged(None, &LIVE_STATES).await
    }

    /// The NodeClaim's instance, unless it is already going away (then a new launch is
    /// right). The oldest wins if there were ever two.
    pub(crate) async fn nodeclaim_instance(
        &self,
        nodeclaim: &str,
    ) -> Result<Option<Instance>, CloudError> {
        let f = Filter::builder()
            .name(format!("tag:{TAG_NODECLAIM}"))
            .values(nodeclaim)
            .build();
        let mut found = self
            .describe_tagged(Some(f), &["pending", "running", "stopping", "stopped"])
            .await?;
        found.sort_by(|a, b| (a.launch_time, &a.instance_id).cmp(&(b.launch_time, &b.instance_id)));
        Ok(found.into_iter().next())
    }

    /// The instance's state reason, whatever its state (EC2 keeps a terminated instance
    /// visible for about an hour); None once EC2 no longer knows it or gives no reason.
    pub(crate) async fn instance_state_reason(
        &self,
        id: &str,
    ) -> Result<Option<StateReason>, CloudError> {
        let out = match self
            .ec2
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .cloud("ec2:DescribeInstances")
        {
            Ok(out) => out,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let reason = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find(|i| i.instance_id() == Some(id))
            .and_then(|i| i.state_reason())
            .and_then(|r| {
                let code = r.code().filter(|c| !c.is_empty())?;
                Some(StateReason {
                    code: code.to_string(),
                    message: r.message().unwrap_or_default().to_string(),
                })
            });
        Ok(reason)
    }

    /// Terminates instances; IDs EC2 no longer knows are skipped, not errors.
    pub(crate) async fn terminate_instances(&self, ids: &[String]) -> Result<(), CloudError> {
        if ids.is_empty() {
            return Ok(());
        }
        for chunk in ids.chunks(500) {
            match self.terminate_chunk(chunk).await {
                Ok(()) => {}
                // One unknown ID fails the whole call: go one by one.
                Err(e) if e.is_not_found() && chunk.len() > 1 => {
                    for id in chunk {
                        self.terminate_chunk(std::slice::from_ref(id))
                            .await
                            .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })?;
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The cluster, claim and pool tags on an adopted instance, in one CreateTags (the
    /// agent's policy allows exactly these keys on instances Karpenter launched for this
    /// cluster).
    pub(crate) async fn tag_adopted_instance(
        &self,
        id: &str,
        nodeclaim: &str,
        nodepool: &str,
    ) -> Result<(), CloudError> {
        let tag = |k: &str, v: &str| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build();
        self.ec2
            .create_tags()
            .resources(id)
            .tags(tag(TAG_CLUSTER, &self.options.cluster_name))
            .tags(tag(TAG_NODECLAIM, nodeclaim))
            .tags(tag(TAG_NODEPOOL, nodepool))
            .send()
            .await
            .cloud("ec2:CreateTags")
            .map(|_| ())
    }

    async fn terminate_chunk(&self, ids: &[String]) -> Result<(), CloudError> {
        self.ec2
            .terminate_instances()
            .set_instance_ids(Some(ids.to_vec()))
            .send()
            .await
            .cloud("ec2:TerminateInstances")
            .map(|_| ())
    }
}
