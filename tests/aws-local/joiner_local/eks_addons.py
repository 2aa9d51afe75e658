"""EKS add-ons: Create/Describe/Update/Delete/List, as EKS serves them.

moto 5.2.5 answers the add-on API with a bare 404, so the provider's CoreDNS-on-Fargate
switch could only ever be tested against a scripted endpoint, and kube-sim had no CoreDNS
at all. Here the add-on records live on moto's cluster objects; kube-sim reads them through
the real API (ListAddons/DescribeAddon) and keeps the add-on's Deployment in line, as the
EKS add-on manager does in a real cluster.

What is refused as EKS refuses it: an unknown add-on name, configuration values that are
not a JSON object or name a key the add-on's schema does not have, a second CreateAddon
for an installed add-on, a bad `resolveConflicts`, calls for a missing cluster or add-on.

Simplification: an add-on is ACTIVE as soon as it is created or updated; EKS reports
CREATING/DEGRADED until its pods are ready, which the local world does not relate back.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.eks import urls as eks_urls
from moto.eks.exceptions import (
    InvalidParameterException,
    ResourceInUseException,
    ResourceNotFoundException,
)
from moto.eks.responses import EKSResponse

# The add-ons the local world knows, with the configuration keys their schemas accept
# (the subset of EKS's published configuration schemas that anyone here uses).
ADDONS: dict[str, dict[str, Any]] = {
    "coredns": {
        "version": "v1.11.4-eksbuild.2",
        "keys": {"computeType", "replicaCount", "resources", "tolerations", "nodeSelector", "affinity", "corefile", "podDisruptionBudget", "autoScaling"},
    },
    "kube-proxy": {"version": "v1.33.0-eksbuild.2", "keys": {"resources", "mode", "ipvs"}},
    "vpc-cni": {"version": "v1.19.5-eksbuild.1", "keys": {"env", "resources", "enableNetworkPolicy"}},
    "eks-pod-identity-agent": {"version": "v1.3.7-eksbuild.2", "keys": {"resources", "tolerations"}},
    "aws-ebs-csi-driver": {"version": "v1.44.0-eksbuild.1", "keys": {"controller", "node"}},
}
RESOLVE = ("NONE", "OVERWRITE", "PRESERVE")


def _not_found(cluster: str, addon: str | None, message: str) -> ResourceNotFoundException:
    return ResourceNotFoundException(
        clusterName=cluster,
        nodegroupName=None,
        fargateProfileName=None,
        addonName=addon,
        message=message,
    )


def _cluster(self: EKSResponse) -> Any:
    name = self._get_param("name")
    cluster = self.eks_backend.clusters.get(name)
    if cluster is None:
        raise _not_found(name, None, f"No cluster found for name: {name}.")
    if not hasattr(cluster, "joiner_addons"):
        cluster.joiner_addons = {}
    return cluster


def _addon(cluster: Any, name: str) -> dict[str, Any]:
    addon = cluster.joiner_addons.get(name)
    if addon is None:
        raise _not_found(cluster.name, name, f"No addon: {name} found in cluster: {cluster.name}")
    return addon


def _check_configuration(name: str, values: str | None) -> None:
    if not values:
        return
    try:
        doc = json.loads(values)
    except ValueError as e:
        raise InvalidParameterException(
            message=f"ConfigurationValue provided in request is not supported: Json schema validation failed with error: [{e}]"
        )
    if not isinstance(doc, dict):
        raise InvalidParameterException(
            message="ConfigurationValue provided in request is not supported: Json schema validation failed with error: [$: is not an object]"
        )
    unknown = sorted(set(doc) - ADDONS[name]["keys"])
    if unknown:
        raise InvalidParameterException(
            message=f"ConfigurationValue provided in request is not supported: Json schema validation failed with error: [$.{unknown[0]}: is not defined in the schema and the schema does not allow additional properties]"
        )
    if name == "coredns" and doc.get("computeType") not in (None, "Fargate", "EC2", "auto", "hybrid"):
        raise InvalidParameterException(
            message="ConfigurationValue provided in request is not supported: Json schema validation failed with error: [$.computeType: does not have a value in the enumeration [Fargate, EC2, auto, hybrid]]"
        )


def _check_resolve(value: str | None) -> None:
    if value is not None and value not in RESOLVE:
        raise InvalidParameterException(
            message=f"resolveConflicts must be one of {', '.join(RESOLVE)}"
        )


def create_addon(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self)
    name = self._get_param("addonName")
    if name not in ADDONS:
        raise InvalidParameterException(
            message=f"Addon {name} specified is not supported in {cluster.version} kubernetes version"
        )
    if name in cluster.joiner_addons:
        raise ResourceInUseException(
            clusterName=cluster.name,
            nodegroupName=None,
            addonName=name,
            message=f"Addon already exists: {name}",
        )
    values = self._get_param("configurationValues")
    _check_configuration(name, values)
    _check_resolve(self._get_param("resolveConflicts"))
    region, account, partition = cluster.arn.split(":")[3], cluster.arn.split(":")[4], cluster.arn.split(":")[1]
    now = utcnow()
    addon = {
        "addonName": name,
        "clusterName": cluster.name,
        "status": "ACTIVE",
        "addonVersion": self._get_param("addonVersion") or ADDONS[name]["version"],
        "health": {"issues": []},
        "addonArn": f"arn:{partition}:eks:{region}:{account}:addon/{cluster.name}/{name}/{uuid.uuid4()}",
        "createdAt": now,
        "modifiedAt": now,
        "tags": self._get_param("tags") or {},
        "configurationValues": values or "",
    }
    if self._get_param("serviceAccountRoleArn"):
        addon["serviceAccountRoleArn"] = self._get_param("serviceAccountRoleArn")
    cluster.joiner_addons[name] = addon
    return ActionResult({"addon": addon})


def describe_addon(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self)
    return ActionResult({"addon": _addon(cluster, self._get_param("addonName"))})


def list_addons(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self)
    return ActionResult({"addons": sorted(cluster.joiner_addons)})


def update_addon(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self)
    name = self._get_param("addonName")
    addon = _addon(cluster, name)
    values = self._get_param("configurationValues")
    _check_configuration(name, values)
    _check_resolve(self._get_param("resolveConflicts"))
    params = []
    if values is not None:
        addon["configurationValues"] = values
        params.append({"type": "ConfigurationValues", "value": values})
    if self._get_param("addonVersion"):
        addon["addonVersion"] = self._get_param("addonVersion")
        params.append({"type": "AddonVersion", "value": addon["addonVersion"]})
    addon["modifiedAt"] = utcnow()
    update = {
        "id": str(uuid.uuid4()),
        "status": "Successful",
        "type": "AddonUpdate",
        "params": params,
        "createdAt": utcnow(),
        "errors": [],
    }
    return ActionResult({"update": update})


def delete_addon(self: EKSResponse) -> ActionResult:
    cluster = _cluster(self)
    name = self._get_param("addonName")
    addon = dict(_addon(cluster, name))
    del cluster.joiner_addons[name]
    addon["status"] = "DELETING"
    # `preserve` leaves the add-on's Kubernetes objects in place; kube-sim reads that from
    # the record it keeps of add-ons it has seen (an add-on that vanishes is left running).
    preserved = getattr(cluster, "joiner_preserved_addons", set())
    if self._get_param("preserve"):
        preserved.add(name)
    cluster.joiner_preserved_addons = preserved
    return ActionResult({"addon": addon})


def install() -> None:
    base = "{0}/clusters/(?P<name>[^/]+)/addons"
    eks_urls.url_paths.update(
        {
            base + "$": EKSResponse.dispatch,
            base + "/(?P<addonName>[^/]+)$": EKSResponse.dispatch,
            base + "/(?P<addonName>[^/]+)/update$": EKSResponse.dispatch,
        }
    )
    for fn in (create_addon, describe_addon, list_addons, update_addon, delete_addon):
        setattr(EKSResponse, fn.__name__, fn)
