//! Commitment terms: what each cloud sells to commit to, at what rate against on-demand, for how
//! long, read from a data file that names the public page every number comes from.

use headroom_core::ProviderKind;
use serde::{Deserialize, Serialize};

use crate::ReportError;

/// The terms shipped with Headroom (`config/prices/commitments.toml`), used unless a file is given.
pub const DEFAULT_TERMS: &str = include_str!("../../../../config/prices/commitments.toml");

/// What a commitment buys.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommitmentKind {
    /// Nodes held for the account whether they run or not, billed at the on-demand rate: a
    /// launch into them is not refused for capacity (AWS On-Demand Capacity Reservations, GCP
    /// reservations).
    Capacity,
    /// Capacity for a fixed window bought ahead at its own rate (EC2 Capacity Blocks for ML).
    Block,
    /// A lower rate for usage committed to over a term, with no capacity behind it (Savings
    /// Plans, committed use discounts); it applies to reserved capacity's usage too.
    Discount,
}

/// One product's terms, as the data file writes them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitmentTerm {
    /// The cloud that sells it: `aws` or `gcp`.
    pub provider: String,
    /// The product's own name (`EC2 Instance Savings Plan`, `committed use discount`, …).
    pub product: String,
    pub kind: CommitmentKind,
    /// The term in days; 0 for none (cancel any time).
    pub term_days: u32,
    /// Off the on-demand rate, in percent (0 for a capacity reservation billed at on-demand).
    pub discount_percent: f64,
    /// A block's own rate per node-hour (a block is not priced off on-demand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_node_hour: Option<f64>,
    /// Instance types it applies to, by prefix (`p5.`, `a3-`); empty for every type.
    #[serde(default)]
    pub instance_prefixes: Vec<String>,
    /// The public page the number comes from, and when it was read.
    pub source: String,
    pub read_on: String,
    /// What the number is (a published maximum, a list rate, …), for the reader.
    #[serde(default)]
    pub note: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TermsFile {
    commitment: Vec<CommitmentTerm>,
}

/// Parses a terms file: every entry a known provider, a discount within 0..100, a source.
pub fn parse_terms(text: &str) -> Result<Vec<CommitmentTerm>, ReportError> {
    let file: TermsFile = toml::from_str(text)
        .map_err(|e| ReportError::InvalidArgument(format!("commitments: {}", e.message())))?;
    for (i, term) in file.commitment.iter().enumerate() {
        let at = format!("commitments: commitment[{i}] ({})", term.product);
        if !matches!(term.provider.as_str(), "aws" | "gcp") {
            return Err(ReportError::InvalidArgument(format!(
                "{at}.provider: {:?} is not aws or gcp",
                term.provider
            )));
        }
        if !(0.0..100.0).contains(&term.discount_percent) {
            return Err(ReportError::InvalidArgument(format!(
                "{at}.discount_percent: {} is outside 0..100",
                term.discount_percent
            )));
        }
        if term.kind == CommitmentKind::Discount && term.term_days == 0 {
            return Err(ReportError::InvalidArgument(format!(
                "{at}.term_days: a discount needs a term (days, at least 1)"
            )));
        }
        let rate_ok = term
            .usd_per_node_hour
            .is_some_and(|r| r.is_finite() && r > 0.0);
        // A block sells at its own rate (an EC2 Capacity Block) or at on-demand less its
        // discount (a GCE future reservation, billed as the reservations it creates).
        if term.usd_per_node_hour.is_some() && (term.kind != CommitmentKind::Block || !rate_ok) {
            return Err(ReportError::InvalidArgument(format!(
                "{at}.usd_per_node_hour: only a block has its own rate, a positive number"
            )));
        }
        if !term.source.starts_with("https://") {
            return Err(ReportError::InvalidArgument(format!(
                "{at}.source: name the public page the number comes from (https://…)"
            )));
        }
    }
    Ok(file.commitment)
}

/// The cloud whose commitments apply to a node: its own, or for the simulated cloud the one its
/// instance type names (EC2 types carry a dot, `p5.48xlarge`; Compute Engine's a dash).
pub fn cloud_of(provider: ProviderKind, instance_type: &str) -> Option<&'static str> {
    match provider {
        ProviderKind::Aws => Some("aws"),
        ProviderKind::Gcp => Some("gcp"),
        ProviderKind::Sim if instance_type.contains('.') => Some("aws"),
        ProviderKind::Sim if instance_type.contains('-') => Some("gcp"),
        ProviderKind::Sim => None,
    }
}

impl CommitmentTerm {
    /// Whether this term can commit to nodes of `instance_type` on `cloud`.
    pub fn applies_to(&self, cloud: &str, instance_type: &str) -> bool {
        self.provider == cloud
            && (self.instance_prefixes.is_empty()
                || self
                    .instance_prefixes
                    .iter()
                    .any(|p| instance_type.starts_with(p.as_str())))
    }

    /// The committed hourly rate for a node whose on-demand rate is `on_demand`.
    pub fn rate(&self, on_demand: f64) -> f64 {
        self.usd_per_node_hour
            .unwrap_or(on_demand * (1.0 - self.discount_percent / 100.0))
    }

    /// The term in words: `1 year`, `3 years`, `no term`, `14 days`.
    pub fn term_label(&self) -> String {
        match self.term_days {
            0 => "no term".to_string(),
            365 => "1 year".to_string(),
            d if d % 365 == 0 => format!("{} years", d / 365),
            1 => "1 day".to_string(),
            d => format!("{d} days"),
        }
    }
}
