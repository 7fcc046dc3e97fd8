//! GCP credentials for a control plane on AWS ECS (Fargate included), by workload identity
//! federation from the task role.
//!
//! `google-cloud-auth` reads an `external_account` credential configuration with an AWS
//! `credential_source` (`environment_id = "aws1"`), but signs its subject token only with AWS
//! credentials from `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` or from the EC2 instance
//! metadata service. An ECS task's role credentials come from the container credentials
//! endpoint instead, and Fargate has no instance metadata. So when Application Default
//! Credentials name such a file and the container endpoint is configured
//! (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`, or `AWS_CONTAINER_CREDENTIALS_FULL_URI` with
//! `AWS_CONTAINER_AUTHORIZATION_TOKEN` or `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`), the
//! credentials are built by [`ecs_federated_credentials`] with Headroom's own subject token
//! provider, [`EcsAwsSubjectTokenProvider`] (a `…_FULL_URI` over plain http must name a
//! loopback address or the ECS/EKS credentials address, as the AWS SDKs require):
//!
//! 1. it fetches the task role's temporary credentials from the endpoint (kept until five
//!    minutes before their `Expiration`, never logged);
//! 2. it signs (SigV4, `aws-sigv4`) a `POST` of `GetCallerIdentity` to the file's
//!    `regional_cred_verification_url` (default `https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15`)
//!    with the `x-goog-cloud-target-resource` header set to the audience, without sending it;
//! 3. the subject token is that request as Google documents it, URL-encoded JSON:
//!    `{"url", "method": "POST", "headers": [{"key", "value"}, ...]}` with `Authorization`,
//!    `host`, `x-amz-date`, `x-amz-security-token` and `x-goog-cloud-target-resource`.
//!
//! `google-cloud-auth` then does the rest as for any external account: the token exchange at
//! the file's `token_url`, the service account impersonation, caching. Anything else (another
//! credential type, no container endpoint, static keys in the environment) keeps the library's
//! own Application Default Credentials.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use google_cloud_auth::credentials::Credentials;
use google_cloud_auth::credentials::external_account::ProgrammaticBuilder;
use google_cloud_auth::credentials::subject_token::{
    Builder as SubjectTokenBuilder, SubjectToken, SubjectTokenProvider,
};
use google_cloud_auth::errors::SubjectTokenProviderError;
use headroom_cloud::Clock;
use headroom_core::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::GcpError;

/// The ECS container credentials endpoint's address, to which `…_RELATIVE_URI` is appended.
pub const ECS_CREDENTIALS_HOST: &str = "http://169.254.170.2";
/// Google's default for `credential_source.regional_cred_verification_url`.
pub const DEFAULT_STS_URL: &str =
    "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15";
/// Role credentials are fetched again this long before they expire.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

const RELATIVE_URI: &str = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";
const FULL_URI: &str = "AWS_CONTAINER_CREDENTIALS_FULL_URI";
const AUTH_TOKEN: &str = "AWS_CONTAINER_AUTHORIZATION_TOKEN";
const AUTH_TOKEN_FILE: &str = "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE";

/// Reads one environment variable. [`process_env`] for the service; tests pass a map, so the
/// logic never reads the process-global environment itself.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment; an empty variable counts as unset.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// An AWS role's temporary credentials. `Debug` shows only the access key id.
#[derive(Clone, PartialEq)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    pub expiration: Option<Timestamp>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "** redacted **"),
            )
            .field("expiration", &self.expiration)
            .finish()
    }
}

/// A failure to make the subject token: one line, never a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FederationError {
    message: String,
    transient: bool,
}

impl FederationError {
    fn permanent(message: String) -> Self {
        FederationError {
            message,
            transient: false,
        }
    }
    fn transient(message: String) -> Self {
        FederationError {
            message,
            transient: true,
        }
    }
}

impl fmt::Display for FederationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FederationError {}

impl SubjectTokenProviderError for FederationError {
    fn is_transient(&self) -> bool {
        self.transient
    }
}

#[derive(Clone)]
enum Authorization {
    Token(String),
    File(PathBuf),
}

impl fmt::Debug for Authorization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Authorization::Token(_) => f.write_str("Token(** redacted **)"),
            Authorization::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

/// The ECS container credentials endpoint, as the environment names it.
#[derive(Debug, Clone)]
pub struct EcsCredentialsEndpoint {
    url: String,
    /// The variable the URL came from, for error messages (the URL itself is not shown).
    source: &'static str,
    authorization: Option<Authorization>,
}

impl EcsCredentialsEndpoint {
    /// `…_RELATIVE_URI` (appended to 169.254.170.2) first, as the AWS SDKs do, else
    /// `…_FULL_URI` with its authorization token (inline or in a file), if any.
    pub fn from_env(env: EnvLookup<'_>) -> Option<EcsCredentialsEndpoint> {
        if let Some(relative) = env(RELATIVE_URI) {
            return Some(EcsCredentialsEndpoint {
                url: format!("{ECS_CREDENTIALS_HOST}{relative}"),
                source: RELATIVE_URI,
                authorization: None,
            });
        }
        let full = env(FULL_URI)?;
        let authorization = env(AUTH_TOKEN_FILE)
            .map(|p| Authorization::File(PathBuf::from(p)))
            .or_else(|| env(AUTH_TOKEN).map(Authorization::Token));
        Some(EcsCredentialsEndpoint {
            url: full,
            source: FULL_URI,
            authorization,
        })
    }

    async fn fetch(&self, client: &reqwest::Client) -> Result<AwsCredentials, FederationError> {
        let what = format!(
            "AWS credentials from the ECS container endpoint ({})",
            self.source
        );
        let mut request = client.get(&self.url).timeout(FETCH_TIMEOUT);
        match &self.authorization {
            Some(Authorization::Token(token)) => {
                request = request.header("Authorization", token.trim());
            }
            Some(Authorization::File(path)) => {
                let token = std::fs::read_to_string(path).map_err(|e| {
                    FederationError::permanent(format!(
                        "{what}: cannot read {AUTH_TOKEN_FILE} {}: {e}",
                        path.display()
                    ))
                })?;
                request = request.header("Authorization", token.trim());
            }
            None => {}
        }
        let response = request
            .send()
            .await
            .map_err(|e| FederationError::transient(format!("{what}: {}", without_url(&e))))?;
        let status = response.status();
        if !status.is_success() {
            let message = format!("{what}: HTTP {status}");
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                FederationError::transient(message)
            } else {
                FederationError::permanent(message)
            });
        }
        let body = response.bytes().await.map_err(|e| {
            FederationError::transient(format!("{what}: reading the answer: {}", without_url(&e)))
        })?;
        parse_credentials(&body).map_err(|e| FederationError::permanent(format!("{what}: {e}")))
    }
}

/// A reqwest error's text without its URL (the relative URI is the task's credential path).
fn without_url(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("no answer within {}s", FETCH_TIMEOUT.as_secs());
    }
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "<endpoint>");
    }
    if e.is_connect() {
        text = format!("cannot connect ({text})");
    }
    text
}

#[derive(Deserialize)]
struct EcsCredentialsBody {
    #[serde(rename = "AccessKeyId")]
    access_key_id: String,
    #[serde(rename = "SecretAccessKey")]
    secret_access_key: String,
    #[serde(rename = "Token")]
    token: Option<String>,
    #[serde(rename = "Expiration")]
    expiration: Option<String>,
}

/// The endpoint's JSON. Errors name the shape, never the values (they are secrets).
fn parse_credentials(body: &[u8]) -> Result<AwsCredentials, String> {
    let shape = "expected JSON with AccessKeyId, SecretAccessKey, Token and Expiration";
    let parsed: EcsCredentialsBody = serde_json::from_slice(body).map_err(|e| {
        format!(
            "malformed answer ({:?} error at line {} column {}; {shape})",
            e.classify(),
            e.line(),
            e.column()
        )
    })?;
    if parsed.access_key_id.is_empty() || parsed.secret_access_key.is_empty() {
        return Err(format!("empty AccessKeyId or SecretAccessKey ({shape})"));
    }
    let expiration = match parsed.expiration {
        None => None,
        Some(text) => Some(
            chrono::DateTime::parse_from_rfc3339(&text)
                .map_err(|e| format!("Expiration {text:?} is not an RFC 3339 time ({e})"))?
                .with_timezone(&chrono::Utc),
        ),
    };
    Ok(AwsCredentials {
        access_key_id: parsed.access_key_id,
        secret_access_key: parsed.secret_access_key,
        session_token: parsed.token.filter(|t| !t.is_empty()),
        expiration,
    })
}

/// Makes the AWS subject token from the task role's credentials; see the module docs.
#[derive(Debug)]
pub struct EcsAwsSubjectTokenProvider {
    endpoint: EcsCredentialsEndpoint,
    region: String,
    sts_url: String,
    audience: String,
    clock: Arc<dyn Clock>,
    client: reqwest::Client,
    cached: tokio::sync::Mutex<Option<AwsCredentials>>,
}

impl EcsAwsSubjectTokenProvider {
    /// `sts_url` is the configuration's `regional_cred_verification_url` (`{region}` is
    /// replaced), or [`DEFAULT_STS_URL`].
    pub fn new(
        endpoint: EcsCredentialsEndpoint,
        region: String,
        sts_url: Option<&str>,
        audience: String,
        clock: Arc<dyn Clock>,
    ) -> EcsAwsSubjectTokenProvider {
        let sts_url = sts_url
            .unwrap_or(DEFAULT_STS_URL)
            .replace("{region}", &region);
        EcsAwsSubjectTokenProvider {
            endpoint,
            region,
            sts_url,
            audience,
            clock,
            client: reqwest::Client::new(),
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The role's credentials: the ones held while they have more than [`REFRESH_BEFORE`]
    /// left, else fresh ones from the endpoint. If the endpoint fails while the held ones have
    /// not yet expired, those are used.
    pub async fn aws_credentials(&self) -> Result<AwsCredentials, FederationError> {
        let now = self.clock.now();
        let mut cached = self.cached.lock().await;
        if let Some(held) = cached.as_ref()
            && held
                .expiration
                .is_some_and(|exp| now + REFRESH_BEFORE < exp)
        {
            return Ok(held.clone());
        }
        match self.endpoint.fetch(&self.client).await {
            Ok(fresh) => {
                tracing::debug!(
                    expiration = ?fresh.expiration,
                    "gcp federation: fetched the task role's AWS credentials"
                );
                *cached = Some(fresh.clone());
                Ok(fresh)
            }
            Err(e) => match cached.as_ref() {
                Some(held) if held.expiration.is_some_and(|exp| now < exp) => {
                    tracing::warn!(error = %e, "gcp federation: keeping the AWS credentials held until they expire");
                    Ok(held.clone())
                }
                _ => Err(e),
            },
        }
    }

    /// The URL-encoded subject token, signed now.
    pub async fn token(&self) -> Result<String, FederationError> {
        let creds = self.aws_credentials().await?;
        sign_subject_token(
            &creds,
            &self.region,
            &self.sts_url,
            &self.audience,
            self.clock.now(),
        )
    }
}

impl SubjectTokenProvider for EcsAwsSubjectTokenProvider {
    type Error = FederationError;

    async fn subject_token(&self) -> Result<SubjectToken, FederationError> {
        Ok(SubjectTokenBuilder::new(self.token().await?).build())
    }
}

#[derive(Serialize)]
struct SignedRequest<'a> {
    url: &'a str,
    method: &'a str,
    headers: Vec<Header>,
}

#[derive(Serialize)]
struct Header {
    key: String,
    value: String,
}

/// Signs `POST sts_url` (SigV4, service `sts`) with the `x-goog-cloud-target-resource` header
/// and returns Google's AWS subject token: the URL-encoded JSON of the signed request.
pub fn sign_subject_token(
    creds: &AwsCredentials,
    region: &str,
    sts_url: &str,
    audience: &str,
    now: Timestamp,
) -> Result<String, FederationError> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};

    let host = host_of(sts_url).ok_or_else(|| {
        FederationError::permanent(format!(
            "GCP credentials: regional_cred_verification_url {sts_url:?} has no host"
        ))
    })?;
    let identity = aws_credential_types::Credentials::new(
        creds.access_key_id.clone(),
        creds.secret_access_key.clone(),
        creds.session_token.clone(),
        None,
        "ecs-container-endpoint",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(now.into())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| FederationError::permanent(format!("signing the AWS subject token: {e}")))?
        .into();
    let to_sign = [("host", host), ("x-goog-cloud-target-resource", audience)];
    let request = SignableRequest::new(
        "POST",
        sts_url,
        to_sign.iter().copied(),
        SignableBody::Bytes(b""),
    )
    .map_err(|e| FederationError::permanent(format!("signing the AWS subject token: {e}")))?;
    let (instructions, _signature) = sign(request, &params)
        .map_err(|e| FederationError::permanent(format!("signing the AWS subject token: {e}")))?
        .into_parts();

    let mut headers: Vec<Header> = to_sign
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain(instructions.headers().map(|(k, v)| {
            let key = if k.eq_ignore_ascii_case("authorization") {
                "Authorization".to_string()
            } else {
                k.to_ascii_lowercase()
            };
            (key, v.to_string())
        }))
        .map(|(key, value)| Header { key, value })
        .collect();
    // The order Google's libraries write: sorted by name (`Authorization` first).
    headers.sort_by(|a, b| a.key.cmp(&b.key));
    let json = serde_json::to_string(&SignedRequest {
        url: sts_url,
        method: "POST",
        headers,
    })
    .map_err(|e| FederationError::permanent(format!("encoding the AWS subject token: {e}")))?;
    Ok(url_encode(&json))
}

/// Percent-encodes all but RFC 3986's unreserved characters: a space is `%20`, which form
/// decoding and plain percent decoding both read back as a space.
fn url_encode(text: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(text, UNRESERVED).to_string()
}

/// `https://host[:port]/path?query` → `host[:port]`.
fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.split(['/', '?', '#']).next()?;
    (!host.is_empty()).then_some(host)
}

/// Whether a `…_FULL_URI` may receive the authorization token, by the AWS SDKs' rule: https,
/// or plain http only to a loopback address or the ECS/EKS credentials address.
fn full_uri_allowed(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    match url.scheme() {
        "https" => true,
        // An IPv6 host comes bracketed: `[::1]`.
        "http" => match host.trim_start_matches('[').trim_end_matches(']') {
            "localhost" | "169.254.170.2" | "169.254.170.23" => true,
            ip => ip.parse::<std::net::IpAddr>().is_ok_and(|ip| {
                // fd00:ec2::23, the EKS Pod Identity address.
                ip.is_loopback()
                    || ip == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23)
            }),
        },
        _ => false,
    }
}

/// Where Application Default Credentials are read from: `GOOGLE_APPLICATION_CREDENTIALS`, else
/// gcloud's well-known file.
fn adc_path(env: EnvLookup<'_>) -> Option<PathBuf> {
    if let Some(path) = env("GOOGLE_APPLICATION_CREDENTIALS") {
        return Some(PathBuf::from(path));
    }
    env("HOME")
        .map(|home| PathBuf::from(home).join(".config/gcloud/application_default_credentials.json"))
}

fn text(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The service account of `…/serviceAccounts/SA:generateAccessToken`.
fn impersonated_account(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("/serviceAccounts/")?;
    let account = rest.strip_suffix(":generateAccessToken")?;
    (!account.is_empty() && !account.contains('/')).then_some(account)
}

/// Credentials for the Compute clients when Application Default Credentials name an
/// `external_account` file with an AWS source and the ECS container credentials endpoint is
/// configured; `None` otherwise (the library's own ADC then apply, unchanged). Reads the
/// environment only through `env`.
pub fn ecs_federated_credentials(
    env: EnvLookup<'_>,
    clock: Arc<dyn Clock>,
) -> Result<Option<Credentials>, GcpError> {
    let Some(endpoint) = EcsCredentialsEndpoint::from_env(env) else {
        return Ok(None);
    };
    // Static keys in the environment: the library signs with those itself.
    if env("AWS_ACCESS_KEY_ID").is_some() && env("AWS_SECRET_ACCESS_KEY").is_some() {
        return Ok(None);
    }
    let Some(path) = adc_path(env) else {
        return Ok(None);
    };
    // Unreadable or not JSON: the library reports it as it does today.
    let Ok(contents) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let Ok(file) = serde_json::from_str::<Value>(&contents) else {
        return Ok(None);
    };
    let source = file.get("credential_source");
    let is_aws = source
        .and_then(|s| s.get("environment_id"))
        .and_then(Value::as_str)
        .is_some_and(|id| id.starts_with("aws"));
    if file.get("type").and_then(Value::as_str) != Some("external_account") || !is_aws {
        return Ok(None);
    }
    let config_error = |what: &str| {
        GcpError::Config(format!(
            "GCP credentials: external_account with an AWS source ({}) {what}",
            path.display()
        ))
    };
    if endpoint.source == FULL_URI && !full_uri_allowed(&endpoint.url) {
        return Err(GcpError::Config(format!(
            "GCP credentials: {FULL_URI} must be https, or http to a loopback address or 169.254.170.2/169.254.170.23 (the container credentials endpoint)"
        )));
    }
    let region = env("AWS_REGION")
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .ok_or_else(|| config_error("needs AWS_REGION (or AWS_DEFAULT_REGION) to be set"))?;
    let audience = text(&file, "audience").ok_or_else(|| config_error("has no audience"))?;
    let subject_token_type = text(&file, "subject_token_type")
        .ok_or_else(|| config_error("has no subject_token_type"))?;
    let sts_url = source.and_then(|s| text(s, "regional_cred_verification_url"));
    let provider = EcsAwsSubjectTokenProvider::new(
        endpoint,
        region,
        sts_url.as_deref(),
        audience.clone(),
        clock,
    );
    let mut builder = ProgrammaticBuilder::new(Arc::new(provider))
        .with_audience(audience)
        .with_subject_token_type(subject_token_type);
    if let Some(url) = text(&file, "token_url") {
        builder = builder.with_token_url(url);
    }
    if let Some(url) = text(&file, "service_account_impersonation_url") {
        let account = impersonated_account(&url).ok_or_else(|| {
            config_error(&format!(
                "has a service_account_impersonation_url {url:?} that is not …/serviceAccounts/ACCOUNT:generateAccessToken"
            ))
        })?;
        builder = builder.with_target_principal(account);
    }
    if let Some(scopes) = file.get("scopes").and_then(Value::as_array) {
        let scopes: Vec<String> = scopes
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        if !scopes.is_empty() {
            builder = builder.with_scopes(scopes);
        }
    }
    type Set = fn(ProgrammaticBuilder, String) -> ProgrammaticBuilder;
    let optional: [(&str, Set); 5] = [
        ("client_id", ProgrammaticBuilder::with_client_id::<String>),
        (
            "client_secret",
            ProgrammaticBuilder::with_client_secret::<String>,
        ),
        (
            "workforce_pool_user_project",
            ProgrammaticBuilder::with_workforce_pool_user_project::<String>,
        ),
        (
            "universe_domain",
            ProgrammaticBuilder::with_universe_domain::<String>,
        ),
        (
            "quota_project_id",
            ProgrammaticBuilder::with_quota_project_id::<String>,
        ),
    ];
    for (key, set) in optional {
        if let Some(value) = text(&file, key) {
            builder = set(builder, value);
        }
    }
    let credentials = builder
        .build()
        .map_err(|e| GcpError::Client(format!("GCP credentials from {}: {e}", path.display())))?;
    tracing::info!(
        file = %path.display(),
        "gcp: external_account credentials signed with the ECS task role's AWS credentials"
    );
    Ok(Some(credentials))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_impersonation_urls() {
        assert_eq!(
            host_of("https://sts.us-east-1.amazonaws.com?Action=GetCallerIdentity"),
            Some("sts.us-east-1.amazonaws.com")
        );
        assert_eq!(host_of("http://127.0.0.1:99/x"), Some("127.0.0.1:99"));
        assert_eq!(host_of("https://"), None);
        assert_eq!(
            impersonated_account(
                "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/sa@p.iam.gserviceaccount.com:generateAccessToken"
            ),
            Some("sa@p.iam.gserviceaccount.com")
        );
        assert_eq!(impersonated_account("https://example.com/other"), None);
    }

    #[test]
    fn the_endpoint_prefers_the_relative_uri_as_the_sdks_do() {
        let env = |k: &str| match k {
            RELATIVE_URI => Some("/v2/credentials/abc".to_string()),
            FULL_URI => Some("http://127.0.0.1:1/creds".to_string()),
            _ => None,
        };
        let e = EcsCredentialsEndpoint::from_env(&env).unwrap();
        assert_eq!(e.url, "http://169.254.170.2/v2/credentials/abc");
        assert!(e.authorization.is_none());
        assert!(EcsCredentialsEndpoint::from_env(&|_| None).is_none());
    }

    #[test]
    fn a_full_uri_gets_the_token_only_over_https_or_to_a_local_endpoint() {
        for ok in [
            "https://creds.example.com/x",
            "http://127.0.0.1:8080/creds",
            "http://localhost/creds",
            "http://[::1]:99/creds",
            "http://169.254.170.23/v1/credentials",
            "http://[fd00:ec2::23]/v1/credentials",
        ] {
            assert!(full_uri_allowed(ok), "{ok}");
        }
        for refused in [
            "http://creds.example.com/x",
            "http://10.0.0.1/creds",
            "ftp://127.0.0.1/",
        ] {
            assert!(!full_uri_allowed(refused), "{refused}");
        }
    }

    #[test]
    fn debug_output_holds_no_secret() {
        let c = AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "very-secret".into(),
            session_token: Some("session-secret".into()),
            expiration: None,
        };
        let shown = format!("{c:?}");
        assert!(shown.contains("AKIDEXAMPLE"));
        assert!(!shown.contains("very-secret") && !shown.contains("session-secret"));
        let a = format!("{:?}", Authorization::Token("tok-secret".into()));
        assert!(!a.contains("tok-secret"));
        let err =
            parse_credentials(br#"{"AccessKeyId": "A", "SecretAccessKey": 12345678}"#).unwrap_err();
        assert!(!err.contains("12345678"), "{err}");
    }
}
