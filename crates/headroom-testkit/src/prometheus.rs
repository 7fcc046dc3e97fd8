//! A real Prometheus (Debian's `prometheus` package) on a free loopback port, scraping
//! vLLM-shaped exporters whose queues and counters a test drives: what the tests of pools that
//! read their signals from Prometheus share.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// One model-server pod's `/metrics`: requests waiting, a success counter that grows by
/// `rate` a second, and the oldest waiting request's age in milliseconds (exported in seconds,
/// as a router or sidecar beside vLLM exports it); a pod that is `gone` answers 503, as a pod
/// being deleted stops serving.
#[derive(Debug)]
pub struct Pod {
    pub waiting: AtomicU64,
    pub served: AtomicU64,
    pub oldest_ms: AtomicU64,
    pub gone: AtomicBool,
    pub port: u16,
}

impl Pod {
    /// A pod with `waiting` requests queued, its counter at 5,000.
    pub fn start(waiting: u64) -> Arc<Pod> {
        Pod::start_at("127.0.0.1", 0, waiting)
    }

    /// A pod at `ip:port` (any 127.x.y.z is loopback, so several pods can share a port as
    /// pods with their own IPs do); port 0 picks a free one.
    pub fn start_at(ip: &str, port: u16, waiting: u64) -> Arc<Pod> {
        let listener = std::net::TcpListener::bind((ip, port)).unwrap();
        let pod = Arc::new(Pod {
            waiting: AtomicU64::new(waiting),
            served: AtomicU64::new(5_000),
            oldest_ms: AtomicU64::new(0),
            gone: AtomicBool::new(false),
            port: listener.local_addr().unwrap().port(),
        });
        let serving = pod.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request = [0u8; 2048];
                let _ = stream.read(&mut request);
                let response = if serving.gone.load(Ordering::SeqCst) {
                    "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string()
                } else {
                    let body = format!(
                        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"llama-70b\"}} {}\n# TYPE vllm:request_success_total counter\nvllm:request_success_total{{model_name=\"llama-70b\"}} {}\n# TYPE router_oldest_waiting_seconds gauge\nrouter_oldest_waiting_seconds{{model_name=\"llama-70b\"}} {}\n",
                        serving.waiting.load(Ordering::SeqCst),
                        serving.served.load(Ordering::SeqCst),
                        serving.oldest_ms.load(Ordering::SeqCst) as f64 / 1000.0
                    );
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                let _ = stream.write_all(response.as_bytes());
            }
        });
        pod
    }
}

/// A real Prometheus process, killed when dropped.
#[derive(Debug)]
pub struct Prometheus {
    child: Child,
    pub port: u16,
    /// `https` behind a TLS web configuration, `http` otherwise.
    scheme: &'static str,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Prometheus scraping `targets` (loopback ports) every second, ready to query.
    pub fn start(targets: &[u16]) -> Prometheus {
        Prometheus::start_with(targets, None)
    }

    /// Prometheus serving its API behind `web_config` (Prometheus's `--web.config.file`: basic
    /// auth users, a TLS server certificate), written into its directory by `web_config(dir)`.
    pub fn start_with(
        targets: &[u16],
        web_config: Option<&dyn Fn(&std::path::Path) -> String>,
    ) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut command = Command::new("prometheus");
        let mut scheme = "http";
        if let Some(web_config) = web_config {
            let text = web_config(dir.path());
            scheme = if text.contains("tls_server_config") {
                "https"
            } else {
                "http"
            };
            std::fs::write(dir.path().join("web.yml"), text).unwrap();
            command.arg(format!(
                "--web.config.file={}",
                dir.path().join("web.yml").display()
            ));
        }
        let child = command
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the prometheus binary (apt-get install prometheus; scripts/test installs it)");
        let prometheus = Prometheus {
            child,
            port,
            scheme,
            dir,
        };
        // Up to 30 s: Prometheus replays its (empty) write-ahead log before it is ready. Behind
        // auth or TLS the port answering is enough: the caller's own reads retry.
        let ready = format!("http://127.0.0.1:{port}/-/ready");
        let up = || match web_config {
            None => ureq::get(&ready).call().is_ok(),
            Some(_) => std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        };
        let mut tries = 0;
        while !up() {
            tries += 1;
            assert!(tries < 300, "Prometheus did not become ready in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }
}

impl Prometheus {
    /// Stops the server, as a Prometheus that goes down.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its directory: its configuration, and what a web configuration wrote there.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.port)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An authenticating gate in front of a real Prometheus that wants `Authorization: Bearer
/// <token>`, as the proxies that guard Prometheus with tokens do (kube-rbac-proxy, an
/// ingress): Prometheus itself checks basic auth, never bearer tokens. A request with the token
/// is passed to the server and its answer relayed; any other is answered 401. Every request's
/// `Authorization` header is kept for the test to read.
#[derive(Debug)]
pub struct BearerGate {
    pub port: u16,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl BearerGate {
    /// A gate on a free loopback port, admitting `token` to the Prometheus on `upstream`.
    pub fn start(upstream: u16, token: &str) -> BearerGate {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (admitted, log) = (format!("Bearer {token}"), seen.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let request_line = head.lines().next().unwrap_or_default().to_string();
                let authorization = head
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .find(|(name, _)| name.trim().eq_ignore_ascii_case("authorization"))
                    .map(|(_, value)| value.trim().to_string())
                    .unwrap_or_default();
                let pass = authorization == admitted;
                log.lock().unwrap().push(authorization);
                if pass {
                    let Ok(mut server) = std::net::TcpStream::connect(("127.0.0.1", upstream))
                    else {
                        let _ = stream.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                        continue;
                    };
                    let forwarded = format!(
                        "{request_line}\r\nhost: 127.0.0.1:{upstream}\r\nconnection: close\r\n\r\n"
                    );
                    let mut answer = Vec::new();
                    if server.write_all(forwarded.as_bytes()).is_ok()
                        && server.read_to_end(&mut answer).is_ok()
                    {
                        let _ = stream.write_all(&answer);
                    }
                } else {
                    let _ = stream.write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-type: text/plain\r\ncontent-length: 13\r\nconnection: close\r\n\r\nUnauthorized\n");
                }
            }
        });
        BearerGate { port, seen }
    }

    /// Its base URL, where a client reaches Prometheus through it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `Authorization` header of every request so far (empty where none was sent).
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}
