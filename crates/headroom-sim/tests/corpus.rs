//! The generated corpus: every member is a valid scenario that replays from the TOML it dumps,
//! within the family's documented ranges, and the same seed draws the same corpus.

use headroom_sim::corpus::{self, MAX_SCENARIOS};
use headroom_sim::scenario;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Any member of any corpus parses, and its TOML written to a file loads back to the same
    /// scenario (what `--corpus-dump` then `--scenario FILE` does).
    #[test]
    fn every_member_is_valid_and_round_trips_through_toml(seed in any::<u64>(), index in 0..MAX_SCENARIOS) {
        let m = corpus::member(seed, index).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{}.toml", m.params.name));
        std::fs::write(&path, &m.toml).unwrap();
        let replayed = scenario::load(path.to_str().unwrap()).unwrap();
        prop_assert_eq!(format!("{replayed:?}"), format!("{:?}", m.scenario));

        // Within the family's ranges (scenarios/README.md).
        let p = &m.params;
        let sc = &m.scenario;
        prop_assert!((600.0..=1200.0).contains(&sc.duration_s));
        prop_assert!((60..=600).contains(&p.cold_start_s));
        prop_assert_eq!(sc.pools.len(), 1 + usize::from(p.second_pool.is_some()));
        let main = &sc.primary().spec;
        prop_assert!((2..=8).contains(&main.min_replicas));
        prop_assert!(main.max_replicas >= main.min_replicas + 2 && main.max_replicas <= 48);
        prop_assert!(main.warm_pool_size <= 4);
        // The careful team's buffer, a quarter of the floor, is the baselines' pause pods and
        // Headroom's buffer on every pool alike (within a small pool's bounds).
        prop_assert_eq!(sc.hpa.overprovision, main.min_replicas.div_ceil(4));
        for pool in &sc.pools {
            prop_assert_eq!(pool.spec.scaling.buffer_replicas, sc.hpa.overprovision.min(pool.spec.max_replicas));
        }
        prop_assert!(sc.faults.windows(2).all(|w| w[0].at_s <= w[1].at_s));
        prop_assert!(sc.faults.iter().all(|f| f.at_s < sc.duration_s + 600.0));
        prop_assert_eq!(sc.config.budgets.len(), usize::from(p.budget.is_some()));
        // Under a budget, holds run for the shortest horizon the configuration accepts.
        if p.budget.is_some() {
            let shortest = std::time::Duration::from_secs(u64::from(2 * p.cold_start_s).max(244));
            prop_assert_eq!(sc.config.engine.hold_horizon, shortest);
        }
        prop_assert!(p.bursts.len() <= 3);
        for s in &sc.streams {
            prop_assert!((0..sc.duration_s as u32).step_by(5).all(|t| s.rate.rate_at(f64::from(t)) >= 0.0));
        }
        // The peak (daily crest included) needs at most 32 replicas, with rounding's slack.
        let peak: f64 = (0..sc.duration_s as u32)
            .map(|t| sc.streams.iter().filter(|s| s.pool == 0).map(|s| s.rate.rate_at(f64::from(t))).sum::<f64>())
            .fold(0.0, f64::max);
        prop_assert!(peak <= 32.5 * p.replica_rps + 1.0, "peak {} at {} per replica", peak, p.replica_rps);
    }
}

#[test]
fn the_same_seed_draws_the_same_corpus() {
    let a = corpus::corpus(20, 7).unwrap();
    let b = corpus::corpus(20, 7).unwrap();
    assert!(a.iter().zip(&b).all(|(x, y)| x.toml == y.toml));
    // The family's options all occur in a corpus of this size.
    let traits: std::collections::BTreeSet<&str> = corpus::corpus(200, 1)
        .unwrap()
        .iter()
        .flat_map(|m| m.params.traits())
        .collect();
    for t in [
        "70b",
        "8b",
        "bursts",
        "ramp",
        "daily",
        "weekly",
        "job",
        "lognormal",
        "spot",
        "two-regions",
        "stockout",
        "reclaim",
        "price-move",
        "two-pools",
        "fallback",
        "budget",
        "warm-pool",
        "cold-start>=5m",
    ] {
        assert!(traits.contains(t), "no member has {t}: {traits:?}");
    }
}
