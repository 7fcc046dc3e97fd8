//! The plain HTTP listener: an accept loop of our own around hyper's HTTP/1 connection, so that
//! no client can hold the API's connections or descriptors (as nginx and Envoy bound theirs):
//!
//! - a request's head must arrive within `header_read_timeout` (hyper's timer), counted from
//!   when the connection opens or its previous answer was sent: a slow header and an idle new
//!   or keep-alive connection are closed after it;
//! - a connection with no request in a handler on which no byte moves for `idle_timeout` is
//!   closed (a client that stops reading its answer);
//! - at most `max_connections_per_client` connections from one peer address (a trusted proxy
//!   carries many clients and is exempt), and at most `max_connections` in all, lowered below the
//!   process's descriptor limit; a connection past either is answered 503 and closed at once,
//!   counted in `headroom_http_connections_refused_total{limit}`;
//! - hyper's own answers to unparsable requests (400, 414, 431, with empty bodies) are rewritten
//!   as problem+json like every other error.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use headroom_engine::metrics::LimitLabels;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tower::ServiceExt;

use crate::{AppState, Problem};

/// Descriptors kept back from the connection limit for everything else the process opens: the
/// ledger's pool, the TLS listener, outbound scrapes and webhooks, files.
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// The most a request head (request line and headers) may take; past it the answer is 431. Above
/// hyper's 64 KiB limit on a path, so a long path is answered 414 rather than 431.
pub const MAX_HEAD_BYTES: usize = 128 * 1024;

/// The process's soft limit on open file descriptors, when the platform says.
pub fn descriptor_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The connections the listener takes at once: the configured limit, lowered so that they and
/// [`RESERVED_DESCRIPTORS`] fit under the descriptor limit (at least one).
pub fn connection_limit(configured: u32, descriptors: Option<u64>) -> usize {
    let room = descriptors.map_or(u64::MAX, |d| d.saturating_sub(RESERVED_DESCRIPTORS));
    usize::try_from(u64::from(configured).min(room).max(1)).unwrap_or(usize::MAX)
}

/// Which limit refused a connection (the metric's `limit` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    PerClient,
    Global,
}

impl Limit {
    fn as_str(self) -> &'static str {
        match self {
            Limit::PerClient => "per_client",
            Limit::Global => "global",
        }
    }
}

/// Open connections, in all and per peer address.
#[derive(Debug, Default)]
struct Open {
    per_client: Mutex<HashMap<IpAddr, usize>>,
    total: AtomicUsize,
}

/// One admitted connection; its place is given back when it drops.
#[derive(Debug)]
struct Slot {
    open: Arc<Open>,
    client: Option<IpAddr>,
}

impl Open {
    fn admit(
        self: &Arc<Self>,
        client: Option<IpAddr>,
        max_total: usize,
        max_per_client: usize,
    ) -> Result<Slot, Limit> {
        // Only the accept loop admits, so reading then adding cannot overshoot.
        if self.total.load(Ordering::Acquire) >= max_total {
            return Err(Limit::Global);
        }
        if let Some(ip) = client {
            let mut per_client = self.per_client.lock().unwrap_or_else(|e| e.into_inner());
            let n = per_client.entry(ip).or_insert(0);
            if *n >= max_per_client {
                return Err(Limit::PerClient);
            }
            *n += 1;
        }
        self.total.fetch_add(1, Ordering::AcqRel);
        Ok(Slot {
            open: self.clone(),
            client,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(ip) = self.client {
            let mut per_client = self
                .open
                .per_client
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(n) = per_client.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    per_client.remove(&ip);
                }
            }
        }
        self.open.total.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A whole HTTP/1.1 answer with a problem body that closes the connection.
fn problem_bytes(status: StatusCode, slug: &str, title: &str, detail: &str) -> Vec<u8> {
    let body = serde_json::to_vec(&Problem::new(status, slug, title, detail)).unwrap_or_default();
    let mut bytes = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

fn refused(limit: Limit) -> &'static [u8] {
    static PER_CLIENT: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
        problem_bytes(
            StatusCode::SERVICE_UNAVAILABLE,
            "too-many-connections",
            "Too many connections",
            "this address has api.max_connections_per_client connections open; reuse one (keep-alive) or close some",
        )
    });
    static GLOBAL: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
        problem_bytes(
            StatusCode::SERVICE_UNAVAILABLE,
            "too-many-connections",
            "Too many connections",
            "the API has api.max_connections connections open; retry shortly",
        )
    });
    match limit {
        Limit::PerClient => &PER_CLIENT,
        Limit::Global => &GLOBAL,
    }
}

/// The problem that replaces hyper's empty answer to a request it could not parse.
fn parse_error_problem(status: u16) -> Option<&'static [u8]> {
    use std::sync::LazyLock;
    static BAD: LazyLock<Vec<u8>> = LazyLock::new(|| {
        problem_bytes(
            StatusCode::BAD_REQUEST,
            "malformed-request",
            "Malformed request",
            "the request is not valid HTTP/1.1 (request line or a header)",
        )
    });
    static URI: LazyLock<Vec<u8>> = LazyLock::new(|| {
        problem_bytes(
            StatusCode::URI_TOO_LONG,
            "uri-too-long",
            "URI too long",
            "the path and query exceed 65,534 bytes; send large inputs in a request body",
        )
    });
    static HEAD: LazyLock<Vec<u8>> = LazyLock::new(|| {
        problem_bytes(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            "Request header fields too large",
            format!(
                "the request line and headers exceed {} KiB; send fewer or shorter headers",
                MAX_HEAD_BYTES / 1024
            )
            .as_str(),
        )
    });
    match status {
        400 => Some(&BAD),
        414 => Some(&URI),
        431 => Some(&HEAD),
        _ => None,
    }
}

/// The status of a write that is exactly one bodiless 4xx answer head: what hyper writes when it
/// cannot parse a request (the API's own errors always carry a problem body).
fn bare_error_status(buf: &[u8]) -> Option<u16> {
    let rest = buf.strip_prefix(b"HTTP/1.1 4")?;
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    if end + 4 != buf.len() {
        return None;
    }
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    if !head.contains("\r\ncontent-length: 0") || head.contains("\r\ncontent-type:") {
        return None;
    }
    let digits = rest.get(..2)?;
    let tail = std::str::from_utf8(digits).ok()?.parse::<u16>().ok()?;
    Some(400 + tail)
}

/// What a connection has done lately: bytes moved (a counter the idle watch compares between
/// looks) and requests in a handler.
#[derive(Debug, Default)]
struct Activity {
    moved: AtomicU64,
    in_flight: AtomicUsize,
}

/// Marks a request in a handler for as long as it lives.
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Completes once the connection has had no request in a handler and moved no byte for at
/// least `idle` (at most a quarter more): four looks a period apart saw nothing change.
async fn idle_for(activity: &Activity, idle: Duration) {
    const LOOKS: u32 = 4;
    let mut looks = tokio::time::interval(idle / LOOKS);
    looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = activity.moved.load(Ordering::Acquire);
    let mut quiet = 0;
    loop {
        looks.tick().await;
        let moved = activity.moved.load(Ordering::Acquire);
        if moved != seen || activity.in_flight.load(Ordering::Acquire) > 0 {
            seen = moved;
            quiet = 0;
        } else if quiet == LOOKS {
            return;
        } else {
            quiet += 1;
        }
    }
}

/// The socket as hyper sees it: counts the bytes that move for the idle watch, and writes a
/// problem in place of hyper's bare answer to an unparsable request.
#[derive(Debug)]
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
    /// A replacement being written: its bytes, how many are out, and what to report to hyper.
    replacing: Option<(&'static [u8], usize, usize)>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.moved.fetch_add(1, Ordering::AcqRel);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.replacing.is_none()
            && let Some(problem) = bare_error_status(buf).and_then(parse_error_problem)
        {
            self.replacing = Some((problem, 0, buf.len()));
        }
        if let Some((bytes, mut sent, report)) = self.replacing {
            while sent < bytes.len() {
                match Pin::new(&mut self.stream).poll_write(cx, &bytes[sent..]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => {
                        sent += n;
                        self.replacing = Some((bytes, sent, report));
                        self.activity.moved.fetch_add(1, Ordering::AcqRel);
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            // Hyper closes the connection after this answer; nothing else is written.
            return Poll::Ready(Ok(report));
        }
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled
            && n > 0
        {
            self.activity.moved.fetch_add(1, Ordering::AcqRel);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Serves `app` on `listener` with the connection limits of `state.limits` until `stop`
/// completes; then stops accepting, lets requests in hand finish and returns when every
/// connection has closed. The peer address reaches handlers as `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    state: AppState,
    stop: impl Future<Output = ()>,
) -> io::Result<()> {
    let limits = state.limits.clone();
    let max_total = connection_limit(limits.max_connections, descriptor_limit());
    let max_per_client =
        usize::try_from(limits.max_connections_per_client.max(1)).unwrap_or(usize::MAX);
    let refusals = state
        .engine
        .metrics()
        .service
        .http_connections_refused
        .clone();
    let open = Arc::new(Open::default());
    let (closing, closing_rx) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut stop => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was taken: wait a
                    // moment rather than spin, then take the next.
                    tracing::warn!(error = %e, "accepting an API connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let trusted = limits
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&peer.ip()));
        let client = (!trusted).then_some(peer.ip());
        let slot = match open.admit(client, max_total, max_per_client) {
            Ok(slot) => slot,
            Err(limit) => {
                refusals
                    .get_or_create(&LimitLabels {
                        limit: limit.as_str().to_string(),
                    })
                    .inc();
                // Never wait on a refused client: what the socket takes now is all it gets.
                let _ = stream.try_write(refused(limit));
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(connection(
            stream,
            peer,
            app.clone(),
            limits.header_read_timeout,
            limits.idle_timeout,
            closing_rx.clone(),
            slot,
        ));
    }
    let _ = closing.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    mut closing: tokio::sync::watch::Receiver<bool>,
    _slot: Slot,
) {
    let activity = Arc::new(Activity::default());
    let io = hyper_util::rt::TokioIo::new(Watched {
        stream,
        activity: activity.clone(),
        replacing: None,
    });
    let handler_activity = activity.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        let busy = InFlight::enter(&handler_activity);
        let app = app.clone();
        async move {
            let response = app.oneshot(request).await;
            drop(busy);
            response
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        // A head that arrives whole in one read is checked against the first; one still
        // incomplete when the buffer fills, against the second.
        .max_header_size(MAX_HEAD_BYTES)
        .max_buf_size(MAX_HEAD_BYTES);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let idle = idle_for(&activity, idle_timeout);
    tokio::pin!(idle);
    let mut shutting = false;
    loop {
        if !shutting && *closing.borrow() {
            shutting = true;
            conn.as_mut().graceful_shutdown();
        }
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "API connection ended");
                }
                return;
            }
            // Dropping the connection closes the socket.
            () = &mut idle => return,
            changed = closing.changed(), if !shutting => {
                if changed.is_err() {
                    shutting = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_limit_stays_under_the_descriptor_limit() {
        assert_eq!(connection_limit(10_000, Some(1024)), 768);
        assert_eq!(connection_limit(500, Some(1024)), 500);
        assert_eq!(connection_limit(10_000, None), 10_000);
        assert_eq!(connection_limit(10_000, Some(100)), 1);
    }

    #[test]
    fn only_a_bodiless_error_head_is_taken_for_hyper_s() {
        let hyper_s = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error_status(hyper_s), Some(414));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_error_status(ours), None);
        let with_body = b"HTTP/1.1 431 x\r\ncontent-length: 0\r\n\r\n{}";
        assert_eq!(bare_error_status(with_body), None);
        assert_eq!(
            bare_error_status(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
            None
        );
    }
}
