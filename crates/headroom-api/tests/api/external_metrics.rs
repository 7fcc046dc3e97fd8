//! The External Metrics API read by the real Kubernetes client (kube-rs), over HTTP, the way the
//! aggregation layer forwards an HPA's query: discovery, then one metric for a selector.

use super::*;

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExternalMetricValueList {
    kind: String,
    api_version: String,
    items: Vec<ExternalMetricValue>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExternalMetricValue {
    metric_name: String,
    metric_labels: std::collections::BTreeMap<String, String>,
    timestamp: String,
    value: String,
}

/// A kube client for the API served on a real port, presenting `token`.
async fn kube_client(router: axum::Router, token: &str) -> kube::Client {
    // A workspace build enables both of rustls's providers: name one, as `serve` does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
    });
    let mut config = kube::Config::new(url.parse().unwrap());
    config.headers.push((
        header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    ));
    kube::Client::try_from(config).unwrap()
}

fn get(path: &str) -> axum::http::Request<Vec<u8>> {
    Request::get(path).body(Vec::new()).unwrap()
}

#[tokio::test]
async fn an_hpa_reads_the_queue_headroom_scales_on_through_the_kubernetes_client() {
    let (api, router) = secured().await;
    let research = mint(&api, &["research"], &[Scope::Metrics]).await;
    let client = kube_client(router.clone(), &research).await;
    api.post(
        "/v1/pools/mistral-7b-batch/signals",
        None,
        json!({"queue_depth": 42, "oldest_age_s": 2.5, "arrival_rate_rps": 12.0}),
    )
    .await;
    api.engine.tick().await.unwrap();

    let discovery: Value = client
        .request(get("/apis/external.metrics.k8s.io/v1beta1"))
        .await
        .unwrap();
    assert_eq!(discovery["kind"], "APIResourceList");
    assert_eq!(discovery["groupVersion"], "external.metrics.k8s.io/v1beta1");
    let names: Vec<&str> = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"headroom_queue_depth"), "{names:?}");

    // What an HPA with `metric: {name: headroom_queue_depth, selector: {matchLabels: {pool:
    // mistral-7b-batch}}}` asks, in the namespace it lives in.
    let base = "/apis/external.metrics.k8s.io/v1beta1/namespaces/inference";
    let list: ExternalMetricValueList = client
        .request(get(&format!(
            "{base}/headroom_queue_depth?labelSelector=pool%3Dmistral-7b-batch"
        )))
        .await
        .unwrap();
    assert_eq!(list.kind, "ExternalMetricValueList");
    assert_eq!(list.api_version, "external.metrics.k8s.io/v1beta1");
    assert_eq!(list.items.len(), 1, "{list:?}");
    let item = &list.items[0];
    assert_eq!(item.metric_name, "headroom_queue_depth");
    assert_eq!(item.metric_labels["pool"], "mistral-7b-batch");
    assert_eq!(item.value, "42");
    // The value is the signal the controller read, stamped when it was received.
    let status = api.get("/v1/pools/mistral-7b-batch").await;
    assert_eq!(status.body["last_signal"]["queue_depth"], 42);
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(&item.timestamp).unwrap(),
        chrono::DateTime::parse_from_rfc3339(
            status.body["last_signal"]["received_at"].as_str().unwrap()
        )
        .unwrap()
    );
    let age: ExternalMetricValueList = client
        .request(get(&format!(
            "{base}/headroom_oldest_age_seconds?labelSelector=pool%3Dmistral-7b-batch"
        )))
        .await
        .unwrap();
    assert_eq!(age.items[0].value, "2500m");
    let desired: ExternalMetricValueList = client
        .request(get(&format!(
            "{base}/headroom_desired_replicas?labelSelector=pool%3Dmistral-7b-batch"
        )))
        .await
        .unwrap();
    assert_eq!(
        desired.items[0].value,
        status.body["desired"].to_string(),
        "the replicas Headroom wants, as /v1/pools says"
    );

    // Only the token's accounts: the other account's pool is not there, even when named.
    let all: ExternalMetricValueList = client
        .request(get(&format!("{base}/headroom_desired_replicas")))
        .await
        .unwrap();
    assert!(
        all.items
            .iter()
            .all(|i| i.metric_labels["account"] == "research"),
        "{all:?}"
    );
    let foreign: ExternalMetricValueList = client
        .request(get(&format!(
            "{base}/headroom_desired_replicas?labelSelector=pool%3Dllama-70b-interactive"
        )))
        .await
        .unwrap();
    assert!(foreign.items.is_empty(), "{foreign:?}");

    // A pool holding for a missing signal has no queue value, so the HPA holds as Headroom does.
    api.clock.advance(std::time::Duration::from_secs(600));
    api.engine.tick().await.unwrap();
    let stale: ExternalMetricValueList = client
        .request(get(&format!(
            "{base}/headroom_queue_depth?labelSelector=pool%3Dmistral-7b-batch"
        )))
        .await
        .unwrap();
    assert!(stale.items.is_empty(), "{stale:?}");

    // Mistakes are Kubernetes `Status` answers the client reads: code, reason and message.
    for (path, code, reason, message) in [
        (
            format!("{base}/gpu_utilization"),
            404,
            "NotFound",
            "no external metric \"gpu_utilization\"",
        ),
        (
            format!("{base}/headroom_queue_depth?labelSelector=pool%20in%20x"),
            400,
            "BadRequest",
            "labelSelector",
        ),
    ] {
        match client.request::<Value>(get(&path)).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, code, "{path}: {status:?}");
                assert_eq!(status.reason, reason, "{path}: {status:?}");
                assert!(status.message.contains(message), "{path}: {status:?}");
            }
            other => panic!("{path}: a Kubernetes Status error, got {other:?}"),
        }
    }
    let reader = mint(&api, &["research"], &[Scope::Reports]).await;
    let without_scope = send_as(
        &router,
        Some(&reader),
        "GET",
        &format!("{base}/headroom_queue_depth"),
        None,
    )
    .await;
    assert_eq!(without_scope.status, StatusCode::FORBIDDEN);
    assert_eq!(without_scope.body["kind"], "Status");
    assert!(
        without_scope.body["message"]
            .as_str()
            .unwrap()
            .contains("metrics"),
        "{:?}",
        without_scope.body
    );
}
