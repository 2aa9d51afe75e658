"""EKS token authentication: what aws-iam-authenticator and STS do for a real cluster.

An EKS bearer token is `k8s-aws-v1.` + the unpadded base64url of a presigned STS
GetCallerIdentity URL whose signature covers the `x-k8s-aws-id` header (the cluster name).
EKS's authenticator checks the URL's shape, then replays it against STS with that header
set to its own cluster: STS verifies the signature and answers who signed it, and the
cluster's access entries say who that is in Kubernetes.

moto's STS ignores a presigned URL's credential, so it cannot play that part. This module
can, because the secrets are in moto's process: it verifies the token itself, with
**botocore's** SigV4 query signer (not the Rust signer that made the token), and serves the
result as a Kubernetes TokenReview webhook for the API servers of the local world (kube-sim
and the real control plane):

    POST /joiner-local/eks/<region>/<cluster>/authenticate   (authentication.k8s.io/v1)
    GET  /joiner-local/eks/<region>/<cluster>/authentications  (what was decided, and why)

The checks, in aws-iam-authenticator's order and with its words where it has them:
prefix, size (4 KiB), base64url, https, an STS host (regional or global), path `/`, only the
whitelisted query parameters, each once, Action=GetCallerIdentity, `x-k8s-aws-id` signed,
0 <= X-Amz-Expires <= 900, X-Amz-Date present and not older than 15 minutes (the token's
lifetime, whatever X-Amz-Expires says). Then what STS checks: the date not more than
15 minutes ahead, a known and active access key (an IAM user's, or temporary credentials
STS issued, with their session token and before their expiry; a long-term key with a session
token is refused), the credential scope's region, and the signature recomputed with the
key's secret and compared in constant time. A token that fails only because it was signed
for another cluster of the local world says so (the real authenticator cannot tell that
apart from a bad signature; the local world can, and its log is for people).

The identity is then mapped through the cluster's access entries (`eks_access`):
username with `{{AccountID}}`, `{{SessionName}}` and `{{EC2PrivateDNSName}}` expanded,
groups = the entry's `kubernetesGroups`, plus one group per associated access policy:
`system:masters` for AmazonEKSClusterAdminPolicy, `eks-access-policy:<Name>` for the others.
That is an approximation: real EKS authorizes access policies with its own authorization
webhook, not with groups; an API server of the local world needs RBAC bindings for the
`eks-access-policy:` groups to give them their rights. A CONFIG_MAP cluster honours no
access entry; the creator of a CONFIG_MAP or API_AND_CONFIG_MAP cluster (with bootstrap
admin permissions) is `system:masters` when no entry names it, as EKS's bootstrap admin is.
The `aws-auth` ConfigMap is not read: other principals of a CONFIG_MAP cluster are refused,
with that reason.

Separately, `POST /joiner-local/eks/<region>/clusters/<name>/endpoint` with
`{"endpoint": "https://...", "certificateAuthority": "<PEM, or base64 of it>"}` binds a cluster name to
an API server of the local world: DescribeCluster returns that endpoint and CA (moto's are a
fake host and random bytes), for the cluster if it exists and when it is created later.
"""

from __future__ import annotations

import base64
import datetime
import hmac
import json
import re
import sys
import threading
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from joiner_local import eks_access

PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
MAX_TOKEN_BYTES = 4096
LIFETIME = datetime.timedelta(minutes=15)
SIGV4_TIMESTAMP = "%Y%m%dT%H%M%SZ"
# aws-iam-authenticator's parameterWhitelist, lower-cased.
ALLOWED_PARAMS = {
    "action",
    "version",
    "x-amz-algorithm",
    "x-amz-credential",
    "x-amz-date",
    "x-amz-expires",
    "x-amz-security-token",
    "x-amz-signature",
    "x-amz-signedheaders",
}
STS_HOST = re.compile(r"^sts(?:\.(?P<region>[a-z0-9-]+))?\.amazonaws\.com(?:\.cn)?$")
ADMIN_POLICY_NAME = "AmazonEKSClusterAdminPolicy"

_lock = threading.Lock()
# (region, cluster name) -> {"endpoint": ..., "certificateAuthority": ...}
_bindings: dict[tuple[str, str], dict[str, str]] = {}
# Every decision, newest last: what a test or a person reads to learn why.
_log: list[dict[str, Any]] = []


class Refused(Exception):
    """The token does not authenticate; `kind` is a stable word, the message says why."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


# ----------------------------------------------------------------------------------------
# The token: shape checks (aws-iam-authenticator), then the signature (STS).


def _decode(token: str) -> tuple[str, str, list[tuple[str, str]]]:
    """The STS host, its region and the query parameters of the token's URL."""
    if len(token) > MAX_TOKEN_BYTES:
        raise Refused("malformed", "token is too large")
    if not token.startswith(PREFIX):
        raise Refused("malformed", f'token is missing expected "{PREFIX}" prefix')
    b64 = token[len(PREFIX) :]
    if "=" in b64:
        raise Refused("malformed", "token is not unpadded base64url")
    try:
        url = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).decode("utf-8")
    except Exception as e:  # noqa: BLE001 - any decoding failure is a malformed token
        raise Refused("malformed", f"token is not base64url of a URL: {e}") from None
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise Refused("malformed", f'unexpected scheme "{parts.scheme}" in pre-signed URL')
    m = STS_HOST.match(parts.netloc)
    if not m:
        raise Refused("malformed", f'unexpected hostname "{parts.netloc}" in pre-signed URL')
    region = m.group("region") or "us-east-1"
    if parts.path != "/":
        raise Refused("malformed", "unexpected path in pre-signed URL")
    try:
        params = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise Refused("malformed", "malformed query parameter") from None
    seen: set[str] = set()
    for key, _ in params:
        low = key.lower()
        if low in seen:
            raise Refused("malformed", f'duplicate query parameter found: "{key}"')
        seen.add(low)
        if low not in ALLOWED_PARAMS:
            raise Refused("malformed", f'non-whitelisted query parameter "{key}"')
    return parts.netloc, region, params


def _lower(params: list[tuple[str, str]]) -> dict[str, str]:
    return {k.lower(): v for k, v in params}


def _check_shape(q: dict[str, str], now: datetime.datetime) -> datetime.datetime:
    if q.get("action") != "GetCallerIdentity":
        raise Refused("malformed", "unexpected action parameter in pre-signed URL")
    signed = [h.strip().lower() for h in q.get("x-amz-signedheaders", "").split(";")]
    if CLUSTER_ID_HEADER not in signed:
        raise Refused(
            "malformed",
            f"client did not sign the {CLUSTER_ID_HEADER} header in the pre-signed URL",
        )
    try:
        expires = int(q.get("x-amz-expires", ""))
    except ValueError:
        expires = -1
    if not 0 <= expires <= 900:
        raise Refused("malformed", "invalid X-Amz-Expires parameter in pre-signed URL")
    date = q.get("x-amz-date")
    if not date:
        raise Refused("malformed", "X-Amz-Date parameter must be present in pre-signed URL")
    try:
        signed_at = datetime.datetime.strptime(date, SIGV4_TIMESTAMP).replace(
            tzinfo=datetime.timezone.utc
        )
    except ValueError:
        raise Refused("malformed", f"error parsing X-Amz-Date parameter {date}") from None
    if now > signed_at + LIFETIME:
        raise Refused(
            "expired",
            f"X-Amz-Date parameter is expired (15 minute expiration) {signed_at:%Y-%m-%d %H:%M:%S} UTC, "
            f"now {now:%Y-%m-%d %H:%M:%S} UTC: the token was signed "
            f"{int((now - signed_at).total_seconds())} s ago",
        )
    if signed_at > now + LIFETIME:
        raise Refused(
            "expired",
            f"Signature not yet current: {date} is still later than "
            f"{(now + LIFETIME):{SIGV4_TIMESTAMP}} (now + 15 min.): the signer's clock is ahead",
        )
    return signed_at


def _credentials(access_key: str, session_token: str | None, now: datetime.datetime) -> tuple[Credentials, str, str, str | None]:
    """The key's secret, and who it belongs to: (credentials, caller ARN, user id,
    session name). Raises Refused for an unknown, inactive or expired key, or a session
    token that does not go with it, as STS would (InvalidClientTokenId / ExpiredToken)."""
    from moto.iam.models import iam_backends
    from moto.sts.models import sts_backends

    for account, by_partition in list(sts_backends.items()):
        for backend in list(by_partition.values()):
            for role in backend.assumed_roles:
                if role.access_key_id != access_key:
                    continue
                if session_token is None:
                    raise Refused(
                        "unknown-key",
                        f"access key {access_key} is temporary (issued by sts:AssumeRole*) "
                        "but the token carries no X-Amz-Security-Token",
                    )
                if not hmac.compare_digest(session_token.encode(), role.session_token.encode()):
                    raise Refused(
                        "unknown-key",
                        f"the security token included with access key {access_key} is invalid",
                    )
                expiration = role.expiration.replace(tzinfo=datetime.timezone.utc)
                if now > expiration:
                    raise Refused(
                        "expired",
                        f"the temporary credentials of access key {access_key} expired at "
                        f"{expiration:%Y-%m-%dT%H:%M:%SZ}",
                    )
                return (
                    Credentials(access_key, role.secret_access_key, session_token),
                    role.arn,
                    role.user_id,
                    role.session_name,
                )
    for account, by_partition in list(iam_backends.items()):
        for iam in list(by_partition.values()):
            for user in list(iam.users.values()):
                for key in user.access_keys:
                    if key.access_key_id != access_key:
                        continue
                    if key.status != "Active":
                        raise Refused("unknown-key", f"access key {access_key} is inactive")
                    if session_token is not None:
                        raise Refused(
                            "unknown-key",
                            f"access key {access_key} is the long-term key of {user.arn}, "
                            "but the token carries an X-Amz-Security-Token: the security "
                            "token included in the request is invalid",
                        )
                    return Credentials(access_key, key.secret_access_key), user.arn, user.id, None
    raise Refused(
        "unknown-key",
        f"access key {access_key} is not known to STS: the security token included in the "
        "request is invalid (InvalidClientTokenId)",
    )


def _signature(creds: Credentials, host: str, region: str, params: list[tuple[str, str]], q: dict[str, str], cluster: str) -> str:
    """botocore's SigV4 query signature of the same request for `cluster`, at the token's
    timestamp: what STS computes when the authenticator replays the URL with
    `x-k8s-aws-id: <cluster>`."""
    operation = [(k, v) for k, v in params if not k.lower().startswith("x-amz-")]
    request = AWSRequest(method="GET", url=f"https://{host}/", params=dict(operation))
    signed = [h.strip().lower() for h in q["x-amz-signedheaders"].split(";") if h.strip()]
    for name in signed:
        if name == "host":
            continue
        if name != CLUSTER_ID_HEADER:
            # The authenticator sends no other header: a signature over one cannot match.
            raise Refused("bad-signature", f"the token signs header {name!r}, which the authenticator does not send")
        request.headers[CLUSTER_ID_HEADER] = cluster
    request.context["timestamp"] = q["x-amz-date"]
    signer = SigV4QueryAuth(creds, "sts", region, expires=int(q["x-amz-expires"]))
    signer._modify_request_before_signing(request)
    canonical = signer.canonical_request(request)
    return signer.signature(signer.string_to_sign(request, canonical), request)


def _other_clusters(cluster: str) -> list[str]:
    from moto.eks.models import eks_backends

    names: list[str] = []
    for by_region in list(eks_backends.values()):
        for backend in list(by_region.values()):
            names.extend(n for n in backend.clusters if n != cluster and n not in names)
    with _lock:
        names.extend(n for (_, n) in _bindings if n != cluster and n not in names)
    return names


def verify(token: str, region: str, cluster: str, now: datetime.datetime | None = None) -> dict[str, Any]:
    """Who signed `token` for `cluster`: {arn, account, userId, sessionName, accessKeyId}.
    Raises Refused with the reason."""
    now = now or _now()
    host, sts_region, params = _decode(token)
    q = _lower(params)
    _check_shape(q, now)
    credential = q.get("x-amz-credential", "").split("/")
    if len(credential) != 5 or credential[3] != "sts" or credential[4] != "aws4_request":
        raise Refused("malformed", f"X-Amz-Credential {q.get('x-amz-credential')!r} is not an STS credential scope")
    if q.get("x-amz-algorithm") != "AWS4-HMAC-SHA256":
        raise Refused("malformed", "X-Amz-Algorithm must be AWS4-HMAC-SHA256")
    access_key, scope_region = credential[0], credential[2]
    if scope_region != sts_region:
        raise Refused(
            "bad-signature",
            f"credential should be scoped to a valid region: {scope_region!r} signed for {host}",
        )
    creds, arn, user_id, session = _credentials(access_key, q.get("x-amz-security-token"), now)
    given = q.get("x-amz-signature", "")
    if hmac.compare_digest(_signature(creds, host, sts_region, params, q, cluster).encode(), given.encode()):
        return {
            "arn": arn,
            "account": arn.split(":")[4],
            "userId": user_id,
            "sessionName": session,
            "accessKeyId": access_key,
        }
    for other in _other_clusters(cluster):
        if hmac.compare_digest(_signature(creds, host, sts_region, params, q, other).encode(), given.encode()):
            raise Refused(
                "wrong-cluster",
                f"the token was presigned for cluster {other!r} ({CLUSTER_ID_HEADER}: {other}), "
                f"not for {cluster!r}",
            )
    raise Refused(
        "bad-signature",
        f"the request signature we calculated does not match the signature provided by {arn} "
        f"(key {access_key}) for cluster {cluster!r} (SignatureDoesNotMatch)",
    )


# ----------------------------------------------------------------------------------------
# Who that is in the cluster: access entries.


def _cluster_account(region: str, cluster: str) -> str | None:
    from moto.eks.models import eks_backends

    for account, by_region in list(eks_backends.items()):
        backend = by_region.get(region) if hasattr(by_region, "get") else None
        if backend is not None and cluster in backend.clusters:
            return account
    return None


def _private_dns_name(account: str, region: str, instance_id: str | None) -> str | None:
    if not instance_id or not instance_id.startswith("i-"):
        return None
    from moto.ec2.models import ec2_backends

    try:
        for reservation in ec2_backends[account][region].reservations.values():
            for instance in reservation.instances:
                if instance.id == instance_id:
                    return instance.private_dns_name
    except KeyError:
        return None
    return None


def _expand(template: str, identity: dict[str, Any], region: str) -> str:
    out = template.replace("{{AccountID}}", identity["account"])
    if "{{SessionName}}" in out:
        if not identity["sessionName"]:
            raise Refused("no-access-entry", f"username {template!r} needs a session name, and {identity['arn']} has none")
        out = out.replace("{{SessionName}}", identity["sessionName"])
    if "{{EC2PrivateDNSName}}" in out:
        dns = _private_dns_name(identity["account"], region, identity["sessionName"])
        if not dns:
            raise Refused(
                "no-access-entry",
                f"username {template!r}: no EC2 instance {identity['sessionName']!r} in {region} to take a private DNS name from",
            )
        out = out.replace("{{EC2PrivateDNSName}}", dns)
    return out


def _policy_groups(entry: dict[str, Any]) -> list[str]:
    groups = []
    for arn in entry.get("accessPolicies", {}):
        name = arn.rsplit("/", 1)[-1]
        groups.append("system:masters" if name == ADMIN_POLICY_NAME else f"eks-access-policy:{name}")
    return groups


def authenticate(token: str, region: str, cluster: str, now: datetime.datetime | None = None) -> dict[str, Any]:
    """The TokenReview `status.user` for the token on `cluster`; raises Refused."""
    identity = verify(token, region, cluster, now)
    account = _cluster_account(region, cluster)
    if account is None:
        raise Refused("no-cluster", f"EKS cluster {cluster!r} does not exist in {region}")
    mode = eks_access.authentication_mode(account, region, cluster)
    principal = eks_access.role_arn_of(identity["arn"])
    extra = {
        "arn": [identity["arn"]],
        "canonicalArn": [principal],
        "sessionName": [identity["sessionName"] or ""],
        "accessKeyId": [identity["accessKeyId"]],
    }
    uid = f"aws-iam-authenticator:{identity['account']}:{identity['userId']}"
    entry = None if mode == "CONFIG_MAP" else eks_access.find_entry(account, region, cluster, identity["arn"])
    if entry is None:
        # The creator's bootstrap admin rides on the aws-auth path, which CONFIG_MAP and
        # API_AND_CONFIG_MAP clusters read; an API cluster knows only its entries.
        creator = _creators.get((account, region, cluster))
        if mode != "API" and creator and creator == principal:
            return {"username": identity["arn"], "uid": uid, "groups": ["system:masters"], "extra": extra}
        if mode == "CONFIG_MAP":
            raise Refused(
                "no-access-entry",
                f"cluster {cluster!r} authenticates with the aws-auth ConfigMap (authenticationMode "
                f"CONFIG_MAP), which the local world does not read, and {principal} is not its "
                f"creator (signed as {identity['arn']})",
            )
        raise Refused(
            "no-access-entry",
            f"no access entry for {principal} on cluster {cluster!r} (signed as {identity['arn']})",
        )
    groups = list(entry.get("kubernetesGroups") or [])
    if entry.get("type") in eks_access.NODE_TYPES:
        groups = ["system:nodes"]
    groups += [g for g in _policy_groups(entry) if g not in groups]
    return {
        "username": _expand(entry["username"], identity, region),
        "uid": uid,
        "groups": groups,
        "extra": extra,
    }


# The creator of each cluster ((account, region, name) -> principal ARN), for CONFIG_MAP
# clusters, whose creator EKS makes an invisible system:masters.
_creators: dict[tuple[str, str, str], str] = {}


def review(body: dict[str, Any], region: str, cluster: str) -> dict[str, Any]:
    """The TokenReview answer for a TokenReview request."""
    api_version = body.get("apiVersion") or "authentication.k8s.io/v1"
    token = ((body.get("spec") or {}).get("token")) or ""
    audiences = (body.get("spec") or {}).get("audiences") or []
    record: dict[str, Any] = {"time": _now().strftime("%Y-%m-%dT%H:%M:%SZ"), "region": region, "cluster": cluster}
    try:
        user = authenticate(token, region, cluster)
    except Refused as e:
        record.update(authenticated=False, reason=e.kind, error=str(e))
        status: dict[str, Any] = {"authenticated": False, "error": f"{e.kind}: {e}"}
    else:
        record.update(authenticated=True, user=user)
        status = {"authenticated": True, "user": user}
        if audiences:
            status["audiences"] = audiences
    with _lock:
        _log.append(record)
        del _log[:-1000]
    print(f"joiner_local.eks_token: {json.dumps(record)}", file=sys.stderr, flush=True)
    return {"apiVersion": api_version, "kind": "TokenReview", "status": status}


# ----------------------------------------------------------------------------------------
# Endpoint bindings: DescribeCluster answers with an API server of the local world.


def _apply_binding(cluster: Any, binding: dict[str, str]) -> None:
    cluster.endpoint = binding["endpoint"]
    if binding.get("certificateAuthority"):
        cluster.certificate_authority = {"data": binding["certificateAuthority"]}


def bind(region: str, name: str, endpoint: str, ca: str | None) -> int:
    """Binds the cluster name; returns how many existing clusters took the binding."""
    from moto.eks.models import eks_backends

    if ca and "-----BEGIN" in ca:
        ca = base64.b64encode(ca.encode()).decode()
    binding = {"endpoint": endpoint, "certificateAuthority": ca or ""}
    with _lock:
        _bindings[(region, name)] = binding
    applied = 0
    for by_region in list(eks_backends.values()):
        backend = by_region.get(region) if hasattr(by_region, "get") else None
        if backend is not None and name in backend.clusters:
            _apply_binding(backend.clusters[name], binding)
            applied += 1
    return applied


# ----------------------------------------------------------------------------------------
# The HTTP side, in front of moto's own dispatcher.

ROUTE = re.compile(
    r"^/joiner-local/eks/(?P<region>[a-z0-9-]+)/(?:(?P<cluster>[^/]+)/(?P<op>authenticate|authentications)"
    r"|clusters/(?P<bound>[^/]+)/endpoint)$"
)


def _respond(start_response: Any, code: int, doc: Any) -> list[bytes]:
    body = json.dumps(doc).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}[code]
    start_response(f"{code} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _handle(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    m = ROUTE.match(environ.get("PATH_INFO", ""))
    if not m:
        return _respond(start_response, 404, {"message": "no such joiner-local route"})
    method = environ.get("REQUEST_METHOD", "GET")
    region = m.group("region")
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    raw = environ["wsgi.input"].read(length) if length else b""
    if m.group("op") == "authentications":
        cluster = m.group("cluster")
        with _lock:
            records = [r for r in _log if r["region"] == region and r["cluster"] == cluster]
        return _respond(start_response, 200, {"authentications": records})
    if method != "POST":
        return _respond(start_response, 405, {"message": f"{method} not allowed: use POST"})
    try:
        body = json.loads(raw or b"{}")
    except ValueError as e:
        return _respond(start_response, 400, {"message": f"body is not JSON: {e}"})
    if m.group("op") == "authenticate":
        if body.get("kind") != "TokenReview":
            return _respond(start_response, 400, {"message": "expected a TokenReview"})
        return _respond(start_response, 200, review(body, region, m.group("cluster")))
    endpoint = body.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint.startswith("https://"):
        return _respond(start_response, 400, {"message": "endpoint must be an https:// URL"})
    applied = bind(region, m.group("bound"), endpoint, body.get("certificateAuthority"))
    return _respond(start_response, 200, {"cluster": m.group("bound"), "region": region, "appliedTo": applied})


def install() -> None:
    from moto.eks.models import EKSBackend
    from moto.eks.responses import EKSResponse
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original_call = DomainDispatcherApplication.__call__

    def call(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "").startswith("/joiner-local/eks/"):
            return _handle(environ, start_response)
        return original_call(self, environ, start_response)

    DomainDispatcherApplication.__call__ = call  # type: ignore[method-assign]

    original_create = EKSBackend.create_cluster

    def create_cluster(self: Any, *args: Any, **kwargs: Any) -> Any:
        cluster = original_create(self, *args, **kwargs)
        with _lock:
            binding = _bindings.get((self.region_name, cluster.name))
        if binding:
            _apply_binding(cluster, binding)
        return cluster

    EKSBackend.create_cluster = create_cluster  # type: ignore[method-assign]

    # Remember each cluster's creator (EKS's bootstrap admin of a CONFIG_MAP cluster).
    original_response = EKSResponse.create_cluster

    def create_cluster_response(self: EKSResponse) -> Any:
        creator = eks_access.role_arn_of(eks_access._caller_arn(self))
        bootstrap = (self._get_param("accessConfig") or {}).get("bootstrapClusterCreatorAdminPermissions")
        result = original_response(self)
        key = (self.current_account, self.region, self._get_param("name"))
        if bootstrap is False:
            _creators.pop(key, None)
        else:
            _creators[key] = creator
        return result

    EKSResponse.create_cluster = create_cluster_response  # type: ignore[method-assign]
