"""EC2's per-Region quota on launch templates.

"Each AWS account can have up to a maximum of 5,000 launch templates per Region ... Your
accounts might have different quotas based on their age and usage history" (EC2 user
guide, "Restrictions for Amazon EC2 launch templates"). The quota is shared by everything
in the account and Region, so a controller that leaves templates behind eventually stops
every launch there. moto 5.2.5 has no such quota. Here CreateLaunchTemplate refuses a
template past the quota with `ResourceLimitExceeded`, EC2's code for an exceeded resource
limit (EC2 API reference, "Error codes"; the page names no narrower code for this quota).

A test sets an account's quota, as a quota increase or an older account would, with
`POST /moto-api/joiner-local/launch-template-quota` (JSON: `quota`, optional `account` and
`region`): filling 5,000 templates to reach the default would take a test minutes.
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_QUOTA = 5000
ADMIN_PATH = "/moto-api/joiner-local/launch-template-quota"
# (account, region) -> quota, for accounts whose quota a test set.
_QUOTAS: dict[tuple[str, str], int] = {}


def quota(account: str, region: str) -> int:
    return _QUOTAS.get((account, region), DEFAULT_QUOTA)


def _respond(start_response: Any, code: int, doc: Any) -> list[bytes]:
    body = json.dumps(doc).encode()
    reason = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed"}[code]
    start_response(f"{code} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _admin(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    if environ.get("REQUEST_METHOD") != "POST":
        return _respond(start_response, 405, {"message": "use POST"})
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length) if length else b"{}")
        value = int(body["quota"])
        if value < 0:
            raise ValueError("quota must be 0 or more")
    except (KeyError, ValueError, TypeError) as e:
        return _respond(start_response, 400, {"error": "InvalidRequest", "message": str(e)})
    key = (str(body.get("account", "123456789012")), str(body.get("region", "us-east-1")))
    _QUOTAS[key] = value
    return _respond(start_response, 200, {"account": key[0], "region": key[1], "quota": value})


def install() -> None:
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models.launch_templates import LaunchTemplateBackend
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original_create = LaunchTemplateBackend.create_launch_template

    def create_launch_template(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        limit = quota(self.account_id, self.region_name)
        if name not in self.launch_template_name_to_ids and len(self.launch_templates) >= limit:
            raise EC2ClientError(
                "ResourceLimitExceeded",
                f"You have reached the maximum number of launch templates ({limit}) in {self.region_name}.",
            )
        return original_create(self, name, *args, **kwargs)

    LaunchTemplateBackend.create_launch_template = create_launch_template  # type: ignore[method-assign]

    original_call = DomainDispatcherApplication.__call__

    def call(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "") == ADMIN_PATH:
            return _admin(environ, start_response)
        return original_call(self, environ, start_response)

    DomainDispatcherApplication.__call__ = call  # type: ignore[method-assign]
