"""Instances an EC2 Fleet launches from a launch template are in the template's security groups.

moto 5.2.5 builds a fleet's launch specifications from the template data's `GroupSet`, a key
launch templates do not have: a template names its groups in `SecurityGroupIds` (or
`SecurityGroups`), or in `NetworkInterfaces[].Groups` when it describes the interfaces
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_RequestLaunchTemplateData.html).
The instances then landed in the VPC's default group whatever the NodeClass selected, and
nothing could judge a node's network. Here each launch specification without groups takes
the template's, so DescribeInstances reports the groups the agent chose, as EC2 does.
"""

from __future__ import annotations

from typing import Any


def template_groups(data: dict[str, Any]) -> list[str]:
    """The security groups a launch template's data puts its instances in."""
    groups = list(data.get("SecurityGroupIds") or []) + list(data.get("SecurityGroups") or [])
    for nic in data.get("NetworkInterfaces") or []:
        if isinstance(nic, dict) and str(nic.get("DeviceIndex", "0")) == "0":
            groups += list(nic.get("Groups") or [])
    return groups


def _fill(fleet: Any) -> None:
    for spec in fleet.launch_specs:
        template = getattr(spec, "launch_template_spec", None) or {}
        if spec.group_set or not template.get("LaunchTemplateId"):
            continue
        lt = fleet.ec2_backend.get_launch_template(template["LaunchTemplateId"])
        version = template.get("Version") or lt.default_version_number
        spec.group_set = template_groups(lt.get_version(version).data)


def install() -> None:
    from moto.ec2.models.fleets import Fleet

    # An instant fleet launches from its constructor, through these two.
    create_on_demand = Fleet.create_on_demand_requests
    create_spot = Fleet.create_spot_requests

    def on_demand(self: Any, weight_to_add: float) -> Any:
        _fill(self)
        return create_on_demand(self, weight_to_add)

    def spot(self: Any, weight_to_add: float) -> Any:
        _fill(self)
        return create_spot(self, weight_to_add)

    Fleet.create_on_demand_requests = on_demand  # type: ignore[method-assign]
    Fleet.create_spot_requests = spot  # type: ignore[method-assign]
