//! Reports against hand-built ledger histories whose figures can be checked by hand.

use headroom_core::planner::Destination;
use headroom_core::{
    Budget, BudgetPeriod, HardAction, Market, Money, NodeId, NodeState, ProviderKind,
    RefusalReason, ReservedCapacity, Timestamp,
};
use headroom_records::derive::spend;
use headroom_records::{NodeEvent, RefusalRecord};
use headroom_report::{GroupBy, ReportInput, budget_report, focus, html, to_csv};

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn event(
    node: &str,
    market: Market,
    destination: Destination,
    state: NodeState,
    at: &str,
    price: &str,
    gpus: u32,
) -> NodeEvent {
    NodeEvent {
        node: NodeId(node.into()),
        pool: "llama".parse().unwrap(),
        account: "ml".parse().unwrap(),
        offering: "o".parse().unwrap(),
        provider: ProviderKind::Aws,
        region: "us-east-1".into(),
        zone: "use1-az1".into(),
        instance_type: "p4d.24xlarge".into(),
        market,
        request: None,
        destination,
        state,
        instance: Some(format!("i-{node}")),
        client_token: format!("hr-{node}"),
        price_usd_per_hour: price.parse().unwrap(),
        parked_usd_per_hour: Money::ZERO,
        gpus,
        hold: Money::ZERO,
        reason: None,
        at: t(at),
    }
}

/// An on-demand node: requested 09:00, booting 09:06 to 09:12, serving until 10:12, gone.
/// A spot node climbing to the warm pool 09:00-09:30, then parked (stopped) warm.
fn history() -> Vec<NodeEvent> {
    use Destination::{Serve, Warm as ToWarm};
    use NodeState::{Booting, Requested, Serving, Terminated};
    vec![
        event(
            "a",
            Market::OnDemand,
            Serve,
            Requested,
            "2026-11-30T09:00:00Z",
            "24",
            8,
        ),
        event(
            "a",
            Market::OnDemand,
            Serve,
            Booting,
            "2026-11-30T09:06:00Z",
            "24",
            8,
        ),
        event(
            "b",
            Market::Spot,
            ToWarm,
            Booting,
            "2026-11-30T09:00:00Z",
            "6",
            8,
        ),
        event(
            "a",
            Market::OnDemand,
            Serve,
            Serving,
            "2026-11-30T09:12:00Z",
            "24",
            8,
        ),
        event(
            "b",
            Market::Spot,
            ToWarm,
            NodeState::Warm,
            "2026-11-30T09:30:00Z",
            "6",
            8,
        ),
        event(
            "a",
            Market::OnDemand,
            Serve,
            Terminated,
            "2026-11-30T10:12:00Z",
            "24",
            8,
        ),
    ]
}

/// [`history`] with node `b`'s volumes priced at $0.50/h: parked warm from 09:30, they cost
/// $1.25 by 12:00.
fn history_with_parked_volumes() -> Vec<NodeEvent> {
    history()
        .into_iter()
        .map(|mut e| {
            if e.node.0 == "b" {
                e.parked_usd_per_hour = "0.5".parse().unwrap();
            }
            e
        })
        .collect()
}

/// One p4d node on the reservation `use1-p4d-reserved`, serving 09:00-09:40.
fn reserved_node_09_00_to_09_40() -> [NodeEvent; 2] {
    let reserved = |state, at| {
        let mut e = event(
            "r",
            Market::Reserved,
            Destination::Serve,
            state,
            at,
            "18.5",
            8,
        );
        e.offering = "use1-p4d-reserved".parse().unwrap();
        e
    };
    [
        reserved(NodeState::Serving, "2026-11-30T09:00:00Z"),
        reserved(NodeState::Terminated, "2026-11-30T09:40:00Z"),
    ]
}

/// Two p4d nodes reserved at 18.50/h for pool `llama` (account `ml`).
fn p4d_reservation(starts_at: Option<Timestamp>, ends_at: Option<Timestamp>) -> ReservedCapacity {
    ReservedCapacity {
        offering: "use1-p4d-reserved".parse().unwrap(),
        provider: ProviderKind::Aws,
        region: "us-east-1".into(),
        zone: "us-east-1a".into(),
        instance_type: "p4d.24xlarge".into(),
        nodes: 2,
        gpus_per_node: 8,
        price_usd_per_hour: "18.5".parse().unwrap(),
        starts_at,
        ends_at,
        pools: vec![("llama".parse().unwrap(), "ml".parse().unwrap())],
    }
}

fn input<'a>(
    events: &'a [NodeEvent],
    refusals: &'a [RefusalRecord],
    budgets: &'a [Budget],
    by: GroupBy,
) -> ReportInput<'a> {
    ReportInput {
        events,
        refusals,
        budgets,
        reservations: &[],
        from: t("2026-11-30T00:00:00Z"),
        to: t("2026-12-01T00:00:00Z"),
        now: t("2026-11-30T12:00:00Z"),
        group_by: by,
    }
}

#[test]
fn spend_splits_by_market_and_counts_the_warm_premium() {
    let events = history();
    let refusals = [RefusalRecord {
        pool: "llama".parse().unwrap(),
        request: None,
        node: None,
        offering: None,
        replicas: 3,
        reason: RefusalReason::MaxReplicas,
        detail: String::new(),
        at: t("2026-11-30T09:01:00Z"),
    }];
    let report = budget_report(&input(&events, &refusals, &[], GroupBy::Market)).unwrap();
    // On-demand: 6 min booting + 60 min serving at $24/h = $26.40. Spot warm climb: 30 min at $6/h = $3.
    let on_demand = report.rows.iter().find(|r| r.group == "on-demand").unwrap();
    assert_eq!(on_demand.spend, "26.4".parse().unwrap());
    let spot = report.rows.iter().find(|r| r.group == "spot").unwrap();
    assert_eq!(
        (spot.spend, spot.warm_idle_premium),
        ("3".parse().unwrap(), "3".parse().unwrap())
    );
    assert_eq!(report.totals.spend, "29.4".parse().unwrap());
    // Requested GPU-hours: 8 GPUs from 09:00 to 10:12 (1.2 h) = 9.6; delivered 8 × 1 h = 8.
    assert!((report.totals.requested_gpu_hours - 9.6).abs() < 1e-9);
    assert!((report.totals.delivered_gpu_hours - 8.0).abs() < 1e-9);
    assert!((report.totals.fill_ratio - 8.0 / 9.6).abs() < 1e-9);
    assert_eq!(
        report.totals.refusals_by_reason.get("max_replicas"),
        Some(&3)
    );
}

#[test]
fn focus_rows_sum_to_the_ledger_spend_exactly() {
    let events = history();
    let (from, until) = (t("2026-11-30T09:03:00Z"), t("2026-11-30T09:45:00Z"));
    let text = focus::to_focus_csv(&events, &[], from, until).unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers().unwrap().clone();
    for column in [
        "BilledCost",
        "EffectiveCost",
        "ListCost",
        "ContractedCost",
        "BillingCurrency",
        "ChargePeriodStart",
        "PricingCategory",
        "ResourceId",
        "Tags",
        "x_Pool",
    ] {
        assert!(headers.iter().any(|h| h == column), "{column} missing");
    }
    let billed = headers.iter().position(|h| h == "BilledCost").unwrap();
    let category = headers.iter().position(|h| h == "PricingCategory").unwrap();
    let mut total = Money::ZERO;
    let mut categories = std::collections::BTreeSet::new();
    for row in reader.records() {
        let row = row.unwrap();
        total += row[billed].parse::<Money>().unwrap();
        categories.insert(row[category].to_string());
    }
    assert_eq!(total, spend(&events, None, Some(from), until));
    // By hand: booting 09:06-09:12 ($2.40) and serving 09:12-09:45 ($13.20) at $24/h, plus
    // the spot warm climb 09:03-09:30 at $6/h ($2.70).
    assert_eq!(total, "18.3".parse().unwrap());
    assert_eq!(
        categories,
        ["Dynamic".to_string(), "Standard".to_string()].into()
    );
}

/// Account `ml`'s daily budget of `ceiling`.
fn ml_day_budget(ceiling: &str) -> Budget {
    Budget {
        account: "ml".parse().unwrap(),
        period: BudgetPeriod::Day,
        ceiling: ceiling.parse().unwrap(),
        soft_threshold_percent: 80,
        hard_action: HardAction::Refuse,
    }
}

#[test]
fn csv_and_html_carry_the_same_figures() {
    let events = history();
    let budgets = [ml_day_budget("30")];
    let report = budget_report(&input(&events, &[], &budgets, GroupBy::Account)).unwrap();
    let csv = to_csv(&report).unwrap();
    assert!(
        csv.lines()
            .any(|l| l.starts_with("ml,") && l.contains(",29.400000,")),
        "{csv}"
    );
    assert!(csv.lines().last().unwrap().starts_with("total,"));
    let page = html::to_html(&report);
    assert!(page.contains(r#"id="total-spend" title="29.400000""#));
    assert!(page.contains("<svg id=\"spend-chart\""));
    assert!(
        !page.contains("<script") && !page.contains("http"),
        "self-contained, no network"
    );
    // 29.40 of 30 spent: over the 80 % soft threshold, nothing billing now, so no more forecast.
    let line = &report.budgets[0];
    assert!(line.soft_threshold_reached);
    assert_eq!(line.forecast, line.spent);
}

/// A node parked an hour at $X/h adds $X to the account's spend: in the report's rows, its
/// budget line and forecast, the CSV and FOCUS (a row of its own for the volumes, at the parked
/// price), all to the micro-dollar of the ledger's spend; GPU-hours stay compute.
#[test]
fn a_parked_node_s_volumes_are_spend_in_every_format() {
    let events = history_with_parked_volumes();
    let budgets = [ml_day_budget("100")];
    let money = |s: &str| -> Money { s.parse().unwrap() };
    let now = t("2026-11-30T12:00:00Z");
    let report = budget_report(&input(&events, &[], &budgets, GroupBy::Market)).unwrap();
    // Node b parked 09:30-12:00: 2.5 h at $0.50/h = $1.25 beside its $3 climb.
    let spot = report.rows.iter().find(|r| r.group == "spot").unwrap();
    assert_eq!(
        (spot.spend, spot.spot, spot.parked, spot.warm_idle_premium),
        (money("4.25"), money("3"), money("1.25"), money("4.25"))
    );
    assert_eq!(report.totals.spend, money("30.65"));
    assert_eq!(report.totals.spend, spend(&events, None, None, now));
    let unparked = budget_report(&input(&history(), &[], &budgets, GroupBy::Market)).unwrap();
    assert_eq!(
        report.totals.spend - unparked.totals.spend,
        money("1.25"),
        "the parked hours, and nothing else, are new"
    );
    assert_eq!(
        (
            report.totals.requested_gpu_hours,
            report.totals.delivered_gpu_hours
        ),
        (
            unparked.totals.requested_gpu_hours,
            unparked.totals.delivered_gpu_hours
        ),
        "a parked node delivers and asks for no GPU-hours"
    );
    // The budget counts it, and its forecast burns $0.50/h for the 12 h left of the day.
    let line = &report.budgets[0];
    assert_eq!(line.spent, money("30.65"));
    assert_eq!(line.forecast, money("36.65"));

    let csv = to_csv(&report).unwrap();
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let headers = reader.headers().unwrap().clone();
    let parked = headers.iter().position(|h| h == "parked").unwrap();
    let spend_column = headers.iter().position(|h| h == "spend").unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let spot_row = rows.iter().find(|r| &r[0] == "spot").unwrap();
    assert_eq!(
        (&spot_row[spend_column], &spot_row[parked]),
        ("4.250000", "1.250000")
    );
    let total_row = rows.last().unwrap();
    assert_eq!(&total_row[spend_column], "30.650000");

    let from = t("2026-11-30T00:00:00Z");
    let text = focus::to_focus_csv(&events, &[], from, now).unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let mut total = Money::ZERO;
    let mut parked_rows = Vec::new();
    for row in reader.deserialize::<std::collections::BTreeMap<String, String>>() {
        let row = row.unwrap();
        total += row["BilledCost"].parse::<Money>().unwrap();
        if row["ChargeDescription"].contains("parked") {
            parked_rows.push(row);
        }
    }
    assert_eq!(total, spend(&events, None, Some(from), now));
    assert_eq!(total, money("30.65"));
    assert_eq!(parked_rows.len(), 1, "one row for b's parked span");
    let row = &parked_rows[0];
    for (column, value) in [
        ("BilledCost", "1.250000"),
        ("ListUnitPrice", "0.500000"),
        ("ContractedUnitPrice", "0.500000"),
        ("PricingQuantity", "2.500000"),
        ("ConsumedQuantity", "2.500000"),
        ("ConsumedUnit", "Hours"),
        ("PricingCategory", "Standard"),
        ("ServiceCategory", "Storage"),
        ("ChargePeriodStart", "2026-11-30T09:30:00Z"),
        ("x_NodeId", "b"),
        ("CommitmentDiscountId", ""),
    ] {
        assert_eq!(row[column], value, "{column}: {row:?}");
    }
}

/// FOCUS 1.2's rules for the conditional columns, row by row, over on-demand, spot, parked and
/// reserved nodes: each column named as FOCUS spells it (or `x_`-prefixed), names present where
/// their ids are, SKU price ids only with a SKU, costs equal to unit price times quantity, and
/// the commitment discount columns filled exactly on the rows priced `Committed`.
#[test]
fn focus_conditional_columns_follow_the_spec_s_rules() {
    let mut events = history_with_parked_volumes();
    events.extend(reserved_node_09_00_to_09_40());
    // Two nodes reserved from 08:00: both idle 08:00-09:00 and 09:40-12:00, one while the
    // reserved node serves.
    let reservation = p4d_reservation(Some(t("2026-11-30T08:00:00Z")), None);
    let text = focus::to_focus_csv(
        &events,
        &[reservation],
        t("2026-11-30T00:00:00Z"),
        t("2026-11-30T12:00:00Z"),
    )
    .unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let known: std::collections::BTreeSet<&str> = focus::COLUMNS.into_iter().collect();
    assert_eq!(known.len(), headers.len(), "no column twice");
    for h in &headers {
        assert!(
            h.starts_with("x_") || h.chars().next().unwrap().is_ascii_uppercase(),
            "{h}: FOCUS columns are PascalCase, custom ones x_"
        );
    }
    for column in [
        "RegionName",
        "SubAccountName",
        "ResourceName",
        "SkuId",
        "SkuPriceId",
        "ListUnitPrice",
        "ContractedUnitPrice",
        "CommitmentDiscountId",
        "CommitmentDiscountType",
        "CommitmentDiscountCategory",
        "CommitmentDiscountStatus",
        "CommitmentDiscountQuantity",
        "CommitmentDiscountUnit",
    ] {
        assert!(headers.iter().any(|h| h == column), "{column} missing");
    }
    let (mut used_rows, mut unused_rows) = (0, 0);
    for row in reader.deserialize::<std::collections::BTreeMap<String, String>>() {
        let row = row.unwrap();
        let v = |c: &str| row[c].as_str();
        let null = |c: &str| row[c].is_empty();
        let money = |c: &str| v(c).parse::<f64>().unwrap();
        // Names are null exactly when their ids are.
        for (id, name) in [
            ("RegionId", "RegionName"),
            ("SubAccountId", "SubAccountName"),
            ("ResourceId", "ResourceName"),
            ("CommitmentDiscountId", "CommitmentDiscountName"),
        ] {
            assert_eq!(null(id), null(name), "{id}/{name}: {row:?}");
        }
        assert!(
            null("SkuPriceId") || !null("SkuId"),
            "a SKU price needs its SKU"
        );
        // Costs are unit prices times the pricing quantity (to the micro-dollar).
        let quantity = money("PricingQuantity");
        for (cost, unit) in [
            ("ListCost", "ListUnitPrice"),
            ("ContractedCost", "ContractedUnitPrice"),
        ] {
            assert!(
                (money(cost) - money(unit) * quantity).abs() < 1e-5,
                "{cost} is not {unit} × PricingQuantity: {row:?}"
            );
        }
        assert!(money("EffectiveCost") <= money("ListCost") + 1e-9);
        // Commitment discounts: exactly on Committed rows, used, in hours of the span.
        let committed = v("PricingCategory") == "Committed";
        assert_eq!(committed, !null("CommitmentDiscountId"), "{row:?}");
        let cd = [
            "CommitmentDiscountType",
            "CommitmentDiscountCategory",
            "CommitmentDiscountStatus",
            "CommitmentDiscountQuantity",
            "CommitmentDiscountUnit",
        ];
        if committed {
            assert_eq!(v("CommitmentDiscountCategory"), "Usage");
            assert_eq!(v("CommitmentDiscountUnit"), "Hours");
            assert_eq!(v("CommitmentDiscountQuantity"), v("PricingQuantity"));
            assert_eq!(v("CommitmentDiscountId"), "use1-p4d-reserved");
            // The capacity reservation's columns match the commitment's.
            assert_eq!(v("CapacityReservationId"), v("CommitmentDiscountId"));
            assert_eq!(
                v("CapacityReservationStatus"),
                v("CommitmentDiscountStatus")
            );
            // Consumed columns are null exactly on the unused part of the commitment.
            match v("CommitmentDiscountStatus") {
                "Used" => {
                    used_rows += 1;
                    assert_eq!(v("ConsumedQuantity"), v("PricingQuantity"));
                }
                "Unused" => {
                    unused_rows += 1;
                    assert!(null("ConsumedQuantity") && null("ConsumedUnit"), "{row:?}");
                }
                other => panic!("CommitmentDiscountStatus {other:?}: {row:?}"),
            }
        } else {
            for c in cd
                .into_iter()
                .chain(["CapacityReservationId", "CapacityReservationStatus"])
            {
                assert!(null(c), "{c} on a row without a commitment: {row:?}");
            }
        }
        assert_eq!(v("RegionName"), "US East (N. Virginia)");
        assert_eq!(v("SubAccountName"), v("SubAccountId"));
    }
    assert_eq!(used_rows, 1, "the reserved node's serving span");
    // 08:00-09:00 two idle, 09:00-09:40 one, 09:40-12:00 two.
    assert_eq!(unused_rows, 3);
}

/// A reservation of two p4d nodes for the day, on which one node served 09:00-09:40: the
/// report charges the 23 h 20 min of unused node time to the one pool that can use it, in
/// spend, in every grouping, in the chart's last point and in FOCUS to the micro-dollar.
#[test]
fn a_reservation_s_idle_hours_are_spend_in_every_grouping_and_format() {
    let mut events = history();
    events.extend(reserved_node_09_00_to_09_40());
    let reservation = p4d_reservation(None, Some(t("2026-12-01T00:00:00Z")));
    let reservations = [reservation];
    let mut day = input(&events, &[], &[], GroupBy::Pool);
    day.now = t("2026-12-01T00:00:00Z");
    day.reservations = &reservations;
    let without = budget_report(&ReportInput {
        reservations: &[],
        ..day
    })
    .unwrap();
    let report = budget_report(&day).unwrap();
    // 48 reserved node-hours, 40 minutes used.
    let idle_hours = 48.0 - 40.0 / 60.0;
    assert!((report.totals.reserved_idle_node_hours - idle_hours).abs() < 1e-9);
    assert!((report.totals.reserved_used_node_hours - 40.0 / 60.0).abs() < 1e-9);
    let idle_cost = report.totals.reserved_idle;
    assert!((idle_cost.as_f64_lossy() - idle_hours * 18.5).abs() < 1e-5);
    assert_eq!(report.totals.spend, without.totals.spend + idle_cost);
    assert_eq!(
        report.spend_series.last().unwrap().cumulative_spend,
        report.totals.spend
    );
    let pool = |r: &headroom_report::BudgetReport, name: &str| {
        r.rows.iter().find(|row| row.group == name).unwrap().clone()
    };
    let llama = pool(&report, "llama");
    assert_eq!(
        llama.reserved_idle, idle_cost,
        "the only pool listing it pays"
    );
    for by in [
        GroupBy::Account,
        GroupBy::Provider,
        GroupBy::Region,
        GroupBy::Market,
    ] {
        let grouped = budget_report(&ReportInput {
            group_by: by,
            ..day
        })
        .unwrap();
        assert_eq!(grouped.totals.spend, report.totals.spend, "{by}");
        assert_eq!(grouped.totals.reserved_idle, idle_cost, "{by}");
    }
    let by_market = budget_report(&ReportInput {
        group_by: GroupBy::Market,
        ..day
    })
    .unwrap();
    assert_eq!(pool(&by_market, "reserved").reserved_idle, idle_cost);

    let csv_text = to_csv(&report).unwrap();
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let headers = reader.headers().unwrap().clone();
    let column = headers.iter().position(|h| h == "reserved_idle").unwrap();
    let total = reader.records().last().unwrap().unwrap();
    assert_eq!(&total[column], idle_cost.to_string());
    let page = html::to_html(&report);
    assert!(
        page.contains("reserved idle"),
        "the finance page shows the column"
    );

    let focus_text = focus::to_focus_csv(&events, &reservations, day.from, day.now).unwrap();
    let mut reader = csv::Reader::from_reader(focus_text.as_bytes());
    let billed: i64 = reader
        .deserialize::<std::collections::BTreeMap<String, String>>()
        .map(|row| {
            row.unwrap()["BilledCost"]
                .parse::<Money>()
                .unwrap()
                .micros()
        })
        .sum();
    assert_eq!(billed, report.totals.spend.micros(), "FOCUS reconciles");
}

/// An exact decimal as written: `(units, decimals)`, so `"1.50"` is `(150, 2)`.
fn exact(s: &str) -> (i128, u32) {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let units: i128 = format!("{whole}{frac}")
        .parse()
        .unwrap_or_else(|_| panic!("{s:?}"));
    (units, frac.len() as u32)
}

/// `a` and `b` are the same number (at any number of decimals).
fn same((a, da): (i128, u32), (b, db): (i128, u32)) -> bool {
    let d = da.max(db);
    a * 10i128.pow(d - da) == b * 10i128.pow(d - db)
}

fn times((a, da): (i128, u32), (b, db): (i128, u32)) -> (i128, u32) {
    (a * b, da + db)
}

/// FOCUS 1.2's identities hold exactly as the strings are written, on every row of a report of
/// many spans at awkward prices and millisecond-odd durations, with a reservation's unused rows:
/// ListCost = ListUnitPrice × PricingQuantity, ContractedCost = ContractedUnitPrice ×
/// PricingQuantity, EffectiveCost = BilledCost, and BilledCost is the list cost rounded half up
/// to the micro-dollar (never above it), so the rows still sum to the ledger's spend exactly.
#[test]
fn focus_costs_are_exactly_unit_price_times_quantity_on_every_row() {
    let mut events = Vec::new();
    for i in 0..240u32 {
        let name = format!("n{i}");
        let market = [Market::OnDemand, Market::Spot, Market::Reserved][i as usize % 3];
        // $3.670001/h upward in odd steps; starts and stops a few odd milliseconds apart.
        let price = Money::from_micros(3_670_001 + i64::from(i) * 137_173);
        let start =
            t("2026-11-30T08:00:00Z") + chrono::Duration::milliseconds(i64::from(i) * 7_919);
        let serving = start + chrono::Duration::milliseconds(61_001 + i64::from(i) * 13);
        let end = serving + chrono::Duration::milliseconds(3_599_999 + i64::from(i) * 104_729);
        for (state, at) in [
            (NodeState::Booting, start),
            (NodeState::Serving, serving),
            (NodeState::Terminated, end),
        ] {
            let mut e = event(
                &name,
                market,
                Destination::Serve,
                state,
                "2026-11-30T08:00:00Z",
                "1",
                8,
            );
            e.price_usd_per_hour = price;
            e.at = at;
            if market == Market::Reserved {
                e.offering = "use1-p4d-reserved".parse().unwrap();
            }
            events.push(e);
        }
    }
    let mut reservation = p4d_reservation(Some(t("2026-11-30T07:59:59.997Z")), None);
    reservation.nodes = 120;
    reservation.price_usd_per_hour = "18.333337".parse().unwrap();
    let (from, until) = (t("2026-11-30T00:00:00Z"), t("2026-11-30T20:00:00.001Z"));
    let reservations = [reservation];
    let text = focus::to_focus_csv(&events, &reservations, from, until).unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let (mut rows, mut unused, mut billed_total) = (0, 0, Money::ZERO);
    for row in reader.deserialize::<std::collections::BTreeMap<String, String>>() {
        let row = row.unwrap();
        let v = |c: &str| exact(&row[c]);
        let quantity = v("PricingQuantity");
        assert!(
            same(v("ListCost"), times(v("ListUnitPrice"), quantity)),
            "ListCost is not ListUnitPrice × PricingQuantity: {row:?}"
        );
        assert!(
            same(
                v("ContractedCost"),
                times(v("ContractedUnitPrice"), quantity)
            ),
            "ContractedCost is not ContractedUnitPrice × PricingQuantity: {row:?}"
        );
        assert_eq!(row["BilledCost"], row["EffectiveCost"], "{row:?}");
        // BilledCost is the list cost rounded half up to the micro-dollar, never above it.
        let (list, d) = v("ListCost");
        let (billed, _) = v("BilledCost");
        assert!(d >= 6, "{row:?}");
        let unit = 10i128.pow(d - 6);
        assert_eq!(
            (list + unit / 2).div_euclid(unit),
            billed,
            "BilledCost is not ListCost rounded: {row:?}"
        );
        assert!(billed * unit <= list, "BilledCost above ListCost: {row:?}");
        billed_total += row["BilledCost"].parse::<Money>().unwrap();
        if row["CommitmentDiscountStatus"] == "Unused" {
            unused += 1;
        }
        rows += 1;
    }
    assert!(rows > 600 && unused > 100, "{rows} rows, {unused} unused");
    let report = budget_report(&ReportInput {
        events: &events,
        refusals: &[],
        budgets: &[],
        reservations: &reservations,
        from,
        to: until,
        now: until,
        group_by: GroupBy::Account,
    })
    .unwrap();
    assert_eq!(billed_total, report.totals.spend, "FOCUS reconciles");
}

/// The `<svg …>…</svg>` element whose opening tag contains `marker`.
fn svg_with<'a>(page: &'a str, marker: &str) -> &'a str {
    let at = page
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} missing: {page}"));
    let start = page[..at].rfind("<svg").unwrap();
    &page[start..at + page[at..].find("</svg>").unwrap()]
}

/// Every `<tag …>` in `svg` with the value of `name`, in order.
fn attrs(svg: &str, tag: &str, name: &str) -> Vec<String> {
    svg.match_indices(&format!("<{tag} "))
        .filter_map(|(at, _)| {
            let el = &svg[at..at + svg[at..].find('>').unwrap()];
            let key = format!(" {name}=\"");
            let from = el.find(&key)? + key.len();
            Some(el[from..from + el[from..].find('"').unwrap()].to_string())
        })
        .collect()
}

/// Every `<text>` of `svg` as a box `(left, top, right, bottom)`, its glyphs taken 6 px wide and
/// 10 px tall (the chart's 10 px font): enough to tell labels that share a spot.
fn text_boxes(svg: &str) -> Vec<(String, [f64; 4])> {
    svg.match_indices("<text ")
        // The rotated axis title stands apart, left of the tick labels.
        .filter(|(at, _)| !svg[*at..*at + svg[*at..].find('>').unwrap()].contains("rotate("))
        .map(|(at, _)| {
            let el = &svg[at..];
            let open = &el[..el.find('>').unwrap()];
            let content = &el[el.find('>').unwrap() + 1..el.find("</text>").unwrap()];
            let get = |k: &str| {
                let key = format!(" {k}=\"");
                open.find(&key).map(|f| {
                    let f = f + key.len();
                    open[f..f + open[f..].find('"').unwrap()].to_string()
                })
            };
            let (x, y): (f64, f64) = (
                get("x").unwrap().parse().unwrap(),
                get("y").unwrap().parse().unwrap(),
            );
            let w = 6.0 * content.chars().count() as f64;
            let left = match get("text-anchor").as_deref() {
                Some("end") => x - w,
                Some("middle") => x - w / 2.0,
                _ => x,
            };
            (content.to_string(), [left, y - 10.0, left + w, y])
        })
        .collect()
}

/// $29.40 of spend in a day under a $20,000 daily ceiling: the day's chart scales to the spend
/// (a round top within twice the data, the line reaching over half the height) and names the
/// ceiling above the scale instead of squashing the line flat; under a $30 ceiling the line is
/// drawn and sets the top ($30). Each ceiling is drawn on its own account's chart over its own
/// period (the day), never on the range's chart of all spend; "now" overprints no label.
#[test]
fn the_budget_chart_scales_to_the_spend_and_draws_each_ceiling_against_its_period() {
    let events = history();
    let budget = |ceiling: &str| Budget {
        account: "ml".parse().unwrap(),
        period: BudgetPeriod::Day,
        ceiling: ceiling.parse().unwrap(),
        soft_threshold_percent: 80,
        hard_action: HardAction::Refuse,
    };
    let mut month = input(&events, &[], &[], GroupBy::Account);
    month.from = t("2026-11-01T00:00:00Z");
    let far = [budget("20000")];
    let page = html::to_html(
        &budget_report(&ReportInput {
            budgets: &far,
            ..month
        })
        .unwrap(),
    );
    let range = svg_with(&page, r#"id="spend-chart""#);
    assert!(
        !range.contains("ceiling"),
        "no account's daily ceiling on a month of all spend: {range}"
    );
    let day = svg_with(&page, r#"class="budget-chart" data-account="ml""#);
    assert!(day.contains(r#"data-period="daily""#), "{day}");
    assert!(
        day.contains(">2026-11-30 00:00</text>") && day.contains(">2026-12-01 00:00</text>"),
        "the chart spans the budget's day: {day}"
    );
    let y_ticks: Vec<f64> = day
        .split(r#"class="y-tick""#)
        .skip(1)
        .map(|rest| {
            let text = &rest[rest.find('>').unwrap() + 1..rest.find('<').unwrap()];
            text.trim_start_matches('$').parse().unwrap()
        })
        .collect();
    let top = *y_ticks.last().unwrap();
    assert!(
        (29.4..=2.0 * 29.4).contains(&top),
        "the scale's top {top} follows the spend: {y_ticks:?}"
    );
    assert!(
        [1.0, 2.0, 2.5, 5.0].iter().any(|m| {
            let step = y_ticks[1] - y_ticks[0];
            let p = 10f64.powf(step.log10().floor());
            (step / p - m).abs() < 1e-9
        }),
        "round ticks: {y_ticks:?}"
    );
    assert!(!day.contains(r#"class="ceiling""#), "{day}");
    assert!(
        day.contains(r#"class="ceiling-off-scale""#) && day.contains("$20000.00"),
        "{day}"
    );
    let ys: Vec<f64> = attrs(day, "polyline", "points")[0]
        .split(' ')
        .map(|p| p.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    let axis = attrs(day, "line", "y1");
    let (upper, bottom): (f64, f64) = (axis[1].parse().unwrap(), axis[0].parse().unwrap());
    let highest = ys.iter().copied().fold(f64::MAX, f64::min);
    assert!(
        bottom - highest > (bottom - upper) / 2.0,
        "the spend fills the chart: {ys:?}"
    );

    let near = [budget("30")];
    let page = html::to_html(
        &budget_report(&ReportInput {
            budgets: &near,
            ..month
        })
        .unwrap(),
    );
    let day = svg_with(&page, r#"class="budget-chart" data-account="ml""#);
    assert!(
        day.contains(r#"class="ceiling" data-account="ml""#),
        "{day}"
    );
    assert!(
        day.contains(r#"text-anchor="end">$30</text>"#),
        "the ceiling sets a round top: {day}"
    );
    for svg in [svg_with(&page, r#"id="spend-chart""#), day] {
        let boxes = text_boxes(svg);
        for (i, (a, p)) in boxes.iter().enumerate() {
            for (b, q) in &boxes[i + 1..] {
                let apart = p[2] <= q[0] || q[2] <= p[0] || p[3] <= q[1] || q[3] <= p[1];
                assert!(apart, "{a:?} {p:?} overprints {b:?} {q:?}");
            }
        }
    }
}
