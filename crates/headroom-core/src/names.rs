//! Names parsed once at the edge, so the core can trust them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::CoreError;

const MAX_NAME_LEN: usize = 63;

/// Checks the DNS-label-like shape every Headroom name shares: 1..=63 characters of lowercase
/// ASCII letters, digits, `-`, `_` and `.`, starting with a letter or digit. Names end up in
/// cloud tags, label values and URL paths, where anything wider needs escaping.
fn check_name(kind: &'static str, value: &str) -> Result<(), CoreError> {
    let err = |why| CoreError::InvalidName {
        kind,
        value: value.chars().take(80).collect(),
        why,
    };
    if value.is_empty() {
        return Err(err("must not be empty"));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(err("must be at most 63 characters"));
    }
    if !value.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        return Err(err("must start with a lowercase letter or digit"));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'))
    {
        return Err(err("may only contain a-z, 0-9, '-', '_' and '.'"));
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = CoreError;
            fn from_str(s: &str) -> Result<Self, CoreError> {
                check_name($kind, s)?;
                Ok($name(s.to_string()))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

name_type!(
    /// A pool: one fleet for one workload class, e.g. `llama-70b-interactive`.
    PoolName,
    "pool name"
);
name_type!(
    /// A budget account: a team or cost centre that pools charge.
    AccountName,
    "account name"
);
name_type!(
    /// An offering's configured identifier, e.g. `aws-use1-p5-od`.
    OfferingId,
    "offering id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_label_like_names() {
        assert!("llama-70b-interactive".parse::<PoolName>().is_ok());
        assert!("team.ml_infra".parse::<AccountName>().is_ok());
    }

    #[test]
    fn rejects_hostile_names() {
        for bad in [
            "",
            "Upper",
            "-lead",
            "a b",
            "x'; drop table",
            "../etc",
            "é",
            &"a".repeat(64),
        ] {
            assert!(bad.parse::<PoolName>().is_err(), "{bad:?} was accepted");
        }
    }
}
