//! Unit tests of the server's filters and name and label checks.

use serde_json::json;

use super::filter::{matches_filter, parse_filter, valid_label, valid_name};

#[test]
fn filters_parse_and_match() {
    let terms = parse_filter("(labels.headroom-cluster = \"c1\") AND (status = RUNNING)").unwrap();
    let vm = json!({"labels": {"headroom-cluster": "c1"}, "status": "RUNNING"});
    assert!(matches_filter(&vm, &terms));
    let other = json!({"labels": {"headroom-cluster": "c2"}, "status": "RUNNING"});
    assert!(!matches_filter(&other, &terms));
    assert!(parse_filter("labels.x ~ y").is_err());
    assert!(parse_filter("").unwrap().is_empty());
}

#[test]
fn names_and_labels_are_checked_like_gce() {
    assert!(valid_name("hr-0123abc"));
    assert!(!valid_name("Hr-x") && !valid_name("1abc") && !valid_name("a-") && !valid_name(""));
    assert!(valid_label("headroom-cluster", true) && !valid_label("Upper", false));
    assert!(!valid_label(&"a".repeat(64), false));
}
