"""Who the local world's default credentials are: an IAM user, not moto's phantom.

Every test and the sandbox sign with the access key `testing`. moto answers
GetCallerIdentity for an unknown key with `arn:aws:sts::123456789012:user/moto`, a principal
that does not exist in its IAM, so nothing can grant it anything: an EKS access entry for it
is refused, and under enforced IAM every call it makes is denied. Here the key belongs to a
real IAM user, `local-admin`, with AdministratorAccess: the operator's identity in the local
account. Identities under test (the agent's role, a provider limited to its documented
policy) are other principals with their own credentials.

The user is created when the server starts and again after every `/moto-api/reset`.
"""

from __future__ import annotations

import json

ACCOUNT_ID = "123456789012"
USER = "local-admin"
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"
ADMIN_POLICY = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
)


def arn() -> str:
    return f"arn:aws:iam::{ACCOUNT_ID}:user/{USER}"


def ensure_admin() -> None:
    """Creates the user and its key unless they exist (idempotent)."""
    from moto.iam.models import AccessKey, iam_backends

    iam = iam_backends[ACCOUNT_ID]["aws"]
    if USER not in iam.users:
        iam.create_user(region_name="us-east-1", user_name=USER, path="/", tags=[])
        iam.put_user_policy(USER, "AdministratorAccess", ADMIN_POLICY)
    user = iam.users[USER]
    if not any(k.access_key_id == ACCESS_KEY_ID for k in user.access_keys):
        key = AccessKey(USER, prefix="AKIA", account_id=ACCOUNT_ID)
        key.access_key_id = ACCESS_KEY_ID
        key.secret_access_key = SECRET_ACCESS_KEY
        user.access_keys.append(key)


def install() -> None:
    import re

    from moto.core.responses import BaseResponse
    from moto.moto_api._internal.models import MotoAPIBackend

    # moto recognises only 20-character AKIA-style key ids in the Authorization header and
    # treats any other key as "AKIAEXAMPLE"; AWS reads whatever `Credential=` names.
    BaseResponse.access_key_regex = re.compile(r"Credential=(?P<access_key>[^/,\s]+)/")

    original_reset = MotoAPIBackend.reset

    def reset(self: MotoAPIBackend) -> None:
        original_reset(self)
        ensure_admin()

    MotoAPIBackend.reset = reset  # type: ignore[method-assign]
    ensure_admin()
