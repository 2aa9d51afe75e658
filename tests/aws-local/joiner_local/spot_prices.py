"""EC2 Spot price history: a price for every (instance type, zone) with a Spot market, and
none where there is no market.

moto 5.2.5 answers DescribeSpotPriceHistory with the price "0.00001" for every type in every
zone it offers, whatever the type: a client cannot tell a cheap market from none. EC2 prices
every Spot market it has (the price in effect at the start time, "the last price change before
the start time": the API reference), so a type or zone missing from its answer has no Spot
market, and Karpenter offers no Spot there (`offering/base_resolver.go`, `pricing.go`). Here,
in moto's process, the history is served as EC2 would, from a stated model:

- The price: the Region's public on-demand price, from the table the agent embeds for it
  (`agent/data/ec2-ondemand-prices-<region>.csv`), in the Region's currency as EC2 answers
  there (CNY in the China Regions, USD elsewhere). A Region without a table of its own is
  served from its partition's, as the agent prices it (`agent/src/catalog/prices.rs`):
  cn-north-1's in `cn-` Regions, us-gov-west-1's in GovCloud, us-east-1's elsewhere. The
  on-demand price times a fixed factor per instance category (general purpose `c`,
  `m` 0.35; memory `r`, `x`, `z` 0.40; burstable `t` 0.30; accelerated `g`, `p`, `inf`,
  `trn`, `dl`, `vt`, `f` 0.45; anything else 0.40), times 1 + 0.01 x (zone letter index mod 5),
  printed with six decimals as EC2 prints prices. It is the model the agent's benchmarks use
  (`agent/src/catalog/prices.rs`, `spot_model`), so the local world and the benchmarks agree.
- No entry, that is no Spot market, for:
  - types whose SupportedUsageClasses (moto's instance-type data, as EC2 describes them) lack
    `spot`: EC2 does not sell them as Spot (mac, hpc, u- high memory, t2.nano, ...);
  - types the on-demand table does not list: nothing to model their price from;
  - the `c6in` family in the region's first zone (`us-east-1a`): a hole chosen so that tests
    can see a type sold as Spot in some zones and not in another, as real regions have.
- Product descriptions `Linux/UNIX` and `Linux/UNIX (Amazon VPC)`, at the same price (other
  operating systems are not served). Whether EC2 still reports the VPC variant for every
  account: not verified; it is served so that a client asking for either gets an answer.
- One price point per (type, zone, product), with the timestamp 2026-07-01T00:00:00Z (the
  date of the on-demand table), whatever StartTime and EndTime ask: the answer never depends
  on the world's state or the clock.
- The request as EC2 takes it: InstanceTypes, ProductDescriptions, AvailabilityZone or
  AvailabilityZoneId (not both: InvalidParameterCombination), the documented filters
  (`availability-zone`, `availability-zone-id`, `instance-type`, `product-description`,
  `spot-price`, `timestamp`, with `*` and `?` wildcards; another filter name is refused
  with InvalidParameterValue), MaxResults (1000 when absent; pages of at most 1000, EC2's own
  bound on it: not verified) and NextToken.
"""

from __future__ import annotations

import csv
import fnmatch
from pathlib import Path
from typing import Any

TIMESTAMP = "2026-07-01T00:00:00.000Z"
PRODUCTS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]
PAGE = 1000
FILTERS = {"availability-zone", "availability-zone-id", "instance-type", "product-description", "spot-price", "timestamp"}
# (family, zone letter): no Spot market there.
NO_MARKET = {("c6in", "a")}
DATA = Path(__file__).resolve().parents[3] / "agent" / "data"
# The Regions with a table of their own (agent/data/ec2-ondemand-prices-<region>.csv).
TABLES = ("us-east-1", "us-gov-west-1", "us-gov-east-1", "cn-north-1")

_on_demand: dict[str, dict[str, float]] = {}


def table_region(region: str) -> str:
    """The Region whose on-demand table prices `region` (its own, else its partition's)."""
    if region in TABLES:
        return region
    if region.startswith("cn-"):
        return "cn-north-1"
    if region.startswith("us-gov-"):
        return "us-gov-west-1"
    return "us-east-1"


def on_demand(region: str = "us-east-1") -> dict[str, float]:
    """Price per hour by instance type, in the Region's currency."""
    name = table_region(region)
    if name not in _on_demand:
        with open(DATA / f"ec2-ondemand-prices-{name}.csv", newline="") as f:
            rows = csv.reader(f)
            next(rows)
            _on_demand[name] = {t: float(p) for t, p in rows if float(p) > 0}
    return _on_demand[name]


def category_of(instance_type: str) -> str:
    """`c` for `c5a.large`, `inf` for `inf2.xlarge`, `m` for `m7i-flex.large`."""
    family = instance_type.split(".", 1)[0]
    for i, ch in enumerate(family):
        if ch.isdigit() or ch == "-":
            return family[:i]
    return family


def spot_factor(category: str) -> float:
    if category in ("c", "m"):
        return 0.35
    if category in ("r", "x", "z"):
        return 0.40
    if category == "t":
        return 0.30
    if category in ("g", "p", "inf", "trn", "dl", "vt", "f"):
        return 0.45
    return 0.40


def zone_letter(zone: str) -> str:
    last = zone[-1:] if zone else ""
    return last if "a" <= last <= "z" else "a"


def spot_price(instance_type: str, zone: str, region: str = "us-east-1") -> str | None:
    """The modelled price in `region`'s currency, or None where the model says there is no
    Spot market."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    info = INSTANCE_TYPES.get(instance_type)
    if info is None or "spot" not in info.get("SupportedUsageClasses", []):
        return None
    od = on_demand(region).get(instance_type)
    if od is None:
        return None
    family = instance_type.split(".", 1)[0]
    if (family, zone_letter(zone)) in NO_MARKET:
        return None
    zone_factor = 1.0 + 0.01 * ((ord(zone_letter(zone)) - ord("a")) % 5)
    return f"{od * spot_factor(category_of(instance_type)) * zone_factor:.6f}"


def history(region: str, zone_ids: dict[str, str]) -> list[dict[str, str]]:
    """Every price point of the region, sorted by type, zone and product."""
    from moto.ec2.models.instance_types import INSTANCE_TYPE_OFFERINGS

    out = []
    offered = sorted({(o["InstanceType"], o["Location"]) for o in INSTANCE_TYPE_OFFERINGS["availability-zone"].get(region, [])})
    for instance_type, zone in offered:
        price = spot_price(instance_type, zone, region)
        if price is None:
            continue
        for product in PRODUCTS:
            item = {
                "AvailabilityZone": zone,
                "InstanceType": instance_type,
                "ProductDescription": product,
                "SpotPrice": price,
                "Timestamp": TIMESTAMP,
            }
            if zone in zone_ids:
                item["AvailabilityZoneId"] = zone_ids[zone]
            out.append(item)
    return out


def _error(code: str, message: str) -> Exception:
    from moto.ec2.exceptions import EC2ClientError

    return EC2ClientError(code, message)


def _matches(item: dict[str, str], name: str, values: list[str]) -> bool:
    field = {
        "availability-zone": "AvailabilityZone",
        "availability-zone-id": "AvailabilityZoneId",
        "instance-type": "InstanceType",
        "product-description": "ProductDescription",
        "spot-price": "SpotPrice",
        "timestamp": "Timestamp",
    }[name]
    got = item.get(field, "")
    return any(fnmatch.fnmatchcase(got, v) for v in values)


def install() -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.responses.spot_instances import SpotInstances

    def describe_spot_price_history(self: Any) -> Any:
        self.error_on_dryrun()
        zone = self._get_param("AvailabilityZone")
        zone_id = self._get_param("AvailabilityZoneId")
        if zone and zone_id:
            raise _error("InvalidParameterCombination", "Either AvailabilityZone or AvailabilityZoneId can be specified, but not both")
        filters = self._filters_from_querystring() or {}
        for name in filters:
            if name not in FILTERS:
                raise _error("InvalidParameterValue", f"The filter '{name}' is invalid")
        types = set(self._get_param("InstanceTypes", []) or [])
        products = set(self._get_param("ProductDescriptions", []) or [])
        zone_ids = {z.name: z.zone_id for z in self.ec2_backend.describe_availability_zones()}
        found = [
            item
            for item in history(self.region, zone_ids)
            if (not types or item["InstanceType"] in types)
            and (not products or item["ProductDescription"] in products)
            and (not zone or item["AvailabilityZone"] == zone)
            and (not zone_id or item.get("AvailabilityZoneId") == zone_id)
            and all(_matches(item, name, values) for name, values in filters.items())
        ]
        max_results = self._get_param("MaxResults")
        size = min(int(max_results), PAGE) if max_results else PAGE
        size = max(size, 1)
        token = self._get_param("NextToken")
        start = int(token) if token and str(token).isdigit() else 0
        result: dict[str, Any] = {"SpotPriceHistory": found[start : start + size]}
        if start + size < len(found):
            result["NextToken"] = str(start + size)
        return ActionResult(result)

    SpotInstances.describe_spot_price_history = describe_spot_price_history  # type: ignore[method-assign]
