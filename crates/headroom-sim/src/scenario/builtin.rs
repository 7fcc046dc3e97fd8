//! The scenarios built into the binary, and loading a scenario by name or from a file.

use crate::error::SimError;

use super::Scenario;
use super::validate::{parse, parse_in};

/// The scenarios built into the binary.
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "seed-000-backlog",
        include_str!("../../scenarios/seed-000-backlog.toml"),
    ),
    (
        "seed-001-burst",
        include_str!("../../scenarios/seed-001-burst.toml"),
    ),
    (
        "stockout-fallback",
        include_str!("../../scenarios/stockout-fallback.toml"),
    ),
    (
        "multicloud-stockout",
        include_str!("../../scenarios/multicloud-stockout.toml"),
    ),
    (
        "spot-interruptions",
        include_str!("../../scenarios/spot-interruptions.toml"),
    ),
    (
        "spot-price-spike",
        include_str!("../../scenarios/spot-price-spike.toml"),
    ),
    (
        "budget-clamp",
        include_str!("../../scenarios/budget-clamp.toml"),
    ),
    (
        "azure-code-trace",
        include_str!("../../scenarios/azure-code-trace.toml"),
    ),
    (
        "flash-burst",
        include_str!("../../scenarios/flash-burst.toml"),
    ),
    ("slow-ramp", include_str!("../../scenarios/slow-ramp.toml")),
    (
        "compressed-day",
        include_str!("../../scenarios/compressed-day.toml"),
    ),
    (
        "scale-to-zero",
        include_str!("../../scenarios/scale-to-zero.toml"),
    ),
    (
        "smaller-model-handover",
        include_str!("../../scenarios/smaller-model-handover.toml"),
    ),
    (
        "long-context-chat",
        include_str!("../../scenarios/long-context-chat.toml"),
    ),
];

/// The built-in scenarios' names, for messages.
pub fn built_in_names() -> Vec<&'static str> {
    BUILT_IN.iter().map(|(name, _)| *name).collect()
}

/// Loads a built-in scenario by name, or a TOML file by path (its `[[spot_traces]]` files read
/// from the file's directory).
pub fn load(name_or_file: &str) -> Result<Scenario, SimError> {
    if let Some((name, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_file) {
        return parse(text, name);
    }
    let path = std::path::Path::new(name_or_file);
    if !path.exists() {
        return Err(SimError::UnknownScenario(name_or_file.to_string()));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| SimError::Io(format!("--scenario: cannot read {name_or_file} ({e})")))?;
    parse_in(&text, name_or_file, path.parent())
}
