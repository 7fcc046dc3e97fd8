//! Spot prices from DescribeSpotPriceHistory.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::InstanceType;
use headroom_cloud::CloudError;
use headroom_core::Money;

use super::errors::api_error;
use super::{AwsProvider, MAX_PAGES};

impl AwsProvider {
    /// The current spot price per (instance type, availability zone) in `region`, for Linux.
    pub async fn spot_prices(
        &self,
        region: &str,
        instance_types: &[&str],
    ) -> Result<BTreeMap<(String, String), Money>, CloudError> {
        let ec2 = self.client(region)?;
        // A start time of now asks for the price in force now, one entry per type and zone.
        let now = aws_sdk_ec2::primitives::DateTime::from_secs(self.clock.now().timestamp());
        let mut prices = BTreeMap::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let out = ec2
                .describe_spot_price_history()
                .set_instance_types(Some(
                    instance_types
                        .iter()
                        .map(|t| InstanceType::from(*t))
                        .collect(),
                ))
                .product_descriptions("Linux/UNIX")
                .start_time(now)
                .max_results(1000)
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| api_error(e, None))?;
            for p in out.spot_price_history() {
                let (Some(t), Some(zone), Some(price)) =
                    (p.instance_type(), p.availability_zone(), p.spot_price())
                else {
                    continue;
                };
                let Ok(price) = price.parse::<Money>() else {
                    continue;
                };
                // Newest first: keep the first price seen per key.
                prices
                    .entry((t.as_str().to_string(), zone.to_string()))
                    .or_insert(price);
            }
            match out.next_token() {
                Some(token) if !token.is_empty() => next = Some(token.to_string()),
                _ => break,
            }
        }
        Ok(prices)
    }
}
