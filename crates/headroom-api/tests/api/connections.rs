//! The listener `serve` runs (`headroom_api::server::serve`), on real loopback sockets: slow and
//! idle connections are closed, connections are capped per client and in all, and hyper's own
//! parse errors answer as problems. Every loop here is bounded in count and in time.

use std::net::SocketAddr;
use std::time::Duration;

use headroom_api::{AppState, Limits, app};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, timeout};

use super::api;

struct Listener {
    addr: SocketAddr,
    state: AppState,
    _api: super::Api,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn listen(limits: Limits) -> Listener {
    let api = api().await;
    let state = AppState::new(api.engine.clone(), false, limits);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(headroom_api::server::serve(
        listener,
        app(state.clone()),
        state.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    Listener {
        addr,
        state,
        _api: api,
        _stop: stop,
    }
}

/// A connection from `from` (any 127.0.0.0/8 address is this machine on Linux): another client
/// as the listener counts them.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// Everything the server sends until it closes, or what came within `within`.
async fn read_to_close(stream: &mut TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let closed = timeout(within, async {
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (got, closed)
}

/// One `GET path` on a fresh connection from `from`: everything answered (nothing when the
/// connection was refused or closed first).
async fn answer_from(from: &str, to: SocketAddr, path: &str) -> Vec<u8> {
    let mut stream = connect_from(from, to).await;
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return Vec::new();
    }
    read_to_close(&mut stream, Duration::from_secs(5)).await.0
}

/// [`answer_from`]'s status, or `None` when there was no answer.
async fn get_from(from: &str, to: SocketAddr, path: &str) -> Option<u16> {
    let answer = answer_from(from, to, path).await;
    let text = String::from_utf8_lossy(&answer);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

fn refused_count(state: &AppState, limit: &str) -> u64 {
    let text = state.engine.metrics().encode();
    let series = format!("headroom_http_connections_refused_total{{limit=\"{limit}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

fn problem_status(answer: &[u8]) -> (String, serde_json::Value) {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_connections_are_closed_within_the_header_timeout() {
    let bound = Duration::from_secs(1);
    let server = listen(Limits {
        header_read_timeout: bound,
        ..Limits::default()
    })
    .await;
    // A header sent a byte at a time, every 100 ms, never finished. Timed from before the
    // connect: the server may accept (and start its timer) before the client's connect returns.
    let started = Instant::now();
    let (mut read, mut write) = TcpStream::connect(server.addr).await.unwrap().into_split();
    let trickle = tokio::spawn(async move {
        for byte in b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: "
            .iter()
            .cycle()
            .take(60)
        {
            if write.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let closed = timeout(Duration::from_secs(4), async {
        let mut buf = [0u8; 256];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    let took = started.elapsed();
    trickle.abort();
    assert!(closed.is_ok(), "a slow header still open after 4 s");
    assert!(
        took >= bound && took < bound + Duration::from_millis(1500),
        "closed after {took:?}, the header timeout is {bound:?}"
    );

    // A connection that sends nothing, and one kept alive after an answer, likewise.
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let (_, closed) = read_to_close(&mut silent, Duration::from_secs(4)).await;
    assert!(closed, "an idle new connection still open after 4 s");
    let mut kept = TcpStream::connect(server.addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (answer, closed) = read_to_close(&mut kept, Duration::from_secs(4)).await;
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(closed, "an idle keep-alive connection still open after 4 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_per_client_cap_are_refused_while_others_are_served() {
    let server = listen(Limits {
        max_connections_per_client: 3,
        ..Limits::default()
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(connect_from("127.0.0.2", server.addr).await);
    }
    // The idle three are taken before the fourth is: the server answers on each first.
    for stream in &mut idle {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    }
    let mut fourth = connect_from("127.0.0.2", server.addr).await;
    let (answer, closed) = read_to_close(&mut fourth, Duration::from_secs(2)).await;
    assert!(closed, "the fourth connection of one client was kept");
    let (head, problem) = problem_status(&answer);
    assert!(head.starts_with("http/1.1 503"), "{head}");
    assert!(
        head.contains("content-type: application/problem+json"),
        "{head}"
    );
    assert_eq!(
        problem["type"],
        "https://headroom.dev/problems/too-many-connections"
    );
    assert_eq!(refused_count(&server.state, "per_client"), 1);
    // Another client is served meanwhile.
    assert_eq!(
        get_from("127.0.0.3", server.addr, "/healthz").await,
        Some(200)
    );
    // A connection given back is a place for the next.
    drop(idle.pop());
    let mut served = None;
    for _ in 0..50 {
        served = get_from("127.0.0.2", server.addr, "/healthz").await;
        if served == Some(200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(served, Some(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_cap_refuses_then_frees_its_places_when_idle_connections_time_out() {
    let server = listen(Limits {
        max_connections: 4,
        max_connections_per_client: 2,
        header_read_timeout: Duration::from_secs(1),
        ..Limits::default()
    })
    .await;
    let mut idle = Vec::new();
    for from in ["127.0.0.4", "127.0.0.4", "127.0.0.5", "127.0.0.5"] {
        idle.push(connect_from(from, server.addr).await);
    }
    // Let the accept loop take all four (it takes them in order, before the next).
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Refused: a 503 problem, or a reset when our request crossed the close.
    let refused = get_from("127.0.0.6", server.addr, "/healthz").await;
    assert!(matches!(refused, None | Some(503)), "{refused:?}");
    assert_eq!(refused_count(&server.state, "global"), 1);
    assert_eq!(refused_count(&server.state, "per_client"), 0);
    // The idle four are closed by the header timeout; a new client is then served.
    let mut served = None;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        served = get_from("127.0.0.6", server.addr, "/healthz").await;
        if served == Some(200) {
            break;
        }
    }
    assert_eq!(served, Some(200), "the idle connections kept their places");
    drop(idle);
}

#[test]
fn the_connection_limit_stays_under_this_process_s_descriptor_limit() {
    let descriptors = headroom_api::server::descriptor_limit().expect("RLIMIT_NOFILE on Linux");
    let limit = headroom_api::server::connection_limit(u32::MAX, Some(descriptors));
    assert!(limit as u64 + headroom_api::server::RESERVED_DESCRIPTORS <= descriptors.max(257));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_hyper_cannot_take_is_answered_as_a_problem() {
    let server = listen(Limits::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let path = format!("/{}", "a".repeat(100_000));
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (answer, closed) = read_to_close(&mut stream, Duration::from_secs(5)).await;
    assert!(closed);
    let (head, problem) = problem_status(&answer);
    assert!(head.starts_with("http/1.1 414"), "{head}");
    assert!(
        head.contains("content-type: application/problem+json"),
        "{head}"
    );
    assert_eq!(problem["status"], 414);
    assert_eq!(
        problem["type"],
        "https://headroom.dev/problems/uri-too-long"
    );

    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = read_to_close(&mut stream, Duration::from_secs(5)).await;
    let (head, problem) = problem_status(&answer);
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert!(
        head.contains("content-type: application/problem+json"),
        "{head}"
    );
    assert_eq!(problem["status"], 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_its_answers_is_cut_after_the_idle_timeout() {
    let server = listen(Limits {
        idle_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(30),
        ..Limits::default()
    })
    .await;
    // Far more answer than the sockets' buffers hold, asked for at once and never read.
    let asked = 200;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let one = "GET /openapi.json HTTP/1.1\r\nhost: x\r\n\r\n";
    stream
        .write_all(one.repeat(asked).as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (got, closed) = read_to_close(&mut stream, Duration::from_secs(3)).await;
    assert!(
        closed,
        "a stalled connection was kept past the idle timeout"
    );
    let whole = asked * headroom_api::openapi().len();
    assert!(
        got.len() < whole / 2,
        "{} of {whole} bytes: the server kept writing",
        got.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_too_large_is_answered_431_as_a_problem() {
    let server = listen(Limits::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let big = "b".repeat(headroom_api::server::MAX_HEAD_BYTES + 1024);
    let request = format!("GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (answer, closed) = read_to_close(&mut stream, Duration::from_secs(5)).await;
    assert!(closed);
    let (head, problem) = problem_status(&answer);
    assert!(head.starts_with("http/1.1 431"), "{head}");
    assert!(
        head.contains("content-type: application/problem+json"),
        "{head}"
    );
    assert_eq!(problem["status"], 431);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_in_flight_limit_is_shed_at_once_and_the_probes_still_answer() {
    let server = listen(Limits {
        max_requests_in_flight: 2,
        ..Limits::default()
    })
    .await;
    // Two requests held in hand: their heads are in, their bodies never finish arriving.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(
                b"POST /v1/capacity-requests HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"pool\":",
            )
            .await
            .unwrap();
        held.push(stream);
    }
    // The third is answered at once, not queued behind them.
    let mut shed = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let started = Instant::now();
        let (head, problem) =
            problem_status(&answer_from("127.0.0.7", server.addr, "/v1/pools").await);
        if head.starts_with("http/1.1 503") {
            shed = Some((head, problem, started.elapsed()));
            break;
        }
    }
    let (head, problem, took) = shed.expect("the limit never bit with two requests in hand");
    assert!(took < Duration::from_secs(2), "shed after {took:?}");
    assert!(head.contains("retry-after: 1\r\n"), "{head}");
    assert!(
        head.contains("content-type: application/problem+json"),
        "{head}"
    );
    assert_eq!(problem["type"], "https://headroom.dev/problems/server-busy");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("api.max_requests_in_flight"),
        "{problem}"
    );
    // The probes and the scrape answer whatever the load (this engine has not ticked, so
    // /readyz says not ready, but for its own reason), and the scrape counts the shed one.
    for path in ["/healthz", "/metrics"] {
        assert_eq!(
            get_from("127.0.0.7", server.addr, path).await,
            Some(200),
            "{path}"
        );
    }
    let (head, problem) = problem_status(&answer_from("127.0.0.7", server.addr, "/readyz").await);
    assert!(
        head.starts_with("http/1.1 200")
            || problem["type"] == "https://headroom.dev/problems/not-ready",
        "{head}{problem}"
    );
    let text = server.state.engine.metrics().encode();
    assert!(
        text.lines()
            .any(|l| l == "headroom_http_requests_shed_total 1"),
        "{}",
        text.lines()
            .filter(|l| l.contains("shed"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Once the requests in hand are gone, their places serve the next.
    drop(held);
    let mut served = None;
    for _ in 0..50 {
        served = get_from("127.0.0.7", server.addr, "/v1/pools").await;
        if served == Some(200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(served, Some(200));
}
