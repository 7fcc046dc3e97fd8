//! `serve`'s External Metrics listener as the kube-apiserver's aggregation layer reaches it:
//! HTTPS, a client certificate the front-proxy CA signed, read with the real kube client.

use super::*;

/// Writes a CA, a serving certificate for 127.0.0.1 and client certificates into `dir` with the
/// openssl CLI: `front-proxy` signed by the client CA, `stranger` by a CA the server does not know.
fn certificates(dir: &std::path::Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is needed for this test (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for ca in ["ca", "client-ca", "other-ca"] {
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={ca}"),
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.crt"),
        ]);
    }
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, ca, ext) in [
        ("server", "ca", "server.ext"),
        ("front-proxy", "client-ca", "client.ext"),
        ("stranger", "other-ca", "client.ext"),
    ] {
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            ext,
            "-out",
            &format!("{name}.crt"),
        ]);
    }
}

/// A kube client for `url` presenting the client certificate `name`, as a kubeconfig names it.
async fn kube_client(dir: &std::path::Path, url: &str, name: &str) -> kube::Client {
    let d = dir.display();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{{name: c, cluster: {{server: '{url}', certificate-authority: '{d}/ca.crt'}}}}]\n\
         users: [{{name: u, user: {{client-certificate: '{d}/{name}.crt', client-key: '{d}/{name}.key'}}}}]\n\
         contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n"
    );
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn get(path: &str) -> axum::http::Request<Vec<u8>> {
    axum::http::Request::get(path).body(Vec::new()).unwrap()
}

#[test]
fn the_external_metrics_listener_takes_only_the_front_proxy_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let db = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let token = mint_admin_token(&db);
    let (port, metrics_port) = (free_port(), free_port());
    let base = format!("http://127.0.0.1:{port}");
    let d = dir.path().display().to_string();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/headroom.example.toml"),
        ])
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--database-url",
            &db,
        ])
        .args([
            "--external-metrics-listen",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .args([
            "--tls-cert",
            &format!("{d}/server.crt"),
            "--tls-key",
            &format!("{d}/server.key"),
        ])
        .args(["--client-ca", &format!("{d}/client-ca.crt")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let agent = agent_with(&token);
    assert!(
        eventually(300, || agent.get(format!("{base}/readyz")).call().is_ok()),
        "serve did not become ready"
    );
    let pushed = call(
        &agent,
        "POST",
        &format!("{base}/v1/pools/mistral-7b-batch/signals"),
        Some(r#"{"queue_depth": 17, "oldest_age_s": 1.25}"#),
    );
    assert_eq!(pushed.status, 202, "{:?}", pushed.body);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let url = format!("https://127.0.0.1:{metrics_port}");
        let aggregator = kube_client(dir.path(), &url, "front-proxy").await;
        let discovery: Value = aggregator
            .request(get("/apis/external.metrics.k8s.io/v1beta1"))
            .await
            .unwrap();
        assert_eq!(discovery["groupVersion"], "external.metrics.k8s.io/v1beta1");
        // The pushed signal reaches the status the loop publishes within a tick or two.
        let path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/inference/headroom_queue_depth?labelSelector=pool%3Dmistral-7b-batch";
        let mut value = Value::Null;
        for _ in 0..100 {
            value = aggregator.request::<Value>(get(path)).await.unwrap();
            if value["items"][0]["value"] == "17" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(value["items"][0]["value"], "17", "{value}");
        assert_eq!(value["items"][0]["metricLabels"]["account"], "research");

        // A certificate another CA signed is refused at the handshake.
        let stranger = kube_client(dir.path(), &url, "stranger").await;
        assert!(stranger.request::<Value>(get(path)).await.is_err());
        // Only the External Metrics API is on this listener.
        let other = aggregator.request::<Value>(get("/v1/pools")).await;
        assert!(other.unwrap_err().to_string().contains("404"));
    });
    // The plain listener still wants its bearer token for the same API.
    let anonymous = call(
        &super::agent(),
        "GET",
        &format!("{base}/apis/external.metrics.k8s.io/v1beta1"),
        None,
    );
    assert_eq!(anonymous.status, 401);
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn the_external_metrics_flags_come_together_or_not_at_all() {
    let out = Command::new(BIN)
        .args([
            "serve",
            "--external-metrics-listen",
            "127.0.0.1:0",
            "--tls-cert",
            "x.crt",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--tls-key, --client-ca: missing"),
        "{stderr}"
    );
}
