//! The corpus's unit tests: determinism in the seed, and summed rate components.

use super::rates::{sum_points, trapezoid};
use super::*;
use crate::arrivals::RateProfile;

#[test]
fn the_same_seed_draws_the_same_corpus_and_members_do_not_depend_on_its_size() {
    let a = corpus(6, 42).unwrap();
    let b = corpus(6, 42).unwrap();
    let c = corpus(3, 42).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.params, y.params);
        assert_eq!(x.toml, y.toml);
    }
    for (x, y) in a.iter().zip(&c) {
        assert_eq!(x.toml, y.toml);
    }
    let other = corpus(6, 43).unwrap();
    assert!(a.iter().zip(&other).any(|(x, y)| x.toml != y.toml));
}

#[test]
fn summed_components_are_the_base_plus_each_trapezoid() {
    let parts = vec![
        trapezoid(10.0, 10.0, 20.0, 2.0, 30.0),
        trapezoid(20.0, 0.0 + 5.0, 5.0, 5.0, 10.0),
    ];
    let points = sum_points(5.0, &parts, 100.0);
    let rate = RateProfile {
        points,
        diurnal: None,
    };
    assert_eq!(rate.rate_at(0.0), 5.0);
    assert_eq!(rate.rate_at(15.0), 20.0);
    assert_eq!(rate.rate_at(27.0), 45.0);
    assert_eq!(rate.rate_at(60.0), 5.0);
}
