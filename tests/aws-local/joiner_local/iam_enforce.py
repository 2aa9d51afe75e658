"""IAM enforced in the local world: every signed call is authorized as AWS would authorize it.

moto can authenticate and authorize (`INITIAL_NO_AUTH_ACTION_COUNT`), but its evaluator is
too crude to prove a least-privilege policy: it checks every action against resource `*`, so
a statement scoped to ARNs never matches, and it turns an Allow whose Condition does not
match into an explicit Deny, so every tag-conditioned Allow denies everything. This module
keeps moto's authentication (the SigV4 signature is verified against the secret of the
access key, or of the STS session the key belongs to) and replaces its authorization with
IAM's own rules:

- explicit Deny beats Allow, and without an Allow the call is implicitly denied;
- `Action`/`NotAction`, `Resource`/`NotResource` with `*` and `?` wildcards;
- the `Condition` operators joiner's policies use (String*, Arn*, Bool, Null, Numeric*,
  `IfExists`, `ForAllValues:`/`ForAnyValue:`), with IAM's rules for absent keys;
- identity policies of IAM users (inline, attached, groups) and of roles for their sessions;
- each action evaluated on the resources AWS authorizes it on, with the condition context
  AWS builds (see `_resources`): the instances, volumes, fleets... a CreateFleet creates,
  with `aws:RequestTag/*` from its TagSpecifications, and the tag-on-create `ec2:CreateTags`
  with `ec2:CreateAction`; the launch template it uses with its `aws:ResourceTag/*`; each
  launch of an instant fleet as `ec2:RunInstances` for the caller (`_create_fleet_checks`);
  the KMS requests EC2 makes for the caller when a launch's volumes use a customer managed
  key (`ebs_keys`: refused, the instance fails at launch rather than the call);
  `iam:PassRole` on the role of the instance profile a launch passes; the SQS queue, the EKS
  cluster, the SSM parameter, the IAM role, ...; the Price List's actions (`pricing`) on `*`,
  the only resource they have.
- STS: `AssumeRole` needs the role's trust policy to admit the caller (and, when it admits
  only the account, an identity policy too); `AssumeRoleWithWebIdentity` needs an IAM OIDC
  provider for the token's issuer, a token signed by a key the issuer published
  (`oidc_keys`: kube-sim and tests register their issuer's JWKS there, standing in for the
  discovery document STS fetches), an unexpired token whose audience the provider lists,
  and a trust statement whose `<issuer>:sub`/`:aud` conditions hold for the token's claims.

Actions this module does not model are evaluated against resource `*` only and named once
in the server's log and in the decisions (`modelled: false`), so a gap is visible rather than
silently allowed. Resource-based policies (the interruption queue's policy) are not
evaluated: only identity policies decide, which for same-account calls is what matters
except the queue's TLS-only Deny (the local world speaks plain HTTP).

Refusals answer as the service does: EC2 `UnauthorizedOperation`, query protocols (IAM,
STS, SQS query) `AccessDenied`, JSON protocols `AccessDeniedException`, all HTTP 403, with
the message "User: <arn> is not authorized to perform: <action> on resource: <arn> because
no identity-based policy allows the <action> action". A launch of an instant fleet is not a
call: its refusal is an `UnauthorizedOperation` entry in the fleet's `Errors[]` (HTTP 200).

Every decision (principal, action, resource, allowed, the statement that decided) is kept
and served at `GET /moto-api/joiner-local/iam/decisions[?principal=ARN-or-substring]
[&app=NAME]` (`app/NAME` of the SDK's user agent), so
tests and the sandbox can say "calls made N, refused 0". `/moto-api/reset` clears them.

On when the server runs with `JOINER_LOCAL_IAM=enforce`; otherwise nothing changes.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import logging
import os
import re
import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from werkzeug.exceptions import HTTPException

from joiner_local import ebs_keys, identity, oidc_keys

log = logging.getLogger("joiner_local.iam")

ENV = "JOINER_LOCAL_IAM"

# ----------------------------------------------------------------------------------------
# Decisions, kept for the endpoint.

_LOCK = threading.Lock()
_DECISIONS: list[dict[str, Any]] = []
_UNMODELLED_SEEN: set[str] = set()


def _record(entry: dict[str, Any]) -> None:
    with _LOCK:
        _DECISIONS.append(entry)


def decisions(principal: str | None = None) -> list[dict[str, Any]]:
    with _LOCK:
        rows = list(_DECISIONS)
    if principal:
        rows = [d for d in rows if principal in (d.get("principal") or "")]
    return rows


def clear() -> None:
    with _LOCK:
        _DECISIONS.clear()
        _UNMODELLED_SEEN.clear()


# ----------------------------------------------------------------------------------------
# Policy evaluation.


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _wild(pattern: str, value: str, ignore_case: bool = False) -> bool:
    """IAM wildcards: `*` any run, `?` one character; nothing else is special."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


def _action_matches(patterns: Any, action: str) -> bool:
    return any(_wild(p, action, ignore_case=True) for p in _as_list(patterns))


def _resource_matches(patterns: Any, resource: str) -> bool:
    return any(p == "*" or _wild(p, resource) for p in _as_list(patterns))


def _arn_like(pattern: str, value: str) -> bool:
    # ArnLike compares the six colon-separated parts one by one, with wildcards in each.
    pp, vp = pattern.split(":", 5), value.split(":", 5)
    if len(pp) != 6 or len(vp) != 6:
        return False
    return all(_wild(a, b) for a, b in zip(pp, vp))


def _bool(v: str) -> str:
    return str(v).lower()


_NEGATED = {
    "StringNotEquals",
    "StringNotEqualsIgnoreCase",
    "StringNotLike",
    "ArnNotEquals",
    "ArnNotLike",
    "NumericNotEquals",
    "DateNotEquals",
}


def _match_one(op: str, policy_value: Any, value: str) -> bool:
    pv = str(policy_value)
    if op in ("StringEquals", "StringNotEquals"):
        return value == pv
    if op in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        return value.lower() == pv.lower()
    if op in ("StringLike", "StringNotLike"):
        return _wild(pv, value)
    if op in ("ArnEquals", "ArnNotEquals", "ArnLike", "ArnNotLike"):
        return _arn_like(pv, value)
    if op == "Bool":
        return _bool(value) == _bool(pv)
    if op.startswith("Numeric"):
        try:
            a, b = float(value), float(pv)
        except ValueError:
            return False
        return {
            "NumericEquals": a == b,
            "NumericNotEquals": a == b,
            "NumericLessThan": a < b,
            "NumericLessThanEquals": a <= b,
            "NumericGreaterThan": a > b,
            "NumericGreaterThanEquals": a >= b,
        }.get(op, False)
    raise ValueError(f"condition operator {op} is not supported by the local evaluator")


def _condition_holds(operator: str, key: str, policy_values: Any, ctx: dict[str, list[str]]) -> bool:
    qualifier = None
    if ":" in operator:
        qualifier, operator = operator.split(":", 1)
    if_exists = operator.endswith("IfExists")
    if if_exists:
        operator = operator[: -len("IfExists")]
    values = ctx.get(key)
    pvals = _as_list(policy_values)
    if operator == "Null":
        absent = values is None or len(values) == 0
        return any(_bool(p) == ("true" if absent else "false") for p in pvals)
    negated = operator in _NEGATED
    if values is None:
        if if_exists:
            return True
        if qualifier == "ForAllValues":
            return True
        return negated
    if qualifier == "ForAllValues":
        if negated:
            return all(not any(_match_one(operator, p, v) for p in pvals) for v in values)
        return all(any(_match_one(operator, p, v) for p in pvals) for v in values)
    # Single-valued keys, and ForAnyValue over multi-valued ones.
    if negated:
        return any(not any(_match_one(operator, p, v) for p in pvals) for v in values)
    return any(any(_match_one(operator, p, v) for p in pvals) for v in values)


def _conditions_hold(block: dict[str, Any] | None, ctx: dict[str, list[str]]) -> bool:
    for operator, keys in (block or {}).items():
        for key, policy_values in keys.items():
            # Condition keys are case-insensitive; the tag part is matched as written.
            found = _lookup_key(key, ctx)
            if not _condition_holds(operator, key, policy_values, {key: found} if found is not None else {}):
                return False
    return True


def _lookup_key(key: str, ctx: dict[str, list[str]]) -> list[str] | None:
    if key in ctx:
        return ctx[key]
    lk = key.lower()
    for k, v in ctx.items():
        prefix, _, rest = k.partition("/")
        kprefix, _, krest = key.partition("/")
        if prefix.lower() == kprefix.lower() and rest == krest and "/" in k:
            return v
        if k.lower() == lk and "/" not in k:
            return v
    return None


def _statements(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return _as_list(doc.get("Statement"))


def _statement_applies(st: dict[str, Any], action: str, resource: str, ctx: dict[str, list[str]]) -> bool:
    if "NotAction" in st:
        if _action_matches(st["NotAction"], action):
            return False
    elif not _action_matches(st.get("Action"), action):
        return False
    if "NotResource" in st:
        if _resource_matches(st["NotResource"], resource):
            return False
    elif "Resource" in st and not _resource_matches(st["Resource"], resource):
        return False
    return _conditions_hold(st.get("Condition"), ctx)


def evaluate(
    policies: list[tuple[str, dict[str, Any]]], action: str, resource: str, ctx: dict[str, list[str]]
) -> tuple[str, str | None]:
    """('allow'|'deny'|'implicit', 'policy#statement') for one action on one resource."""
    allowed_by = None
    for name, doc in policies:
        for i, st in enumerate(_statements(doc)):
            if not _statement_applies(st, action, resource, ctx):
                continue
            label = f"{name}#{st.get('Sid') or i}"
            if st.get("Effect") == "Deny":
                return "deny", label
            if st.get("Effect") == "Allow" and allowed_by is None:
                allowed_by = label
    return ("allow", allowed_by) if allowed_by else ("implicit", None)


# ----------------------------------------------------------------------------------------
# Principals: who signed, and their identity policies.


def _doc_of(policy: Any) -> dict[str, Any]:
    from moto.iam.models import Policy

    if isinstance(policy, Policy):
        version = next(v for v in policy.versions if v.is_default)
        text = version.document
    elif isinstance(policy, str):
        text = policy
    elif isinstance(policy, dict):
        text = policy["policy_document"]
    else:
        text = str(policy)
    if isinstance(text, dict):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(unquote(text))


class Principal:
    def __init__(self, arn: str, kind: str, name: str, account: str, partition: str) -> None:
        self.arn, self.kind, self.name, self.account, self.partition = arn, kind, name, account, partition

    def iam(self) -> Any:
        from moto.iam.models import iam_backends

        return iam_backends[self.account][self.partition]

    def policies(self) -> list[tuple[str, dict[str, Any]]]:
        iam = self.iam()
        out: list[tuple[str, dict[str, Any]]] = []
        if self.kind == "user":
            user = iam.get_user(self.name)
            for pname, doc in user.policies.items():
                out.append((f"user/{self.name}:{pname}", _doc_of(doc)))
            for parn, pol in user.managed_policies.items():
                out.append((parn, _doc_of(pol)))
            for group in iam.get_groups_for_user(self.name):
                for pname, doc in group.policies.items():
                    out.append((f"group/{group.name}:{pname}", _doc_of(doc)))
                for parn, pol in group.managed_policies.items():
                    out.append((parn, _doc_of(pol)))
        else:
            role = iam.get_role(self.name)
            for pname, doc in role.policies.items():
                out.append((f"role/{self.name}:{pname}", _doc_of(doc)))
            for parn, pol in role.managed_policies.items():
                out.append((parn, _doc_of(pol)))
        return out

    def role_arn(self) -> str | None:
        if self.kind != "assumed-role":
            return None
        return self.iam().get_role(self.name).arn


class Refusal(HTTPException):
    """An error answered in the wire shape of the service called."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(description=body)
        self.code = status


def _request_id() -> str:
    return str(uuid.uuid4())


def _refuse(resp: Any, service: str, code: str, message: str, status: int = 403) -> Refusal:
    """Builds the refusal for `service`'s protocol (and sets its headers on `resp`)."""
    rid = _request_id()
    if service == "ec2":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
            f"<Code>{code}</Code><Message>{_xml(message)}</Message>"
            f"</Error></Errors><RequestID>{rid}</RequestID></Response>"
        )
        resp.response_headers["Content-Type"] = "text/xml;charset=UTF-8"
        return Refusal(status, body)
    json_request = bool(resp.headers.get("X-Amz-Target")) or "json" in (resp.headers.get("Content-Type") or "")
    if service in ("iam", "sts") or (service == "sqs" and not json_request):
        body = (
            '<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error>'
            f"<Type>Sender</Type><Code>{code}</Code><Message>{_xml(message)}</Message>"
            f"</Error><RequestId>{rid}</RequestId></ErrorResponse>"
        )
        resp.response_headers["Content-Type"] = "text/xml"
        return Refusal(status, body)
    if service == "sqs":
        # SQS's JSON protocol is query-compatible: the SDK reads the code from this header.
        resp.response_headers["x-amzn-query-error"] = f"{code};Sender"
        typ = "com.amazon.coral.service#AccessDeniedException" if code == "AccessDenied" else code
    else:
        typ = "AccessDeniedException" if code == "AccessDenied" else code
    resp.response_headers["x-amzn-ErrorType"] = typ
    resp.response_headers["Content-Type"] = "application/x-amz-json-1.1"
    return Refusal(status, json.dumps({"__type": typ, "message": message, "Message": message}))


def _xml(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _principal_of(access_key: Any, account: str, partition: str) -> Principal:
    from moto.iam.access_control import AssumedRoleAccessKey

    if isinstance(access_key, AssumedRoleAccessKey):
        role, session = access_key._owner_role_name, access_key._session_name
        return Principal(access_key.arn, "assumed-role", role, account, partition)
    return Principal(access_key.arn, "user", access_key._owner_user_name, account, partition)


# ----------------------------------------------------------------------------------------
# Requests: the parameters of a call in one shape, whatever the protocol.


class Call:
    def __init__(self, resp: Any, service: str, region: str, account: str, partition: str, op: str) -> None:
        self.resp, self.service, self.region, self.account, self.partition, self.op = (
            resp,
            service,
            region,
            account,
            partition,
            op,
        )
        self.qs: dict[str, list[str]] = {}
        try:
            self.qs = {k: v for k, v in (resp.querystring or {}).items()}
        except Exception:  # noqa: BLE001 - a request without a query string
            self.qs = {}
        self.body: dict[str, Any] = {}
        # An instant CreateFleet's launches, one per override (`_create_fleet_checks`).
        self.launches: list[FleetLaunch] = []
        try:
            raw = resp.body.decode() if isinstance(resp.body, bytes) else resp.body
            if raw and raw.lstrip().startswith("{"):
                self.body = json.loads(raw)
        except Exception:  # noqa: BLE001
            self.body = {}

    def param(self, name: str) -> str | None:
        if name in self.body:
            v = self.body[name]
            return v if isinstance(v, str) else None
        v = self.qs.get(name)
        if v:
            return v[0]
        um = getattr(self.resp, "uri_match", None) or {}
        if name in um:
            return unquote(um[name])
        return None

    def indexed(self, prefix: str) -> dict[int, dict[str, str]]:
        """`Prefix.N.Rest=value` query parameters grouped by N: {N: {Rest: value}}."""
        out: dict[int, dict[str, str]] = {}
        rx = re.compile(re.escape(prefix) + r"\.(\d+)(?:\.(.+))?$")
        for k, v in self.qs.items():
            m = rx.match(k)
            if m:
                out.setdefault(int(m.group(1)), {})[m.group(2) or ""] = v[0]
        return out

    def arn(self, service: str, resource: str, region: str | None = None, account: str | None = None) -> str:
        r = self.region if region is None else region
        a = self.account if account is None else account
        return f"arn:{self.partition}:{service}:{r}:{a}:{resource}"


# A resource to authorize: (action, resource ARN, extra context).
Check = tuple[str, str, dict[str, list[str]]]


def _tag_ctx(prefix: str, tags: dict[str, str]) -> dict[str, list[str]]:
    return {f"{prefix}/{k}": [v] for k, v in tags.items()}


def _ec2_backend(call: Call) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[call.account][call.region]


def _ec2_tags(call: Call, resource_id: str) -> dict[str, str]:
    try:
        return dict(_ec2_backend(call).tags.get(resource_id, {}))
    except Exception:  # noqa: BLE001
        return {}


def _resource_tags_ctx(tags: dict[str, str], service: str) -> dict[str, list[str]]:
    ctx = _tag_ctx("aws:ResourceTag", tags)
    ctx.update(_tag_ctx(f"{service}:ResourceTag", tags))
    return ctx


_EC2_KINDS = {
    "i": "instance",
    "lt": "launch-template",
    "vol": "volume",
    "eni": "network-interface",
    "subnet": "subnet",
    "sg": "security-group",
    "vpc": "vpc",
    "ami": "image",
    "snap": "snapshot",
    "fleet": "fleet",
    "sir": "spot-instances-request",
    "cr": "capacity-reservation",
}


def _ec2_arn(call: Call, resource_id: str) -> str:
    kind = _EC2_KINDS.get(resource_id.split("-", 1)[0], "unknown")
    account = "" if kind in ("image", "snapshot") else call.account
    return call.arn("ec2", f"{kind}/{resource_id}", account=account)


def _tag_specs(call: Call) -> dict[str, dict[str, str]]:
    """TagSpecification.N: {ResourceType: {key: value}}."""
    out: dict[str, dict[str, str]] = {}
    for spec in call.indexed("TagSpecification").values():
        rtype = spec.get("ResourceType", "")
        tags: dict[int, dict[str, str]] = {}
        for k, v in spec.items():
            m = re.match(r"Tag\.(\d+)\.(Key|Value)$", k)
            if m:
                tags.setdefault(int(m.group(1)), {})[m.group(2)] = v
        out.setdefault(rtype, {}).update({t["Key"]: t.get("Value", "") for t in tags.values() if "Key" in t})
    return out


def _launch_template(call: Call, tid: str | None, name: str | None) -> Any:
    backend = _ec2_backend(call)
    try:
        if tid:
            return backend.get_launch_template(tid)
        if name:
            return backend.get_launch_template_by_name(name)
    except Exception:  # noqa: BLE001
        return None
    return None


def _template_data(template: Any, version: str | None) -> dict[str, Any]:
    try:
        if version in (None, "", "$Default"):
            v = template.default_version()
        elif version == "$Latest":
            v = template.latest_version()
        else:
            v = template.get_version(version)
        return v.data or {}
    except Exception:  # noqa: BLE001
        return {}


def _template_tag_specs(data: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The tags a launch template's data specifies for what a launch creates, by kind."""
    out: dict[str, dict[str, str]] = {}
    for spec in _as_list(data.get("TagSpecifications")):
        if isinstance(spec, dict) and spec.get("ResourceType") != "launch-template":
            tags = {t.get("Key"): t.get("Value", "") for t in _as_list(spec.get("Tags")) if isinstance(t, dict)}
            out.setdefault(spec.get("ResourceType", ""), {}).update(tags)
    return out


def _create_checks(call: Call, action: str, kind: str, tags: dict[str, str], tagged: dict[str, str], create_action: str) -> list[Check]:
    """`action` on a kind the call creates, with `tags` as the request's tags; and, when the
    call applies `tagged` to it, the tag-on-create `ec2:CreateTags` with `ec2:CreateAction`."""
    ctx = _tag_ctx("aws:RequestTag", tags)
    ctx["aws:TagKeys"] = sorted(tags)
    arn = call.arn("ec2", f"{kind}/*")
    checks: list[Check] = [(action, arn, ctx)]
    if tagged:
        tag_ctx = _tag_ctx("aws:RequestTag", tagged)
        tag_ctx["aws:TagKeys"] = sorted(tagged)
        tag_ctx["ec2:CreateAction"] = [create_action]
        checks.append(("ec2:CreateTags", arn, tag_ctx))
    return checks


def _template_inputs_checks(call: Call, action: str, data: dict[str, Any], image: str | None, subnets: list[str]) -> list[Check]:
    """`action` on what a launch uses: its image, subnets, the template's security groups and
    the capacity reservation it targets; `iam:PassRole` on the role of the profile it names."""
    checks: list[Check] = []
    image = image or data.get("ImageId")
    if image:
        checks.append((action, call.arn("ec2", f"image/{image}", account=""), {}))
    nis = [ni for ni in _as_list(data.get("NetworkInterface")) + _as_list(data.get("NetworkInterfaces")) if isinstance(ni, dict)]
    if not subnets:
        subnets = [ni["SubnetId"] for ni in nis if ni.get("SubnetId")]
    for subnet in sorted(set(subnets)):
        checks.append((action, call.arn("ec2", f"subnet/{subnet}"), {}))
    sgs: set[str] = set()
    for key in ("SecurityGroupId", "SecurityGroupIds"):
        sgs.update(s for s in _as_list(data.get(key)) if isinstance(s, str))
    for ni in nis:
        sgs.update(s for s in _as_list(ni.get("SecurityGroupId")) + _as_list(ni.get("Groups")) if isinstance(s, str))
    for sg in sorted(sgs):
        checks.append((action, call.arn("ec2", f"security-group/{sg}"), {}))
    # A launch into a capacity reservation is authorized on the reservation too.
    target = (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    rid = target.get("CapacityReservationId")
    if rid:
        owner = getattr(_ec2_backend(call), "_joiner_capacity_reservations", {}).get(rid)
        account = owner.owner_id if owner is not None else call.account
        checks.append((action, call.arn("ec2", f"capacity-reservation/{rid}", account=account), {}))
    prof = data.get("IamInstanceProfile") or {}
    if isinstance(prof, dict) and (prof.get("Name") or prof.get("Arn")):
        checks.extend(_pass_role_checks(call, prof.get("Name") or prof["Arn"].rsplit("/", 1)[-1]))
    return checks


def _template_check(call: Call, action: str, template: Any) -> Check:
    return (action, call.arn("ec2", f"launch-template/{template.id}"), _resource_tags_ctx(_ec2_tags(call, template.id), "ec2"))


def _run_instances_checks(call: Call) -> list[Check]:
    """What RunInstances is authorized on: every kind it creates (a Spot request too when
    the market is Spot), with the call's and the template's tags as request tags and their
    tag-on-create under `ec2:CreateAction = RunInstances`; the template; what it uses."""
    action = "ec2:RunInstances"
    template, data = None, {}
    tid, tname = call.param("LaunchTemplate.LaunchTemplateId"), call.param("LaunchTemplate.LaunchTemplateName")
    if tid or tname:
        template = _launch_template(call, tid, tname)
        if template is not None:
            data = _template_data(template, call.param("LaunchTemplate.Version"))
    specs = _template_tag_specs(data)
    for rtype, tags in _tag_specs(call).items():
        specs.setdefault(rtype, {}).update(tags)
    kinds = ["instance", "volume", "network-interface"]
    if (call.param("InstanceMarketOptions.MarketType") or "").lower() == "spot":
        kinds.append("spot-instances-request")
    checks: list[Check] = []
    for kind in kinds:
        checks += _create_checks(call, action, kind, specs.get(kind, {}), specs.get(kind, {}), "RunInstances")
    if template is not None:
        checks.append(_template_check(call, action, template))
    subnets = [s for s in [call.param("SubnetId")] if s]
    checks += _template_inputs_checks(call, action, data, call.param("ImageId"), subnets)
    if call.param("IamInstanceProfile.Name"):
        checks.extend(_pass_role_checks(call, call.param("IamInstanceProfile.Name") or ""))
    return checks


class FleetLaunch:
    """One override of an instant fleet: where it is (as CreateFleet's `Errors[]` name it)
    and what the launch from it is authorized on."""

    def __init__(self, index: tuple[int, int], where: dict[str, Any], checks: list[Check]) -> None:
        self.index, self.where, self.checks = index, where, checks


def _fleet_configs(call: Call) -> list[dict[str, Any]]:
    """LaunchTemplateConfigs as parsed for the emulator (the list it launches from)."""
    params = getattr(call.resp, "params", None)
    if isinstance(params, dict) and isinstance(params.get("LaunchTemplateConfigs"), list):
        return params["LaunchTemplateConfigs"]
    out = []
    for _, cfg in sorted(call.indexed("LaunchTemplateConfigs").items()):
        spec = {k.split(".", 1)[1]: v for k, v in cfg.items() if k.startswith("LaunchTemplateSpecification.")}
        overrides: dict[int, dict[str, str]] = {}
        for k, v in cfg.items():
            m = re.match(r"Overrides\.(\d+)\.(.+)$", k)
            if m:
                overrides.setdefault(int(m.group(1)), {})[m.group(2)] = v
        out.append({"LaunchTemplateSpecification": spec, "Overrides": [o for _, o in sorted(overrides.items())]})
    return out


def _fleet_is_spot(call: Call) -> bool:
    default = (call.param("TargetCapacitySpecification.DefaultTargetCapacityType") or "").lower()
    try:
        spot_units = float(call.param("TargetCapacitySpecification.SpotTargetCapacity") or 0)
    except ValueError:
        spot_units = 0
    return default == "spot" or spot_units > 0


def _create_fleet_checks(call: Call) -> list[Check]:
    """CreateFleet, as AWS authorizes it.

    The call itself is `ec2:CreateFleet`, on the resource types the Service Authorization
    Reference gives that action (fleet, instance, volume, launch-template, subnet, image):
    the fleet, instances and volumes with the call's own TagSpecifications as request tags
    (tag-on-create under `ec2:CreateAction = CreateFleet`), the launch templates, and the
    subnets and images its overrides name. A refusal there refuses the call (HTTP 403).

    The SAR's CreateFleet entry also says its resource-level permissions "do not include
    the resources specified in a launch template": those are authorized under
    `ec2:RunInstances`. An instant fleet launches in the caller's own security context (the
    EC2 Fleet user guide, "EC2 Fleet prerequisites": an instant fleet needs no
    service-linked role, which maintain and request fleets launch with), so each launch is
    authorized as `ec2:RunInstances` for the caller on what it creates (instance, volume,
    network-interface, and spot-instances-request when the target capacity is Spot) and on
    what it uses (the template, its image, the override's subnet, the template's security
    groups, its capacity reservation), plus `iam:PassRole` for the instance profile. Tags the
    template specifies for those kinds are applied by RunInstances, so their tag-on-create
    is checked under `ec2:CreateAction = RunInstances`. Those checks are kept per override on
    `call.launches`; `authorize` turns refused overrides into the fleet's `Errors[]`.

    A maintain or request fleet launches later, with EC2 Fleet's service-linked role, so only
    the call itself is checked for it; so is a dry run.
    """
    call_specs = _tag_specs(call)
    checks: list[Check] = []
    for kind in ("fleet", "instance", "volume"):
        tags = call_specs.get(kind, {})
        checks += _create_checks(call, "ec2:CreateFleet", kind, tags, tags, "CreateFleet")
    instant = (call.param("Type") or "maintain") == "instant"
    dry_run = (call.param("DryRun") or "").lower() == "true"
    spot = _fleet_is_spot(call)
    launches: list[FleetLaunch] = []
    seen_templates: set[str] = set()
    override_inputs: list[Check] = []
    for i, cfg in enumerate(_fleet_configs(call)):
        spec = dict(cfg.get("LaunchTemplateSpecification") or {})
        template = _launch_template(call, spec.get("LaunchTemplateId"), spec.get("LaunchTemplateName"))
        if template is None:
            continue
        if template.id not in seen_templates:
            seen_templates.add(template.id)
            checks.append(_template_check(call, "ec2:CreateFleet", template))
        data = _template_data(template, spec.get("Version"))
        tmpl_specs = _template_tag_specs(data)
        kinds = ["instance", "volume", "network-interface"] + (["spot-instances-request"] if spot else [])
        for j, ov in enumerate(cfg.get("Overrides") or [{}]):
            ov = ov if isinstance(ov, dict) else {}
            subnets = [ov["SubnetId"]] if ov.get("SubnetId") else []
            for s in subnets:
                override_inputs.append(("ec2:CreateFleet", call.arn("ec2", f"subnet/{s}"), {}))
            if ov.get("ImageId"):
                override_inputs.append(("ec2:CreateFleet", call.arn("ec2", f"image/{ov['ImageId']}", account=""), {}))
            if not instant or dry_run:
                continue
            run: list[Check] = []
            for kind in kinds:
                tags = {**tmpl_specs.get(kind, {}), **call_specs.get(kind, {})}
                run += _create_checks(call, "ec2:RunInstances", kind, tags, tmpl_specs.get(kind, {}), "RunInstances")
            run.append(_template_check(call, "ec2:RunInstances", template))
            run += _template_inputs_checks(call, "ec2:RunInstances", data, ov.get("ImageId"), subnets)
            # As the answer's Instances[] name it: the template's ID and resolved version.
            version = str(spec.get("Version") or "$Default")
            if version == "$Latest":
                version = str(template.latest_version_number)
            elif version == "$Default":
                version = str(template.default_version_number)
            where = {"LaunchTemplateSpecification": {**spec, "LaunchTemplateId": template.id, "Version": version}, "Overrides": ov}
            launches.append(FleetLaunch((i, j), where, run))
    for check in override_inputs:
        if check not in checks:
            checks.append(check)
    call.launches = launches
    return checks


def _pass_role_checks(call: Call, profile_name: str) -> list[Check]:
    """AWS checks iam:PassRole on the role of the instance profile a launch passes."""
    from moto.iam.models import iam_backends

    iam = iam_backends[call.account][call.partition]
    profile = next((p for p in iam.instance_profiles.values() if p.name == profile_name), None)
    if profile is None:
        raise MissingInstanceProfile(profile_name)
    ctx = {"iam:PassedToService": ["ec2.amazonaws.com"]}
    return [("iam:PassRole", role.arn, ctx) for role in profile.roles]


class MissingInstanceProfile(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _ec2_checks(call: Call) -> list[Check] | None:
    op = call.op
    if op.startswith("Describe"):
        return [(f"ec2:{op}", "*", {})]
    if op == "CreateFleet":
        return _create_fleet_checks(call)
    if op == "RunInstances":
        return _run_instances_checks(call)
    if op == "CreateLaunchTemplate":
        tags = _tag_specs(call).get("launch-template", {})
        ctx = _tag_ctx("aws:RequestTag", tags)
        ctx["aws:TagKeys"] = sorted(tags)
        arn = call.arn("ec2", "launch-template/*")
        checks = [("ec2:CreateLaunchTemplate", arn, ctx)]
        if tags:
            checks.append(("ec2:CreateTags", arn, {**ctx, "ec2:CreateAction": ["CreateLaunchTemplate"]}))
        return checks
    if op in ("DeleteLaunchTemplate", "CreateLaunchTemplateVersion", "ModifyLaunchTemplate", "DeleteLaunchTemplateVersions"):
        t = _launch_template(call, call.param("LaunchTemplateId"), call.param("LaunchTemplateName"))
        if t is None:
            return [(f"ec2:{op}", call.arn("ec2", "launch-template/*"), {})]
        return [(f"ec2:{op}", call.arn("ec2", f"launch-template/{t.id}"), _resource_tags_ctx(_ec2_tags(call, t.id), "ec2"))]
    if op in ("TerminateInstances", "StopInstances", "StartInstances", "RebootInstances"):
        ids = [v[0] for k, v in call.qs.items() if re.match(r"InstanceId\.\d+$", k)]
        return [(f"ec2:{op}", _ec2_arn(call, i), _resource_tags_ctx(_ec2_tags(call, i), "ec2")) for i in ids]
    if op in ("CreateTags", "DeleteTags"):
        ids = [v[0] for k, v in call.qs.items() if re.match(r"ResourceId\.\d+$", k)]
        tags = {t["Key"]: t.get("Value", "") for t in call.indexed("Tag").values() if "Key" in t}
        out = []
        for i in ids:
            ctx = _resource_tags_ctx(_ec2_tags(call, i), "ec2")
            ctx.update(_tag_ctx("aws:RequestTag", tags))
            ctx["aws:TagKeys"] = sorted(tags)
            out.append((f"ec2:{op}", _ec2_arn(call, i), ctx))
        return out
    return None


def _sqs_checks(call: Call) -> list[Check] | None:
    batch = {
        "DeleteMessageBatch": "DeleteMessage",
        "SendMessageBatch": "SendMessage",
        "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
    }
    action = "sqs:" + batch.get(call.op, call.op)
    if call.op == "ListQueues":
        return [(action, "*", {})]
    name = call.param("QueueName")
    url = call.param("QueueUrl")
    if url:
        name = urlparse(url).path.rstrip("/").rsplit("/", 1)[-1]
    if not name:
        return None
    ctx: dict[str, list[str]] = {}
    if call.op == "CreateQueue":
        tags = call.body.get("tags") or {}
        ctx = _tag_ctx("aws:RequestTag", tags)
        ctx["aws:TagKeys"] = sorted(tags)
    return [(action, call.arn("sqs", name), ctx)] + _sqs_key_checks(call, name, action)


# What SQS asks of KMS on the caller's behalf for an SSE-KMS queue (SQS developer guide,
# "Configuring KMS permissions for Amazon SQS"): a consumer needs kms:Decrypt, a producer
# kms:GenerateDataKey and kms:Decrypt, both "via" SQS.
_SQS_KEY_ACTIONS = {
    "sqs:ReceiveMessage": ["kms:Decrypt"],
    "sqs:SendMessage": ["kms:GenerateDataKey", "kms:Decrypt"],
}


def _sqs_key_checks(call: Call, queue_name: str, action: str) -> list[Check]:
    """The KMS checks of a send or receive on a queue encrypted with a customer managed key.
    The AWS managed key (`alias/aws/sqs`) is granted to the account's principals by its own
    key policy, so it needs nothing of the identity policy. Key policies are not evaluated:
    a customer managed key is taken to have the default policy, which delegates to IAM.
    Stricter than SQS in one way: an empty receive is checked too (SQS only decrypts what
    it returns), so a reader the local world admits is one AWS admits."""
    kms_actions = _SQS_KEY_ACTIONS.get(action)
    if not kms_actions:
        return []
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[call.account][call.region].queues.get(queue_name)
    key = getattr(queue, "kms_master_key_id", None) if queue is not None else None
    if not key or key == "alias/aws/sqs" or key.endswith(":alias/aws/sqs"):
        return []
    from moto.kms.models import kms_backends

    kms = kms_backends[call.account][call.region]
    try:
        arn = kms.keys[kms.any_id_to_key_id(key)].arn
    except Exception:  # not a key this world knows: check the name as given
        arn = key
    via = {"kms:ViaService": [f"sqs.{call.region}.amazonaws.com"]}
    return [(a, arn, via) for a in kms_actions]


_EKS_PATH = re.compile(
    r"^/clusters/(?P<cluster>[^/]+)(?:/(?P<kind>access-entries|addons|fargate-profiles|updates)(?:/(?P<child>[^/]+))?)?"
)


def _eks_request_tags(call: Call) -> dict[str, list[str]]:
    tags = call.body.get("tags") or {}
    if not isinstance(tags, dict) or not tags:
        return {}
    ctx = _tag_ctx("aws:RequestTag", tags)
    ctx["aws:TagKeys"] = sorted(tags)
    return ctx


def _eks_access_entry_arn(call: Call, cluster: str, principal_arn: str) -> str:
    """The entry's ARN as EKS forms it; the trailing ID is EKS's own, so a policy can only
    name it with a wildcard, which the literal `*` here matches."""
    kind = "role" if ":role/" in principal_arn else "user"
    account = principal_arn.split(":")[4] if principal_arn.count(":") >= 5 else call.account
    name = principal_arn.rsplit("/", 1)[-1]
    return call.arn("eks", f"access-entry/{cluster}/{kind}/{account}/{name}/*")


def _eks_checks(call: Call) -> list[Check] | None:
    """EKS authorizes each action on the resource type the Service Authorization Reference
    gives it: creating or listing a cluster's parts on the cluster, the rest on the part
    (access entry, add-on, Fargate profile), tagging on the ARN tagged. Passing a role to
    EKS needs `iam:PassRole` too."""
    op = call.op
    if op in ("ListClusters", "DescribeAddonVersions", "DescribeClusterVersions", "ListAccessPolicies"):
        return [(f"eks:{op}", "*", {})]
    if op in ("TagResource", "UntagResource", "ListTagsForResource"):
        arn = call.param("resourceArn") or unquote(call.resp.path.split("/tags/", 1)[-1])
        ctx = _eks_request_tags(call) if op == "TagResource" else {}
        if op == "UntagResource":
            ctx = {"aws:TagKeys": call.qs.get("tagKeys") or []}
        return [(f"eks:{op}", arn, ctx)]
    if op == "CreateCluster":
        # The Service Authorization Reference lists no resource type for CreateCluster:
        # only a grant on `*` matches it.
        out: list[Check] = [("eks:CreateCluster", "*", _eks_request_tags(call))]
        if call.body.get("roleArn"):
            out.append(("iam:PassRole", call.body["roleArn"], {"iam:PassedToService": ["eks.amazonaws.com"]}))
        # Envelope encryption of secrets: the caller must be allowed kms:DescribeKey and
        # kms:CreateGrant on the key (the EKS user guide, "Encrypt Kubernetes secrets with
        # KMS"); EKS then uses the key through that grant, not the cluster role's policy.
        for config in call.body.get("encryptionConfig") or []:
            key = ((config or {}).get("provider") or {}).get("keyArn")
            if key:
                out += [("kms:DescribeKey", key, {}), ("kms:CreateGrant", key, {})]
        return out
    m = _EKS_PATH.match(call.resp.path or "")
    cluster = unquote(m.group("cluster")) if m else (call.param("name") or call.param("clusterName"))
    if not cluster:
        return None
    cluster_arn = call.arn("eks", f"cluster/{cluster}")
    kind = m.group("kind") if m else None
    child = unquote(m.group("child")) if m and m.group("child") else None
    if op == "CreateFargateProfile":
        out = [("eks:CreateFargateProfile", cluster_arn, _eks_request_tags(call))]
        if call.body.get("podExecutionRoleArn"):
            out.append(
                ("iam:PassRole", call.body["podExecutionRoleArn"], {"iam:PassedToService": ["eks-fargate-pods.amazonaws.com"]})
            )
        return out
    if op in ("CreateAccessEntry", "CreateAddon", "CreatePodIdentityAssociation"):
        return [(f"eks:{op}", cluster_arn, _eks_request_tags(call))]
    if kind == "access-entries" and child:
        return [(f"eks:{op}", _eks_access_entry_arn(call, cluster, child), {})]
    if kind == "addons" and child:
        return [(f"eks:{op}", call.arn("eks", f"addon/{cluster}/{child}/*"), {})]
    if kind == "fargate-profiles" and child:
        return [(f"eks:{op}", call.arn("eks", f"fargateprofile/{cluster}/{child}/*"), {})]
    if op == "DescribeUpdate" and call.param("addonName"):
        return [(f"eks:{op}", call.arn("eks", f"addon/{cluster}/{call.param('addonName')}/*"), {})]
    if op in (
        "DescribeCluster",
        "DeleteCluster",
        "UpdateClusterConfig",
        "UpdateClusterVersion",
        "DescribeUpdate",
        "ListUpdates",
        "ListFargateProfiles",
        "ListAccessEntries",
        "ListAddons",
        "ListPodIdentityAssociations",
    ):
        return [(f"eks:{op}", cluster_arn, {})]
    return None


def _ssm_checks(call: Call) -> list[Check] | None:
    if call.op in ("GetParameter", "GetParameters", "PutParameter", "DeleteParameter"):
        names = [call.body.get("Name")] if call.body.get("Name") else list(call.body.get("Names") or [])
        out = []
        for n in names:
            path = n.lstrip("/")
            account = "" if n.startswith("/aws/service/") else call.account
            out.append((f"ssm:{call.op}", call.arn("ssm", f"parameter/{path}", account=account), {}))
        return out or None
    return None


def _iam_checks(call: Call) -> list[Check] | None:
    a = call.account
    arn = lambda r: f"arn:{call.partition}:iam::{a}:{r}"  # noqa: E731
    ctx: dict[str, list[str]] = {}
    tags = {t["Key"]: t.get("Value", "") for t in call.indexed("Tags.member").values() if "Key" in t}
    if tags:
        ctx = _tag_ctx("aws:RequestTag", tags)
        ctx["aws:TagKeys"] = sorted(tags)
    if call.op.startswith("List") and not call.param("RoleName") and not call.param("UserName"):
        return [(f"iam:{call.op}", "*", {})]
    if call.param("InstanceProfileName"):
        return [(f"iam:{call.op}", arn(f"instance-profile/{call.param('InstanceProfileName')}"), ctx)]
    if call.param("RoleName"):
        out = [(f"iam:{call.op}", arn(f"role/{call.param('RoleName')}"), ctx)]
        if call.param("PolicyArn"):
            out[0][2]["iam:PolicyARN"] = [call.param("PolicyArn") or ""]
        return out
    if call.param("UserName"):
        return [(f"iam:{call.op}", arn(f"user/{call.param('UserName')}"), ctx)]
    if call.param("OpenIDConnectProviderArn"):
        return [(f"iam:{call.op}", call.param("OpenIDConnectProviderArn") or "", ctx)]
    if call.op == "CreateOpenIDConnectProvider":
        url = (call.param("Url") or "").replace("https://", "")
        return [(f"iam:{call.op}", arn(f"oidc-provider/{url}"), ctx)]
    if call.param("PolicyArn"):
        return [(f"iam:{call.op}", call.param("PolicyArn") or "", ctx)]
    if call.op == "CreatePolicy":
        return [(f"iam:{call.op}", arn(f"policy/{call.param('PolicyName')}"), ctx)]
    if call.op == "CreateServiceLinkedRole":
        svc = call.param("AWSServiceName") or ""
        return [(f"iam:{call.op}", arn(f"role/aws-service-role/{svc}/*"), {"iam:AWSServiceName": [svc]})]
    return None


def _events_checks(call: Call) -> list[Check] | None:
    if call.op in ("TagResource", "UntagResource", "ListTagsForResource") and call.body.get("ResourceARN"):
        ctx: dict[str, list[str]] = {}
        if call.op == "TagResource":
            tags = {t["Key"]: t.get("Value", "") for t in call.body.get("Tags") or []}
            ctx = _tag_ctx("aws:RequestTag", tags)
            ctx["aws:TagKeys"] = sorted(tags)
        elif call.op == "UntagResource":
            ctx = {"aws:TagKeys": list(call.body.get("TagKeys") or [])}
        return [(f"events:{call.op}", call.body["ResourceARN"], ctx)]
    name = call.body.get("Name") or call.body.get("Rule")
    if name:
        bus = call.body.get("EventBusName") or "default"
        rule = f"rule/{name}" if bus == "default" else f"rule/{bus}/{name}"
        ctx = {}
        tags = {t["Key"]: t.get("Value", "") for t in call.body.get("Tags") or []}
        if tags:
            ctx = _tag_ctx("aws:RequestTag", tags)
            ctx["aws:TagKeys"] = sorted(tags)
        return [(f"events:{call.op}", call.arn("events", rule), ctx)]
    if call.op in ("ListRules", "PutEvents"):
        return [(f"events:{call.op}", "*", {})]
    return None


def _sts_checks(call: Call) -> list[Check] | None:
    if call.op == "AssumeRole":
        return [("sts:AssumeRole", call.param("RoleArn") or "*", {})]
    return None


def _pricing_checks(call: Call) -> list[Check] | None:
    # The Price List's actions have no resource types and no condition keys of their own
    # (Service Authorization Reference, "AWS Price List"): each is authorized on `*`.
    if call.op in ("GetProducts", "DescribeServices", "GetAttributeValues", "ListPriceLists", "GetPriceListFileUrl"):
        return [(f"pricing:{call.op}", "*", {})]
    return None


_MODELS = {
    "ec2": _ec2_checks,
    "sqs": _sqs_checks,
    "eks": _eks_checks,
    "ssm": _ssm_checks,
    "iam": _iam_checks,
    "events": _events_checks,
    "sts": _sts_checks,
    "pricing": _pricing_checks,
}


# Creating with tags is also tagging: IAM, SQS, EKS and EventBridge authorize the service's
# tagging action on the new resource as well (EC2's tag-on-create is modelled in its own
# checks, with `ec2:CreateAction`).
_TAG_ON_CREATE = {
    ("iam", "CreateRole"): "iam:TagRole",
    ("iam", "CreateInstanceProfile"): "iam:TagInstanceProfile",
    ("iam", "CreateOpenIDConnectProvider"): "iam:TagOpenIDConnectProvider",
    ("iam", "CreateUser"): "iam:TagUser",
    ("iam", "CreatePolicy"): "iam:TagPolicy",
    ("sqs", "CreateQueue"): "sqs:TagQueue",
    ("eks", "CreateCluster"): "eks:TagResource",
    ("eks", "CreateFargateProfile"): "eks:TagResource",
    ("eks", "CreateAddon"): "eks:TagResource",
    ("eks", "CreateAccessEntry"): "eks:TagResource",
    ("events", "PutRule"): "events:TagResource",
}


def _tag_on_create(call: Call, checks: list[Check]) -> list[Check]:
    action = _TAG_ON_CREATE.get((call.service, call.op))
    if not action or not checks:
        return checks
    ctx = checks[0][2]
    if not ctx.get("aws:TagKeys"):
        return checks
    resource = checks[0][1]
    if call.service == "eks" and call.op == "CreateCluster":
        resource = call.arn("eks", f"cluster/{call.body.get('name')}")
    elif call.service == "eks":
        cluster = resource.rsplit("cluster/", 1)[-1]
        if call.op == "CreateFargateProfile":
            resource = call.arn("eks", f"fargateprofile/{cluster}/{call.body.get('fargateProfileName')}/*")
        elif call.op == "CreateAddon":
            resource = call.arn("eks", f"addon/{cluster}/{call.body.get('addonName')}/*")
        else:
            resource = _eks_access_entry_arn(call, cluster, str(call.body.get("principalArn") or ""))
    return checks + [(action, resource, ctx)]


def _checks(call: Call) -> tuple[list[Check], bool]:
    model = _MODELS.get(call.service)
    checks = model(call) if model else None
    if checks is not None:
        return _tag_on_create(call, checks), True
    key = f"{call.service}:{call.op}"
    with _LOCK:
        first = key not in _UNMODELLED_SEEN
        _UNMODELLED_SEEN.add(key)
    if first:
        log.warning("IAM: %s is not modelled; evaluated against resource * only", key)
    return [(key, "*", {})], False


# ----------------------------------------------------------------------------------------
# STS trust.


def _trust_principals(st: dict[str, Any], kind: str) -> list[str]:
    p = st.get("Principal")
    if p == "*":
        return ["*"]
    if isinstance(p, dict):
        return [str(x) for x in _as_list(p.get(kind))]
    return []


def _check_assume_role(call: Call, principal: Principal, identity_decision: str) -> None:
    from moto.iam.models import iam_backends

    role_arn = call.param("RoleArn") or ""
    iam = iam_backends[call.account][call.partition]
    try:
        role = iam.get_role_by_arn(role_arn)
    except Exception:  # noqa: BLE001
        raise _refuse(call.resp, "sts", "AccessDenied", f"User: {principal.arn} is not authorized to perform: sts:AssumeRole on resource: {role_arn}")
    trust = _doc_of(role.assume_role_policy_document)
    caller = principal.role_arn() or principal.arn
    ctx = _global_ctx(call, principal)
    by_arn = by_account = False
    for st in _statements(trust):
        if not _action_matches(st.get("Action"), "sts:AssumeRole") or not _conditions_hold(st.get("Condition"), ctx):
            continue
        names = _trust_principals(st, "AWS")
        if st.get("Effect") == "Deny" and (caller in names or "*" in names):
            by_arn = by_account = False
            break
        if st.get("Effect") != "Allow":
            continue
        if caller in names or principal.arn in names:
            by_arn = True
        if "*" in names or principal.account in names or f"arn:{call.partition}:iam::{principal.account}:root" in names:
            by_account = True
    ok = by_arn or (by_account and identity_decision == "allow")
    _record(
        {
            "time": time.time(),
            "principal": principal.arn,
            "action": "sts:AssumeRole (trust)",
            "resource": role_arn,
            "allowed": ok,
            "decided_by": f"{role_arn}:trust" if ok else None,
            "modelled": True,
        }
    )
    if not ok:
        raise _refuse(call.resp, "sts", "AccessDenied", f"User: {principal.arn} is not authorized to perform: sts:AssumeRole on resource: {role_arn}")


def _jwt_claims(token: str) -> dict[str, Any] | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        pad = "=" * (-len(parts[1]) % 4)
        return json.loads(base64.urlsafe_b64decode(parts[1] + pad))
    except Exception:  # noqa: BLE001
        return None


def _check_web_identity(resp: Any, account: str, partition: str) -> None:
    """What STS checks before AssumeRoleWithWebIdentity answers."""
    from moto.iam.models import iam_backends

    qs = resp.querystring or {}
    role_arn = (qs.get("RoleArn") or [""])[0]
    token = (qs.get("WebIdentityToken") or [""])[0]
    claims = _jwt_claims(token)

    def deny(code: str, message: str, status: int = 400) -> Refusal:
        _record(
            {
                "time": time.time(),
                "principal": f"web-identity:{(claims or {}).get('sub')}",
                "action": "sts:AssumeRoleWithWebIdentity",
                "resource": role_arn,
                "allowed": False,
                "decided_by": code,
                "modelled": True,
            }
        )
        return _refuse(resp, "sts", code, message, status)

    if claims is None:
        raise deny("InvalidIdentityToken", "The ID Token provided is not a valid JWT. (You may see this error if you sent an Access Token)")
    iss = str(claims.get("iss", ""))
    host_path = re.sub(r"^https://", "", iss).rstrip("/")
    iam = iam_backends[account][partition]
    provider = next((p for p in iam.open_id_providers.values() if p.url.rstrip("/") == host_path), None)
    if provider is None:
        raise deny("InvalidIdentityToken", f"No OpenIDConnect provider found in your account for {iss}")
    try:
        oidc_keys.verify(token, iss)
    except oidc_keys.Invalid as e:
        raise deny("InvalidIdentityToken", str(e))
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)) or exp < time.time():
        raise deny("ExpiredTokenException", "Token expired: current date/time must be before the expiration date/time")
    auds = [str(a) for a in _as_list(claims.get("aud"))]
    if not any(a in provider.client_id_list for a in auds):
        raise deny("InvalidIdentityToken", "Incorrect token audience")
    try:
        role = iam.get_role_by_arn(role_arn)
    except Exception:  # noqa: BLE001
        raise deny("AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity", 403)
    ctx: dict[str, list[str]] = {
        f"{host_path}:sub": [str(claims.get("sub", ""))],
        f"{host_path}:aud": auds,
        f"{host_path}:amr": [str(a) for a in _as_list(claims.get("amr"))],
    }
    allowed, denied = None, False
    for i, st in enumerate(_statements(_doc_of(role.assume_role_policy_document))):
        if not _action_matches(st.get("Action"), "sts:AssumeRoleWithWebIdentity"):
            continue
        if provider.arn not in _trust_principals(st, "Federated"):
            continue
        if not _conditions_hold(st.get("Condition"), ctx):
            continue
        if st.get("Effect") == "Deny":
            denied = True
        elif st.get("Effect") == "Allow":
            allowed = f"{role_arn}:trust#{st.get('Sid') or i}"
    if denied or not allowed:
        raise deny("AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity", 403)
    _record(
        {
            "time": time.time(),
            "principal": f"web-identity:{claims.get('sub')}",
            "action": "sts:AssumeRoleWithWebIdentity",
            "resource": role_arn,
            "allowed": True,
            "decided_by": allowed,
            "modelled": True,
        }
    )


# ----------------------------------------------------------------------------------------
# The hook.


def _global_ctx(call: Call, principal: Principal) -> dict[str, list[str]]:
    ctx = {
        "aws:PrincipalArn": [principal.role_arn() or principal.arn],
        "aws:PrincipalAccount": [principal.account],
        "aws:PrincipalType": ["AssumedRole" if principal.kind == "assumed-role" else "User"],
        "aws:RequestedRegion": [call.region],
        "aws:SecureTransport": ["false"],
    }
    if principal.kind == "user":
        ctx["aws:username"] = [principal.name]
    return ctx


_UNSIGNED_STS = ("AssumeRoleWithWebIdentity", "AssumeRoleWithSAML")


def _resolve_access_key(resp: Any, iam_request: Any) -> None:
    """Session expiry, which moto does not check."""
    from moto.iam.access_control import AssumedRoleAccessKey
    from moto.sts.models import sts_backends

    key = iam_request._access_key
    if isinstance(key, AssumedRoleAccessKey):
        for r in sts_backends[key.account_id][key.partition].assumed_roles:
            if r.access_key_id == key._access_key_id:
                import datetime

                exp = r.expiration
                now = datetime.datetime.now(exp.tzinfo) if exp.tzinfo else datetime.datetime.utcnow()
                if exp < now:
                    raise _refuse(resp, iam_request._service, "ExpiredToken", "The security token included in the request is expired", 400)


RAW_FORM_KEY = "joiner_local.raw_form"


def _keep_raw_form(environ: dict[str, Any]) -> None:
    """Reads a form-encoded request body and puts it back, keeping a copy (see authorize)."""
    import io

    if not str(environ.get("CONTENT_TYPE", "")).startswith("application/x-www-form-urlencoded"):
        return
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return
    if length <= 0:
        return
    raw = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(raw)
    environ[RAW_FORM_KEY] = raw


def _app_of(headers: Any) -> str | None:
    """The caller's application (`app/NAME` in an AWS SDK's user agent), as CloudTrail's
    userAgent shows it: tells apart callers that share credentials."""
    for h in ("X-Amz-User-Agent", "User-Agent"):
        m = re.search(r"(?:^|\s)app/(\S+)", headers.get(h) or "")
        if m:
            return m.group(1)
    return None


def _service_of(auth: str) -> str:
    scope = auth.split("Credential=", 1)[-1].split(",", 1)[0].split("/")
    return scope[3] if len(scope) > 3 else ""


def authorize(resp: Any, iam_request_cls: type, resource: str = "*") -> None:
    """Replaces moto's `_authenticate_and_authorize_action`."""
    from moto.iam.access_control import IAMRequest
    from moto.utilities.utils import get_partition

    op = resp._get_action()
    auth = resp.headers.get("Authorization")
    if not auth:
        parsed = urlparse(resp.uri)
        query = parse_qs(parsed.query)
        if op in _UNSIGNED_STS:
            if op == "AssumeRoleWithWebIdentity":
                _check_web_identity(resp, resp.current_account, get_partition(resp.region))
            return
        if op == "GetCallerIdentity" and "X-Amz-Signature" in query:
            # A presigned GetCallerIdentity (the EKS token): always allowed, as on AWS;
            # verifying its signature is the EKS token authenticator's job.
            return
        raise _refuse(resp, "sts" if "sts" in (resp.uri or "") else "iam", "MissingAuthenticationToken", "Request is missing Authentication Token", 403)
    # The default credentials send a session token with their long-term key (tests export
    # AWS_SESSION_TOKEN=testing); AWS would refuse that, the local world takes it as the admin.
    headers = resp.headers
    if auth.split("Credential=", 1)[-1].split("/", 1)[0] == identity.ACCESS_KEY_ID and "X-Amz-Security-Token" in headers:
        headers = {k: v for k, v in headers.items() if k.lower() != "x-amz-security-token"}
        headers_for_signature = resp.headers
    else:
        headers_for_signature = headers
    parsed_url = urlparse(resp.uri)
    path = resp.raw_path
    if parsed_url.query:
        path += "?" + parsed_url.query
    service = _service_of(auth)
    from moto.core.exceptions import AuthFailureError, InvalidClientTokenIdError, SignatureDoesNotMatchError

    environ = getattr(getattr(resp, "normalized_request", None), "environ", None) or {}
    try:
        req = IAMRequest(
            account_id=resp.current_account,
            method=resp.method,
            path=path,
            # A body-less request (REST GET/DELETE) is signed over an empty payload; moto
            # would otherwise sign its parsed parameters as a form body.
            data={} if resp.method in ("GET", "DELETE", "HEAD") and not resp.raw_body else resp.data,
            # The bytes that were signed: werkzeug hands moto an empty body once it has
            # parsed a form, and re-encoding the parsed form changes it (the Rust SDK sends
            # a space as %20, Python's urlencode as +), so the form is kept as it came.
            body=environ.get(RAW_FORM_KEY) or resp.raw_body,
            headers=headers,
            action=op,
        )
        req._headers = headers_for_signature
        req.check_signature()
    except SignatureDoesNotMatchError:
        raise _refuse(
            resp,
            service,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.",
        )
    except (InvalidClientTokenIdError, AuthFailureError):
        if service == "ec2":
            raise _refuse(resp, "ec2", "AuthFailure", "AWS was not able to validate the provided access credentials", 401)
        raise _refuse(
            resp,
            service,
            "UnrecognizedClientException" if service not in ("iam", "sts", "sqs") else "InvalidClientTokenId",
            "The security token included in the request is invalid.",
        )
    _resolve_access_key(resp, req)
    partition = get_partition(req._region)
    principal = _principal_of(req._access_key, resp.current_account, partition)
    service = req._service
    if service == "sts" and op == "GetCallerIdentity":
        return
    call = Call(resp, service, req._region, resp.current_account, partition, op)
    try:
        checks, modelled = _checks(call)
    except MissingInstanceProfile as e:
        raise _refuse(
            resp,
            "ec2",
            "InvalidParameterValue",
            f"Value ({e.name}) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name",
            400,
        )
    policies = principal.policies()
    base_ctx = _global_ctx(call, principal)
    app = _app_of(resp.headers)

    def decide(action: str, arn: str, extra: dict[str, list[str]]) -> tuple[str, str | None]:
        ctx = dict(base_ctx)
        ctx.update(extra)
        decision, by = evaluate(policies, action, arn, ctx)
        _record(
            {
                "time": time.time(),
                "principal": principal.arn,
                "app": app,
                "operation": f"{service}:{op}",
                "action": action,
                "resource": arn,
                "allowed": decision == "allow",
                "decided_by": by,
                "modelled": modelled,
            }
        )
        return decision, by

    def message(action: str, arn: str, decision: str, by: str | None) -> str:
        why = (
            f"with an explicit deny in an identity-based policy: {by}"
            if decision == "deny"
            else f"because no identity-based policy allows the {action} action"
        )
        return f"User: {principal.arn} is not authorized to perform: {action} on resource: {arn} {why}"

    def ec2_message(action: str, arn: str, decision: str, by: str | None) -> str:
        encoded = base64.b64encode(json.dumps({"allowed": False, "action": action, "resource": arn}).encode()).decode()
        return (
            f"You are not authorized to perform this operation. {message(action, arn, decision, by)}. "
            f"Encoded authorization failure message: {encoded}"
        )

    identity_decision = "allow"
    for action, arn, extra in checks:
        decision, by = decide(action, arn, extra)
        if decision != "allow":
            identity_decision = decision
            if op == "AssumeRole":
                break
            if service == "ec2":
                raise _refuse(resp, "ec2", "UnauthorizedOperation", ec2_message(action, arn, decision, by))
            raise _refuse(resp, service, "AccessDenied", message(action, arn, decision, by))
    if op == "AssumeRole":
        _check_assume_role(call, principal, identity_decision)
    if call.launches:
        _authorize_fleet_launches(resp, call, decide, ec2_message)
    if service == "ec2" and op in ("RunInstances", "CreateFleet"):
        setattr(resp, ebs_keys.RESPONSE_JUDGE, _ebs_key_judge(call, principal, decide))


def _ebs_key_judge(call: Call, principal: Principal, decide: Any) -> ebs_keys.Judge:
    """Whether the caller may use a customer managed key for a launch's volumes: the KMS
    requests EC2 makes on its behalf (`ebs_keys.key_requests`), each evaluated against the
    caller's identity policies and recorded under the launch call. Each key is decided
    once per call."""
    decided: dict[str, str | None] = {}

    def judge(key_arn: str) -> str | None:
        if key_arn not in decided:
            decided[key_arn] = None
            for action, ctx in ebs_keys.key_requests(call.region, principal.account):
                decision, _ = decide(action, key_arn, ctx)
                if decision != "allow":
                    decided[key_arn] = action
                    break
        return decided[key_arn]

    return judge


# Instance lifecycles as CreateFleet's Errors[] name them, by the fleet's default target type.
_FLEET_LIFECYCLE = {
    "spot": "spot",
    "capacity-block": "capacity-block",
    "reserved-capacity": "interruptible-capacity-reservation",
}

RESPONSE_FLEET_REFUSALS = "_joiner_fleet_refusals"


def _authorize_fleet_launches(resp: Any, call: Call, decide: Any, ec2_message: Any) -> None:
    """An instant fleet's launches, each authorized as `ec2:RunInstances` (see
    `_create_fleet_checks`). A refused launch does not refuse the call: CreateFleet answers
    HTTP 200 with an `Errors[]` entry for that override (ErrorCode `UnauthorizedOperation`,
    the message the call would have had) and launches nothing from it, which is how an
    instant fleet reports what it could not launch (the `Errors` member of CreateFleet's
    answer, botocore's EC2 model: "Supported only for fleets of type instant").
    Each distinct check is decided (and recorded) once per call."""
    decided: dict[str, tuple[str, str | None]] = {}
    default = (call.param("TargetCapacitySpecification.DefaultTargetCapacityType") or "on-demand").lower()
    lifecycle = "spot" if _fleet_is_spot(call) else _FLEET_LIFECYCLE.get(default, "on-demand")
    errors: list[dict[str, Any]] = []
    refused: set[tuple[int, int]] = set()
    for launch in call.launches:
        for action, arn, extra in launch.checks:
            key = json.dumps([action, arn, extra], sort_keys=True)
            if key not in decided:
                decided[key] = decide(action, arn, extra)
            decision, by = decided[key]
            if decision != "allow":
                refused.add(launch.index)
                errors.append(
                    {
                        "LaunchTemplateAndOverrides": launch.where,
                        "Lifecycle": lifecycle,
                        "ErrorCode": "UnauthorizedOperation",
                        "ErrorMessage": ec2_message(action, arn, decision, by),
                    }
                )
                break
    if refused:
        setattr(resp, RESPONSE_FLEET_REFUSALS, {"errors": errors, "refused": refused})


def _create_fleet_answer(self: Any, original: Any) -> Any:
    """CreateFleet with the refused launches left out and reported in `Errors[]`."""
    from moto.core.responses import ActionResult

    refusals = getattr(self, RESPONSE_FLEET_REFUSALS, None)
    if not refusals:
        return original(self)
    setattr(self, RESPONSE_FLEET_REFUSALS, None)
    refused = refusals["refused"]
    params = self.params
    configs = params.get("LaunchTemplateConfigs") or []
    requested_configs = configs
    requested_target = params.get("TargetCapacitySpecification") or {}
    kept = []
    for i, cfg in enumerate(configs):
        overrides = [ov for j, ov in enumerate(cfg.get("Overrides") or [{}]) if (i, j) not in refused]
        if overrides:
            kept.append({**cfg, "Overrides": overrides})
    params["LaunchTemplateConfigs"] = kept
    if not kept:
        # Nothing may be launched: the fleet is made, with nothing to launch.
        params["TargetCapacitySpecification"] = {"TotalTargetCapacity": 0, "DefaultTargetCapacityType": "on-demand"}
    try:
        out = original(self)
    finally:
        params["LaunchTemplateConfigs"] = requested_configs
        params["TargetCapacitySpecification"] = requested_target
    result = dict(out.result) if isinstance(out.result, dict) else {}
    fleet = self.ec2_backend.get_fleet(result.get("FleetId"))
    if fleet is not None:
        fleet.launch_template_configs = requested_configs
        fleet.target_capacity_specification = requested_target
    result["Errors"] = refusals["errors"] + list(result.get("Errors") or [])
    result.setdefault("Instances", [])
    return ActionResult(result)


def _decisions_endpoint(request: Any, full_url: str, headers: Any) -> Any:
    query = parse_qs(urlparse(full_url).query)
    principal = (query.get("principal") or [None])[0]
    rows = decisions(principal)
    app = (query.get("app") or [None])[0]
    if app:
        rows = [r for r in rows if r.get("app") == app]
    body = {
        "enforced": True,
        "calls": len(rows),
        "refused": sum(1 for r in rows if not r["allowed"]),
        "unmodelled": sorted({r["action"] for r in rows if not r.get("modelled", True)}),
        "decisions": rows,
    }
    return 200, {"Content-Type": "application/json"}, json.dumps(body)


def enabled() -> bool:
    return os.environ.get(ENV, "").lower() == "enforce"


def install() -> None:
    """Patches moto whether or not enforcement is on; each patch asks `enabled()` when it
    runs, so that one process (`farm`) can fork open and enforced worlds alike."""
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.moto_api._internal import urls as api_urls
    from moto.moto_api._internal.models import MotoAPIBackend

    original_authorize = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def _authenticate_and_authorize_action(self: Any, iam_request_cls: type, resource: str = "*") -> None:
        if not enabled():
            return original_authorize(self, iam_request_cls, resource)
        authorize(self, iam_request_cls, resource)

    ActionAuthenticatorMixin._authenticate_and_authorize_action = _authenticate_and_authorize_action  # type: ignore[method-assign]
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original_call = DomainDispatcherApplication.__call__

    def call(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        if enabled():
            _keep_raw_form(environ)
        return original_call(self, environ, start_response)

    DomainDispatcherApplication.__call__ = call  # type: ignore[method-assign]
    from moto.ec2.responses import EC2Response

    # Installed last (`EXTENSIONS`), so this wraps the other extensions' CreateFleet.
    original_create_fleet = EC2Response.create_fleet

    def create_fleet(self: Any) -> Any:
        if not enabled():
            return original_create_fleet(self)
        return _create_fleet_answer(self, original_create_fleet)

    EC2Response.create_fleet = create_fleet  # type: ignore[method-assign]

    def decisions_endpoint(request: Any, full_url: str, headers: Any) -> Any:
        if not enabled():
            return 404, {}, "IAM is not enforced in this world (JOINER_LOCAL_IAM)"
        return _decisions_endpoint(request, full_url, headers)

    api_urls.url_paths["{0}/moto-api/joiner-local/iam/decisions"] = decisions_endpoint
    original_reset = MotoAPIBackend.reset

    def reset(self: MotoAPIBackend) -> None:
        original_reset(self)
        clear()

    MotoAPIBackend.reset = reset  # type: ignore[method-assign]
