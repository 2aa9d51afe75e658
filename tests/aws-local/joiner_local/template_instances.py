"""Instances an EC2 Fleet launches from a launch template carry the template's tags and disks.

EC2 tags every instance launched from a launch template with `aws:ec2launchtemplate:id` and
`aws:ec2launchtemplate:version` (EC2 user guide, "Launch EC2 instances using a launch
template"), and gives it the EBS volumes of the template's `BlockDeviceMappings`. moto 5.2.5
does both for RunInstances with a template but neither for CreateFleet, which launches
through RunInstances without the template: its instances carry no trace of the template and
only moto's default 8 GiB `/dev/sda1`. Here a fleet's instances get the two tags and the
template version's volumes, so DescribeInstances (and the kubelet bridge, which sizes a
node's ephemeral storage from the template the instance names) sees what EC2 would show.
"""

from __future__ import annotations

from typing import Any


def _mark(backend: Any, instance: Any, launch_spec: Any) -> None:
    template = getattr(launch_spec, "launch_template_spec", None) or {}
    template_id = template.get("LaunchTemplateId")
    if not template_id or any(t.get("key") == "aws:ec2launchtemplate:id" for t in instance.get_tags()):
        return
    lt = backend.get_launch_template(template_id)
    # EC2 tags the version it resolved (a number), never `$Latest` or `$Default`.
    resolved = lt.get_version(str(template.get("Version") or lt.default_version_number))
    instance.add_tags({"aws:ec2launchtemplate:id": template_id, "aws:ec2launchtemplate:version": str(resolved.number)})
    data = resolved.data
    for mapping in data.get("BlockDeviceMappings") or []:
        ebs = mapping.get("Ebs") or {}
        device = mapping.get("DeviceName")
        if not device or "VolumeSize" not in ebs or device in instance.block_device_mapping:
            continue
        instance.add_block_device(
            int(ebs["VolumeSize"]),
            device,
            ebs.get("SnapshotId"),
            str(ebs.get("Encrypted", False)).lower() == "true",
            str(ebs.get("DeleteOnTermination", False)).lower() == "true",
            ebs.get("KmsKeyId"),
            ebs.get("VolumeType"),
        )


def install() -> None:
    from moto.ec2.models.fleets import Fleet

    create_on_demand = Fleet.create_on_demand_requests
    create_spot = Fleet.create_spot_requests

    def on_demand(self: Any, weight_to_add: float) -> Any:
        before = len(self.on_demand_instances)
        out = create_on_demand(self, weight_to_add)
        for launched in self.on_demand_instances[before:]:
            _mark(self.ec2_backend, launched["instance"], launched.get("launch_spec"))
        return out

    def spot(self: Any, weight_to_add: float) -> Any:
        before = len(self.spot_requests)
        out = create_spot(self, weight_to_add)
        for request in self.spot_requests[before:]:
            instance = getattr(request, "instance", None)
            if instance is not None:
                _mark(self.ec2_backend, instance, request.launch_spec)
        return out

    Fleet.create_on_demand_requests = on_demand  # type: ignore[method-assign]
    Fleet.create_spot_requests = spot  # type: ignore[method-assign]
