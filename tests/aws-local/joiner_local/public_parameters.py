"""The public SSM parameters of EKS node images, where AWS publishes them.

AWS publishes the image id of every EKS-optimized AMI as a public parameter that any
account reads with `ssm:GetParameter`, e.g.
`/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id`
and `/aws/service/bottlerocket/aws-k8s-1.33/arm64/latest/image_id`; a NodeClass's AMI alias
(`al2023@latest`, `bottlerocket@latest`) resolves through them. moto serves a few public
trees (Amazon Linux, ECS) but not these, and refuses `PutParameter` under `/aws/` (as AWS
does), so nothing could put them there. This module serves them from moto's own parameter
store, loaded lazily per account, region and Kubernetes version (1.23 to 1.40) the first
time a name under either tree is read, as moto loads its other public trees. An agent
therefore reads the real names, with the rights a real account needs
(`parameter/aws/service/*`).

Which images they name, per version and architecture (EKS user guide, "Use EKS-optimized
accelerated AMIs for GPU instances" and "Retrieve recommended Amazon Linux AMI IDs"):

- AL2023 `standard`: moto's built-in `al2022-ami-*` image of that architecture, an image
  with no accelerator driver (so a launch from it succeeds, and a node booted from it has
  no GPU or Neuron device to advertise);
- AL2023 `nvidia` (x86_64, arm64) and `neuron` (x86_64 only): images registered here,
  named as EKS names them (`amazon-eks-node-al2023-<arch>-<variant>-<k8s>-v<date>`);
- Bottlerocket `aws-k8s-<k8s>` and `aws-k8s-<k8s>-nvidia` (x86_64, arm64): images
  registered here, named as Bottlerocket names them
  (`bottlerocket-aws-k8s-<k8s>[-nvidia]-<x86_64|aarch64>-v<version>-<commit>`). The
  standard x86_64 one carries the Neuron driver, as Bottlerocket's does.

The images registered here are public, owned by Amazon, and their names and descriptions
say which driver they carry: kube-sim's bridge reads the name of the image an instance
booted from to decide which devices its node advertises, as only a node whose image has the
driver runs a device plugin that finds the devices.

Each of them also has a lookalike: a public image of the same name and architecture, owned
by another account and created a day later. Any account may make an image public under any
name (EC2 user guide, "Understand shared AMI usage": "You can't verify the source of a
shared AMI", and "Make your AMI publicly available"), and DescribeImages without `Owners`
returns every public image. A client that picks the newest image by name alone boots the
lookalike: the local world serves it so that such a client is caught.
"""

from __future__ import annotations

import re
from typing import Any

TREES = ("/aws/service/eks/optimized-ami", "/aws/service/bottlerocket")
VERSIONS = [f"1.{minor}" for minor in range(23, 41)]
_LOADED = "_joiner_eks_versions_loaded"
_VERSION = re.compile(
    r"^/aws/service/(?:eks/optimized-ami/(1\.\d+)/|bottlerocket/aws-k8s-(1\.\d+)(?:-nvidia)?/)"
)
# The release the local images stand for (any fixed one: nothing reads it back).
_AL2023_RELEASE = "v20250715"
_BOTTLEROCKET_RELEASE = "v1.42.0-8b3b6b47"
# The account that publishes the lookalikes (not Amazon's, not the caller's).
LOOKALIKE_OWNER = "210987654321"


def standard(version: str, arch: str) -> str:
    """The AL2023 standard parameter of a version and architecture."""
    return f"/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/{arch}/standard/recommended/image_id"


def registered(version: str) -> list[tuple[str, str, str, str]]:
    """(parameter, architecture, image name, description) of the images registered here."""
    out = []
    for arch, variant, driver in [
        ("x86_64", "nvidia", "NVIDIA"),
        ("arm64", "nvidia", "NVIDIA"),
        ("x86_64", "neuron", "Neuron"),
    ]:
        out.append(
            (
                f"/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/{arch}/{variant}/recommended/image_id",
                arch,
                f"amazon-eks-node-al2023-{arch}-{variant}-{version}-{_AL2023_RELEASE}",
                f"EKS-optimized Kubernetes node based on Amazon Linux 2023, accelerated: "
                f"{driver} driver (k8s: {version})",
            )
        )
    for arch, machine in [("x86_64", "x86_64"), ("arm64", "aarch64")]:
        for flavour, what in [("", "standard"), ("-nvidia", "NVIDIA driver")]:
            if flavour == "" and arch == "x86_64":
                what = "standard, with the Neuron driver"
            out.append(
                (
                    f"/aws/service/bottlerocket/aws-k8s-{version}{flavour}/{arch}/latest/image_id",
                    arch,
                    f"bottlerocket-aws-k8s-{version}{flavour}-{machine}-{_BOTTLEROCKET_RELEASE}",
                    f"Bottlerocket aws-k8s-{version}{flavour} ({what})",
                )
            )
    return out


def _builtin_images(ec2: Any) -> dict[str, Any]:
    """The lowest-id built-in al2022 image per architecture (a stable choice)."""
    by_arch: dict[str, Any] = {}
    for ami in ec2.amis.values():
        if not str(ami.name or "").startswith("al2022-ami-"):
            continue
        arch = ami.architecture
        if arch not in by_arch or ami.id < by_arch[arch].id:
            by_arch[arch] = ami
    return by_arch


def _register(ec2: Any, name: str, arch: str, description: str, owner: str) -> str:
    """A public Amazon image named `name` (the one already registered, if any)."""
    from moto.ec2.models.amis import Ami
    from moto.ec2.utils import random_ami_id

    for ami in ec2.amis.values():
        if ami.name == name and ami.owner_id == owner:
            return ami.id
    ami = Ami(
        ec2,
        ami_id=random_ami_id(),
        name=name,
        description=description,
        owner_id=owner,
        owner_alias="amazon",
        public=True,
        virtualization_type="hvm",
        architecture=arch,
        root_device_type="ebs",
        root_device_name="/dev/xvda",
        hypervisor="xen",
    )
    ec2.amis[ami.id] = ami
    _lookalike(ec2, ami)
    return ami.id


def _lookalike(ec2: Any, original: Any) -> None:
    """Another account's public image with `original`'s name, created a day after it."""
    from datetime import timedelta

    from moto.ec2.models.amis import Ami
    from moto.ec2.utils import random_ami_id

    copy = Ami(
        ec2,
        ami_id=random_ami_id(),
        name=original.name,
        description=original.description,
        owner_id=LOOKALIKE_OWNER,
        public=True,
        virtualization_type="hvm",
        architecture=original.architecture,
        creation_date=original.creation_date + timedelta(days=1),
        root_device_type="ebs",
        root_device_name="/dev/xvda",
        hypervisor="xen",
    )
    ec2.amis[copy.id] = copy


def _put(params: Any, name: str, image: str) -> None:
    from moto.core.utils import utcnow
    from moto.ssm.models import Parameter

    versions = dict.setdefault(params, name, [])
    if versions:
        return
    versions.append(
        Parameter(
            account_id=params.account_id,
            name=name,
            value=image,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=utcnow(),
            version=1,
            data_type="aws:ec2:image",
        )
    )


def _load(params: Any, version: str) -> None:
    from moto.ec2.models import ec2_backends

    ec2 = ec2_backends[params.account_id][params.region_name]
    builtin = _builtin_images(ec2)
    for arch, ami in builtin.items():
        _put(params, standard(version, arch), ami.id)
    owner = next((a.owner_id for a in builtin.values()), params.account_id)
    for name, arch, image_name, description in registered(version):
        _put(params, name, _register(ec2, image_name, arch, description, owner))


def install() -> None:
    from moto.ssm.models import ParameterDict

    original = ParameterDict._check_loading_status

    def check_loading_status(self: Any, key: str) -> None:
        original(self, key)
        key = str(key or "")
        if not key.startswith(TREES):
            return
        loaded = getattr(self, _LOADED, None)
        if loaded is None:
            loaded = set()
            setattr(self, _LOADED, loaded)
        # A parameter names its version: load that one. A path above the versions (a
        # GetParametersByPath of a whole tree) loads them all.
        m = _VERSION.match(key)
        wanted = [m.group(1) or m.group(2)] if m else VERSIONS
        for version in wanted:
            if version in VERSIONS and version not in loaded:
                loaded.add(version)
                _load(self, version)

    ParameterDict._check_loading_status = check_loading_status  # type: ignore[method-assign]
