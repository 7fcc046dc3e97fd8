use headroom_core::WarmMode;

use super::*;

const EXAMPLE: &str = include_str!("../../../config/headroom.example.toml");

fn errors(text: &str) -> Vec<String> {
    Config::parse(text, "t.toml")
        .expect_err("config should be rejected")
        .0
}

#[test]
fn the_example_is_valid() {
    let config = Config::parse(EXAMPLE, "example").unwrap();
    assert_eq!(config.pools.len(), 2);
    assert_eq!(
        config
            .offering(&"use1-p5-od".parse().unwrap())
            .unwrap()
            .price_usd_per_hour,
        "55.04".parse().unwrap()
    );
}

#[test]
fn supply_mistakes_name_the_key_and_the_fix() {
    let with_supply = |supply: &str| {
        EXAMPLE.replacen(
            "\n[pools.ladder]\n",
            &format!("\n[pools.supply]\n{supply}\n[pools.ladder]\n"),
            1,
        )
    };
    for (supply, key) in [
        (
            "spot_percent_above_base = 150",
            "pools[0].supply.spot_percent_above_base",
        ),
        ("warm_mode = \"tepid\"", "pools[0].supply.warm_mode"),
        ("fallback_pool = \"nope\"", "pools[0].supply.fallback_pool"),
        (
            "fallback_pool = \"llama-70b-interactive\"",
            "pools[0].supply.fallback_pool",
        ),
        (
            "max_launches_per_period = 0",
            "pools[0].supply.max_launches_per_period",
        ),
    ] {
        let e = errors(&with_supply(supply));
        assert!(
            e.len() == 1 && e[0].contains(key) && e[0].contains("fix:"),
            "{supply}: {e:?}"
        );
    }
    let ok = Config::parse(
        &with_supply("on_demand_base = 2\nspot_percent_above_base = 50\nwarm_mode = \"running\"\nfallback_pool = \"mistral-7b-batch\""),
        "t.toml",
    )
    .unwrap();
    assert_eq!(ok.pools[0].supply.on_demand_base, 2);
    assert_eq!(ok.pools[0].supply.warm_mode, WarmMode::Running);

    let reserved = EXAMPLE.replacen("market = \"on-demand\"", "market = \"reserved\"", 1);
    let e = errors(&reserved);
    assert!(e[0].contains("offerings[0].reserved_nodes"), "{e:?}");
    let ok = Config::parse(
        &reserved.replacen(
            "gpus = 8",
            "gpus = 8\nreserved_nodes = 4\nreservation_ends = \"2027-01-01T00:00:00Z\"",
            1,
        ),
        "t.toml",
    )
    .unwrap();
    assert_eq!(ok.offerings[0].reservation.map(|r| r.nodes), Some(4));
    // The books price it for the pools that list it, from when it starts.
    let books = ok.reserved_capacity();
    assert_eq!(books.len(), 1);
    assert_eq!(books[0].nodes, 4);
    assert!(!books[0].pools.is_empty(), "{books:?}");
    let backwards = reserved.replacen(
        "gpus = 8",
        "gpus = 8\nreserved_nodes = 4\nreservation_starts = \"2027-02-01T00:00:00Z\"\nreservation_ends = \"2027-01-01T00:00:00Z\"",
        1,
    );
    let e = errors(&backwards);
    assert!(
        e[0].contains("offerings[0].reservation_ends") && e[0].contains("before it starts"),
        "{e:?}"
    );
}

#[test]
fn unknown_key_names_the_key_and_line() {
    let text = EXAMPLE.replace("warm_pool_size = 4", "warm_pool_sise = 4");
    let e = errors(&text);
    assert_eq!(e.len(), 1);
    assert!(
        e[0].contains("warm_pool_sise") && e[0].contains("fix:"),
        "{}",
        e[0]
    );
    assert!(e[0].starts_with("t.toml:"), "{}", e[0]);
}

#[test]
fn negative_size_is_rejected_with_a_fix() {
    let e = errors(&EXAMPLE.replace("warm_pool_size = 4", "warm_pool_size = -4"));
    assert!(
        e[0].contains("key `warm_pool_size`") && e[0].contains("whole number"),
        "{}",
        e[0]
    );
}

#[test]
fn semantic_problems_are_each_one_line() {
    let text = EXAMPLE
        .replace("min_replicas = 8", "min_replicas = 30")
        .replace(
            "\"use1-p4d-od\", \"use2-p4d-od\"",
            "\"use1-p4d-od\", \"nowhere\"",
        )
        .replace(
            "scale_down_stabilization = \"10m\"",
            "scale_down_stabilization = \"ten minutes\"",
        );
    let e = errors(&text);
    assert_eq!(e.len(), 3, "{e:#?}");
    assert!(
        e.iter()
            .any(|l| l.contains("key `pools[0].min_replicas`") && l.contains("max_replicas 24"))
    );
    assert!(
        e.iter()
            .any(|l| l.contains("key `pools[0].offerings[1]`") && l.contains("nowhere"))
    );
    assert!(e.iter().any(
        |l| l.contains("key `pools[0].scaling.scale_down_stabilization`") && l.contains("\"90s\"")
    ));
    assert!(e.iter().all(|l| !l.contains('\n')));
}

#[test]
fn price_refresh_is_off_at_zero_and_never_a_hammering_loop() {
    let c = Config::parse(
        &EXAMPLE.replace("price_refresh = \"5m\"", "price_refresh = \"0s\""),
        "t",
    )
    .unwrap();
    assert!(c.engine.price_refresh.is_zero());
    let e = errors(&EXAMPLE.replace("price_refresh = \"5m\"", "price_refresh = \"2s\""));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].contains("engine.price_refresh") && e[0].contains("\"0s\""),
        "{}",
        e[0]
    );
}

#[test]
fn quota_cache_ttl_defaults_to_five_minutes_and_is_bounded() {
    let c = Config::parse("cluster_id = \"t\"\n", "t").unwrap();
    assert_eq!(
        c.engine.quota_cache_ttl,
        std::time::Duration::from_secs(300)
    );
    let off = Config::parse(
        "cluster_id = \"t\"\n[engine]\nquota_cache_ttl = \"0s\"\n",
        "t",
    )
    .unwrap();
    assert!(off.engine.quota_cache_ttl.is_zero());
    for bad in ["2s", "2h"] {
        let e = errors(&format!(
            "cluster_id = \"t\"\n[engine]\nquota_cache_ttl = \"{bad}\"\n"
        ));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(
            e[0].contains("engine.quota_cache_ttl")
                && e[0].contains("\"0s\"")
                && !e[0].contains('\n'),
            "{}",
            e[0]
        );
    }
}

#[test]
fn transient_failures_are_bounded_by_validated_knobs() {
    let c = Config::parse("cluster_id = \"t\"\n", "t").unwrap();
    assert_eq!(c.engine.transient_failure_limit, 3);
    assert_eq!(c.engine.transient_failure_window, Duration::from_secs(300));
    assert_eq!(
        c.engine.provider_errors_alert_after,
        Duration::from_secs(300)
    );
    for (from, to, key) in [
        (
            "transient_failure_limit = 3",
            "transient_failure_limit = 0",
            "engine.transient_failure_limit",
        ),
        (
            "transient_failure_window = \"5m\"",
            "transient_failure_window = \"2h\"",
            "engine.transient_failure_window",
        ),
        (
            "provider_errors_alert_after = \"5m\"",
            "provider_errors_alert_after = \"0s\"",
            "engine.provider_errors_alert_after",
        ),
    ] {
        assert!(EXAMPLE.contains(from), "{from}");
        let e = errors(&EXAMPLE.replace(from, to));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(e[0].contains(key) && e[0].contains("e.g."), "{}", e[0]);
    }
}

#[test]
fn the_simulated_launch_answer_delay_is_a_bounded_duration() {
    let c = Config::parse(
        "cluster_id = \"t\"\n[sim]\nlaunch_answer_delay = \"300ms\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.sim.launch_answer_delay, Duration::from_millis(300));
    for bad in ["\"soon\"", "\"11m\""] {
        let e = errors(&format!(
            "cluster_id = \"t\"\n[sim]\nlaunch_answer_delay = {bad}\n"
        ));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(e[0].contains("sim.launch_answer_delay"), "{}", e[0]);
    }
}

#[test]
fn orphan_policy_is_terminate_or_report() {
    let c = Config::parse(
        &EXAMPLE.replace(
            "orphan_policy = \"terminate\"",
            "orphan_policy = \"report\"",
        ),
        "t",
    )
    .unwrap();
    assert_eq!(c.engine.orphan_policy, OrphanPolicy::Report);
    let e = errors(&EXAMPLE.replace("orphan_policy = \"terminate\"", "orphan_policy = \"keep\""));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].contains("engine.orphan_policy") && e[0].contains("\"report\""),
        "{}",
        e[0]
    );
}

#[test]
fn bad_money_and_names_are_rejected() {
    let e = errors(&EXAMPLE.replace("\"55.04\"", "\"55.0400001\""));
    assert!(e[0].contains("price_usd_per_hour"), "{}", e[0]);
    let e = errors(&EXAMPLE.replace("name = \"mistral-7b-batch\"", "name = \"Mistral 7B\""));
    assert!(e[0].contains("pool name"), "{}", e[0]);
}

#[test]
fn an_offering_listed_twice_in_a_pool_is_refused() {
    let text = EXAMPLE.replace(
        "\"use1-p4d-od\", \"use2-p4d-od\"",
        "\"use1-p4d-od\", \"use1-p4d-od\"",
    );
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].contains("key `pools[0].offerings`") && e[0].contains("use1-p4d-od twice"),
        "{}",
        e[0]
    );
}

#[test]
fn token_cache_bounds_and_client_limits_are_read_and_checked() {
    let with_api = |api: &str| EXAMPLE.replacen("# [api]\n", &format!("[api]\n{api}\n"), 1);
    let defaults = Config::parse(EXAMPLE, "t").unwrap().api;
    assert_eq!(
        (
            defaults.client_requests_per_second,
            defaults.client_burst,
            defaults.token_recheck_interval,
            defaults.token_outage_grace
        ),
        (200, 400, Duration::from_secs(10), Duration::from_secs(300))
    );
    let set = Config::parse(
        &with_api("token_recheck_interval = \"2s\"\ntoken_outage_grace = \"1m\"\nclient_burst = 9"),
        "t",
    )
    .unwrap()
    .api;
    assert_eq!(
        (
            set.token_recheck_interval,
            set.token_outage_grace,
            set.client_burst
        ),
        (Duration::from_secs(2), Duration::from_secs(60), 9)
    );
    let proxies = Config::parse(
        &with_api("trusted_proxies = [\"10.0.0.0/8\", \"192.0.2.10\"]"),
        "t",
    )
    .unwrap()
    .api
    .trusted_proxies;
    assert_eq!(
        proxies,
        ["10.0.0.0/8", "192.0.2.10/32"].map(|n| n.parse::<ipnet::IpNet>().unwrap())
    );
    for (api, key) in [
        (
            "token_recheck_interval = \"0s\"",
            "api.token_recheck_interval",
        ),
        (
            "token_recheck_interval = \"1m\"\ntoken_outage_grace = \"30s\"",
            "api.token_outage_grace",
        ),
        (
            "client_requests_per_second = 0",
            "api.client_requests_per_second",
        ),
        ("trusted_proxies = [\"10.0.0.0/33\"]", "api.trusted_proxies"),
    ] {
        let e = errors(&with_api(api));
        assert_eq!(e.len(), 1, "{api}: {e:#?}");
        assert!(e[0].contains(key), "{api}: {}", e[0]);
    }
}

#[test]
fn every_api_duration_and_connection_limit_has_a_range() {
    let with_api = |api: &str| EXAMPLE.replacen("# [api]\n", &format!("[api]\n{api}\n"), 1);
    let defaults = Config::parse(EXAMPLE, "t").unwrap().api;
    assert_eq!(
        (
            defaults.header_read_timeout,
            defaults.idle_timeout,
            defaults.max_connections,
            defaults.max_connections_per_client,
            defaults.max_requests_in_flight
        ),
        (
            Duration::from_secs(10),
            Duration::from_secs(60),
            10_000,
            256,
            512
        )
    );
    let set = Config::parse(
        &with_api("header_read_timeout = \"2s\"\nidle_timeout = \"5m\"\nmax_connections = 50\nmax_connections_per_client = 5\nmax_requests_in_flight = 7"),
        "t",
    )
    .unwrap()
    .api;
    assert_eq!(
        (
            set.header_read_timeout,
            set.idle_timeout,
            set.max_connections,
            set.max_connections_per_client,
            set.max_requests_in_flight
        ),
        (Duration::from_secs(2), Duration::from_secs(300), 50, 5, 7)
    );
    for (api, key) in [
        ("request_timeout = \"1ns\"", "api.request_timeout"),
        ("request_timeout = \"0s\"", "api.request_timeout"),
        ("request_timeout = \"99999999h\"", "api.request_timeout"),
        (
            "token_recheck_interval = \"99999999h\"\ntoken_outage_grace = \"99999999h\"",
            "api.token_recheck_interval",
        ),
        (
            "token_outage_grace = \"99999999h\"",
            "api.token_outage_grace",
        ),
        ("header_read_timeout = \"1ns\"", "api.header_read_timeout"),
        (
            "header_read_timeout = \"18446744073709551615s\"",
            "api.header_read_timeout",
        ),
        ("idle_timeout = \"0s\"", "api.idle_timeout"),
        ("idle_timeout = \"99999999h\"", "api.idle_timeout"),
        ("max_connections = 0", "api.max_connections"),
        ("max_connections = 4294967295", "api.max_connections"),
        (
            "max_connections = 10\nmax_connections_per_client = 11",
            "api.max_connections_per_client",
        ),
        (
            "max_connections_per_client = 0",
            "api.max_connections_per_client",
        ),
        ("max_requests_in_flight = 0", "api.max_requests_in_flight"),
        (
            "max_requests_in_flight = 100001",
            "api.max_requests_in_flight",
        ),
    ] {
        let e = errors(&with_api(api));
        assert!(!e.is_empty(), "{api} was accepted");
        assert!(e.iter().all(|line| !line.contains('\n')), "{e:#?}");
        assert!(
            e[0].contains(&format!("key `{key}`")) && e[0].contains("fix:"),
            "{api}: {}",
            e[0]
        );
    }
}

#[test]
fn external_labels_and_alert_links_are_checked_in_one_line_each() {
    let with = |alerts: &str| format!("{EXAMPLE}\n[alerts]\n{alerts}\n");
    let ok = Config::parse(
        &with("runbook_base_url = \"https://git.example/runbooks.md\"\n[alerts.external_labels]\nregion = \"eu\"\ndeployment = \"prod\""),
        "t.toml",
    )
    .unwrap();
    assert_eq!(ok.alerts.external_labels.len(), 2);
    for (alerts, key) in [
        (
            "[alerts.external_labels]\n\"9lives\" = \"x\"",
            "alerts.external_labels.9lives",
        ),
        (
            "[alerts.external_labels]\n__meta = \"x\"",
            "alerts.external_labels.__meta",
        ),
        (
            "[alerts.external_labels]\npool = \"x\"",
            "alerts.external_labels.pool",
        ),
        (
            "[alerts.external_labels]\nregion = \"\"",
            "alerts.external_labels.region",
        ),
        (
            "generator_base_url = \"headroom.internal\"",
            "alerts.generator_base_url",
        ),
    ] {
        let e = errors(&with(alerts));
        assert_eq!(e.len(), 1, "{alerts}: {e:?}");
        assert!(e[0].contains(key), "{alerts}: {e:?}");
    }
}

#[test]
fn a_prometheus_source_is_checked_query_by_query() {
    let with_signals = |signals: &str| {
        EXAMPLE.replacen(
            "\n[pools.ladder]\n",
            &format!("\n[pools.signals]\n{signals}\n[pools.ladder]\n"),
            1,
        )
    };
    let good = "source = \"prometheus\"\nurl = \"http://prometheus:9090\"\nbearer_token_file = \"/var/run/secrets/token\"\n[pools.signals.queries]\nqueue_depth = 'sum(vllm:num_requests_waiting{model_name=\"llama-70b\"})'\narrival_rate_rps = 'sum(rate(vllm:request_success_total[1m]))'\n";
    let config = Config::parse(&with_signals(good), "t.toml").unwrap();
    let (pool, source) = config.prometheus.iter().next().unwrap();
    assert_eq!(pool, &config.pools[0].name);
    assert_eq!(source.queries.named().len(), 2);
    assert_eq!(
        source.auth,
        crate::prometheus::PrometheusAuth::BearerTokenFile("/var/run/secrets/token".into())
    );
    for (change, key) in [
        (
            good.replace("[1m]))'", "[1m])'"),
            "pools[0].signals.queries.arrival_rate_rps",
        ),
        (
            good.replace(
                "sum(rate(vllm:request_success_total[1m]))",
                "vllm:x_total[1m]",
            ),
            "pools[0].signals.queries.arrival_rate_rps",
        ),
        (
            good.replace("\"prometheus\"\n", "\"kafka\"\n"),
            "pools[0].signals.source",
        ),
        (
            good.replace("http://prometheus:9090", "prometheus:9090"),
            "pools[0].signals.url",
        ),
        (
            good.replace(
                "http://prometheus:9090",
                "http://headroom:hunter2@prometheus:9090",
            ),
            "pools[0].signals.url",
        ),
        (
            good.replace(
                "bearer_token_file = \"/var/run/secrets/token\"",
                "basic_auth_username = \"headroom\"",
            ),
            "pools[0].signals.basic_auth_password_file",
        ),
        (
            good.replace("source", "interval = \"1s\"\ntimeout = \"3s\"\nsource"),
            "pools[0].signals.timeout",
        ),
    ] {
        let e = errors(&with_signals(&change));
        assert_eq!(e.len(), 1, "{change}: {e:?}");
        assert!(e[0].contains(key), "{change}: {e:?}");
        assert!(
            !e[0].contains("hunter2"),
            "a password is never echoed: {e:?}"
        );
    }
}

#[test]
fn a_scrape_reads_one_url_or_a_list_of_targets() {
    let with_scrape = |scrape: &str| {
        EXAMPLE.replacen(
            "\n[pools.ladder]\n",
            &format!("\n[pools.scrape]\n{scrape}\n[pools.scrape.series]\nqueue_depth = \"vllm:num_requests_waiting\"\n[pools.ladder]\n"),
            1,
        )
    };
    let config = Config::parse(
        &with_scrape(
            "targets = [\"http://10.0.0.5:8000/metrics\", \"http://10.0.0.6:8000/metrics\"]",
        ),
        "t.toml",
    )
    .unwrap();
    assert_eq!(config.scrape.values().next().unwrap().urls.len(), 2);
    let with_kube = |scrape: &str| format!("{}\n[kube]\nenabled = true\n", with_scrape(scrape));
    let pods = Config::parse(&with_kube("[pools.scrape.pods]\nport = 8000"), "t.toml").unwrap();
    let target = pods.scrape.values().next().unwrap();
    assert_eq!(
        target.pods.as_ref().map(|p| p.url("10.1.2.3")),
        Some("http://10.1.2.3:8000/metrics".to_string())
    );
    assert_eq!(
        target.pods.as_ref().map(|p| p.url("fd00::7")),
        Some("http://[fd00::7]:8000/metrics".to_string())
    );
    let e = errors(&with_kube(
        "url = \"http://a:1/metrics\"\n[pools.scrape.pods]\nport = 8000",
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("`pools[0].scrape.pods`"), "{e:?}");
    let too_many: Vec<String> = (0..257)
        .map(|i| format!("\"http://10.0.{}.{}:8000/metrics\"", i / 200, i % 200))
        .collect();
    for (scrape, key) in [
        ("interval = \"5s\"", "pools[0].scrape"),
        (
            "url = \"http://a:1/metrics\"\ntargets = [\"http://b:1/metrics\"]",
            "pools[0].scrape",
        ),
        ("targets = []", "pools[0].scrape.targets"),
        (
            &format!("targets = [{}]", too_many.join(",")),
            "pools[0].scrape.targets",
        ),
        (
            "targets = [\"http://a:1/metrics\", \"b:1/metrics\"]",
            "pools[0].scrape.targets[1]",
        ),
        // Pods come from the cluster: without [kube] there is none to read.
        ("[pools.scrape.pods]\nport = 8000", "pools[0].scrape.pods"),
    ] {
        let e = errors(&with_scrape(scrape));
        assert_eq!(e.len(), 1, "{scrape}: {e:?}");
        assert!(e[0].contains(&format!("`{key}`")), "{scrape}: {e:?}");
    }
}

#[test]
fn the_age_aggregation_is_max_or_a_declared_percentile() {
    use crate::scrape::AgeAggregation;
    let with = |aggregation: &str, series: &str| {
        EXAMPLE.replacen(
            "\n[pools.ladder]\n",
            &format!("\n[pools.scrape]\nurl = \"http://10.0.0.5:8000/metrics\"\n{aggregation}\n[pools.scrape.series]\nqueue_depth = \"vllm:num_requests_waiting\"\n{series}\n[pools.ladder]\n"),
            1,
        )
    };
    let age = "oldest_age_s = \"oldest_seconds\"";
    let read = |aggregation: &str| {
        Config::parse(&with(aggregation, age), "t.toml")
            .unwrap()
            .scrape
            .values()
            .next()
            .unwrap()
            .age
    };
    assert_eq!(read(""), AgeAggregation::Max);
    assert_eq!(
        read("oldest_age_aggregation = \"max\""),
        AgeAggregation::Max
    );
    assert_eq!(
        read("oldest_age_aggregation = \"p90\""),
        AgeAggregation::Percentile(90)
    );
    for bad in ["p100", "p49", "p9", "p90.5", "90", "median", "P90"] {
        let e = errors(&with(&format!("oldest_age_aggregation = \"{bad}\""), age));
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert!(
            e[0].contains("`pools[0].scrape.oldest_age_aggregation`")
                && e[0].contains("from p50 to p99")
                && e[0].contains("fix: use \"max\""),
            "{bad}: {e:?}"
        );
    }
    let e = errors(&with("oldest_age_aggregation = \"p95\"", ""));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("`pools[0].scrape.oldest_age_aggregation`")
            && e[0].contains("no oldest_age_s"),
        "{e:?}"
    );
}

#[test]
fn scheduled_windows_are_checked_in_one_line_each() {
    let with = |windows: &str| {
        EXAMPLE.replacen(
            "\n[pools.ladder]\n",
            &format!("\n{windows}\n[pools.ladder]\n"),
            1,
        )
    };
    let good = "[[pools.schedule]]\nname = \"batch-0900\"\nmin_replicas = 12\ndays = [\"weekdays\"]\nstart = \"09:00\"\nend = \"09:30\"\ntime_zone = \"Europe/Paris\"\n[[pools.schedule]]\nname = \"launch\"\nmin_replicas = 16\nfrom = \"2026-12-08T09:00\"\nto = \"2026-12-08T18:00\"\ntime_zone = \"America/New_York\"";
    let config = Config::parse(&with(good), "t.toml").unwrap();
    let windows = config.schedules.values().next().unwrap();
    assert_eq!(windows.len(), 2);
    assert_eq!(windows[0].describe(), "mon-fri 09:00-09:30 Europe/Paris");
    for (change, key) in [
        (
            good.replace("Europe/Paris", "Europe/Pariss"),
            "pools[0].schedule[0].time_zone",
        ),
        (
            good.replace("\"09:30\"", "\"9.30\""),
            "pools[0].schedule[0].end",
        ),
        (
            good.replace("min_replicas = 16", "min_replicas = 500"),
            "pools[0].schedule[1].min_replicas",
        ),
        (
            good.replace("\"weekdays\"", "\"someday\""),
            "pools[0].schedule[0].days",
        ),
        (
            good.replace("name = \"launch\"", "name = \"batch-0900\""),
            "pools[0].schedule[1].name",
        ),
        (
            good.replace("2026-12-08T18:00", "2026-12-07T18:00"),
            "pools[0].schedule[1].to",
        ),
    ] {
        let e = errors(&with(&change));
        assert_eq!(e.len(), 1, "{change}: {e:?}");
        assert!(e[0].contains(&format!("`{key}`")), "{change}: {e:?}");
    }
}

#[test]
fn a_parked_node_pays_its_volumes_priced_from_their_size_or_as_set() {
    let p5: OfferingId = "use1-p5-od".parse().unwrap();
    let warm = |text: &str| {
        Config::parse(text, "t.toml")
            .unwrap()
            .offering(&p5)
            .unwrap()
            .warm_usd_per_hour
    };
    // 8 GPUs: 500 GB at gp3's $0.08 a GB-month over 730 hours, rounded up to the micro-dollar.
    assert_eq!(warm(EXAMPLE), "0.054795".parse().unwrap());
    let with = |line: &str| {
        EXAMPLE.replacen(
            "\"55.04\"\ngpus = 8\n",
            &format!("\"55.04\"\ngpus = 8\n{line}\n"),
            1,
        )
    };
    assert_eq!(warm(&with("volume_gb = 1000")), "0.109590".parse().unwrap());
    assert_eq!(
        warm(&with("warm_usd_per_hour = \"0.2\"")),
        "0.2".parse().unwrap()
    );
    for (line, key) in [
        ("volume_gb = 0", "].volume_gb"),
        ("warm_usd_per_hour = \"-1\"", "].warm_usd_per_hour"),
    ] {
        let e = errors(&with(line));
        assert!(e[0].contains(key), "{line}: {}", e[0]);
    }
}

#[test]
fn a_buffer_is_read_and_never_larger_than_the_pool() {
    let with = |line: &str| {
        EXAMPLE.replacen(
            "[pools.scaling]\n",
            &format!("[pools.scaling]\n{line}\n"),
            1,
        )
    };
    let config = Config::parse(&with("buffer_replicas = 2"), "t.toml").unwrap();
    assert_eq!(config.pools[0].scaling.buffer_replicas, 2);
    assert_eq!(
        config.pools[1].scaling.buffer_replicas, 0,
        "none unless set"
    );
    let e = errors(&with("buffer_replicas = 25"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("`pools[0].scaling.buffer_replicas`"), "{e:?}");
    assert!(e[0].contains("above max_replicas 24"), "{e:?}");
}

/// Every TOML example of the README's Signals section parses as a pool's table: each is put in
/// the example configuration's first pool, and the configuration must load.
#[test]
fn the_readmes_signal_examples_parse() {
    let readme = include_str!("../../../README.md");
    let section = readme
        .split("\n## Signals\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README has a Signals section");
    let blocks: Vec<&str> = section
        .split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .collect();
    assert!(
        blocks.len() >= 2,
        "the scrape and Prometheus examples: {blocks:?}"
    );
    for block in blocks {
        let text = EXAMPLE.replacen(
            "\n[pools.ladder]\n",
            &format!("\n{block}\n[pools.ladder]\n"),
            1,
        );
        if let Err(e) = Config::parse(&text, "README.md") {
            panic!("{block}\n{e}");
        }
    }
}
