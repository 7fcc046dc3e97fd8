//! The document types every answer: each real response of every JSON endpoint is checked against
//! the schema `openapi.json` gives it, read as strictly as a generated client would (every
//! `$ref` resolved, flattened parts merged, no field the schema does not name, formats checked).

use super::*;

/// The schema of `method path`'s `status` answer as `content_type`, made strict.
fn response_schema(doc: &Value, path: &str, method: &str, status: u16) -> Value {
    let schema = &doc["paths"][path][method]["responses"][status.to_string()]["content"]["application/json"]
        ["schema"];
    assert!(
        schema.is_object(),
        "{method} {path} documents no JSON schema for {status}"
    );
    strict(schema, doc, 0)
}

/// `schema` with every reference inlined, every `allOf` of objects merged into one object, and
/// objects closed (`additionalProperties: false`) unless they say otherwise.
fn strict(schema: &Value, doc: &Value, depth: usize) -> Value {
    assert!(depth < 40, "schemas nest too deep (a cycle?)");
    let Some(map) = schema.as_object() else {
        return schema.clone();
    };
    if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected reference {reference}"));
        let target = &doc["components"]["schemas"][name];
        assert!(target.is_object(), "{reference} is not in the document");
        return strict(target, doc, depth + 1);
    }
    if let Some(parts) = map.get("allOf").and_then(Value::as_array) {
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        for part in parts {
            let part = strict(part, doc, depth + 1);
            if let Some(p) = part["properties"].as_object() {
                properties.extend(p.clone());
            }
            if let Some(r) = part["required"].as_array() {
                required.extend(r.iter().cloned());
            }
        }
        return json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        });
    }
    let mut out = serde_json::Map::new();
    for (key, value) in map {
        let value = match key.as_str() {
            "properties" => Value::Object(
                value
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), strict(v, doc, depth + 1)))
                    .collect(),
            ),
            "items" | "additionalProperties" => strict(value, doc, depth + 1),
            "oneOf" | "anyOf" => Value::Array(
                value
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| strict(v, doc, depth + 1))
                    .collect(),
            ),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    if out.contains_key("properties") && !out.contains_key("additionalProperties") {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Value::Object(out)
}

/// Every way `value` breaks `schema`, one line each.
fn violations(schema: &Value, value: &Value) -> Vec<String> {
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(schema)
        .unwrap_or_else(|e| panic!("the document's schema does not compile: {e}"));
    validator
        .iter_errors(value)
        .map(|e| format!("at {}: {e}", e.instance_path()))
        .collect()
}

#[tokio::test]
async fn every_json_answer_matches_the_schema_the_document_gives_it() {
    let api = api().await;
    let doc = api.get("/openapi.json").await.body;
    let mut checked: Vec<(String, String, u16)> = Vec::new();
    let mut check = |path: &str, method: &str, reply: &Reply| {
        assert!(
            reply.status.is_success(),
            "{method} {path}: {:?}",
            reply.body
        );
        let schema = response_schema(&doc, path, method, reply.status.as_u16());
        // An untyped `object` would let anything through: a client generated from it has
        // nothing to read the answer into.
        assert!(
            schema["properties"]
                .as_object()
                .is_some_and(|p| !p.is_empty()),
            "{method} {path} documents its answer as an untyped object"
        );
        let broken = violations(&schema, &reply.body);
        assert!(
            broken.is_empty(),
            "{method} {path} answered what its schema does not describe:\n{}\n{}",
            broken.join("\n"),
            serde_json::to_string_pretty(&reply.body).unwrap()
        );
        checked.push((path.into(), method.into(), reply.status.as_u16()));
    };

    // A life worth describing: a pushed signal, a budget, requests created, replayed and
    // cancelled, nodes through the ladder (the seeded spot interruption logs a node event), and
    // a pool without signals holding (an alert).
    let signal = json!({"queue_depth": 40, "arrival_rate_rps": 20.0, "oldest_age_s": 3.0,
        "queue_depth_by_priority": {"high": 30, "low": 10}, "queued_tokens": 64000.0});
    let pushed = api
        .post("/v1/pools/mistral-7b-batch/signals", None, signal)
        .await;
    assert_eq!(pushed.status, StatusCode::ACCEPTED, "{:?}", pushed.body);
    let budget = put(
        &api,
        "/v1/budgets/research",
        json!({"period": "day", "ceiling_usd": "500.00", "hard_action": "refuse"}),
    )
    .await;
    check("/v1/budgets/{account}", "put", &budget);
    let create = json!({"pool": "mistral-7b-batch", "replicas": 2, "priority": "high"});
    let created = api
        .post("/v1/capacity-requests", Some("typed-1"), create.clone())
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    check("/v1/capacity-requests", "post", &created);
    let replayed = api
        .post("/v1/capacity-requests", Some("typed-1"), create)
        .await;
    assert_eq!(replayed.status, StatusCode::OK);
    check("/v1/capacity-requests", "post", &replayed);
    let doomed = api
        .post(
            "/v1/capacity-requests",
            None,
            json!({"pool": "mistral-7b-batch", "replicas": 1}),
        )
        .await;
    let cancelled = api
        .send(
            Request::delete(format!(
                "/v1/capacity-requests/{}",
                doomed.body["id"].as_str().unwrap()
            ))
            .body(Body::empty())
            .unwrap(),
        )
        .await;
    check("/v1/capacity-requests/{id}", "delete", &cancelled);
    for _ in 0..=60 {
        api.engine.tick().await.unwrap();
        api.clock.advance(std::time::Duration::from_secs(5));
    }

    let id = created.body["id"].as_str().unwrap();
    let read = api.get(&format!("/v1/capacity-requests/{id}")).await;
    check("/v1/capacity-requests/{id}", "get", &read);
    let listed = api.get("/v1/capacity-requests?limit=1").await;
    check("/v1/capacity-requests", "get", &listed);
    assert!(listed.body["next_cursor"].is_string(), "{:?}", listed.body);
    let pools = api.get("/v1/pools").await;
    check("/v1/pools", "get", &pools);
    for pool in ["mistral-7b-batch", "llama-70b-interactive"] {
        check(
            "/v1/pools/{name}",
            "get",
            &api.get(&format!("/v1/pools/{pool}")).await,
        );
        check(
            "/v1/pools/{name}/admission",
            "get",
            &api.get(&format!("/v1/pools/{pool}/admission")).await,
        );
        check(
            "/v1/pools/{name}/ledger",
            "get",
            &api.get(&format!("/v1/pools/{pool}/ledger")).await,
        );
    }
    let decisions = api.get("/v1/pools/mistral-7b-batch/decisions").await;
    check("/v1/pools/{name}/decisions", "get", &decisions);
    let shadow = api.get("/v1/pools/mistral-7b-batch/shadow-report").await;
    check("/v1/pools/{name}/shadow-report", "get", &shadow);
    let window = serde_json::json!({"name": "batch", "min_replicas": 2, "days": ["weekdays"], "start": "09:00", "end": "09:30", "time_zone": "Europe/Paris"});
    let declared = api
        .post("/v1/pools/mistral-7b-batch/schedules", None, window)
        .await;
    check("/v1/pools/{name}/schedules", "post", &declared);
    let windows = api.get("/v1/pools/mistral-7b-batch/schedules").await;
    check("/v1/pools/{name}/schedules", "get", &windows);
    let budgets = api.get("/v1/budgets").await;
    check("/v1/budgets", "get", &budgets);
    check(
        "/v1/budgets/{account}",
        "get",
        &api.get("/v1/budgets/research").await,
    );
    let offerings = api.get("/v1/offerings").await;
    check("/v1/offerings", "get", &offerings);
    let alerts = api.get("/v1/alerts").await;
    check("/v1/alerts", "get", &alerts);
    let report = api.get("/v1/reports/budget?group_by=pool").await;
    check("/v1/reports/budget", "get", &report);
    let advice = api.get("/v1/reports/reservations").await;
    check("/v1/reports/reservations", "get", &advice);
    check(
        "/apis/external.metrics.k8s.io/v1beta1",
        "get",
        &api.get("/apis/external.metrics.k8s.io/v1beta1").await,
    );
    let external = api
        .get("/apis/external.metrics.k8s.io/v1beta1/namespaces/default/headroom_desired_replicas")
        .await;
    check(
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}",
        "get",
        &external,
    );

    // The answers checked hold what their types describe, not empty lists.
    let entries = decisions.body["decisions"].as_array().unwrap();
    assert!(entries.iter().any(|d| d["rule"].is_string()), "{entries:?}");
    assert!(
        entries.iter().any(|d| d["event"].is_string()),
        "{entries:?}"
    );
    assert!(!alerts.body["alerts"].as_array().unwrap().is_empty());
    assert!(!offerings.body["offerings"].as_array().unwrap().is_empty());
    assert!(!budgets.body["budgets"].as_array().unwrap().is_empty());
    assert!(
        !listed.body["capacity_requests"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(!report.body["rows"].as_array().unwrap().is_empty());
    assert!(!report.body["budgets"].as_array().unwrap().is_empty());
    assert!(!external.body["items"].as_array().unwrap().is_empty());

    // Every JSON success answer the document lists was checked, so a new endpoint cannot go
    // untyped unseen.
    for (path, operations) in doc["paths"].as_object().unwrap() {
        if path == "/openapi.json" {
            continue;
        }
        for (method, operation) in operations.as_object().unwrap() {
            for (status, response) in operation["responses"].as_object().unwrap() {
                let json_success = status.starts_with('2')
                    && response["content"].get("application/json").is_some();
                if json_success {
                    let status: u16 = status.parse().unwrap();
                    assert!(
                        checked.contains(&(path.clone(), method.clone(), status)),
                        "{method} {path} {status} is documented but no answer of it was checked"
                    );
                }
            }
        }
    }
}

#[test]
fn a_strict_schema_refuses_an_answer_with_an_undocumented_or_missing_field() {
    // The checker itself: a field the document does not name, a missing required one and a
    // timestamp that is not RFC 3339 are each refused.
    let doc = json!({"components": {"schemas": {
        "Inner": {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}},
                  "required": ["at"]},
        "Outer": {"allOf": [{"$ref": "#/components/schemas/Inner"},
                            {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}]}
    }}});
    let schema = strict(&json!({"$ref": "#/components/schemas/Outer"}), &doc, 0);
    assert!(violations(&schema, &json!({"at": "2026-12-01T09:00:00Z", "n": 1})).is_empty());
    for bad in [
        json!({"at": "2026-12-01T09:00:00Z", "n": 1, "extra": true}),
        json!({"at": "2026-12-01T09:00:00Z"}),
        json!({"at": "yesterday", "n": 1}),
    ] {
        assert!(!violations(&schema, &bad).is_empty(), "{bad} passed");
    }
}
