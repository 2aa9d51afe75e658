"""EKS cluster access: the access configuration and access entries, as EKS serves them.

moto 5.2.5 ignores `accessConfig` on CreateCluster and answers every access-entry call with
a bare 404. Without them nothing in the local world can say whether a node role may join a
cluster, so this module adds them to moto's EKS backend with EKS's wire shapes, defaults and
refusals:

- CreateCluster takes `accessConfig` (default: `CONFIG_MAP`, bootstrap creator admin on) and
  DescribeCluster returns it; UpdateClusterConfig changes the mode one way only
  (CONFIG_MAP -> API_AND_CONFIG_MAP -> API), as EKS does.
- With bootstrap permissions on and a mode that allows entries, the creating principal gets
  a STANDARD entry with AmazonEKSClusterAdminPolicy, as EKS creates it.
- Create/Describe/List/Update/Delete access entries and Associate/Disassociate/List access
  policies, with EKS's errors: entries on a CONFIG_MAP cluster, unknown principals, node
  types with groups or a username, policies on node entries, duplicates.

Other extensions (kube-sim's kubelet bridge through the API, the EKS token authenticator
in-process) read the same records through `entries_for` and `find_entry`.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from moto.core.responses import ActionResult, EmptyResult
from moto.core.utils import utcnow
from moto.eks import urls as eks_urls
from moto.eks.exceptions import (
    InvalidParameterException,
    InvalidRequestException,
    ResourceInUseException,
    ResourceNotFoundException,
)
from moto.eks.models import eks_backends
from moto.eks.responses import EKSResponse
from moto.iam.models import iam_backends
from moto.sts.models import sts_backends

MODES = ("CONFIG_MAP", "API_AND_CONFIG_MAP", "API")
TYPES = (
    "STANDARD",
    "EC2_LINUX",
    "EC2_WINDOWS",
    "FARGATE_LINUX",
    "EC2",
    "HYBRID_LINUX",
    "HYPERPOD_LINUX",
)
# Entry types that EKS fills in itself and that take no groups, username or access policy.
NODE_TYPES = ("EC2_LINUX", "EC2_WINDOWS", "FARGATE_LINUX", "HYBRID_LINUX", "HYPERPOD_LINUX")
NODE_USERNAME = {
    "EC2_LINUX": "system:node:{{EC2PrivateDNSName}}",
    "EC2_WINDOWS": "system:node:{{EC2PrivateDNSName}}",
    "FARGATE_LINUX": "system:node:{{SessionName}}",
    "HYBRID_LINUX": "system:node:{{SessionName}}",
    "HYPERPOD_LINUX": "system:node:{{SessionName}}",
}
CLUSTER_ACCESS_POLICY = re.compile(r"^arn:aws[a-z-]*:eks::aws:cluster-access-policy/[A-Za-z0-9]+$")
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
ROLE_ARN = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):role/(?:.*/)?([\w+=,.@-]+)$")
USER_ARN = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):user/(?:.*/)?([\w+=,.@-]+)$")
ASSUMED_ROLE_ARN = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/.+$")


# ----------------------------------------------------------------------------------------
# Records, kept on moto's own Cluster objects so that they go with the cluster.


def _entries(cluster: Any) -> dict[str, dict[str, Any]]:
    if not hasattr(cluster, "joiner_access_entries"):
        cluster.joiner_access_entries = {}
    return cluster.joiner_access_entries


def _mode(cluster: Any) -> str:
    return (getattr(cluster, "access_config", None) or {}).get("authenticationMode", "CONFIG_MAP")


def _cluster(backend: Any, name: str) -> Any:
    cluster = backend.clusters.get(name)
    if cluster is None:
        raise ResourceNotFoundException(
            clusterName=name,
            nodegroupName=None,
            fargateProfileName=None,
            addonName=None,
            message=f"No cluster found for name: {name}.",
        )
    return cluster


def _require_api_mode(cluster: Any) -> None:
    if _mode(cluster) == "CONFIG_MAP":
        raise InvalidRequestException(
            message="The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this operation."
        )


def _entry(cluster: Any, principal_arn: str) -> dict[str, Any]:
    entry = _entries(cluster).get(principal_arn)
    if entry is None:
        raise ResourceNotFoundException(
            clusterName=cluster.name,
            nodegroupName=None,
            fargateProfileName=None,
            addonName=None,
            message=f"The specified access entry resource can't be found: {principal_arn}",
        )
    return entry


def principal_exists(account_id: str, principal_arn: str) -> bool:
    """Whether an IAM role or user of that ARN exists (EKS refuses entries for others)."""
    for pattern, kind in ((ROLE_ARN, "role"), (USER_ARN, "user")):
        m = pattern.match(principal_arn)
        if not m:
            continue
        partition, account, name = m.group(1), m.group(2), m.group(3)
        try:
            iam = iam_backends[account][partition]
        except KeyError:
            return False
        if kind == "role":
            return any(r.name == name for r in iam.roles.values())
        return name in iam.users
    return False


def role_arn_of(principal_arn: str) -> str:
    """An assumed-role session ARN names its role; other ARNs are returned as they are.

    Access entries are made for the role, while a caller (a node, the agent, Terraform on
    assumed credentials) presents the session ARN that STS GetCallerIdentity returns.
    """
    m = ASSUMED_ROLE_ARN.match(principal_arn)
    if not m:
        return principal_arn
    partition, account, role = m.group(1), m.group(2), m.group(3)
    try:
        iam = iam_backends[account][partition]
        for r in iam.roles.values():
            if r.name == role:
                return r.arn
    except KeyError:
        pass
    return f"arn:{partition}:iam::{account}:role/{role}"


def entries_for(account_id: str, region: str, cluster_name: str) -> list[dict[str, Any]]:
    """The cluster's access entries (AccessEntry shapes with `accessPolicies`)."""
    cluster = eks_backends[account_id][region].clusters.get(cluster_name)
    return [] if cluster is None else [dict(e) for e in _entries(cluster).values()]


def find_entry(account_id: str, region: str, cluster_name: str, principal_arn: str) -> dict[str, Any] | None:
    """The entry that authorizes `principal_arn` (a role, user or assumed-role session ARN)
    on the cluster, or None. A CONFIG_MAP cluster honours no entry."""
    cluster = eks_backends[account_id][region].clusters.get(cluster_name)
    if cluster is None or _mode(cluster) == "CONFIG_MAP":
        return None
    entries = _entries(cluster)
    return entries.get(principal_arn) or entries.get(role_arn_of(principal_arn))


def authentication_mode(account_id: str, region: str, cluster_name: str) -> str | None:
    cluster = eks_backends[account_id][region].clusters.get(cluster_name)
    return None if cluster is None else _mode(cluster)


def _new_entry(cluster: Any, principal_arn: str, kind: str, groups: list[str] | None, username: str | None, tags: dict[str, str] | None) -> dict[str, Any]:
    m = ROLE_ARN.match(principal_arn) or USER_ARN.match(principal_arn)
    name = m.group(3) if m else "principal"
    kind_word = "role" if ROLE_ARN.match(principal_arn) else "user"
    account = cluster.arn.split(":")[4]
    region = cluster.arn.split(":")[3]
    partition = cluster.arn.split(":")[1]
    if kind in NODE_TYPES:
        username = NODE_USERNAME[kind]
        groups = ["system:nodes"]
    elif not username:
        username = (
            f"arn:{partition}:sts::{account}:assumed-role/{name}/{{{{SessionName}}}}"
            if kind_word == "role"
            else principal_arn
        )
    now = utcnow()
    return {
        "clusterName": cluster.name,
        "principalArn": principal_arn,
        "kubernetesGroups": list(groups or []),
        "accessEntryArn": f"arn:{partition}:eks:{region}:{account}:access-entry/{cluster.name}/{kind_word}/{account}/{name}/{uuid.uuid4()}",
        "createdAt": now,
        "modifiedAt": now,
        "tags": dict(tags or {}),
        "username": username,
        "type": kind,
        "accessPolicies": {},
    }


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "accessPolicies"}


def _validate_new(cluster: Any, account_id: str, principal_arn: str, kind: str, groups: list[str] | None, username: str | None) -> None:
    _require_api_mode(cluster)
    if kind not in TYPES:
        raise InvalidParameterException(
            message=f"The type {kind} is not supported. Valid types: {', '.join(TYPES)}"
        )
    if not principal_exists(account_id, principal_arn):
        raise InvalidParameterException(
            message=f"The specified principalArn is invalid: invalid principal {principal_arn}"
        )
    if kind in NODE_TYPES:
        if groups:
            raise InvalidParameterException(
                message=f"kubernetesGroups cannot be specified for an access entry of type {kind}."
            )
        if username:
            raise InvalidParameterException(
                message=f"username cannot be specified for an access entry of type {kind}."
            )
        if not ROLE_ARN.match(principal_arn):
            raise InvalidParameterException(
                message=f"An access entry of type {kind} requires an IAM role principal."
            )
    for g in groups or []:
        if g.startswith("system:"):
            raise InvalidParameterException(
                message=f"The kubernetes group {g} is not allowed: groups starting with system: are reserved."
            )
    if principal_arn in _entries(cluster):
        raise ResourceInUseException(
            clusterName=cluster.name,
            nodegroupName=None,
            addonName=None,
            message="The specified access entry resource is already in use on this cluster.",
        )


def _caller_arn(response: EKSResponse) -> str:
    """The principal that signed the request, as STS GetCallerIdentity would name it."""
    auth = response.headers.get("Authorization", "")
    m = re.search(r"Credential=([^/]+)/", auth)
    key = m.group(1) if m else ""
    sts = sts_backends[response.current_account]["aws"]
    _, arn, _ = sts.get_caller_identity(key, response.region)
    return arn


# ----------------------------------------------------------------------------------------
# The API, as methods of moto's EKSResponse (its dispatcher calls them by operation name).


def create_access_entry(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self.eks_backend, self._get_param("name"))
    principal = self._get_param("principalArn")
    kind = self._get_param("type") or "STANDARD"
    groups = self._get_param("kubernetesGroups")
    username = self._get_param("username")
    _validate_new(cluster, self.current_account, principal, kind, groups, username)
    entry = _new_entry(cluster, principal, kind, groups, username, self._get_param("tags"))
    _entries(cluster)[principal] = entry
    return ActionResult({"accessEntry": _public(entry)})


def describe_access_entry(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self.eks_backend, self._get_param("name"))
    _require_api_mode(cluster)
    return ActionResult({"accessEntry": _public(_entry(cluster, self._get_param("principalArn")))})


def list_access_entries(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self.eks_backend, self._get_param("name"))
    _require_api_mode(cluster)
    policy = self._get_param("associatedPolicyArn")
    arns = [
        arn
        for arn, e in _entries(cluster).items()
        if policy is None or policy in e["accessPolicies"]
    ]
    return ActionResult({"accessEntries": sorted(arns)})


def update_access_entry(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self.eks_backend, self._get_param("name"))
    _require_api_mode(cluster)
    entry = _entry(cluster, self._get_param("principalArn"))
    groups = self._get_param("kubernetesGroups")
    username = self._get_param("username")
    if entry["type"] in NODE_TYPES and (groups or username):
        raise InvalidParameterException(
            message=f"kubernetesGroups and username cannot be changed for an access entry of type {entry['type']}."
        )
    if groups is not None:
        entry["kubernetesGroups"] = list(groups)
    if username:
        entry["username"] = username
    entry["modifiedAt"] = utcnow()
    return ActionResult({"accessEntry": _public(entry)})


def delete_access_entry(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self.eks_backend, self._get_param("name"))
    _require_api_mode(cluster)
    principal = self._get_param("principalArn")
    _entry(cluster, principal)
    del _entries(cluster)[principal]
    return EmptyResult()


def associate_access_policy(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self.eks_backend, self._get_param("name"))
    _require_api_mode(cluster)
    entry = _entry(cluster, self._get_param("principalArn"))
    policy = self._get_param("policyArn")
    scope = self._get_param("accessScope") or {}
    if not CLUSTER_ACCESS_POLICY.match(policy or ""):
        raise InvalidParameterException(message=f"The policyArn {policy} is not a valid EKS access policy.")
    if entry["type"] in NODE_TYPES:
        raise InvalidRequestException(
            message=f"Access policies cannot be associated with an access entry of type {entry['type']}."
        )
    if scope.get("type") not in ("cluster", "namespace"):
        raise InvalidParameterException(message="accessScope.type must be one of [cluster, namespace].")
    if scope.get("type") == "namespace" and not scope.get("namespaces"):
        raise InvalidParameterException(message="accessScope.namespaces is required for the namespace scope.")
    now = utcnow()
    prior = entry["accessPolicies"].get(policy)
    assoc = {
        "policyArn": policy,
        "accessScope": {"type": scope["type"], "namespaces": list(scope.get("namespaces") or [])},
        "associatedAt": prior["associatedAt"] if prior else now,
        "modifiedAt": now,
    }
    entry["accessPolicies"][policy] = assoc
    return ActionResult(
        {"clusterName": cluster.name, "principalArn": entry["principalArn"], "associatedAccessPolicy": assoc}
    )


def disassociate_access_policy(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self.eks_backend, self._get_param("name"))
    _require_api_mode(cluster)
    entry = _entry(cluster, self._get_param("principalArn"))
    entry["accessPolicies"].pop(self._get_param("policyArn"), None)
    return EmptyResult()


def list_associated_access_policies(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self.eks_backend, self._get_param("name"))
    _require_api_mode(cluster)
    entry = _entry(cluster, self._get_param("principalArn"))
    return ActionResult(
        {
            "clusterName": cluster.name,
            "principalArn": entry["principalArn"],
            "associatedAccessPolicies": list(entry["accessPolicies"].values()),
        }
    )


def _updates(cluster: Any) -> dict[str, dict[str, Any]]:
    if not hasattr(cluster, "joiner_updates"):
        cluster.joiner_updates = {}
    return cluster.joiner_updates


def describe_update(self: EKSResponse) -> ActionResult:
    """DescribeUpdate for the updates this module answers (moto has no update records)."""
    cluster = _cluster(self.eks_backend, self._get_param("name"))
    update_id = self._get_param("updateId")
    update = _updates(cluster).get(update_id)
    if update is None:
        raise ResourceNotFoundException(
            clusterName=cluster.name,
            nodegroupName=None,
            fargateProfileName=None,
            addonName=None,
            message=f"No update found for ID: {update_id}.",
        )
    return ActionResult({"update": update})


def _wrap_create_cluster(original: Any) -> Any:
    def create_cluster(self: EKSResponse) -> ActionResult:
        config = self._get_param("accessConfig") or {}
        mode = config.get("authenticationMode") or "CONFIG_MAP"
        bootstrap = config.get("bootstrapClusterCreatorAdminPermissions")
        bootstrap = True if bootstrap is None else bool(bootstrap)
        if mode not in MODES:
            raise InvalidParameterException(
                message=f"Unsupported authentication mode {mode}: valid modes are {', '.join(MODES)}."
            )
        if mode == "CONFIG_MAP" and not bootstrap:
            raise InvalidParameterException(
                message="bootstrapClusterCreatorAdminPermissions must be true when the authentication mode is CONFIG_MAP."
            )
        creator = _caller_arn(self)
        result = original(self)
        cluster = self.eks_backend.clusters[self._get_param("name")]
        cluster.access_config = {
            "authenticationMode": mode,
            "bootstrapClusterCreatorAdminPermissions": bootstrap,
        }
        if bootstrap and mode != "CONFIG_MAP":
            principal = role_arn_of(creator)
            if principal_exists(self.current_account, principal):
                entry = _new_entry(cluster, principal, "STANDARD", None, None, None)
                entry["accessPolicies"][CLUSTER_ADMIN_POLICY] = {
                    "policyArn": CLUSTER_ADMIN_POLICY,
                    "accessScope": {"type": "cluster", "namespaces": []},
                    "associatedAt": utcnow(),
                    "modifiedAt": utcnow(),
                }
                _entries(cluster)[principal] = entry
        return result

    return create_cluster


def _wrap_update_cluster_config(original: Any) -> Any:
    def update_cluster_config(self: EKSResponse) -> ActionResult:
        config = self._get_param("accessConfig")
        if config and config.get("authenticationMode"):
            cluster = _cluster(self.eks_backend, self._get_param("name"))
            new, old = config["authenticationMode"], _mode(cluster)
            if new not in MODES:
                raise InvalidParameterException(
                    message=f"Unsupported authentication mode {new}: valid modes are {', '.join(MODES)}."
                )
            if MODES.index(new) < MODES.index(old):
                raise InvalidParameterException(
                    message=f"Unsupported authentication mode update from {old} to {new}"
                )
            cluster.access_config = dict(getattr(cluster, "access_config", {}) or {})
            cluster.access_config["authenticationMode"] = new
            cluster.access_config.setdefault("bootstrapClusterCreatorAdminPermissions", True)
            if not self._get_param("resourcesVpcConfig") and not self._get_param("logging"):
                # moto's own update needs one of its fields; an access-only update is ours.
                # Kept on the cluster so that DescribeUpdate can follow it, as on EKS.
                update = {
                    "id": str(uuid.uuid4()),
                    "status": "Successful",
                    "type": "AccessConfigUpdate",
                    "params": [{"type": "AuthenticationMode", "value": new}],
                    "createdAt": utcnow(),
                    "errors": [],
                }
                _updates(cluster)[update["id"]] = update
                return ActionResult({"update": update})
        return original(self)

    return update_cluster_config


def _entry_by_arn(backend: Any, arn: str) -> dict[str, Any] | None:
    for cluster in backend.clusters.values():
        for entry in _entries(cluster).values():
            if entry["accessEntryArn"] == arn:
                return entry
    return None


def _wrap_tagging() -> None:
    """TagResource/UntagResource on an access entry's ARN (moto tags clusters only)."""
    from moto.eks.models import EKSBackend

    tag, untag = EKSBackend.tag_resource, EKSBackend.untag_resource

    def tag_resource(self: Any, resource_arn: str, tags: dict[str, str]) -> None:
        entry = _entry_by_arn(self, resource_arn)
        if entry is None:
            return tag(self, resource_arn, tags)
        entry["tags"].update(tags)

    def untag_resource(self: Any, resource_arn: str, tag_keys: list[str]) -> None:
        entry = _entry_by_arn(self, resource_arn)
        if entry is None:
            return untag(self, resource_arn, tag_keys)
        for k in tag_keys if isinstance(tag_keys, list) else [tag_keys]:
            entry["tags"].pop(k, None)

    EKSBackend.tag_resource = tag_resource  # type: ignore[method-assign]
    EKSBackend.untag_resource = untag_resource  # type: ignore[method-assign]


def install() -> None:
    """Adds the routes and methods to moto's EKS service; called before the server starts."""
    base = "{0}/clusters/(?P<name>[^/]+)/access-entries"
    # werkzeug decodes %2F in the path, so a principal ARN (role/path/name) spans slashes.
    routes = {
        base + "$": EKSResponse.dispatch,
        base + "/(?P<principalArn>arn:.+)/access-policies/(?P<policyArn>arn:aws[a-z-]*:eks::aws:cluster-access-policy/[^/]+)$": EKSResponse.dispatch,
        base + "/(?P<principalArn>arn:.+)/access-policies$": EKSResponse.dispatch,
        base + "/(?P<principalArn>arn:.+)$": EKSResponse.dispatch,
        "{0}/clusters/(?P<name>[^/]+)/updates/(?P<updateId>[^/]+)$": EKSResponse.dispatch,
    }
    eks_urls.url_paths.update(routes)
    for fn in (
        create_access_entry,
        describe_access_entry,
        list_access_entries,
        update_access_entry,
        delete_access_entry,
        associate_access_policy,
        disassociate_access_policy,
        list_associated_access_policies,
        describe_update,
    ):
        setattr(EKSResponse, fn.__name__, fn)
    _wrap_tagging()
    EKSResponse.create_cluster = _wrap_create_cluster(EKSResponse.create_cluster)
    EKSResponse.update_cluster_config = _wrap_update_cluster_config(EKSResponse.update_cluster_config)
    # DescribeCluster serialises attributes by name: give every cluster the default.
    from moto.eks.models import Cluster

    if not hasattr(Cluster, "access_config"):
        Cluster.access_config = {
            "authenticationMode": "CONFIG_MAP",
            "bootstrapClusterCreatorAdminPermissions": True,
        }
