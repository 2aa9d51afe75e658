"""Instances launched from a launch template carry its IAM instance profile, as on EC2.

moto 5.2.5 drops `IamInstanceProfile` from the launch template on both paths the agent and
the tests use: CreateFleet (on-demand and Spot) and RunInstances with a template. The
instance then reports no profile, so nothing can tell which role a node would authenticate
as, and the kubelet bridge could only trust tags. Here every instance launched through a
template (or a fleet's launch specification) gets the template's profile associated, exactly
as `AssociateIamInstanceProfile` would, so DescribeInstances shows `IamInstanceProfile.Arn`
and the profile names the role. A template naming a profile that does not exist fails the
launch, as EC2 refuses it (`InvalidParameterValue`: Value (...) for parameter
iamInstanceProfile.name is invalid).
"""

from __future__ import annotations

from typing import Any


def _profile_args(spec: Any) -> tuple[str | None, str | None]:
    if not isinstance(spec, dict):
        return None, None
    return spec.get("Name"), spec.get("Arn")


def _associate(backend: Any, instance: Any, spec: Any) -> None:
    name, arn = _profile_args(spec)
    if not (name or arn):
        return
    if instance.id in backend.iam_instance_profile_associations:
        return
    _check(backend, spec)
    backend.associate_iam_instance_profile(
        instance_id=instance.id,
        iam_instance_profile_name=None if arn else name,
        iam_instance_profile_arn=arn,
    )


def _check(backend: Any, spec: Any) -> None:
    """Refuses a profile that does not exist, before anything is launched."""
    from moto.ec2.utils import filter_iam_instance_profiles

    name, arn = _profile_args(spec)
    if not (name or arn):
        return
    try:
        ok = filter_iam_instance_profiles(
            backend.account_id,
            partition=backend.partition,
            iam_instance_profile_arn=arn,
            iam_instance_profile_name=name,
        )
    except Exception:  # moto raises IAM's NoSuchEntity for an unknown name
        ok = None
    if ok is None:
        _refuse(name or arn)


def _refuse(value: str | None) -> None:
    from moto.ec2.exceptions import EC2ClientError

    raise EC2ClientError(
        "InvalidParameterValue",
        f"Value ({value}) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name",
    )


def install() -> None:
    from moto.ec2.models import EC2Backend
    from moto.ec2.models.fleets import Fleet

    run_instances = EC2Backend.run_instances

    def run_with_template_profile(self: Any, *args: Any, **kwargs: Any) -> Any:
        explicit = kwargs.get("iam_instance_profile_name") or kwargs.get("iam_instance_profile_arn")
        spec = None
        if kwargs.get("launch_template") and not explicit:
            spec = self._get_template_from_args(kwargs["launch_template"]).data.get("IamInstanceProfile")
            _check(self, spec)
        reservation = run_instances(self, *args, **kwargs)
        if spec:
            for instance in reservation.instances:
                _associate(self, instance, spec)
        return reservation

    EC2Backend.run_instances = run_with_template_profile  # type: ignore[method-assign]

    create_on_demand = Fleet.create_on_demand_requests
    create_spot = Fleet.create_spot_requests

    def check_specs(fleet: Any) -> None:
        for launch_spec in fleet.launch_specs:
            _check(fleet.ec2_backend, getattr(launch_spec, "_iam_instance_profile_arn", None))

    def on_demand(self: Any, weight_to_add: float) -> None:
        check_specs(self)
        before = len(self.on_demand_instances)
        create_on_demand(self, weight_to_add)
        for launched in self.on_demand_instances[before:]:
            spec = getattr(launched["launch_spec"], "_iam_instance_profile_arn", None)
            _associate(self.ec2_backend, launched["instance"], spec)

    def spot(self: Any, weight_to_add: float) -> Any:
        check_specs(self)
        before = len(self.spot_requests)
        out = create_spot(self, weight_to_add)
        for request in self.spot_requests[before:]:
            instance = getattr(request, "instance", None)
            if instance is None:
                continue
            spec = getattr(request.launch_spec, "_iam_instance_profile_arn", None)
            _associate(self.ec2_backend, instance, spec)
        return out

    Fleet.create_on_demand_requests = on_demand  # type: ignore[method-assign]
    Fleet.create_spot_requests = spot  # type: ignore[method-assign]
