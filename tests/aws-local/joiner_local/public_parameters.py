"""The public SSM parameters of EKS node images, where AWS publishes them.

AWS publishes the image id of every EKS-optimized AMI as a public parameter that any
account reads with `ssm:GetParameter`, e.g.
`/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id`
and `/aws/service/bottlerocket/aws-k8s-1.33/arm64/latest/image_id`; a NodeClass's AMI alias
(`al2023@latest`, `bottlerocket@latest`) resolves through them. moto serves a few public
trees (Amazon Linux, ECS) but not these, and refuses `PutParameter` under `/aws/` (as AWS
does), so nothing could put them there. This module serves them from moto's own parameter
store, loaded lazily per account and region the first time a name under either tree is
read, as moto loads its other public trees: for Kubernetes 1.23 to 1.40, each architecture
pointing at moto's built-in `al2022-ami-*` image of that architecture (an image that exists
in the emulator, so a launch from it succeeds). An agent therefore reads the real names,
with the rights a real account needs (`parameter/aws/service/*`).
"""

from __future__ import annotations

from typing import Any

TREES = ("/aws/service/eks/optimized-ami", "/aws/service/bottlerocket")
VERSIONS = [f"1.{minor}" for minor in range(23, 41)]
_FLAG = "_joiner_eks_images_loaded"


def names(version: str, arch: str) -> list[str]:
    return [
        f"/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/{arch}/standard/recommended/image_id",
        f"/aws/service/bottlerocket/aws-k8s-{version}/{arch}/latest/image_id",
    ]


def _images(account_id: str, region: str) -> dict[str, str]:
    """The lowest-id built-in al2022 image per architecture (a stable choice)."""
    from moto.ec2.models import ec2_backends

    by_arch: dict[str, str] = {}
    for ami in ec2_backends[account_id][region].amis.values():
        if not str(ami.name or "").startswith("al2022-ami-"):
            continue
        arch = ami.architecture
        if arch not in by_arch or ami.id < by_arch[arch]:
            by_arch[arch] = ami.id
    return by_arch


def _load(params: Any) -> None:
    from moto.core.utils import utcnow
    from moto.ssm.models import Parameter

    for arch, image in _images(params.account_id, params.region_name).items():
        for version in VERSIONS:
            for name in names(version, arch):
                versions = dict.setdefault(params, name, [])
                if versions:
                    continue
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


def install() -> None:
    from moto.ssm.models import ParameterDict

    original = ParameterDict._check_loading_status

    def check_loading_status(self: Any, key: str) -> None:
        original(self, key)
        if str(key or "").startswith(TREES) and not getattr(self, _FLAG, False):
            setattr(self, _FLAG, True)
            _load(self)

    ParameterDict._check_loading_status = check_loading_status  # type: ignore[method-assign]
