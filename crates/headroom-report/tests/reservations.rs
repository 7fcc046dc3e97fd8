//! Reservations advised from hand-built histories whose right answer is known: a steady base with
//! daily peaks, a pool refused every afternoon, a short campaign of refusals, spot that is
//! cheaper than any discount, and a pool with no history.

use headroom_core::planner::Destination;
use headroom_core::refusal::ErrorClass;
use headroom_core::{Market, Money, NodeId, NodeState, ProviderKind, RefusalReason, Timestamp};
use headroom_records::{NodeEvent, RefusalRecord};
use headroom_report::reservations::{
    CommitmentKind, DEFAULT_TERMS, ReservationInput, ReservationReport, advise, parse_terms,
    to_csv, to_html, to_table,
};

const START: &str = "2026-11-02T00:00:00Z"; // a Monday
const P4D_ON_DEMAND: &str = "21.957642";

fn at(hours: f64) -> Timestamp {
    START.parse::<Timestamp>().unwrap() + chrono::Duration::milliseconds((hours * 3.6e6) as i64)
}

/// One node serving from `from` to `to` (hours after the start), then terminated.
fn node(name: &str, market: Market, price: &str, from: f64, to: f64) -> Vec<NodeEvent> {
    let event = |state: NodeState, hours: f64| NodeEvent {
        node: NodeId(name.into()),
        pool: "llama".parse().unwrap(),
        account: "ml".parse().unwrap(),
        offering: format!("p4d-{market}").parse().unwrap(),
        provider: ProviderKind::Aws,
        region: "us-east-2".into(),
        zone: "use2-az1".into(),
        instance_type: "p4d.24xlarge".into(),
        market,
        request: None,
        destination: Destination::Serve,
        state,
        instance: Some(format!("i-{name}")),
        client_token: format!("hr-{name}"),
        price_usd_per_hour: price.parse().unwrap(),
        parked_usd_per_hour: Money::ZERO,
        gpus: 8,
        hold: Money::ZERO,
        reason: None,
        at: at(hours),
    };
    vec![
        event(NodeState::Serving, from),
        event(NodeState::Terminated, to),
    ]
}

fn capacity_refusal(hours: f64, replicas: u32) -> RefusalRecord {
    RefusalRecord {
        pool: "llama".parse().unwrap(),
        request: None,
        node: None,
        offering: Some("p4d-on-demand".parse().unwrap()),
        replicas,
        reason: RefusalReason::Cloud(ErrorClass::Capacity),
        detail: "InsufficientInstanceCapacity".into(),
        at: at(hours),
    }
}

fn advise_over(days: f64, events: &[NodeEvent], refusals: &[RefusalRecord]) -> ReservationReport {
    let terms = parse_terms(DEFAULT_TERMS).unwrap();
    advise(&ReservationInput {
        events,
        refusals,
        terms: &terms,
        from: at(0.0),
        until: at(days * 24.0),
    })
    .unwrap()
}

/// `base` nodes all the time, `peak` more from 12:00 to 16:00 every day.
fn base_and_peaks(days: u32, base: u32, peak: u32) -> Vec<NodeEvent> {
    let mut events = Vec::new();
    for n in 0..base {
        events.extend(node(
            &format!("base-{n}"),
            Market::OnDemand,
            P4D_ON_DEMAND,
            0.0,
            days as f64 * 24.0,
        ));
    }
    for d in 0..days {
        for n in 0..peak {
            let noon = d as f64 * 24.0 + 12.0;
            events.extend(node(
                &format!("peak-{d}-{n}"),
                Market::OnDemand,
                P4D_ON_DEMAND,
                noon,
                noon + 4.0,
            ));
        }
    }
    events
}

#[test]
fn a_steady_base_with_daily_peaks_is_advised_to_commit_to_its_base_and_not_its_peaks() {
    let report = advise_over(14.0, &base_and_peaks(14, 4, 6), &[]);
    let family = &report.families[0];
    assert_eq!((family.base_nodes, family.peak_nodes), (4.0, 10.0));
    assert_eq!(family.recommendations.len(), 1, "{family:#?}");
    let line = &family.recommendations[0];
    assert_eq!(line.kind, CommitmentKind::Discount);
    assert_eq!(
        line.instances, 4,
        "the base, not the 4-hour peaks: {line:#?}"
    );
    assert_eq!(line.location, "us-east-2");
    // 4 nodes at 72 % off, all the time: 4 × 21.957642 × 0.72 × 720 h saved a month.
    let expected = 4.0 * 21.957642 * 0.72 * 720.0;
    assert!(
        (line.savings_per_30d - expected).abs() < 0.01,
        "{}",
        line.savings_per_30d
    );
    assert!(line.savings_at_80_percent_per_30d < line.savings_per_30d);
    assert!(line.savings_at_50_percent_per_30d < line.savings_at_80_percent_per_30d);
    assert!((line.break_even_utilisation - 0.28).abs() < 1e-6);
    assert!(family.why.contains("never refused"), "{}", family.why);
    // The heat map's cells: 32 GPUs at 03:00, 80 at 13:00, every weekday of the fortnight.
    assert_eq!(family.profile[0][3], Some(32.0));
    assert_eq!(family.profile[4][13], Some(80.0));
}

#[test]
fn a_pool_refused_every_afternoon_is_advised_capacity_for_the_refused_hours() {
    let mut refusals = Vec::new();
    for d in 0..7 {
        for minute in (0..240).step_by(10) {
            refusals.push(capacity_refusal(
                d as f64 * 24.0 + 13.0 + minute as f64 / 60.0,
                3,
            ));
        }
    }
    let report = advise_over(7.0, &base_and_peaks(7, 2, 0), &refusals);
    let family = &report.families[0];
    assert_eq!(
        (family.refused_hours, family.recurring_refused_hours),
        (28, 28)
    );
    let capacity = &family.recommendations[0];
    assert_eq!(capacity.kind, CommitmentKind::Capacity, "{family:#?}");
    assert_eq!(capacity.product, "EC2 On-Demand Capacity Reservation");
    assert_eq!(capacity.instances, 5, "the 2 that ran and the 3 refused");
    assert_eq!(
        capacity.location, "use2-az1",
        "capacity is reserved in a zone"
    );
    assert_eq!(capacity.refused_node_hours_avoided, 7.0 * 4.0 * 3.0);
    assert!(
        capacity.savings_per_30d < 0.0,
        "capacity at on-demand costs more: {capacity:#?}"
    );
    // The discount then covers the nodes that run most of the day: the base of 2.
    let discount = &family.recommendations[1];
    assert_eq!(
        (discount.kind, discount.instances),
        (CommitmentKind::Discount, 2)
    );
}

#[test]
fn refusals_within_a_few_days_of_a_long_history_buy_a_block_not_a_standing_reservation() {
    let mut refusals = Vec::new();
    for d in 3..6 {
        refusals.push(capacity_refusal(d as f64 * 24.0 + 14.0, 4));
        refusals.push(capacity_refusal(d as f64 * 24.0 + 15.5, 2));
    }
    let report = advise_over(28.0, &base_and_peaks(28, 1, 0), &refusals);
    let family = &report.families[0];
    let block = &family.recommendations[0];
    assert_eq!(block.kind, CommitmentKind::Block, "{family:#?}");
    assert_eq!(block.starts_at, Some(at(72.0)));
    assert_eq!(block.length_hours, Some(72));
    assert_eq!(block.instances, 5);
    assert_eq!(block.usd_per_node_hour, "14.75".parse().unwrap());
}

/// The same refusals on Compute Engine: a future reservation over the refused window, at the
/// on-demand rate (what the reservations it creates are charged), not a standing reservation.
#[test]
fn refusals_within_a_few_days_on_compute_engine_buy_a_future_reservation() {
    let mut refusals = Vec::new();
    for d in 3..6 {
        refusals.push(capacity_refusal(d as f64 * 24.0 + 14.0, 4));
    }
    let events: Vec<NodeEvent> = base_and_peaks(28, 1, 0)
        .into_iter()
        .map(|e| NodeEvent {
            provider: ProviderKind::Gcp,
            region: "us-central1".into(),
            zone: "us-central1-a".into(),
            instance_type: "a2-highgpu-8g".into(),
            ..e
        })
        .collect();
    let report = advise_over(28.0, &events, &refusals);
    let family = &report.families[0];
    let window = &family.recommendations[0];
    assert_eq!(
        window.product, "Compute Engine future reservation",
        "{family:#?}"
    );
    assert_eq!(window.kind, CommitmentKind::Block);
    assert_eq!(window.starts_at, Some(at(72.0)));
    assert_eq!(window.usd_per_node_hour, P4D_ON_DEMAND.parse().unwrap());
}

#[test]
fn a_single_refusal_is_reported_but_not_reserved_for() {
    let report = advise_over(
        28.0,
        &base_and_peaks(28, 1, 0),
        &[capacity_refusal(30.0, 2)],
    );
    let family = &report.families[0];
    assert_eq!(
        (family.refused_hours, family.recurring_refused_hours),
        (1, 0)
    );
    assert!(
        family
            .recommendations
            .iter()
            .all(|r| r.kind == CommitmentKind::Discount),
        "{family:#?}"
    );
    assert!(
        family.why.contains("not a pattern to reserve for"),
        "{}",
        family.why
    );
}

#[test]
fn spot_cheaper_than_any_discount_gets_no_discount() {
    let mut events = node("od", Market::OnDemand, P4D_ON_DEMAND, 0.0, 1.0);
    for n in 0..3 {
        events.extend(node(
            &format!("spot-{n}"),
            Market::Spot,
            "5.5",
            0.0,
            7.0 * 24.0,
        ));
    }
    let report = advise_over(7.0, &events, &[]);
    let family = &report.families[0];
    assert!(family.recommendations.is_empty(), "{family:#?}");
    assert!(family.why.contains("no discount saves"), "{}", family.why);
}

#[test]
fn a_pool_with_no_history_gets_no_advice_and_says_why() {
    let refusals = [RefusalRecord {
        pool: "ghost".parse().unwrap(),
        request: None,
        node: None,
        offering: None,
        replicas: 2,
        reason: RefusalReason::NoOffering,
        detail: "every offering refused".into(),
        at: at(5.0),
    }];
    let report = advise_over(7.0, &[], &refusals);
    assert!(report.families.is_empty());
    assert_eq!(report.pools_without_history.len(), 1);
    assert!(report.pools_without_history[0].why.contains("never ran"));
    let table = to_table(&report);
    assert!(table.contains("ghost: refused but never ran"), "{table}");
    let empty = advise_over(7.0, &[], &[]);
    assert!(to_table(&empty).contains("no advice"));
    assert!(to_html(&empty).contains("id=\"no-advice\""));
}

#[test]
fn every_format_carries_the_advice() {
    let report = advise_over(14.0, &base_and_peaks(14, 4, 6), &[]);
    let csv = to_csv(&report).unwrap();
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 1);
    let headers = reader.headers().unwrap().clone();
    let get = |name: &str| rows[0][headers.iter().position(|h| h == name).unwrap()].to_string();
    assert_eq!(get("instances"), "4");
    assert_eq!(get("kind"), "discount");
    let html = to_html(&report);
    assert_eq!(html.matches("<rect").count(), 7 * 24);
    assert!(html.contains("EC2 Instance Savings Plan"));
    assert!(html.contains("https://aws.amazon.com/savingsplans/faqs/"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["families"][0]["recommendations"][0]["instances"], 4);
}

#[test]
fn a_terms_file_without_a_source_or_with_a_discount_past_100_is_refused() {
    let bad = DEFAULT_TERMS.replacen("discount_percent = 72", "discount_percent = 120", 1);
    let err = parse_terms(&bad).unwrap_err().to_string();
    assert!(
        err.contains("discount_percent: 120 is outside 0..100"),
        "{err}"
    );
    let bad = DEFAULT_TERMS.replacen(
        "source = \"https://aws.amazon.com/savingsplans/faqs/\"",
        "source = \"my spreadsheet\"",
        1,
    );
    let err = parse_terms(&bad).unwrap_err().to_string();
    assert!(err.contains(".source: name the public page"), "{err}");
    // Only a block has its own rate.
    let bad = DEFAULT_TERMS.replacen(
        "discount_percent = 72\n",
        "discount_percent = 72\nusd_per_node_hour = 9.5\n",
        1,
    );
    let err = parse_terms(&bad).unwrap_err().to_string();
    assert!(err.contains("only a block has its own rate"), "{err}");
}
