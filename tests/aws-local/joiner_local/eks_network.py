"""The cluster security group EKS creates, and the VPC configuration EKS reports.

moto 5.2.5 stores a cluster's `resourcesVpcConfig` as the request gave it: no
`clusterSecurityGroupId`, no `vpcId`, no endpoint-access defaults, and no security group in
EC2. On AWS every cluster gets one, and it is the group the control plane's network
interfaces and every Fargate pod (CoreDNS and the agent included) are in, so whether a node
can reach the API server and cluster DNS depends on it. Here, as EKS does
(https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html, "Default cluster
security group"):

- CreateCluster creates `eks-cluster-sg-<name>-<uniqueID>` in the cluster's VPC (the VPC of
  its subnets), with inbound all traffic from itself only and outbound all traffic, tagged
  `Name`, `kubernetes.io/cluster/<name> = owned` and `aws:eks:cluster-name = <name>`. The
  cluster's own tags are not copied to it.
- DescribeCluster reports it as `resourcesVpcConfig.clusterSecurityGroupId`, with `vpcId`
  and the API's documented defaults for what the request left out (the EKS API reference,
  VpcConfigRequest: `endpointPublicAccess` true, `endpointPrivateAccess` false,
  `publicAccessCidrs` 0.0.0.0/0, `securityGroupIds` none).
- UpdateClusterConfig changes only the fields it is given (moto replaces them all).
- DeleteCluster deletes the group with the cluster.

kube-sim's kubelet bridge reads these to decide whether a node reaches the API server
(`tests/kube-sim/src/network.rs`).
"""

from __future__ import annotations

import random
from typing import Any

from moto.ec2.models import ec2_backends
from moto.eks.models import EKSBackend

NAME_TAG = "aws:eks:cluster-name"


def _ec2(backend: EKSBackend) -> Any:
    return ec2_backends[backend.account_id][backend.region_name]


def _vpc_of(ec2: Any, subnet_ids: list[str]) -> str | None:
    for subnet_id in subnet_ids:
        for subnets in ec2.subnets.values():
            if subnet_id in subnets:
                return subnets[subnet_id].vpc_id
    return None


def _create_group(ec2: Any, cluster: str, vpc_id: str) -> str:
    unique = "".join(random.choice("0123456789") for _ in range(10))
    name = f"eks-cluster-sg-{cluster}-{unique}"
    group = ec2.create_security_group(
        name=name,
        description="EKS created security group applied to ENI that is attached to EKS Control "
        "Plane master nodes, as well as any managed workloads.",
        vpc_id=vpc_id,
        tags={
            "Name": name,
            f"kubernetes.io/cluster/{cluster}": "owned",
            NAME_TAG: cluster,
        },
    )
    # Inbound: all traffic from the group itself, and nothing else.
    ec2.authorize_security_group_ingress(
        group_name_or_id=group.id,
        ip_protocol="-1",
        from_port=None,
        to_port=None,
        ip_ranges=[],
        source_groups=[{"GroupId": group.id}],
        prefix_list_ids=[],
        security_rule_ids=None,
        vpc_id=vpc_id,
    )
    return group.id


def install() -> None:
    original_create = EKSBackend.create_cluster
    original_delete = EKSBackend.delete_cluster

    def create_cluster(self: EKSBackend, name: str, *args: Any, **kwargs: Any) -> Any:
        cluster = original_create(self, name, *args, **kwargs)
        config = cluster.resources_vpc_config = dict(cluster.resources_vpc_config or {})
        config.setdefault("securityGroupIds", [])
        config.setdefault("endpointPublicAccess", True)
        config.setdefault("endpointPrivateAccess", False)
        config.setdefault("publicAccessCidrs", ["0.0.0.0/0"])
        ec2 = _ec2(self)
        vpc_id = _vpc_of(ec2, list(config.get("subnetIds") or []))
        if vpc_id is not None:
            config["vpcId"] = vpc_id
            config["clusterSecurityGroupId"] = _create_group(ec2, name, vpc_id)
        return cluster

    def delete_cluster(self: EKSBackend, name: str) -> Any:
        cluster = original_delete(self, name)
        group_id = (cluster.resources_vpc_config or {}).get("clusterSecurityGroupId")
        if group_id:
            try:
                _ec2(self).delete_security_group(group_id=group_id)
            except Exception:  # noqa: BLE001  (a group still in use stays, as on EKS)
                pass
        return cluster

    original_update = EKSBackend.update_cluster_config

    def update_cluster_config(self: EKSBackend, name: str, resources_vpc_config: Any = None, *args: Any, **kwargs: Any) -> Any:
        # UpdateClusterConfig changes the fields it is given and keeps the rest (moto
        # replaces the whole configuration, losing the cluster security group).
        cluster = self.clusters.get(name)
        if cluster is not None and resources_vpc_config:
            resources_vpc_config = {**(cluster.resources_vpc_config or {}), **resources_vpc_config}
        return original_update(self, name, resources_vpc_config, *args, **kwargs)

    EKSBackend.create_cluster = create_cluster  # type: ignore[method-assign]
    EKSBackend.update_cluster_config = update_cluster_config  # type: ignore[method-assign]
    EKSBackend.delete_cluster = delete_cluster  # type: ignore[method-assign]
