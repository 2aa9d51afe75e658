"""Self-check of `joiner_local.pricing`: starts the local world and calls it with boto3.

Run from the repository root:

    .tools/venv/bin/python tests/aws-local/check_pricing.py

It starts `python -m joiner_local` twice (open IAM, then JOINER_LOCAL_IAM=enforce) on free
ports and checks GetProducts' products, filters, pagination and refusals, the price knob,
IAM enforcement, and that other services still answer. Exits non-zero on the first failure.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".tools" / "venv" / "bin" / "python"
KARPENTER_SHARED = [
    ("serviceCode", "AmazonEC2"),
    ("preInstalledSw", "NA"),
    ("operatingSystem", "Linux"),
    ("capacitystatus", "Used"),
    ("marketoption", "OnDemand"),
]
RESULTS: list[str] = []


def ok(what: str) -> None:
    RESULTS.append(what)
    print(f"ok   {what}", flush=True)


def fail(what: str) -> None:
    print(f"FAIL {what}", flush=True)
    sys.exit(1)


def expect(cond: bool, what: str) -> None:
    ok(what) if cond else fail(what)


def table(region: str) -> dict[str, Decimal]:
    with open(ROOT / "agent" / "data" / f"ec2-ondemand-prices-{region}.csv", newline="") as f:
        rows = csv.reader(f)
        next(rows)
        return {t: Decimal(p) for t, p in rows if Decimal(p) > 0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(iam: str | None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "aws-local"), MOTO_IAM_LOAD_MANAGED_POLICIES="true")
    env.pop("JOINER_LOCAL_IAM", None)
    if iam:
        env["JOINER_LOCAL_IAM"] = iam
    proc = subprocess.Popen(
        [str(PYTHON), "-m", "joiner_local", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1).read()
            return proc, url
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)
    proc.kill()
    fail("the server started")
    raise SystemExit(1)


def client(url: str, service: str, region: str = "us-east-1", key: str = "testing", secret: str = "testing", validate: bool = True):
    return boto3.client(
        service,
        endpoint_url=url,
        region_name=region,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(parameter_validation=validate, retries={"max_attempts": 1}),
    )


def filters(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in pairs]


def all_products(pricing, flt: list[dict[str, str]], page: int = 100) -> tuple[list[dict], int]:
    out, pages, token = [], 0, None
    while True:
        args = {"ServiceCode": "AmazonEC2", "Filters": flt, "MaxResults": page}
        if token:
            args["NextToken"] = token
        r = pricing.get_products(**args)
        pages += 1
        out += [json.loads(p) for p in r["PriceList"]]
        token = r.get("NextToken")
        if not token:
            return out, pages


def price_of(doc: dict) -> tuple[str, Decimal]:
    (term,) = doc["terms"]["OnDemand"].values()
    (dim,) = term["priceDimensions"].values()
    ((cur, amount),) = dim["pricePerUnit"].items()
    return cur, Decimal(amount)


def refused(call, code: str, what: str) -> ClientError:
    try:
        call()
    except ClientError as e:
        got = e.response["Error"]["Code"]
        status = e.response["ResponseMetadata"]["HTTPStatusCode"]
        expect(got == code, f"{what}: refused with {got} (HTTP {status}): {e.response['Error'].get('Message')}")
        return e
    fail(f"{what}: was not refused")
    raise SystemExit(1)


def open_world(url: str) -> None:
    pricing = client(url, "pricing")
    us = table("us-east-1")

    # Karpenter's two queries for us-east-1.
    shared = filters([("regionCode", "us-east-1")] + KARPENTER_SHARED + [("tenancy", "Shared"), ("productFamily", "Compute Instance")])
    metal = filters([("regionCode", "us-east-1")] + KARPENTER_SHARED + [("tenancy", "Dedicated"), ("productFamily", "Compute Instance (bare metal)")])
    got_shared, pages = all_products(pricing, shared)
    got_metal, _ = all_products(pricing, metal)
    types_shared = [d["product"]["attributes"]["instanceType"] for d in got_shared]
    types_metal = [d["product"]["attributes"]["instanceType"] for d in got_metal]
    expect(
        sorted(types_shared) == sorted(t for t in us if ".metal" not in t),
        f"us-east-1 shared query: {len(types_shared)} products in {pages} pages, every non-metal type of the table",
    )
    expect(sorted(types_metal) == sorted(t for t in us if ".metal" in t), f"us-east-1 bare metal query: {len(types_metal)} products, every .metal type")
    expect(len(set(types_shared)) == len(types_shared), "pagination: no product twice")
    doc = next(d for d in got_shared if d["product"]["attributes"]["instanceType"] == "m5.large")
    cur, amount = price_of(doc)
    expect(cur == "USD" and amount == us["m5.large"], f"m5.large in us-east-1: {cur} {amount} (table {us['m5.large']})")
    a = doc["product"]["attributes"]
    expect(
        doc["serviceCode"] == "AmazonEC2"
        and a["location"] == "US East (N. Virginia)"
        and a["tenancy"] == "Shared"
        and doc["product"]["productFamily"] == "Compute Instance"
        and all(k in doc for k in ("version", "publicationDate")),
        "product shape: serviceCode, location, tenancy, productFamily, version, publicationDate",
    )
    print("     sample item:", json.dumps(doc)[:400] + " ...")
    expect(all(d["product"]["attributes"]["tenancy"] == "Dedicated" for d in got_metal), "bare metal products are Dedicated")

    # One product, exact filter; a filter that matches nothing.
    one = pricing.get_products(ServiceCode="AmazonEC2", Filters=filters([("regionCode", "us-east-1"), ("instanceType", "c5.xlarge")]))
    expect(len(one["PriceList"]) == 1 and one["FormatVersion"] == "aws_v1" and "NextToken" not in one, "instanceType filter: one product, FormatVersion aws_v1, no NextToken")
    expect(isinstance(one["PriceList"][0], str), "PriceList items are JSON strings")
    none = pricing.get_products(ServiceCode="AmazonEC2", Filters=filters([("regionCode", "us-east-1"), ("operatingSystem", "Windows")]))
    expect(none["PriceList"] == [], "operatingSystem=Windows: no products")
    west = pricing.get_products(ServiceCode="AmazonEC2", Filters=filters([("regionCode", "us-west-2")]))
    expect(west["PriceList"] == [], "regionCode us-west-2 (no table): empty PriceList")
    other = pricing.get_products(ServiceCode="AmazonS3", MaxResults=5)
    expect(other["PriceList"] == [], "ServiceCode AmazonS3: no products")

    # GovCloud table in USD, read through the us-east-1 endpoint.
    gov = table("us-gov-west-1")
    r = pricing.get_products(ServiceCode="AmazonEC2", Filters=filters([("regionCode", "us-gov-west-1"), ("instanceType", "c5.large")]))
    cur, amount = price_of(json.loads(r["PriceList"][0]))
    expect(cur == "USD" and amount == gov["c5.large"], f"c5.large in us-gov-west-1: {cur} {amount}")

    # China: signed for cn-northwest-1, priced in CNY.
    cn = client(url, "pricing", region="cn-northwest-1")
    cn_table = table("cn-north-1")
    got_cn, _ = all_products(cn, filters([("regionCode", "cn-north-1")] + KARPENTER_SHARED + [("tenancy", "Shared"), ("productFamily", "Compute Instance")]), page=37)
    doc = next(d for d in got_cn if d["product"]["attributes"]["instanceType"] == "m5.large")
    cur, amount = price_of(doc)
    expect(cur == "CNY" and amount == cn_table["m5.large"], f"m5.large in cn-north-1 via cn-northwest-1: {cur} {amount} (table {cn_table['m5.large']})")
    expect(len(got_cn) == sum(1 for t in cn_table if ".metal" not in t), f"cn-north-1 shared query: {len(got_cn)} products (pages of 37)")

    # Pagination: pages of 7 over everything in us-east-1 visit each product once.
    every, pages = all_products(pricing, filters([("regionCode", "us-east-1")]), page=7)
    skus = [d["product"]["sku"] for d in every]
    expect(len(skus) == len(set(skus)) == len(us) and pages == -(-len(us) // 7), f"pagination by 7: {len(skus)} products, {pages} pages, each once")

    # Refusals.
    loose = client(url, "pricing", validate=False)
    refused(lambda: loose.get_products(ServiceCode="AmazonEC2", MaxResults=0), "InvalidParameterException", "MaxResults 0")
    refused(lambda: loose.get_products(ServiceCode="AmazonEC2", MaxResults=101), "InvalidParameterException", "MaxResults 101")
    refused(lambda: pricing.get_products(ServiceCode="AmazonEC2", NextToken="not-a-token"), "InvalidNextTokenException", "NextToken garbage")
    token = pricing.get_products(ServiceCode="AmazonEC2", MaxResults=1)["NextToken"]
    refused(
        lambda: pricing.get_products(ServiceCode="AmazonEC2", MaxResults=1, NextToken=token, Filters=filters([("regionCode", "us-east-1")])),
        "InvalidNextTokenException",
        "NextToken of another query",
    )
    refused(
        lambda: loose.get_products(ServiceCode="AmazonEC2", Filters=[{"Type": "REGEX", "Field": "instanceType", "Value": "m5.*"}]),
        "InvalidParameterException",
        "filter Type REGEX",
    )
    refused(lambda: pricing.get_products(ServiceCode="AmazonEC2", FormatVersion="aws_v2"), "InvalidParameterException", "FormatVersion aws_v2")
    oregon = client(url, "pricing", region="us-west-2")
    e = refused(lambda: oregon.get_products(ServiceCode="AmazonEC2"), "EndpointNotFound", "signed for us-west-2")
    expect(e.response["ResponseMetadata"]["HTTPStatusCode"] == 404, "signed for us-west-2: HTTP 404")
    gov_client = client(url, "pricing", region="us-gov-west-1")
    refused(lambda: gov_client.get_products(ServiceCode="AmazonEC2"), "EndpointNotFound", "signed for us-gov-west-1")
    refused(lambda: pricing.describe_services(ServiceCode="AmazonEC2"), "UnknownOperationException", "DescribeServices (not served here)")
    for region in ("eu-central-1", "ap-south-1"):
        r = client(url, "pricing", region=region).get_products(ServiceCode="AmazonEC2", MaxResults=1)
        expect(len(r["PriceList"]) == 1, f"signed for {region}: served")

    # The knob: a changed price is what the next call answers.
    def post(region: str, body: dict) -> dict:
        req = urllib.request.Request(f"{url}/moto-api/joiner-local/pricing/{region}", data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req).read())

    one_m5 = filters([("regionCode", "us-east-1"), ("instanceType", "m5.large")])
    before = price_of(json.loads(pricing.get_products(ServiceCode="AmazonEC2", Filters=one_m5)["PriceList"][0]))
    answer = post("us-east-1", {"m5.large": "0.2"})
    after = price_of(json.loads(pricing.get_products(ServiceCode="AmazonEC2", Filters=one_m5)["PriceList"][0]))
    expect(before[1] == us["m5.large"] and after == ("USD", Decimal("0.2")), f"knob: m5.large {before[1]} -> {after[1]} (answer {answer})")
    post("cn-north-1", {"m5.large": 1.5})
    after_cn = price_of(json.loads(cn.get_products(ServiceCode="AmazonEC2", Filters=filters([("regionCode", "cn-north-1"), ("instanceType", "m5.large")]))["PriceList"][0]))
    expect(after_cn == ("CNY", Decimal("1.5")), f"knob: m5.large in cn-north-1 -> {after_cn}")
    try:
        post("us-east-1", {"m5.large": "-1"})
        fail("knob: a negative price refused")
    except urllib.error.HTTPError as err:
        expect(err.code == 400, f"knob: a negative price refused (HTTP {err.code})")
    post("us-east-1", {"m5.large": None})
    restored = price_of(json.loads(pricing.get_products(ServiceCode="AmazonEC2", Filters=one_m5)["PriceList"][0]))
    expect(restored[1] == us["m5.large"], f"knob: null restores the table's {restored[1]}")
    post("us-east-1", {"m5.large": "0.3"})
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")).read()
    reset = price_of(json.loads(pricing.get_products(ServiceCode="AmazonEC2", Filters=one_m5)["PriceList"][0]))
    expect(reset[1] == us["m5.large"], "knob: /moto-api/reset clears changes")

    # Other services are unaffected.
    ec2 = client(url, "ec2")
    regions = ec2.describe_regions()["Regions"]
    expect(len(regions) > 10, f"ec2 DescribeRegions: {len(regions)} Regions")
    types = ec2.describe_instance_types(InstanceTypes=["m5.large"])["InstanceTypes"]
    expect(types[0]["InstanceType"] == "m5.large", "ec2 DescribeInstanceTypes answers")
    ident = client(url, "sts").get_caller_identity()
    expect(ident["Arn"].endswith("user/local-admin"), f"sts GetCallerIdentity: {ident['Arn']}")
    expect(client(url, "sqs").list_queues().get("QueueUrls", []) == [], "sqs ListQueues answers")
    expect("clusters" in client(url, "eks").list_clusters(), "eks ListClusters answers")


def enforced_world(url: str) -> None:
    iam = client(url, "iam")
    iam.create_user(UserName="no-pricing")
    iam.put_user_policy(
        UserName="no-pricing",
        PolicyName="ec2-only",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"}]}),
    )
    key = iam.create_access_key(UserName="no-pricing")["AccessKey"]
    time.sleep(0.2)
    user = client(url, "pricing", key=key["AccessKeyId"], secret=key["SecretAccessKey"])
    e = refused(lambda: user.get_products(ServiceCode="AmazonEC2", MaxResults=1), "AccessDeniedException", "enforced IAM, no pricing:GetProducts")
    expect(e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, "enforced IAM refusal: HTTP 403")
    iam.put_user_policy(
        UserName="no-pricing",
        PolicyName="pricing",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "pricing:GetProducts", "Resource": "*"}]}),
    )
    r = user.get_products(ServiceCode="AmazonEC2", MaxResults=1)
    expect(len(r["PriceList"]) == 1, "enforced IAM, pricing:GetProducts on * allowed: served")
    admin = client(url, "pricing").get_products(ServiceCode="AmazonEC2", MaxResults=1)
    expect(len(admin["PriceList"]) == 1, "enforced IAM, local-admin: served")
    d = json.loads(urllib.request.urlopen(f"{url}/moto-api/joiner-local/iam/decisions?principal=no-pricing").read())
    rows = [(r["action"], r["resource"], r["allowed"], r["modelled"]) for r in d["decisions"] if r["action"].startswith("pricing:")]
    expect(rows == [("pricing:GetProducts", "*", False, True), ("pricing:GetProducts", "*", True, True)], f"IAM decisions: {rows}")
    oregon = client(url, "pricing", region="us-west-2", key=key["AccessKeyId"], secret=key["SecretAccessKey"])
    refused(lambda: oregon.get_products(ServiceCode="AmazonEC2"), "EndpointNotFound", "enforced IAM, signed for us-west-2: no endpoint before IAM")


def main() -> None:
    for mode, check in ((None, open_world), ("enforce", enforced_world)):
        proc, url = start(mode)
        print(f"--- world {'JOINER_LOCAL_IAM=enforce' if mode else 'open IAM'} at {url}", flush=True)
        try:
            check(url)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print(f"all {len(RESULTS)} checks passed")


if __name__ == "__main__":
    main()
