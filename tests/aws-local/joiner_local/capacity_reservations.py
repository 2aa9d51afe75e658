"""EC2 capacity reservations: on-demand capacity reservations (ODCRs), capacity blocks and
interruptible reservations, with the launches that target them.

moto 5.2.5 has none of it: no CreateCapacityReservation, no DescribeCapacityReservations,
and its CreateFleet ignores a launch template's `CapacityReservationSpecification` and
launches nothing at all for the `capacity-block` and `reserved-capacity` target capacity
types. Here, in moto's process:

- `CreateCapacityReservation`, `DescribeCapacityReservations` (IDs, the documented filters,
  pagination) and `CancelCapacityReservation`, with EC2's refusals: missing parameters, an
  unknown instance type or zone, a malformed ID (`InvalidCapacityReservationId.Malformed`),
  an unknown one (`InvalidCapacityReservationId.NotFound`), cancelling a capacity block;
- CreateFleet type `instant` whose templates target a reservation
  (`capacity-reservations-only` + `CapacityReservationTarget`): each override is tried in
  order against its template's reservation and the first that fits launches into it, so
  `AvailableInstanceCount` drops by one; the others are answered per override as EC2 does
  (`ReservationCapacityExceeded` for a full reservation, `InvalidCapacityReservationId.
  NotFound`, a type or zone that is not the reservation's). A capacity block is taken only
  with `DefaultTargetCapacityType=capacity-block` and the template's market type
  `capacity-block` (and only such a request may ask for `capacity-block`); the instance
  then reports `InstanceLifecycle=capacity-block`, and one in an interruptible reservation
  `interruptible-capacity-reservation`. DescribeInstances shows `CapacityReservationId`
  and `CapacityReservationSpecification`;
- time: a reservation with an end date expires at it (state `expired`, no more launches),
  and EC2 terminates a capacity block's instances from 30 minutes before its end. Checked
  whenever reservations or instances are described or launched;
- an instance terminated in a reservation gives its place back.

AWS sells capacity blocks through offerings (`PurchaseCapacityBlock`) and makes
interruptible reservations from an owner's ODCR; neither flow is emulated. A test makes
them with `POST /moto-api/joiner-local/capacity-reservations` (JSON: instanceType,
availabilityZone, instanceCount, endDate (Unix seconds), reservationType `default` or
`capacity-block`, interruptible, tags), which answers the reservation as JSON.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

ID = re.compile(r"^cr-[0-9a-f]{8}([0-9a-f]{9})?$")
BLOCK_RECLAIM = timedelta(minutes=30)


@dataclass
class Reservation:
    id: str
    owner_id: str
    region: str
    instance_type: str
    platform: str
    zone: str
    total: int
    available: int
    match_criteria: str
    end_date: datetime | None
    end_date_type: str
    reservation_type: str = "default"
    interruptible: bool = False
    tenancy: str = "default"
    state: str = "active"
    tags: dict[str, str] = field(default_factory=dict)
    create_date: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    instances: set[str] = field(default_factory=set)

    def arn(self) -> str:
        return f"arn:aws:ec2:{self.region}:{self.owner_id}:capacity-reservation/{self.id}"

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "CapacityReservationId": self.id,
            "OwnerId": self.owner_id,
            "CapacityReservationArn": self.arn(),
            "InstanceType": self.instance_type,
            "InstancePlatform": self.platform,
            "AvailabilityZone": self.zone,
            "Tenancy": self.tenancy,
            "TotalInstanceCount": self.total,
            "AvailableInstanceCount": self.available,
            "EbsOptimized": False,
            "EphemeralStorage": False,
            "State": self.state,
            "StartDate": self.create_date,
            "EndDateType": self.end_date_type,
            "InstanceMatchCriteria": self.match_criteria,
            "CreateDate": self.create_date,
            "Tags": [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())],
            "ReservationType": self.reservation_type,
            "Interruptible": self.interruptible,
        }
        if self.end_date is not None:
            d["EndDate"] = self.end_date
        return d


def _store(backend: Any) -> dict[str, Reservation]:
    store = getattr(backend, "_joiner_capacity_reservations", None)
    if store is None:
        store = {}
        backend._joiner_capacity_reservations = store
    return store


def _error(code: str, message: str) -> Exception:
    from moto.ec2.exceptions import EC2ClientError

    return EC2ClientError(code, message)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _tick(backend: Any) -> None:
    """What time does to reservations: expiry at the end date, and a capacity block's
    instances terminated from 30 minutes before it."""
    now = _now()
    for r in _store(backend).values():
        if r.end_date is None:
            continue
        if r.reservation_type == "capacity-block" and now >= r.end_date - BLOCK_RECLAIM:
            live = [i for i in r.instances if _instance_live(backend, i)]
            if live:
                backend.terminate_instances(live)
        if r.state == "active" and now >= r.end_date:
            r.state = "expired"


def _instance_live(backend: Any, instance_id: str) -> bool:
    try:
        i = backend.get_instance(instance_id)
    except Exception:  # noqa: BLE001
        return False
    return i.state not in ("terminated", "shutting-down")


def _get(backend: Any, rid: str) -> Reservation:
    if not ID.match(rid):
        raise _error("InvalidCapacityReservationId.Malformed", f'Invalid id: "{rid}"')
    r = _store(backend).get(rid)
    if r is None:
        raise _error(
            "InvalidCapacityReservationId.NotFound",
            f"The capacity reservation ID '{rid}' does not exist",
        )
    return r


def _known_type(instance_type: str) -> bool:
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    return instance_type in INSTANCE_TYPES


def create(
    backend: Any,
    instance_type: str | None,
    platform: str | None,
    zone: str | None,
    count: Any,
    end_date: datetime | None,
    end_date_type: str | None,
    match_criteria: str | None,
    tags: dict[str, str],
    reservation_type: str = "default",
    interruptible: bool = False,
) -> Reservation:
    for name, value in (
        ("InstanceType", instance_type),
        ("InstancePlatform", platform),
        ("InstanceCount", count),
        ("AvailabilityZone", zone),
    ):
        if value in (None, ""):
            raise _error("MissingParameter", f"The request must contain the parameter {name}")
    try:
        n = int(count)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise _error("InvalidParameterValue", f"Value ({count}) for parameter instanceCount is invalid. It must be at least 1.")
    if not _known_type(str(instance_type)):
        raise _error("InvalidParameterValue", f"Invalid instance type: {instance_type}")
    if backend.get_zone_by_name(zone) is None:
        raise _error("InvalidParameterValue", f"Invalid availability zone: [{zone}]")
    end_date_type = end_date_type or ("limited" if end_date else "unlimited")
    if end_date_type not in ("limited", "unlimited"):
        raise _error("InvalidParameterValue", f"Value ({end_date_type}) for parameter endDateType is invalid.")
    if end_date_type == "limited" and end_date is None:
        raise _error("InvalidParameterCombination", "EndDate must be specified when EndDateType is limited")
    if end_date_type == "unlimited" and end_date is not None:
        raise _error("InvalidParameterCombination", "EndDate cannot be specified when EndDateType is unlimited")
    if end_date is not None and end_date <= _now():
        raise _error("InvalidParameterValue", "The end date must be in the future")
    match_criteria = match_criteria or "open"
    if match_criteria not in ("open", "targeted"):
        raise _error("InvalidParameterValue", f"Value ({match_criteria}) for parameter instanceMatchCriteria is invalid.")
    r = Reservation(
        id="cr-" + secrets.token_hex(9)[:17],
        owner_id=backend.account_id,
        region=backend.region_name,
        instance_type=str(instance_type),
        platform=str(platform),
        zone=str(zone),
        total=n,
        available=n,
        match_criteria=match_criteria,
        end_date=end_date,
        end_date_type=end_date_type,
        reservation_type=reservation_type,
        interruptible=interruptible,
        tags=dict(tags),
    )
    _store(backend)[r.id] = r
    return r


_FILTERS = {
    "instance-type": lambda r: [r.instance_type],
    "owner-id": lambda r: [r.owner_id],
    "instance-platform": lambda r: [r.platform],
    "availability-zone": lambda r: [r.zone],
    "tenancy": lambda r: [r.tenancy],
    "state": lambda r: [r.state],
    "end-date-type": lambda r: [r.end_date_type],
    "instance-match-criteria": lambda r: [r.match_criteria],
    "tag-key": lambda r: list(r.tags),
}


def _matches(r: Reservation, filters: dict[str, list[str]]) -> bool:
    for name, values in filters.items():
        if name.startswith("tag:"):
            have = [r.tags[name[4:]]] if name[4:] in r.tags else []
        elif name in _FILTERS:
            have = _FILTERS[name](r)
        else:
            raise _error("InvalidParameterValue", f"The filter '{name}' is invalid")
        if not any(v in have for v in values):
            return False
    return True


def describe(backend: Any, ids: list[str], filters: dict[str, list[str]]) -> list[Reservation]:
    _tick(backend)
    if ids:
        found = [_get(backend, i) for i in ids]
    else:
        found = sorted(_store(backend).values(), key=lambda r: r.create_date)
    return [r for r in found if _matches(r, filters)]


def _target(backend: Any, data: dict[str, Any]) -> tuple[str | None, str | None]:
    """The reservation a template's data targets, and its market type."""
    spec = data.get("CapacityReservationSpecification") or {}
    target = spec.get("CapacityReservationTarget") or {}
    market = (data.get("InstanceMarketOptions") or {}).get("MarketType")
    if spec.get("CapacityReservationPreference") == "capacity-reservations-only" and target.get("CapacityReservationId"):
        return target["CapacityReservationId"], market
    return None, market


def _template_data(backend: Any, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        if spec.get("LaunchTemplateId"):
            t = backend.get_launch_template(spec["LaunchTemplateId"])
        else:
            t = backend.get_launch_template_by_name(spec.get("LaunchTemplateName"))
        version = spec.get("Version")
        if version in (None, "", "$Default"):
            return t.default_version().data or {}
        if version == "$Latest":
            return t.latest_version().data or {}
        return t.get_version(version).data or {}
    except Exception:  # noqa: BLE001 (moto's own error follows when the fleet resolves it)
        return {}


def _zone_of(backend: Any, override: dict[str, Any]) -> str | None:
    if override.get("AvailabilityZone"):
        return override["AvailabilityZone"]
    if override.get("SubnetId"):
        try:
            return backend.get_subnet(override["SubnetId"]).availability_zone
        except Exception:  # noqa: BLE001
            return None
    return None


def _fleet_plan(backend: Any, configs: list[dict[str, Any]], default: str, reserved_options: dict[str, Any]):
    """For a fleet whose templates target reservations: the (config, override, reservation)
    to launch, and the per-override errors before it. None when no template targets one."""
    tried: list[tuple[dict[str, Any], dict[str, Any], str | None, str | None]] = []
    for cfg in configs or []:
        spec = cfg.get("LaunchTemplateSpecification") or {}
        data = _template_data(backend, spec)
        rid, market = _target(backend, data)
        for ov in cfg.get("Overrides") or [{}]:
            tried.append((cfg, ov, rid, market))
    targeted = [t for t in tried if t[2]]
    blocks = [t for t in tried if t[3] == "capacity-block"]
    if default == "capacity-block" and len(blocks) != len(tried):
        raise _error(
            "InvalidParameterCombination",
            "A capacity-block target capacity requires launch templates with the capacity-block market type",
        )
    if blocks and default != "capacity-block":
        raise _error(
            "InvalidParameterCombination",
            "Launch templates with the capacity-block market type require the capacity-block target capacity type",
        )
    if default == "reserved-capacity" and "interruptible-capacity-reservation" not in (reserved_options.get("ReservationTypes") or []):
        raise _error(
            "InvalidParameterCombination",
            "The reserved-capacity target capacity type requires ReservedCapacityOptions with its reservation types",
        )
    if not targeted:
        if default in ("capacity-block", "reserved-capacity"):
            raise _error("InvalidParameterCombination", f"No launch template targets a capacity reservation for target capacity type {default}")
        return None
    errors: list[dict[str, Any]] = []
    store = _store(backend)
    for cfg, ov, rid, market in tried:
        spec = dict(cfg.get("LaunchTemplateSpecification") or {})
        where = {"LaunchTemplateSpecification": spec, "Overrides": ov}
        lifecycle = "capacity-block" if market == "capacity-block" else "on-demand"

        def fail(code: str, message: str) -> None:
            errors.append({"LaunchTemplateAndOverrides": where, "Lifecycle": lifecycle, "ErrorCode": code, "ErrorMessage": message})

        if not rid:
            fail("InvalidParameterCombination", "This override's launch template does not target a capacity reservation")
            continue
        r = store.get(rid)
        if r is None or not ID.match(rid):
            fail("InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{rid}' does not exist")
            continue
        if (r.reservation_type == "capacity-block") != (market == "capacity-block"):
            fail("InvalidParameterCombination", f"Capacity reservation {rid} is of type {r.reservation_type}; the launch's market type must match")
            continue
        if r.interruptible and default != "reserved-capacity":
            fail("InvalidParameterCombination", f"Capacity reservation {rid} is interruptible: launch it with the reserved-capacity target capacity type")
            continue
        itype = ov.get("InstanceType")
        zone = _zone_of(backend, ov)
        if itype != r.instance_type or zone != r.zone:
            fail("InvalidParameterValue", f"The instance type {itype} in {zone} does not match capacity reservation {rid} ({r.instance_type} in {r.zone})")
            continue
        if r.state != "active":
            fail("ReservationCapacityExceeded", f"Capacity reservation {rid} is {r.state}")
            continue
        if r.available < 1:
            fail("ReservationCapacityExceeded", f"Insufficient capacity in capacity reservation {rid}")
            continue
        return cfg, ov, r, errors
    return None, None, None, errors


def _launched_into(backend: Any, instance: Any, r: Reservation) -> None:
    r.available -= 1
    r.instances.add(instance.id)
    instance.capacity_reservation_id = r.id
    instance.capacity_reservation_specification = {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": r.id},
    }
    if r.reservation_type == "capacity-block":
        instance.lifecycle = "capacity-block"
        instance.instance_lifecycle = "capacity-block"
    elif r.interruptible:
        instance.lifecycle = "interruptible-capacity-reservation"
        instance.instance_lifecycle = "interruptible-capacity-reservation"


ADMIN_PATH = "/moto-api/joiner-local/capacity-reservations"


def _respond(start_response: Any, code: int, doc: Any) -> list[bytes]:
    body = json.dumps(doc).encode()
    reason = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed"}[code]
    start_response(f"{code} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _admin_create(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """A reservation AWS would make through another flow (a capacity block bought from an
    offering, an interruptible reservation carved from an owner's ODCR)."""
    from moto.ec2.models import ec2_backends

    if environ.get("REQUEST_METHOD") != "POST":
        return _respond(start_response, 405, {"message": "use POST"})
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    raw = environ["wsgi.input"].read(length) if length else b""
    try:
        body = json.loads(raw or b"{}")
        backend = ec2_backends[body.get("account", "123456789012")][body.get("region", "us-east-1")]
        end = body.get("endDate")
        kind = body.get("reservationType", "default")
        if kind not in ("default", "capacity-block"):
            raise ValueError(f"reservationType must be default or capacity-block, got {kind!r}")
        r = create(
            backend,
            body.get("instanceType"),
            body.get("instancePlatform", "Linux/UNIX"),
            body.get("availabilityZone"),
            body.get("instanceCount"),
            datetime.fromtimestamp(float(end), timezone.utc) if end is not None else None,
            None,
            body.get("instanceMatchCriteria", "targeted"),
            body.get("tags") or {},
            reservation_type=kind,
            interruptible=bool(body.get("interruptible", False)),
        )
    except Exception as e:  # noqa: BLE001 (EC2's refusal, or a malformed body)
        code = getattr(e, "error_type", None) or getattr(e, "code", None) or "InvalidRequest"
        return _respond(start_response, 400, {"error": str(code), "message": str(e)})
    d = r.as_dict()
    for k in ("StartDate", "CreateDate", "EndDate"):
        if k in d:
            d[k] = d[k].isoformat()
    return _respond(start_response, 200, d)


def install() -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.models.fleets import Fleet
    from moto.ec2.models.instances import Instance
    from moto.ec2.responses import EC2Response

    def create_capacity_reservation(self: Any) -> Any:
        self.error_on_dryrun()
        tags = self._parse_tag_specification().get("capacity-reservation", {})
        r = create(
            self.ec2_backend,
            self._get_param("InstanceType"),
            self._get_param("InstancePlatform"),
            self._get_param("AvailabilityZone"),
            self._get_param("InstanceCount"),
            self._get_param("EndDate"),
            self._get_param("EndDateType"),
            self._get_param("InstanceMatchCriteria"),
            tags,
        )
        return ActionResult({"CapacityReservation": r.as_dict()})

    def describe_capacity_reservations(self: Any) -> Any:
        self.error_on_dryrun()
        ids = self._get_param("CapacityReservationIds", []) or []
        max_results = self._get_param("MaxResults")
        if ids and max_results is not None:
            raise _error("InvalidParameterCombination", "The parameter CapacityReservationIds cannot be used with the parameter MaxResults")
        found = describe(self.ec2_backend, ids, self._filters_from_querystring())
        token = self._get_param("NextToken")
        start = int(token) if token and str(token).isdigit() else 0
        size = int(max_results) if max_results else 1000
        page = found[start : start + size]
        result: dict[str, Any] = {"CapacityReservations": [r.as_dict() for r in page]}
        if start + size < len(found):
            result["NextToken"] = str(start + size)
        return ActionResult(result)

    def cancel_capacity_reservation(self: Any) -> Any:
        self.error_on_dryrun()
        r = _get(self.ec2_backend, self._get_param("CapacityReservationId") or "")
        if r.reservation_type == "capacity-block":
            raise _error("InvalidParameterValue", f"Capacity reservation {r.id} is a Capacity Block and cannot be cancelled")
        if r.state != "active":
            raise _error("InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{r.id}' is not active")
        r.state = "cancelled"
        # Instances keep running, outside any reservation.
        for iid in list(r.instances):
            try:
                inst = self.ec2_backend.get_instance(iid)
                inst.capacity_reservation_id = None
                inst.capacity_reservation_specification = {"CapacityReservationPreference": "open"}
            except Exception:  # noqa: BLE001
                pass
        r.instances.clear()
        return ActionResult({"Return": True})

    EC2Response.create_capacity_reservation = create_capacity_reservation  # type: ignore[attr-defined]
    EC2Response.describe_capacity_reservations = describe_capacity_reservations  # type: ignore[attr-defined]
    EC2Response.cancel_capacity_reservation = cancel_capacity_reservation  # type: ignore[attr-defined]

    original_describe_instances = EC2Response.describe_instances

    def describe_instances(self: Any) -> Any:
        _tick(self.ec2_backend)
        return original_describe_instances(self)

    EC2Response.describe_instances = describe_instances  # type: ignore[method-assign]

    original_create_fleet_response = EC2Response.create_fleet

    def create_fleet_response(self: Any) -> Any:
        out = original_create_fleet_response(self)
        result = dict(out.result) if isinstance(out.result, dict) else {}
        fleet = self.ec2_backend.get_fleet(result.get("FleetId"))
        errors = getattr(fleet, "_joiner_errors", None)
        if errors:
            result["Errors"] = errors
            return ActionResult(result)
        return out

    EC2Response.create_fleet = create_fleet_response  # type: ignore[method-assign]

    original_init = Fleet.__init__

    def fleet_init(self: Any, ec2_backend: Any, fleet_id: str, on_demand_options: Any, spot_options: Any, target_capacity_specification: dict[str, Any], launch_template_configs: list[dict[str, Any]], *args: Any, **kwargs: Any) -> None:
        _tick(ec2_backend)
        tcs = dict(target_capacity_specification or {})
        default = tcs.get("DefaultTargetCapacityType") or "on-demand"
        reserved_options = getattr(ec2_backend, "_joiner_reserved_options", {}) or {}
        plan = _fleet_plan(ec2_backend, launch_template_configs, default, reserved_options)
        if plan is None:
            original_init(self, ec2_backend, fleet_id, on_demand_options, spot_options, target_capacity_specification, launch_template_configs, *args, **kwargs)
            return
        cfg, ov, r, errors = plan
        if r is None:
            zero = {**tcs, "TotalTargetCapacity": 0, "DefaultTargetCapacityType": "on-demand"}
            original_init(self, ec2_backend, fleet_id, on_demand_options, spot_options, zero, launch_template_configs, *args, **kwargs)
        else:
            one = {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"}
            chosen = [{"LaunchTemplateSpecification": cfg.get("LaunchTemplateSpecification"), "Overrides": [ov]}]
            original_init(self, ec2_backend, fleet_id, on_demand_options, spot_options, one, chosen, *args, **kwargs)
            for item in self.on_demand_instances:
                _launched_into(ec2_backend, item["instance"], r)
            self.launch_template_configs = launch_template_configs
        self.target_capacity_specification = target_capacity_specification
        self._joiner_errors = errors

    Fleet.__init__ = fleet_init  # type: ignore[method-assign]

    original_instances = Fleet.instances

    def instances(self: Any) -> Any:
        out = original_instances.fget(self)
        if out is None:
            return out
        for item in out:
            ids = item.get("InstanceIds") or []
            for iid in ids:
                lifecycle = _lifecycle_of(self.ec2_backend, iid)
                if lifecycle:
                    item["Lifecycle"] = lifecycle
        return out

    Fleet.instances = property(instances)  # type: ignore[method-assign,assignment]

    # The request's ReservedCapacityOptions reach the fleet through the backend (moto's
    # create_fleet does not pass them on).
    original_response_create = create_fleet_response

    def create_fleet_with_options(self: Any) -> Any:
        self.ec2_backend._joiner_reserved_options = self._get_param("ReservedCapacityOptions", {}) or {}
        try:
            return original_response_create(self)
        finally:
            self.ec2_backend._joiner_reserved_options = {}

    EC2Response.create_fleet = create_fleet_with_options  # type: ignore[method-assign]

    original_terminate = Instance.terminate

    def terminate(self: Any) -> Any:
        rid = getattr(self, "capacity_reservation_id", None)
        was_live = self.state not in ("terminated", "shutting-down")
        out = original_terminate(self)
        if rid and was_live:
            r = _store(self.ec2_backend).get(rid)
            if r is not None and self.id in r.instances:
                r.instances.discard(self.id)
                if r.state == "active":
                    r.available = min(r.total, r.available + 1)
        return out

    Instance.terminate = terminate  # type: ignore[method-assign]

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original_call = DomainDispatcherApplication.__call__

    def call(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "") == ADMIN_PATH:
            return _admin_create(environ, start_response)
        return original_call(self, environ, start_response)

    DomainDispatcherApplication.__call__ = call  # type: ignore[method-assign]


def _lifecycle_of(backend: Any, instance_id: str) -> str | None:
    try:
        i = backend.get_instance(instance_id)
    except Exception:  # noqa: BLE001
        return None
    return getattr(i, "instance_lifecycle", None)

