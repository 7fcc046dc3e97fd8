//! The local Compute API server, standalone: `headroom serve` with
//! `config/gcp-local.example.toml` talks to it.
//!
//! ```text
//! cargo run -p headroom-gcp --features test-server --example compute-server -- --port 8089 \
//!     --stockout a2-highgpu-1g --quota a2-ultragpu-1g
//! ```
//! `--stockout TYPE` makes inserts of that machine type finish with ZONE_RESOURCE_POOL_EXHAUSTED,
//! `--quota TYPE` fail with HTTP 403 quotaExceeded. `POST /__control/preempt/PROJECT/ZONE/NAME`
//! preempts a spot VM.

use std::net::SocketAddr;
use std::sync::Arc;

use headroom_cloud::SystemClock;
use headroom_gcp::server::{ComputeServer, Fault, FaultKind, FaultMatch};

#[tokio::main]
async fn main() {
    let mut port: u16 = 8089;
    let mut faults = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("compute-server: {flag} needs a value");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--port" => {
                port = value("--port").parse().unwrap_or_else(|_| {
                    eprintln!("compute-server: --port wants a number");
                    std::process::exit(2)
                })
            }
            "--stockout" => faults.push(Fault {
                matches: FaultMatch::MachineType(value("--stockout")),
                kind: FaultKind::CapacityInOperation("ZONE_RESOURCE_POOL_EXHAUSTED".into()),
                times: None,
            }),
            "--quota" => faults.push(Fault {
                matches: FaultMatch::MachineType(value("--quota")),
                kind: FaultKind::QuotaHttp,
                times: None,
            }),
            other => {
                eprintln!(
                    "compute-server: unknown argument {other:?}; use --port N, --stockout TYPE, --quota TYPE"
                );
                std::process::exit(2)
            }
        }
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let running = ComputeServer::start(Arc::new(SystemClock::new()), addr)
        .await
        .unwrap_or_else(|e| {
            eprintln!("compute-server: cannot listen on {addr}: {e}");
            std::process::exit(1)
        });
    for fault in faults {
        running.server.inject(fault);
    }
    eprintln!("compute-server: Compute API on {}", running.endpoint());
    let _ = tokio::signal::ctrl_c().await;
}
