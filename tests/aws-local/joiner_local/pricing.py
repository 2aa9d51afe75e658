"""The AWS Price List Query API's GetProducts (`pricing:GetProducts`), with its refusals.

moto 5.2.5 has no pricing service: a request signed for `pricing` finds no backend and is
answered as S3. Here a `pricing` service is added to moto's server the way moto's own are
found: a backend (`pricing_backends`, importable as `moto.pricing`), a URL pattern for the
host the server infers from the SigV4 credential scope (`pricing.<region>.amazonaws.com`,
and the real `api.pricing.<region>.amazonaws.com[.cn]`), and a response class answering
awsJson1_1 `AWSPriceListService.<Operation>` at `POST /`. IAM authorization goes through
moto's ordinary hook, so `iam_enforce` authorizes it as `pricing:GetProducts` on `*`.

The products: EC2 on-demand Linux prices from the agent's tables
(`agent/data/ec2-ondemand-prices-<region>.csv`; see `agent/data/README.md`), one product per
(Region, instance type), in the shape of the public price list (the offer file's product
and its `OnDemand` term; botocore's model types each PriceList item as a JSON string):

- `product`: `productFamily` "Compute Instance" with `tenancy` "Shared", or for types named
  `*.metal*` "Compute Instance (bare metal)" with `tenancy` "Dedicated" (the pair Karpenter
  asks for bare metal, and gets answers for on AWS: `pkg/providers/pricing/pricing.go`
  errors out when that query is empty); `attributes` `servicecode` AmazonEC2, `servicename`,
  `location` (the Region's name as botocore's endpoints.json describes it), `locationType`
  "AWS Region", `regionCode`, `instanceType`, `operatingSystem` Linux, `preInstalledSw` NA,
  `licenseModel` "No License required", `capacitystatus` Used, `marketoption` OnDemand,
  `operation` RunInstances; and a 16-character `sku` derived from Region, type and tenancy.
- `terms.OnDemand.<sku>.<sku>.<offerTermCode>` with `priceDimensions.<sku>.<offerTermCode>.
  <rateCode>` (`unit` Hrs, `pricePerUnit` {USD or CNY: ten decimals}, `description`,
  `beginRange` 0, `endRange` Inf, `appliesTo` []), `sku`, `effectiveDate`, `offerTermCode`,
  `termAttributes` {}. The codes are the public list's on-demand ones: JRTCKXETXF /
  6YS6EN2CT7 in the aws partitions, 5Y9WH78GDR / Q7UJUT2CE6 in China.
- `serviceCode` AmazonEC2, `version`, `publicationDate`.
- A Region without a table has no products (an empty PriceList); a type priced 0 in a table
  is left out. cn- Regions are priced in CNY, all others in USD.

The request as the API takes it (botocore `pricing/2017-10-15/service-2.json`):
ServiceCode (required; a code other than AmazonEC2 has no products here), Filters (at most
50; Type one of the model's TERM_MATCH, EQUALS, CONTAINS, ANY_OF, NONE_OF; Field and Value
1 to 1,024 characters; a product matches when every filter holds; fields are the product's
attributes, `productFamily`, `ServiceCode`/`serviceCode` and `sku`; TERM_MATCH and EQUALS
compare exactly, CONTAINS is a substring, ANY_OF and NONE_OF take a comma-separated list),
FormatVersion (`aws_v1`, the default and the only value), MaxResults (1 to 100; 100 when
absent) and NextToken (an opaque token from this API's previous page of the same query).
Refusals are `InvalidParameterException` (HTTP 400) for a bad parameter and
`InvalidNextTokenException` (HTTP 400) for a token this API did not issue for that query.
Only GetProducts is served: another operation of the API (DescribeServices,
GetAttributeValues, the Bulk API's) is refused `UnknownOperationException` (HTTP 400), a
body that is not a JSON object `SerializationException`, and an unsigned request
`MissingAuthenticationTokenException` (HTTP 403).

The endpoint: the Price List Query API is served only from some Regions (botocore's
`endpoints.json`, service `api.pricing`: us-east-1, eu-central-1, ap-south-1, cn-northwest-1,
and the ISO Regions; none in GovCloud). A request signed for another Region has no endpoint
on AWS, so the client cannot connect at all; here it is answered HTTP 404 with the code
`EndpointNotFound` (a form of this local world's own, stated in the message), before any
authorization.

A test changes a price (as a price list update would) with `POST
/moto-api/joiner-local/pricing/<region>` and a JSON object `{"<instance type>": "<price>"}`
(a positive decimal, in the Region's currency; `null` removes a change), answered with the
Region's changes; `GET` on the same path lists them. `/moto-api/reset` clears them.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import re
import sys
import threading
import types
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[3] / "agent" / "data"
# The Regions with a table (agent/data/ec2-ondemand-prices-<region>.csv), and the day each
# table's prices took effect (agent/data/README.md: when they were taken).
TABLES = {
    "us-east-1": "2026-07-01T00:00:00Z",
    "us-gov-west-1": "2026-07-01T00:00:00Z",
    "us-gov-east-1": "2026-07-01T00:00:00Z",
    "cn-north-1": "2024-11-01T00:00:00Z",
}
SERVICE_CODE = "AmazonEC2"
FORMAT_VERSION = "aws_v1"
FILTER_TYPES = ("TERM_MATCH", "EQUALS", "CONTAINS", "ANY_OF", "NONE_OF")
MAX_FILTERS = 50
MIN_RESULTS, MAX_RESULTS, DEFAULT_RESULTS = 1, 100, 100
# The public price list's on-demand offer term and rate codes, by partition.
TERM_CODES = {"aws-cn": ("5Y9WH78GDR", "Q7UJUT2CE6")}
DEFAULT_TERM_CODES = ("JRTCKXETXF", "6YS6EN2CT7")
# Used when botocore's endpoints.json cannot be read (its `api.pricing` endpoints).
FALLBACK_ENDPOINTS = ("us-east-1", "eu-central-1", "ap-south-1", "cn-northwest-1")
ADMIN_PREFIX = "/moto-api/joiner-local/pricing/"
JSON_TYPE = "application/x-amz-json-1.1"

_LOCK = threading.Lock()
# region -> {instance type: price string}: the prices a test changed.
_OVERRIDES: dict[str, dict[str, str]] = {}
_TABLE_CACHE: dict[str, dict[str, str]] = {}
_META: dict[str, Any] = {}


# ----------------------------------------------------------------------------------------
# Where the API is served, and what the Regions are called.


def _endpoints_data() -> dict[str, Any]:
    if "endpoints" not in _META:
        import botocore

        try:
            with open(Path(botocore.__file__).parent / "data" / "endpoints.json") as f:
                _META["endpoints"] = json.load(f)
        except (OSError, ValueError):
            _META["endpoints"] = {"partitions": []}
    return _META["endpoints"]


def endpoint_regions() -> tuple[str, ...]:
    """The Regions that serve the Price List Query API."""
    if "regions" not in _META:
        found: list[str] = []
        for part in _endpoints_data().get("partitions", []):
            found.extend(sorted((part.get("services", {}).get("api.pricing") or {}).get("endpoints", {})))
        _META["regions"] = tuple(found) or FALLBACK_ENDPOINTS
    return _META["regions"]


def location(region: str) -> str:
    for part in _endpoints_data().get("partitions", []):
        desc = (part.get("regions", {}).get(region) or {}).get("description")
        if desc:
            return desc
    return region


def currency(region: str) -> str:
    return "CNY" if region.startswith("cn-") else "USD"


def _partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


# ----------------------------------------------------------------------------------------
# Products.


def _table(region: str) -> dict[str, str]:
    """instance type -> price (as the table prints it), for a Region with a table."""
    if region not in TABLES:
        return {}
    if region not in _TABLE_CACHE:
        with open(DATA / f"ec2-ondemand-prices-{region}.csv", newline="") as f:
            rows = csv.reader(f)
            next(rows)
            _TABLE_CACHE[region] = {t: p for t, p in rows if Decimal(p) > 0}
    return _TABLE_CACHE[region]


def prices(region: str) -> dict[str, str]:
    """The Region's prices now: its table with the changes a test made, sorted by type."""
    with _LOCK:
        changed = dict(_OVERRIDES.get(region, {}))
    merged = dict(_table(region))
    merged.update(changed)
    return dict(sorted(merged.items()))


def _sku(region: str, instance_type: str, tenancy: str) -> str:
    digest = hashlib.sha256(f"{region}|{instance_type}|{tenancy}|Linux".encode()).digest()
    return base64.b32encode(digest).decode()[:16]


def _ten_decimals(price: str) -> str:
    return f"{Decimal(price):.10f}"


def product(region: str, instance_type: str, price: str) -> dict[str, Any]:
    metal = ".metal" in instance_type
    tenancy = "Dedicated" if metal else "Shared"
    family = "Compute Instance (bare metal)" if metal else "Compute Instance"
    sku = _sku(region, instance_type, tenancy)
    term, rate = TERM_CODES.get(_partition(region), DEFAULT_TERM_CODES)
    cur = currency(region)
    effective = TABLES.get(region, "2026-07-01T00:00:00Z")
    amount = f"{Decimal(price).normalize():f}"
    if cur == "USD":
        description = f"${amount} per On Demand Linux {instance_type} Instance Hour"
    else:
        description = f"{amount} {cur} per On Demand Linux {instance_type} Instance Hour"
    return {
        "product": {
            "productFamily": family,
            "attributes": {
                "servicecode": SERVICE_CODE,
                "servicename": "Amazon Elastic Compute Cloud",
                "location": location(region),
                "locationType": "AWS Region",
                "regionCode": region,
                "instanceType": instance_type,
                "tenancy": tenancy,
                "operatingSystem": "Linux",
                "licenseModel": "No License required",
                "preInstalledSw": "NA",
                "capacitystatus": "Used",
                "marketoption": "OnDemand",
                "operation": "RunInstances",
            },
            "sku": sku,
        },
        "serviceCode": SERVICE_CODE,
        "terms": {
            "OnDemand": {
                f"{sku}.{term}": {
                    "priceDimensions": {
                        f"{sku}.{term}.{rate}": {
                            "unit": "Hrs",
                            "endRange": "Inf",
                            "description": description,
                            "appliesTo": [],
                            "rateCode": f"{sku}.{term}.{rate}",
                            "beginRange": "0",
                            "pricePerUnit": {cur: _ten_decimals(price)},
                        }
                    },
                    "sku": sku,
                    "effectiveDate": effective,
                    "offerTermCode": term,
                    "termAttributes": {},
                }
            }
        },
        "version": effective[:10].replace("-", "") + "000000",
        "publicationDate": effective,
    }


def catalogue() -> list[dict[str, Any]]:
    """Every product of every Region with a table or with changes, in a stable order."""
    with _LOCK:
        regions = sorted(set(TABLES) | set(_OVERRIDES))
    return [product(r, t, p) for r in regions for t, p in prices(r).items()]


def _field(doc: dict[str, Any], field: str) -> str | None:
    attrs = doc["product"]["attributes"]
    if field in attrs:
        return attrs[field]
    if field == "productFamily":
        return doc["product"]["productFamily"]
    if field in ("ServiceCode", "serviceCode"):
        return doc["serviceCode"]
    if field == "sku":
        return doc["product"]["sku"]
    return None


def _holds(doc: dict[str, Any], f: dict[str, str]) -> bool:
    value = _field(doc, f["Field"])
    wanted = f["Value"]
    kind = f["Type"]
    if kind in ("TERM_MATCH", "EQUALS"):
        return value == wanted
    if kind == "CONTAINS":
        return value is not None and wanted in value
    choices = {v.strip() for v in wanted.split(",")}
    if kind == "ANY_OF":
        return value in choices
    return value not in choices  # NONE_OF


# ----------------------------------------------------------------------------------------
# The request.


class PricingError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _invalid(message: str) -> PricingError:
    return PricingError("InvalidParameterException", message)


def _filters(raw: Any) -> list[dict[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _invalid("Filters must be a list.")
    if len(raw) > MAX_FILTERS:
        raise _invalid(
            f"1 validation error detected: Value at 'filters' failed to satisfy constraint: "
            f"Member must have length less than or equal to {MAX_FILTERS}"
        )
    out = []
    for i, f in enumerate(raw, 1):
        if not isinstance(f, dict):
            raise _invalid(f"Filters.{i} must be a structure.")
        kind, field, value = f.get("Type"), f.get("Field"), f.get("Value")
        if kind not in FILTER_TYPES:
            raise _invalid(
                f"1 validation error detected: Value '{kind}' at 'filters.{i}.member.type' failed to "
                f"satisfy constraint: Member must satisfy enum value set: [{', '.join(FILTER_TYPES)}]"
            )
        for name, v in (("field", field), ("value", value)):
            if not isinstance(v, str) or not 1 <= len(v) <= 1024:
                raise _invalid(
                    f"1 validation error detected: Value at 'filters.{i}.member.{name}' failed to "
                    f"satisfy constraint: Member must have length between 1 and 1024"
                )
        out.append({"Type": kind, "Field": field, "Value": value})
    return out


def _max_results(raw: Any) -> int:
    if raw is None:
        return DEFAULT_RESULTS
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise _invalid("MaxResults must be an integer.")
    if raw < MIN_RESULTS:
        bound = f"greater than or equal to {MIN_RESULTS}"
    elif raw > MAX_RESULTS:
        bound = f"less than or equal to {MAX_RESULTS}"
    else:
        return raw
    raise _invalid(
        f"1 validation error detected: Value '{raw}' at 'maxResults' failed to satisfy constraint: "
        f"Member must have value {bound}"
    )


def _query_key(service_code: str, filters: list[dict[str, str]], format_version: str) -> str:
    text = json.dumps([service_code, filters, format_version], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _token(key: str, offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"q": key, "o": offset}).encode()).decode()


def _offset(token: Any, key: str) -> int:
    bad = PricingError("InvalidNextTokenException", "The pagination token is invalid. Try again without a pagination token.")
    if not isinstance(token, str) or not token:
        raise bad
    try:
        doc = json.loads(base64.urlsafe_b64decode(token.encode()))
        offset = doc["o"]
        if doc["q"] != key or not isinstance(offset, int) or offset <= 0:
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise bad from None
    return offset


def get_products(body: dict[str, Any]) -> dict[str, Any]:
    service_code = body.get("ServiceCode")
    if not isinstance(service_code, str) or not service_code:
        raise _invalid(
            "1 validation error detected: Value null at 'serviceCode' failed to satisfy constraint: Member must not be null"
        )
    filters = _filters(body.get("Filters"))
    format_version = body.get("FormatVersion", FORMAT_VERSION)
    if format_version != FORMAT_VERSION:
        raise _invalid(f"FormatVersion {format_version!r} is not supported: use {FORMAT_VERSION}.")
    limit = _max_results(body.get("MaxResults"))
    key = _query_key(service_code, filters, format_version)
    start = _offset(body["NextToken"], key) if body.get("NextToken") is not None else 0
    found = []
    if service_code == SERVICE_CODE:
        found = [d for d in catalogue() if all(_holds(d, f) for f in filters)]
    page = found[start : start + limit]
    out: dict[str, Any] = {"FormatVersion": format_version, "PriceList": [json.dumps(d) for d in page]}
    if start + limit < len(found):
        out["NextToken"] = _token(key, start + limit)
    return out


# ----------------------------------------------------------------------------------------
# moto's side: backend, URLs, responses.


def signing_region(auth: str | None) -> str | None:
    """The Region of a SigV4 Authorization header's credential scope."""
    m = re.search(r"Credential=[^/,\s]+/\d{8}/([^/,\s]+)/", auth or "")
    return m.group(1) if m else None


def _error(code: str, message: str, status: int) -> tuple[int, dict[str, Any], str]:
    headers = {"status": status, "x-amzn-ErrorType": code, "Content-Type": JSON_TYPE}
    return status, headers, json.dumps({"__type": code, "message": message, "Message": message})


def _make_response_class() -> type:
    from moto.core.responses import BaseResponse

    class PricingResponse(BaseResponse):
        def __init__(self) -> None:
            super().__init__(service_name="pricing")

        def call_action(self) -> Any:
            auth = self.headers.get("Authorization")
            if not auth:
                return _error("MissingAuthenticationTokenException", "Missing Authentication Token", 403)
            region = signing_region(auth) or ""
            if region not in endpoint_regions():
                return _error(
                    "EndpointNotFound",
                    f"The AWS Price List Query API has no endpoint in {region or 'this Region'} "
                    f"(api.pricing.{region}.amazonaws.com does not exist); it is served from "
                    f"{', '.join(endpoint_regions())}. On AWS the client cannot connect at all; "
                    "this error is the local world's.",
                    404,
                )
            op = self._get_action()
            if op != "GetProducts":
                # The API's other operations (DescribeServices, GetAttributeValues, the Bulk
                # API's) are not served here: refused as awsJson refuses an unknown target.
                return _error("UnknownOperationException", f"Operation {op or '(none)'} is not served by the local world's Price List API.", 400)
            return super().call_action()

        def get_products(self) -> Any:
            try:
                body = json.loads(self.body or "{}")
                if not isinstance(body, dict):
                    raise ValueError
            except ValueError:
                return _error("SerializationException", "The request body is not a JSON object.", 400)
            try:
                answer = get_products(body)
            except PricingError as e:
                return _error(e.code, e.message, e.status)
            return 200, {"Content-Type": JSON_TYPE}, json.dumps(answer)

    return PricingResponse


def _admin(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    region = environ.get("PATH_INFO", "")[len(ADMIN_PREFIX) :].strip("/")
    method = environ.get("REQUEST_METHOD", "GET")

    def respond(code: int, doc: Any) -> list[bytes]:
        body = json.dumps(doc).encode()
        reason = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed"}[code]
        start_response(f"{code} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region):
        return respond(400, {"message": f"not a Region: {region!r}"})
    if method == "GET":
        with _LOCK:
            return respond(200, {"region": region, "currency": currency(region), "changed": dict(_OVERRIDES.get(region, {}))})
    if method != "POST":
        return respond(405, {"message": f"{method} not allowed: use GET or POST"})
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        doc = json.loads(environ["wsgi.input"].read(length) if length else b"{}")
        if not isinstance(doc, dict) or not doc:
            raise ValueError('the body must be a JSON object {"<instance type>": "<price>"}')
        changes: dict[str, str | None] = {}
        for instance_type, price in doc.items():
            if not re.fullmatch(r"[a-z0-9-]+\.[a-z0-9-]+", instance_type):
                raise ValueError(f"not an instance type: {instance_type!r}")
            if price is None:
                changes[instance_type] = None
                continue
            value = Decimal(str(price))
            if not value.is_finite() or value <= 0:
                raise ValueError(f"price of {instance_type} must be a positive decimal, got {price!r}")
            changes[instance_type] = str(price)
    except (ValueError, InvalidOperation, TypeError) as e:
        return respond(400, {"message": str(e)})
    with _LOCK:
        mine = _OVERRIDES.setdefault(region, {})
        for instance_type, price in changes.items():
            if price is None:
                mine.pop(instance_type, None)
            else:
                mine[instance_type] = price
        if not mine:
            _OVERRIDES.pop(region, None)
        current = dict(_OVERRIDES.get(region, {}))
    return respond(200, {"region": region, "currency": currency(region), "changed": current})


def clear() -> None:
    with _LOCK:
        _OVERRIDES.clear()


def install() -> None:
    import moto
    import moto.backend_index as backend_index
    from moto.core.base_backend import BackendDict, BaseBackend
    from moto.moto_api._internal.models import MotoAPIBackend
    from moto.moto_server import werkzeug_app
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from moto.utilities.utils import PARTITION_NAMES

    response_class = _make_response_class()
    # What moto's BaseBackend reads from a service's `urls` module.
    urls = types.SimpleNamespace(
        url_bases=[r"https?://(api\.)?pricing\.(.+)\.amazonaws\.com"],
        url_paths={"{0}/$": response_class.dispatch},
    )

    class PricingBackend(BaseBackend):
        """The Price List is the same for every account: nothing is kept per backend."""

        @property
        def _url_module(self) -> Any:
            return urls

    module = types.ModuleType("moto.pricing")
    module.__doc__ = "The local world's Price List Query API (joiner_local.pricing)."
    module.pricing_backends = BackendDict(PricingBackend, "pricing", use_boto3_regions=False, additional_regions=PARTITION_NAMES)  # type: ignore[attr-defined]
    module.PricingBackend = PricingBackend  # type: ignore[attr-defined]
    module.PricingResponse = response_class  # type: ignore[attr-defined]
    # `moto.backends.get_backend("pricing")` imports `moto.pricing`.
    sys.modules["moto.pricing"] = module
    moto.pricing = module  # type: ignore[attr-defined]
    # The server finds a signed request's backend by the host it infers from the credential
    # scope (`pricing.<region>.amazonaws.com`), matched against these patterns.
    pattern = re.compile(r"https?://(api\.)?pricing\.(.+)\.amazonaws\.com(\.cn)?")
    if not any(name == "pricing" for name, _ in backend_index.backend_url_patterns):
        backend_index.backend_url_patterns.insert(0, ("pricing", pattern))
    # An unsigned request is routed by its target prefix; it is then refused as AWS does.
    werkzeug_app.UNSIGNED_REQUESTS.setdefault("AWSPriceListService", ("pricing", "us-east-1"))

    original_call = DomainDispatcherApplication.__call__

    def call(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "").startswith(ADMIN_PREFIX):
            return _admin(environ, start_response)
        return original_call(self, environ, start_response)

    DomainDispatcherApplication.__call__ = call  # type: ignore[method-assign]

    original_reset = MotoAPIBackend.reset

    def reset(self: MotoAPIBackend) -> None:
        original_reset(self)
        clear()

    MotoAPIBackend.reset = reset  # type: ignore[method-assign]
