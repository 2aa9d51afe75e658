"""EKS's Kubernetes version calendar: DescribeClusterVersions, and the versions EKS refuses.

moto 5.2.5 has no DescribeClusterVersions (404), accepts any version on CreateCluster (and
gives a cluster without one Kubernetes 1.19, a version EKS dropped in 2022), and has no
UpdateClusterVersion at all. A configuration pinned to a version past its end of support
therefore passed every local test while a real CreateCluster refused it. Here:

- `DescribeClusterVersions` (GET /cluster-versions) serves the calendar below, each version's
  status decided from its dates against the emulator's clock (today), with EKS's filters
  (`clusterVersions`, `defaultOnly`, `includeAll`, `versionStatus` and the deprecated
  `status`, `clusterType`) and pagination (`maxResults`, `nextToken`).
- `CreateCluster` without a version gets the calendar's default version, as on EKS; with a
  version that is not on the calendar or is past its end of extended support, it is refused
  with EKS's `InvalidParameterException` (HTTP 400, "unsupported Kubernetes version 1.31").
- `UpdateClusterVersion` (POST /clusters/NAME/updates) upgrades in place with the same
  refusal, and EKS's "Unsupported Kubernetes minor version update from A to B" for anything
  but the next minor version; the update is recorded, so DescribeUpdate and ListUpdates
  follow it. `ListUpdates` answers the updates this world recorded.

The calendar is AWS's "Amazon EKS Kubernetes release calendar", in the EKS user guide page
"Understand the Kubernetes version lifecycle on EKS":
https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html#kubernetes-release-calendar
(source: github.com/awsdocs/amazon-eks-user-guide, latest/ug/versioning/kubernetes-versions.adoc).
Its dates are days in UTC; extended support starts at the beginning of the day standard
support ends, and on the end of extended support date EKS stops creating clusters on the
version. Rows 1.27 to 1.34 are that table as published. 1.35 and 1.36 came later than the
copy we could read: their end dates are the same table as mirrored by endoflife.date
(products/amazon-eks.md, which reads it), their release days the EKS platform-versions page
(1.35 `eks.3`, January 27, 2026) and the EKS Distro 1.36 announcement of June 2, 2026, each
14 months before its end of standard support as the page's rule says. Patch and platform
versions are the newest the platform-versions page listed (its April 3, 2026 entries); a
version without them there has none here.

Which version is the default is not on the page. We take the newest: the user guide's
DescribeClusterVersions example marks the newest version of its day as `defaultVersion`,
and the API reference says only that the default "might not be the latest". The calendar
needs a new row when EKS releases a version; `tests/e2e` fails once the default is out of
standard support, which is when it is certainly stale.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.eks import urls as eks_urls
from moto.eks.exceptions import InvalidParameterException, ResourceNotFoundException
from moto.eks.models import DEFAULT_PLATFORM_VERSION, EKSBackend
from moto.eks.responses import EKSResponse

from joiner_local import eks_access

CLUSTER_TYPE = "eks"
DEFAULT_VERSION = "1.36"

# version: (EKS release, end of standard support, end of extended support, patch, platform)
CALENDAR: dict[str, tuple[str, str, str, str | None, str | None]] = {
    "1.36": ("2026-06-02", "2027-08-02", "2028-08-02", None, None),
    "1.35": ("2026-01-27", "2027-03-27", "2028-03-27", "1.35.2", "eks.9"),
    "1.34": ("2025-10-02", "2026-12-02", "2027-12-02", "1.34.4", "eks.19"),
    "1.33": ("2025-05-29", "2026-07-29", "2027-07-29", "1.33.8", "eks.33"),
    "1.32": ("2025-01-23", "2026-03-23", "2027-03-23", "1.32.12", "eks.40"),
    "1.31": ("2024-09-26", "2025-11-26", "2026-11-26", "1.31.14", "eks.56"),
    "1.30": ("2024-05-23", "2025-07-23", "2026-07-23", "1.30.14", "eks.64"),
    "1.29": ("2024-01-23", "2025-03-23", "2026-03-23", None, None),
    "1.28": ("2023-09-26", "2024-11-26", "2025-11-26", None, None),
    "1.27": ("2023-05-24", "2024-07-24", "2025-07-24", None, None),
}

STANDARD, EXTENDED, UNSUPPORTED = "STANDARD_SUPPORT", "EXTENDED_SUPPORT", "UNSUPPORTED"
# The deprecated `status` request filter names the same states in its own spelling.
LEGACY_STATUS = {"standard-support": STANDARD, "extended-support": EXTENDED, "unsupported": UNSUPPORTED}
MAX_RESULTS = 100


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _day(s: str) -> datetime.datetime:
    return datetime.datetime.strptime(s, "%Y-%m-%d").replace(tzinfo=datetime.timezone.utc)


def status(version: str, now: datetime.datetime | None = None) -> str | None:
    """The version's support status at `now`; None for a version not on the calendar. A
    version not yet released on `now` counts as unsupported (it cannot be created yet)."""
    row = CALENDAR.get(version)
    if row is None:
        return None
    now = now or _now()
    released, end_standard, end_extended = (_day(d) for d in row[:3])
    if now < released or now >= end_extended:
        return UNSUPPORTED
    return STANDARD if now < end_standard else EXTENDED


def describe(version: str, now: datetime.datetime | None = None) -> dict[str, Any]:
    """One ClusterVersionInformation, as DescribeClusterVersions answers it."""
    released, end_standard, end_extended, patch, platform = CALENDAR[version]
    state = status(version, now)
    info: dict[str, Any] = {
        "clusterVersion": version,
        "clusterType": CLUSTER_TYPE,
        "defaultVersion": version == DEFAULT_VERSION,
        "releaseDate": _day(released),
        "endOfStandardSupportDate": _day(end_standard),
        "endOfExtendedSupportDate": _day(end_extended),
        # The deprecated `status` carries the same upper-case value as `versionStatus` (the
        # user guide's example output); that mismatch with the request filter's spelling is
        # why EKS added `versionStatus`.
        "status": state,
        "versionStatus": state,
    }
    if patch:
        info["kubernetesPatchVersion"] = patch
    if platform:
        info["defaultPlatformVersion"] = platform
    return info


def check_creatable(cluster: str, version: str, now: datetime.datetime | None = None) -> None:
    """EKS's refusal of a version it does not offer (unknown, or past end of extended
    support): InvalidParameterException with the cluster's name, as EKS answers."""
    if status(version, now) in (STANDARD, EXTENDED):
        return
    raise InvalidParameterException(
        clusterName=cluster,
        nodegroupName=None,
        fargateProfileName=None,
        addonName=None,
        subscriptionId=None,
        message=f"unsupported Kubernetes version {version}",
    )


def _minor(version: str) -> tuple[int, int] | None:
    major, _, minor = version.partition(".")
    if major.isdigit() and minor.isdigit():
        return int(major), int(minor)
    return None


def _flag(self: EKSResponse, name: str) -> bool:
    values = self.querystring.get(name) or []
    return bool(values) and str(values[0]).lower() == "true"


def describe_cluster_versions(self: EKSResponse) -> ActionResult:
    qs = self.querystring
    now = _now()
    wanted_versions = list(qs.get("clusterVersions") or [])
    wanted_status = (qs.get("versionStatus") or [None])[0]
    legacy = (qs.get("status") or [None])[0]
    if wanted_status is None and legacy is not None:
        wanted_status = LEGACY_STATUS.get(legacy, legacy)
    if wanted_status is not None and wanted_status not in (STANDARD, EXTENDED, UNSUPPORTED):
        raise InvalidParameterException(message=f"Invalid version status: {wanted_status}")
    cluster_type = (qs.get("clusterType") or [None])[0]
    # Unsupported versions only when asked for: includeAll, or that status by name.
    include_all = _flag(self, "includeAll") or wanted_status == UNSUPPORTED
    rows = [describe(v, now) for v in sorted(CALENDAR, key=_minor, reverse=True)]
    rows = [
        r
        for r in rows
        if (include_all or r["versionStatus"] != UNSUPPORTED)
        and (not wanted_versions or r["clusterVersion"] in wanted_versions)
        and (wanted_status is None or r["versionStatus"] == wanted_status)
        and (cluster_type is None or r["clusterType"] == cluster_type)
        and (not _flag(self, "defaultOnly") or r["defaultVersion"])
    ]
    max_results = int((qs.get("maxResults") or [MAX_RESULTS])[0])
    if not 1 <= max_results <= MAX_RESULTS:
        raise InvalidParameterException(message=f"maxResults must be between 1 and {MAX_RESULTS}")
    token = (qs.get("nextToken") or [None])[0]
    start = int(token) if token and token.isdigit() else 0
    page = rows[start : start + max_results]
    result: dict[str, Any] = {"clusterVersions": page}
    if start + max_results < len(rows):
        result["nextToken"] = str(start + max_results)
    return ActionResult(result)


def update_cluster_version(self: EKSResponse) -> ActionResult:
    cluster = eks_access._cluster(self.eks_backend, self._get_param("name"))
    version = self._get_param("version") or ""
    check_creatable(cluster.name, version)
    old, new = _minor(cluster.version), _minor(version)
    if old is None or new is None or new[0] != old[0] or new[1] != old[1] + 1:
        raise InvalidParameterException(
            clusterName=cluster.name,
            nodegroupName=None,
            fargateProfileName=None,
            addonName=None,
            subscriptionId=None,
            message=f"Unsupported Kubernetes minor version update from {cluster.version} to {version}",
        )
    cluster.version = version
    cluster.platformVersion = CALENDAR[version][4] or DEFAULT_PLATFORM_VERSION
    params = [{"type": "Version", "value": version}, {"type": "PlatformVersion", "value": cluster.platformVersion}]
    # The upgrade takes EKS half an hour; here it is over when it is accepted.
    update = {
        "id": str(uuid.uuid4()),
        "status": "Successful",
        "type": "VersionUpdate",
        "params": params,
        "createdAt": utcnow(),
        "errors": [],
    }
    eks_access._updates(cluster)[update["id"]] = update
    return ActionResult({"update": update})


def list_updates(self: EKSResponse) -> ActionResult:
    cluster = eks_access._cluster(self.eks_backend, self._get_param("name"))
    updates = sorted(eks_access._updates(cluster).values(), key=lambda u: u["createdAt"])
    return ActionResult({"updateIds": [u["id"] for u in updates]})


def install() -> None:
    eks_urls.url_paths.update(
        {
            "{0}/cluster-versions$": EKSResponse.dispatch,
            "{0}/clusters/(?P<name>[^/]+)/updates$": EKSResponse.dispatch,
        }
    )
    for fn in (describe_cluster_versions, update_cluster_version, list_updates):
        setattr(EKSResponse, fn.__name__, fn)

    original_create = EKSBackend.create_cluster

    def create_cluster(self: Any, name: str, *args: Any, version: str | None = None, **kwargs: Any) -> Any:
        version = version or DEFAULT_VERSION
        check_creatable(name, version)
        cluster = original_create(self, name, *args, version=version, **kwargs)
        cluster.platformVersion = CALENDAR[version][4] or DEFAULT_PLATFORM_VERSION
        return cluster

    EKSBackend.create_cluster = create_cluster  # type: ignore[method-assign]
