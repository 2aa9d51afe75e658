"""Encrypted EBS volumes at launch: encryption by default, and the launch that fails on its key.

EC2 does not refuse a launch whose volumes the caller may not encrypt. RunInstances (and each
launch of an instant CreateFleet) answers with the instance `pending`; EC2 then creates the
volumes, calling KMS on the caller's behalf, and when KMS refuses, the instance goes to
`terminated` with the state reason `Client.InternalError` / "Client.InternalError: Client
error on launch" (AWS re:Post knowledge center, "kms-iam-ec2-permission" and
"encrypted-volumes-stops-immediately"; Karpenter's troubleshooting guide, "Node terminates
before ready on failed encrypted EBS volume"). What EC2 asks of KMS for the caller (the EBS
user guide, "Requirements for Amazon EBS encryption", permissions for users) is
`kms:CreateGrant` (with `kms:GrantIsForAWSResource`), `kms:GenerateDataKeyWithoutPlaintext`,
`kms:Decrypt` and `kms:DescribeKey`, each with `kms:ViaService = ec2.<region>.amazonaws.com`
and `kms:CallerAccount` set as KMS sets them for a request a service makes. (`kms:ReEncrypt*`
is asked only when a snapshot encrypted under another key is re-encrypted; the local world's
images have unencrypted snapshots, so it is not asked here.) An AWS managed key
(`alias/aws/ebs`) is granted to the account's principals by its own key policy and needs
nothing of theirs. A key that does not exist fails the launch the same way (the EC2 API
reference on `KmsKeyId`: an identifier that is not valid makes the action "appear to
complete, but eventually fails").

moto 5.2.5 launches whatever the key, and ignores EBS encryption by default
(`EnableEbsEncryptionByDefault`): its volumes stay unencrypted. Here:

- with encryption by default on, every volume created is encrypted, with the account's EBS
  default key (`ModifyEbsDefaultKmsKeyId`, or the AWS managed key) unless one is given
  (EBS user guide, "Encryption by default");
- after RunInstances or CreateFleet, each instance launched whose volumes use a customer
  managed key the caller may not use (asked of `iam_enforce`, which evaluates the caller's
  identity policies; without enforcement every existing key is usable), or a key that does
  not exist, is terminated with EC2's state reason, moments after the answer (which still
  reports it pending, as EC2's does);
- terminating an instance already terminated leaves it as it was (moto 5.2.5 rewrote its
  state reason to "user initiated"), so the reason of a failed launch stays readable.

Key policies are not evaluated: a customer managed key is taken to have the default key
policy, which delegates to IAM.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable

FAILURE_CODE = "Client.InternalError"
FAILURE_MESSAGE = "Client.InternalError: Client error on launch"

# How long after the answer the failed instance is terminated: EC2 answers before it
# creates the volumes.
FAILURE_DELAY_SECONDS = 0.3

# Set on the response by `iam_enforce` when it authorizes a launch: `judge(key_arn)` is
# None when the caller may use the key through EC2, else the refused KMS action.
RESPONSE_JUDGE = "_joiner_ebs_key_judge"

Judge = Callable[[str], "str | None"]


def key_requests(region: str, account: str) -> list[tuple[str, dict[str, list[str]]]]:
    """The KMS requests EC2 makes for the caller to create a volume under a customer
    managed key, with the condition keys KMS sets on each."""
    via = {"kms:ViaService": [f"ec2.{region}.amazonaws.com"], "kms:CallerAccount": [account]}
    return [
        ("kms:CreateGrant", {**via, "kms:GrantIsForAWSResource": ["true"]}),
        ("kms:GenerateDataKeyWithoutPlaintext", via),
        ("kms:Decrypt", via),
        ("kms:DescribeKey", via),
    ]


class _Launched(threading.local):
    """The instances the current request launched (None: not watching)."""

    instances: list[Any] | None = None


_LAUNCHED = _Launched()


def _key_of(backend: Any, key_id: str) -> tuple[str | None, bool]:
    """(the key's ARN, whether it is customer managed); (None, _) for a key KMS lacks."""
    from moto.kms.models import kms_backends

    kms = kms_backends[backend.account_id][backend.region_name]
    try:
        key = kms.keys[kms.any_id_to_key_id(key_id)]
    except Exception:  # noqa: BLE001 - an unknown ID, alias or ARN
        return None, False
    aws_managed = any(str(a).startswith("alias/aws/") for a in key.aliases)
    return key.arn, not aws_managed


def _volume_keys(backend: Any, instance: Any) -> list[str]:
    """The KMS key IDs of the instance's encrypted volumes, as the volumes name them."""
    keys = []
    for _, device in instance.get_block_device_mapping:
        try:
            volume = backend.get_volume(device.volume_id)
        except Exception:  # noqa: BLE001 - a volume gone already
            continue
        if volume.encrypted and volume.kms_key_id and volume.kms_key_id not in keys:
            keys.append(volume.kms_key_id)
    return keys


def failed_key(backend: Any, instance: Any, judge: Judge | None) -> str | None:
    """Why the instance's launch fails on a key (the key and what was refused), or None."""
    for key_id in _volume_keys(backend, instance):
        arn, customer = _key_of(backend, key_id)
        if arn is None:
            return f"{key_id}: no such key"
        if customer and judge is not None:
            refused = judge(arn)
            if refused:
                return f"{arn}: {refused} refused"
    return None


def _fail(instance: Any) -> None:
    """Terminates the instance as a failed launch does."""
    from moto.ec2.models.instances import StateReason

    try:
        if instance.state == "terminated":
            return
        instance.terminate()
        instance._reason = ""
        instance.state_reason = StateReason(FAILURE_MESSAGE, FAILURE_CODE)
    except Exception:  # noqa: BLE001 - the world was reset in between
        pass


def _settle(resp: Any, launched: list[Any]) -> None:
    judge = getattr(resp, RESPONSE_JUDGE, None)
    setattr(resp, RESPONSE_JUDGE, None)
    failing = [i for i in launched if failed_key(i.ec2_backend, i, judge)]
    if failing:
        timer = threading.Timer(FAILURE_DELAY_SECONDS, lambda: [_fail(i) for i in failing])
        timer.daemon = True
        timer.start()


def _watching(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A launch response method that settles, after answering, what it launched."""

    def respond(self: Any) -> Any:
        _LAUNCHED.instances = []
        try:
            out = original(self)
            launched = list(_LAUNCHED.instances or [])
        finally:
            _LAUNCHED.instances = None
        if launched:
            _settle(self, launched)
        return out

    return respond


def install() -> None:
    from moto.ec2.models import EC2Backend
    from moto.ec2.models.elastic_block_store import EBSBackend
    from moto.ec2.responses import EC2Response

    create_volume = EBSBackend.create_volume

    def encrypted_by_default(self: Any, size: int, zone_name: str, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "ebs_encryption_by_default", False) and not args:
            kwargs["encrypted"] = True
        return create_volume(self, size, zone_name, *args, **kwargs)

    EBSBackend.create_volume = encrypted_by_default  # type: ignore[method-assign]

    run_instances = EC2Backend.run_instances

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        reservation = run_instances(self, *args, **kwargs)
        if _LAUNCHED.instances is not None:
            _LAUNCHED.instances.extend(reservation.instances)
        return reservation

    EC2Backend.run_instances = recorded  # type: ignore[method-assign]

    from moto.ec2.models.instances import Instance

    terminate = Instance.terminate

    def terminate_once(self: Any) -> Any:
        # Terminating a terminated instance changes nothing on EC2 (its state reason stays
        # that of its end); moto 5.2.5 would write "user initiated" over a failed launch's.
        if self.state == "terminated":
            return copy.copy(self._state)
        return terminate(self)

    Instance.terminate = terminate_once  # type: ignore[method-assign]
    EC2Response.run_instances = _watching(EC2Response.run_instances)  # type: ignore[method-assign]
    EC2Response.create_fleet = _watching(EC2Response.create_fleet)  # type: ignore[method-assign]
