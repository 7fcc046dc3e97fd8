//! Workload identity federation from an ECS task role, over real HTTP: a local server plays the
//! ECS container credentials endpoint (and, end to end, Google's STS token endpoint); the
//! subject token is decoded and its SigV4 signature recomputed here independently (HMAC-SHA256
//! by hand, checked first against AWS's published test vectors).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use google_cloud_auth::credentials::CacheableResource;
use google_cloud_auth::errors::SubjectTokenProviderError;
use headroom_cloud::{Clock, ManualClock};
use headroom_gcp::federation::{
    EcsAwsSubjectTokenProvider, EcsCredentialsEndpoint, ecs_federated_credentials,
};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const AUDIENCE: &str = "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/headroom-aws/providers/aws";
const AUTH_TOKEN: &str = "container-auth-token-xyz";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
// A session token with the characters real ones have ('+', '/', '=').
const SESSION: &str = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJH+MEUCIQ==";

// ---- An independent SigV4 (no aws-sigv4), checked against AWS's published vectors ----

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(data: &str) -> String {
    hex(&Sha256::digest(data.as_bytes()))
}

fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date);
    let k_region = hmac(&k_date, region);
    let k_service = hmac(&k_region, service);
    hmac(&k_service, "aws4_request")
}

/// Signature of a canonical request, per the SigV4 spec.
fn signature(secret: &str, amz_date: &str, region: &str, service: &str, creq: &str) -> String {
    let date = &amz_date[..8];
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        sha256_hex(creq)
    );
    hex(&hmac(
        &signing_key(secret, date, region, service),
        &string_to_sign,
    ))
}

#[test]
fn the_independent_signer_matches_aws_published_vectors() {
    // "Examples of how to derive a signing key for Signature Version 4" (AWS General Reference).
    assert_eq!(
        hex(&signing_key(SECRET, "20120215", "us-east-1", "iam")),
        "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
    );
    // The SigV4 test suite's get-vanilla case.
    let creq = format!(
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n{}",
        sha256_hex("")
    );
    assert_eq!(
        signature(SECRET, "20150830T123600Z", "us-east-1", "service", &creq),
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
}

// ---- The ECS container credentials endpoint, played locally ----

#[derive(Default)]
struct Endpoint {
    fetches: AtomicUsize,
    failing: AtomicBool,
    /// Authorization headers received.
    authorizations: Mutex<Vec<Option<String>>>,
    /// The STS token endpoint's form bodies.
    exchanges: Mutex<Vec<BTreeMap<String, String>>>,
    clock: Option<Arc<ManualClock>>,
}

async fn credentials(State(ep): State<Arc<Endpoint>>, headers: HeaderMap) -> Response {
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_string());
    ep.authorizations.lock().unwrap().push(auth.clone());
    if auth.as_deref() != Some(AUTH_TOKEN) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if ep.failing.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let n = ep.fetches.fetch_add(1, Ordering::SeqCst) + 1;
    let now = ep.clock.as_ref().unwrap().now();
    let expiration = (now + chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    axum::Json(json!({
        "AccessKeyId": format!("ASIAEXAMPLE{n}"),
        "Expiration": expiration,
        "RoleArn": "arn:aws:iam::111122223333:role/headroom-task",
        "SecretAccessKey": SECRET,
        "Token": SESSION,
    }))
    .into_response()
}

fn form_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(&text.replace('+', " "))
        .decode_utf8()
        .unwrap()
        .into_owned()
}

async fn sts_token(State(ep): State<Arc<Endpoint>>, body: String) -> Response {
    let form: BTreeMap<String, String> = body
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (form_decode(k), form_decode(v)))
        .collect();
    ep.exchanges.lock().unwrap().push(form);
    axum::Json(json!({
        "access_token": "ya29.federated-from-ecs",
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "token_type": "Bearer",
        "expires_in": 3600,
    }))
    .into_response()
}

async fn start(clock: Arc<ManualClock>) -> (String, Arc<Endpoint>) {
    let ep = Arc::new(Endpoint {
        clock: Some(clock),
        ..Default::default()
    });
    let app = Router::new()
        .route("/creds", get(credentials))
        .route(
            "/broken",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "oops").into_response() }),
        )
        .route(
            "/garbage",
            get(|| async { "<html>not json, SecretAccessKey=shh</html>".into_response() }),
        )
        .route(
            "/missing",
            get(|| async { axum::Json(json!({"AccessKeyId": "A"})).into_response() }),
        )
        .route("/v1/token", post(sts_token))
        .with_state(ep.clone());
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), ep)
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new("2026-11-30T09:00:00Z".parse().unwrap()))
}

fn env_of(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    move |k: &str| map.get(k).cloned()
}

fn provider(base: &str, path: &str, clock: Arc<ManualClock>) -> EcsAwsSubjectTokenProvider {
    let env = env_of(&[
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{base}{path}"),
        ),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_TOKEN.to_string()),
    ]);
    let endpoint = EcsCredentialsEndpoint::from_env(&env).unwrap();
    EcsAwsSubjectTokenProvider::new(endpoint, "us-east-1".into(), None, AUDIENCE.into(), clock)
}

/// The token's JSON, and its headers by name.
fn decode(token: &str) -> (Value, BTreeMap<String, String>) {
    let json = percent_encoding::percent_decode_str(token)
        .decode_utf8()
        .unwrap();
    let value: Value = serde_json::from_str(&json).unwrap();
    let headers = value["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["key"].as_str().unwrap().to_string(),
                h["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (value, headers)
}

#[tokio::test]
async fn the_subject_token_is_googles_documented_signed_get_caller_identity() {
    let clock = clock();
    let (base, ep) = start(clock.clone()).await;
    let token = provider(&base, "/creds", clock.clone())
        .token()
        .await
        .unwrap();

    // The container endpoint was asked with its authorization token.
    assert_eq!(
        *ep.authorizations.lock().unwrap(),
        vec![Some(AUTH_TOKEN.to_string())]
    );
    assert!(
        !token.contains(' ') && !token.contains('"') && !token.contains('+'),
        "URL-encoded"
    );
    let (value, headers) = decode(&token);
    let url = "https://sts.us-east-1.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15";
    assert_eq!(value["url"], url);
    assert_eq!(value["method"], "POST");
    let keys: Vec<&str> = value["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "Authorization",
            "host",
            "x-amz-date",
            "x-amz-security-token",
            "x-goog-cloud-target-resource"
        ]
    );
    assert_eq!(headers["host"], "sts.us-east-1.amazonaws.com");
    assert_eq!(headers["x-amz-date"], "20261130T090000Z");
    assert_eq!(headers["x-amz-security-token"], SESSION);
    assert_eq!(headers["x-goog-cloud-target-resource"], AUDIENCE);
    let signed = "host;x-amz-date;x-amz-security-token;x-goog-cloud-target-resource";
    let prefix = format!(
        "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE1/20261130/us-east-1/sts/aws4_request, SignedHeaders={signed}, Signature="
    );
    let auth = &headers["Authorization"];
    assert!(auth.starts_with(&prefix), "{auth}");

    // The signature, recomputed from the canonical request by hand.
    let creq = format!(
        "POST\n/\nAction=GetCallerIdentity&Version=2011-06-15\n\
         host:sts.us-east-1.amazonaws.com\nx-amz-date:20261130T090000Z\n\
         x-amz-security-token:{SESSION}\nx-goog-cloud-target-resource:{AUDIENCE}\n\n\
         {signed}\n{}",
        sha256_hex("")
    );
    assert_eq!(
        &auth[prefix.len()..],
        signature(SECRET, "20261130T090000Z", "us-east-1", "sts", &creq)
    );
}

#[tokio::test]
async fn a_failing_or_malformed_endpoint_is_a_clear_error_without_secrets() {
    let clock = clock();
    let (base, _ep) = start(clock.clone()).await;

    let err = provider(&base, "/broken", clock.clone())
        .token()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("AWS_CONTAINER_CREDENTIALS_FULL_URI") && text.contains("HTTP 500"),
        "{text}"
    );
    assert!(err.is_transient(), "a 5xx is retried");

    for path in ["/garbage", "/missing"] {
        let err = provider(&base, path, clock.clone())
            .token()
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("malformed answer") && text.contains("AccessKeyId"),
            "{path}: {text}"
        );
        assert!(!text.contains("shh") && !text.contains('\n'), "{text}");
        assert!(!err.is_transient());
    }

    // Wrong or no authorization token: the endpoint refuses, and so do we (not retried).
    let env = env_of(&[(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        format!("{base}/creds"),
    )]);
    let p = EcsAwsSubjectTokenProvider::new(
        EcsCredentialsEndpoint::from_env(&env).unwrap(),
        "us-east-1".into(),
        None,
        AUDIENCE.into(),
        clock.clone(),
    );
    let err = p.token().await.unwrap_err();
    assert!(err.to_string().contains("HTTP 401"), "{err}");
    assert!(!err.is_transient());

    // Nobody listening.
    let p = provider("http://127.0.0.1:9", "/creds", clock);
    let err = p.token().await.unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");
    assert!(!err.to_string().contains("127.0.0.1:9/creds"), "{err}");
}

#[tokio::test]
async fn role_credentials_are_refreshed_before_they_expire() {
    let clock = clock();
    let (base, ep) = start(clock.clone()).await;
    let p = provider(&base, "/creds", clock.clone());
    let key_of = |token: &str| {
        let (_, headers) = decode(token);
        headers["Authorization"]
            .split("Credential=")
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string()
    };

    assert_eq!(key_of(&p.token().await.unwrap()), "ASIAEXAMPLE1");
    clock.advance(Duration::from_secs(50 * 60));
    let token = p.token().await.unwrap();
    assert_eq!(
        key_of(&token),
        "ASIAEXAMPLE1",
        "still 10 minutes left: kept"
    );
    assert_eq!(
        decode(&token).1["x-amz-date"],
        "20261130T095000Z",
        "signed now"
    );
    assert_eq!(ep.fetches.load(Ordering::SeqCst), 1);

    clock.advance(Duration::from_secs(6 * 60));
    assert_eq!(
        key_of(&p.token().await.unwrap()),
        "ASIAEXAMPLE2",
        "within 5 minutes of Expiration: fetched again"
    );
    assert_eq!(ep.fetches.load(Ordering::SeqCst), 2);

    // The endpoint down while the held credentials are still valid: they are used.
    ep.failing.store(true, Ordering::SeqCst);
    clock.advance(Duration::from_secs(57 * 60));
    assert_eq!(key_of(&p.token().await.unwrap()), "ASIAEXAMPLE2");
    // Past their Expiration: an error.
    clock.advance(Duration::from_secs(4 * 60));
    let err = p.token().await.unwrap_err();
    assert!(err.to_string().contains("HTTP 503"), "{err}");
}

fn write_config(dir: &tempfile::TempDir, config: &Value) -> String {
    let path = dir.path().join("google-credentials.json");
    std::fs::write(&path, serde_json::to_string_pretty(config).unwrap()).unwrap();
    path.display().to_string()
}

fn aws_config(token_url: &str) -> Value {
    json!({
        "type": "external_account",
        "audience": AUDIENCE,
        "subject_token_type": "urn:ietf:params:aws:token-type:aws4_request",
        "token_url": token_url,
        "credential_source": {
            "environment_id": "aws1",
            "region_url": "http://169.254.169.254/latest/meta-data/placement/availability-zone",
            "url": "http://169.254.169.254/latest/meta-data/iam/security-credentials",
            "regional_cred_verification_url": "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15"
        }
    })
}

#[tokio::test]
async fn end_to_end_the_client_exchanges_the_signed_token_for_an_access_token() {
    let clock = clock();
    let (base, ep) = start(clock.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = write_config(&dir, &aws_config(&format!("{base}/v1/token")));
    let env = env_of(&[
        ("GOOGLE_APPLICATION_CREDENTIALS", file),
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{base}/creds"),
        ),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_TOKEN.to_string()),
        ("AWS_REGION", "eu-west-1".to_string()),
    ]);
    let creds = ecs_federated_credentials(&env, clock.clone())
        .unwrap()
        .expect("federated credentials");
    let CacheableResource::New { data, .. } = creds.headers(http::Extensions::new()).await.unwrap()
    else {
        panic!("no headers")
    };
    assert_eq!(
        data.get("authorization").unwrap(),
        "Bearer ya29.federated-from-ecs"
    );

    let exchanges = ep.exchanges.lock().unwrap().clone();
    assert_eq!(exchanges.len(), 1);
    let form = &exchanges[0];
    assert_eq!(form["audience"], AUDIENCE);
    assert_eq!(
        form["subject_token_type"],
        "urn:ietf:params:aws:token-type:aws4_request"
    );
    assert_eq!(
        form["grant_type"],
        "urn:ietf:params:oauth:grant-type:token-exchange"
    );
    let (value, headers) = decode(&form["subject_token"]);
    assert_eq!(
        value["url"],
        "https://sts.eu-west-1.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15"
    );
    assert!(
        headers["Authorization"].contains("/20261130/eu-west-1/sts/aws4_request"),
        "{headers:?}"
    );
    assert_eq!(headers["host"], "sts.eu-west-1.amazonaws.com");
}

#[tokio::test]
async fn other_setups_keep_the_librarys_own_credentials() {
    let clock: Arc<dyn Clock> = clock();
    let dir = tempfile::tempdir().unwrap();
    let aws = write_config(&dir, &aws_config("https://sts.googleapis.com/v1/token"));
    let ecs = |file: &str, extra: &[(&str, &str)]| {
        let mut pairs = vec![
            ("GOOGLE_APPLICATION_CREDENTIALS", file.to_string()),
            (
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "/v2/credentials/x".to_string(),
            ),
        ];
        pairs.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        env_of(&pairs)
    };

    // No container endpoint.
    let env = env_of(&[
        ("GOOGLE_APPLICATION_CREDENTIALS", aws.clone()),
        ("AWS_REGION", "us-east-1".to_string()),
    ]);
    assert!(
        ecs_federated_credentials(&env, clock.clone())
            .unwrap()
            .is_none()
    );
    // Static keys in the environment: the library uses them.
    let env = ecs(
        &aws,
        &[
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ],
    );
    assert!(
        ecs_federated_credentials(&env, clock.clone())
            .unwrap()
            .is_none()
    );
    // A service account key, or an external account from a file: not ours.
    let sa = dir.path().join("sa.json");
    std::fs::write(&sa, r#"{"type": "service_account"}"#).unwrap();
    let file_sourced = dir.path().join("file.json");
    let mut config = aws_config("https://sts.googleapis.com/v1/token");
    config["credential_source"] = json!({"file": "/var/run/token"});
    std::fs::write(&file_sourced, config.to_string()).unwrap();
    for path in [&sa, &file_sourced, &dir.path().join("absent.json")] {
        let env = ecs(&path.display().to_string(), &[("AWS_REGION", "us-east-1")]);
        assert!(
            ecs_federated_credentials(&env, clock.clone())
                .unwrap()
                .is_none(),
            "{path:?}"
        );
    }
    // Ours, but no region: one line naming it.
    let err = ecs_federated_credentials(&ecs(&aws, &[]), clock.clone()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("GCP credentials: external_account with an AWS source")
            && text.contains("needs AWS_REGION")
            && !text.contains('\n'),
        "{text}"
    );
    // AWS_DEFAULT_REGION will do, and the impersonation URL names the service account.
    let mut config = aws_config("https://sts.googleapis.com/v1/token");
    config["service_account_impersonation_url"] = json!(
        "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/headroom@p.iam.gserviceaccount.com:generateAccessToken"
    );
    let impersonating = write_config(&dir, &config);
    let env = ecs(&impersonating, &[("AWS_DEFAULT_REGION", "us-west-2")]);
    assert!(
        ecs_federated_credentials(&env, clock.clone())
            .unwrap()
            .is_some()
    );
    config["service_account_impersonation_url"] = json!("https://example.com/elsewhere");
    let bad = write_config(&dir, &config);
    let err =
        ecs_federated_credentials(&ecs(&bad, &[("AWS_REGION", "us-east-1")]), clock).unwrap_err();
    assert!(
        err.to_string()
            .contains("service_account_impersonation_url"),
        "{err}"
    );
}
