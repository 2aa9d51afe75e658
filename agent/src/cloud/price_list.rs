//! On-demand prices from the AWS Price List Query API (`pricing:GetProducts`).
//!
//! The embedded tables (`catalog::prices`) are dated, and only four Regions have one; the
//! rest are priced from their partition's table. Where the agent may reach the Price List
//! API it reads the Region's own list at start and every [`REFRESH`] after, as Karpenter
//! does (`pkg/providers/pricing/pricing.go`, `UpdateOnDemandPricing`; its pricing
//! controller requeues every 12 hours), and the catalogue prices from it, keeping the
//! table's price for a type the list does not mention.
//!
//! Where the API is: its endpoints are in us-east-1, eu-central-1 and ap-south-1, and
//! cn-northwest-1 for the China Regions; a Region is asked of the nearest (the same choice
//! as Karpenter's `NewAPI`). GovCloud has none; the isolated partitions and the European
//! Sovereign Cloud are not asked (botocore lists endpoints there, whose contents are not
//! known here), and an agent
//! in a VPC without internet access cannot reach any (`--isolated-vpc`): there the tables
//! stand.
//!
//! The query is Karpenter's: Linux, no pre-installed software, capacity status `Used`,
//! market `OnDemand`, in the Region; once for shared-tenancy `Compute Instance` products
//! and once for the dedicated `Compute Instance (bare metal)` ones (the price list files
//! metal sizes so). A price is read from the term's `pricePerUnit` in the Region's currency
//! (CNY in `cn-` Regions).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_pricing::types::{Filter, FilterType};

use super::aws::CloudResultExt;
use super::CloudError;
use crate::catalog::prices::Currency;

/// How often the list is read again.
pub const REFRESH: Duration = Duration::from_secs(12 * 3600);
/// How soon after a failed read it is tried again.
pub const RETRY: Duration = Duration::from_secs(3600);
/// Each page's bound, retries included, and the attempts per page: a read that cannot
/// reach the endpoint (a VPC without a route to it and no `--isolated-vpc`) costs the round
/// that tries it this much, once per [`RETRY`].
const PAGE_TIMEOUT: Duration = Duration::from_secs(15);
const ATTEMPTS: u32 = 2;

/// The Region whose Price List endpoint serves `region`, or None where it is not asked:
/// only the commercial and China partitions are (see the module docs).
pub fn endpoint_region(region: &str) -> Option<&'static str> {
    if region.starts_with("us-gov-") || region.contains("-iso") || region.starts_with("eusc-") {
        None
    } else if region.starts_with("cn-") {
        Some("cn-northwest-1")
    } else if region.starts_with("ap-") {
        Some("ap-south-1")
    } else if region.starts_with("eu-") {
        Some("eu-central-1")
    } else {
        Some("us-east-1")
    }
}

/// A client for the Price List API of `region`'s endpoint, or None where there is none (or
/// the agent was told it cannot reach one). It keeps the configuration's endpoint URL, so
/// with `--aws-endpoint` the list is asked there (the local world serves it; a VPC
/// endpoint does not, and wants `--isolated-vpc`).
pub fn client(
    config: &aws_config::SdkConfig,
    region: &str,
    isolated_vpc: bool,
) -> Option<aws_sdk_pricing::Client> {
    if isolated_vpc {
        return None;
    }
    let endpoint = endpoint_region(region)?;
    let conf = aws_sdk_pricing::config::Builder::from(config)
        .region(aws_sdk_pricing::config::Region::new(endpoint))
        .timeout_config(
            aws_sdk_pricing::config::timeout::TimeoutConfig::builder()
                .operation_timeout(PAGE_TIMEOUT)
                .build(),
        )
        .retry_config(
            aws_sdk_pricing::config::retry::RetryConfig::standard().with_max_attempts(ATTEMPTS),
        )
        .build();
    Some(aws_sdk_pricing::Client::from_conf(conf))
}

/// Every on-demand Linux price of `region`, per instance type, in its currency.
pub async fn on_demand_prices(
    client: &aws_sdk_pricing::Client,
    region: &str,
) -> Result<HashMap<String, f64>, CloudError> {
    let currency = Currency::of_region(region);
    let mut prices = HashMap::new();
    for (tenancy, family) in [
        ("Shared", "Compute Instance"),
        ("Dedicated", "Compute Instance (bare metal)"),
    ] {
        let filters = [
            ("regionCode", region),
            ("serviceCode", "AmazonEC2"),
            ("preInstalledSw", "NA"),
            ("operatingSystem", "Linux"),
            ("capacitystatus", "Used"),
            ("marketoption", "OnDemand"),
            ("tenancy", tenancy),
            ("productFamily", family),
        ]
        .into_iter()
        .map(|(field, value)| {
            Filter::builder()
                .r#type(FilterType::TermMatch)
                .field(field)
                .value(value)
                .build()
                .expect("type, field and value are set")
        });
        let mut pages = client
            .get_products()
            .service_code("AmazonEC2")
            .set_filters(Some(filters.collect()))
            .max_results(100)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.cloud("pricing:GetProducts")?;
            for item in page.price_list() {
                if let Some((name, price)) = parse_product(item, currency) {
                    prices.insert(name, price);
                }
            }
        }
    }
    Ok(prices)
}

/// One price-list product: its instance type and its on-demand price per hour in
/// `currency`, or None for anything else (no instance type, no positive price, not JSON).
/// A product with several price dimensions takes one of them, as Karpenter's
/// `onDemandPage` does (an on-demand Linux product has one).
pub fn parse_product(item: &str, currency: Currency) -> Option<(String, f64)> {
    let v: serde_json::Value = serde_json::from_str(item).ok()?;
    let name = v["product"]["attributes"]["instanceType"].as_str()?;
    if name.is_empty() {
        return None;
    }
    let terms = v["terms"]["OnDemand"].as_object()?;
    let price = terms
        .values()
        .filter_map(|t| t["priceDimensions"].as_object())
        .flat_map(|d| d.values())
        .filter_map(|d| {
            d["pricePerUnit"][currency.code()]
                .as_str()?
                .parse::<f64>()
                .ok()
        })
        .rfind(|p| *p > 0.0)?;
    Some((name.to_string(), price))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_region_asks_its_partitions_nearest_endpoint() {
        assert_eq!(endpoint_region("us-east-1"), Some("us-east-1"));
        assert_eq!(endpoint_region("us-west-2"), Some("us-east-1"));
        assert_eq!(endpoint_region("sa-east-1"), Some("us-east-1"));
        assert_eq!(endpoint_region("eu-west-1"), Some("eu-central-1"));
        assert_eq!(endpoint_region("ap-northeast-1"), Some("ap-south-1"));
        assert_eq!(endpoint_region("cn-north-1"), Some("cn-northwest-1"));
        assert_eq!(endpoint_region("us-gov-west-1"), None);
        assert_eq!(endpoint_region("us-isof-south-1"), None);
        assert_eq!(endpoint_region("eu-isoe-west-1"), None);
        assert_eq!(endpoint_region("eusc-de-east-1"), None);
    }

    fn product(name: &str, unit: &str, price: &str) -> String {
        serde_json::json!({
            "product": {"productFamily": "Compute Instance",
                        "attributes": {"instanceType": name, "regionCode": "eu-west-1"},
                        "sku": "ABC"},
            "serviceCode": "AmazonEC2",
            "terms": {"OnDemand": {"ABC.JRTCKXETXF": {"priceDimensions": {
                "ABC.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {unit: price}}}}}}
        })
        .to_string()
    }

    #[test]
    fn a_product_gives_its_type_and_price_in_the_regions_currency() {
        assert_eq!(
            parse_product(&product("m5.large", "USD", "0.1070000000"), Currency::Usd),
            Some(("m5.large".to_string(), 0.107))
        );
        assert_eq!(
            parse_product(&product("m5.large", "CNY", "0.9380000000"), Currency::Cny),
            Some(("m5.large".to_string(), 0.938))
        );
        assert_eq!(
            parse_product(&product("m5.large", "USD", "0.107"), Currency::Cny),
            None,
            "a price in another currency is not read"
        );
        assert_eq!(
            parse_product(&product("m5.large", "USD", "0.0000000000"), Currency::Usd),
            None
        );
        assert_eq!(
            parse_product(&product("", "USD", "0.1"), Currency::Usd),
            None
        );
        assert_eq!(parse_product("not json", Currency::Usd), None);
    }
}
