//! GCE's name and label rules, and list filters (`a = "b" AND (c = d)`) over JSON resources.

use serde_json::Value;

use super::failures::{ApiFailure, invalid};

pub(super) fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !name.is_empty()
        && name.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
}

pub(super) fn valid_label(s: &str, key: bool) -> bool {
    s.len() <= 63
        && (!key || s.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

pub(super) fn last_segment(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// A parsed list filter: `a = "b" AND (c = d)`; `eq` works as `=`.
pub(super) fn parse_filter(filter: &str) -> Result<Vec<(String, String)>, ApiFailure> {
    let mut terms = Vec::new();
    for part in filter.split(" AND ") {
        let part = part
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .trim();
        if part.is_empty() {
            continue;
        }
        let (field, value) = part
            .split_once(" = ")
            .or_else(|| part.split_once(" eq "))
            .ok_or_else(|| invalid(format!("Invalid list filter expression '{part}'.")))?;
        terms.push((
            field.trim().to_string(),
            value.trim().trim_matches('"').to_string(),
        ));
    }
    Ok(terms)
}

pub(super) fn field<'a>(resource: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(resource, |v, key| v.get(key))
}

pub(super) fn matches_filter(resource: &Value, terms: &[(String, String)]) -> bool {
    terms.iter().all(|(path, want)| {
        field(resource, path).is_some_and(|v| match v {
            Value::String(s) => s == want,
            other => serde_json::from_str::<Value>(want).ok().as_ref() == Some(other),
        })
    })
}
