//! The management API's listener: accepts connections within limits and serves them with
//! HTTP/1.1, so that HTTP clients, logged in or not, can never take the descriptors, memory or
//! time AMQP clients need (see [`HttpLimits`]):
//!
//! - at most `max_connections` at once, `max_connections_per_address` from one address; one
//!   more is answered 503 (written if the socket takes it at once, never waited for) and closed;
//! - a request head must arrive within `header_read_timeout`, which also ends a keep-alive
//!   connection idle that long;
//! - a connection on which no byte moves for `idle_timeout` while no handler is at work (a
//!   client that does not read its answer) is closed, and a request body that has not all
//!   arrived `idle_timeout` after the handler asked for it fails (a body trickled a byte at a
//!   time holds its connection no longer);
//! - over HTTPS, the TLS handshake must finish within [`TLS_HANDSHAKE_TIMEOUT`].
//!
//! A connection's slot of the limits is held as long as the connection, or the WebSocket it
//! became, lives ([`ConnectionSlot`]).

use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// Time a client has to complete the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait before accepting again after accept failed (out of descriptors).
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);
/// Refusals are logged at most once per this interval, with how many there were.
const REFUSAL_LOG_INTERVAL_MS: u64 = 10_000;
/// What a client past the limits is told, in RabbitMQ's error shape.
const TOO_MANY_CONNECTIONS_BODY: &str =
    r#"{"error":"unavailable","reason":"too many management API connections, retry"}"#;

/// The whole answer to a client past the limits: a 503 that closes the connection.
fn too_many_connections() -> Vec<u8> {
    let body = TOO_MANY_CONNECTIONS_BODY;
    let head = "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: application/json";
    format!("{head}\r\ncontent-length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// The bounds of the management API's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections (WebSockets included) at once.
    pub max_connections: usize,
    /// Connections at once from one address.
    pub max_connections_per_address: usize,
    /// Time to send a request's head, from connecting or from the end of the last answer.
    pub header_read_timeout: Duration,
    /// Time without a byte moving, while no handler is at work, before a connection closes.
    pub idle_timeout: Duration,
}

/// Connections at once, as RabbitMQ's management listener (cowboy's default).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Share of `max_connections` one address may hold (an eighth).
const PER_ADDRESS_SHARE: usize = 8;
/// Default header-read timeout.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// Default idle timeout.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 30_000;

impl HttpLimits {
    /// The limits with `max_connections`, an eighth of them per address.
    pub fn with_max_connections(max_connections: usize) -> Self {
        let max_connections = max_connections.max(1);
        HttpLimits {
            max_connections,
            max_connections_per_address: (max_connections / PER_ADDRESS_SHARE).max(1),
            header_read_timeout: Duration::from_millis(DEFAULT_HEADER_READ_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
        }
    }
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits::with_max_connections(DEFAULT_MAX_CONNECTIONS)
    }
}

/// Whether a request came over HTTPS (a request extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverTls(pub bool);

/// A connection's place within the limits (a request extension): the WebSocket a request
/// upgrades to keeps it, so that upgraded connections count too.
#[derive(Debug, Clone)]
pub struct ConnectionSlot(#[allow(dead_code)] Arc<Slot>);

#[derive(Debug)]
struct Slot {
    source: IpAddr,
    counts: Arc<Counts>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.counts.release(self.source);
    }
}

/// Connections open: in all, and by source.
#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

/// Connections open; refusals not yet logged.
#[derive(Debug, Default)]
struct Counts {
    open: Mutex<Open>,
    refused_unlogged: AtomicU64,
    last_refusal_log_ms: AtomicU64,
}

/// Bits of an IPv6 address that name one source: a /64, which one host may hold whole.
const IPV6_SOURCE_PREFIX_BITS: u32 = 64;

/// Where a connection comes from, as the limits count it: an IPv4 address, or an IPv6 /64.
fn source_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & (u128::MAX << (128 - IPV6_SOURCE_PREFIX_BITS));
            IpAddr::V6(std::net::Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

impl Counts {
    /// A slot for a connection from `ip`, if the limits leave one.
    fn claim(self: &Arc<Self>, ip: IpAddr, limits: &HttpLimits) -> Option<ConnectionSlot> {
        let source = source_of(ip);
        let mut open = self.open.lock();
        let from_source = open.by_source.get(&source).copied().unwrap_or(0);
        if open.total >= limits.max_connections || from_source >= limits.max_connections_per_address {
            return None;
        }
        open.by_source.insert(source, from_source + 1);
        open.total += 1;
        Some(ConnectionSlot(Arc::new(Slot { source, counts: Arc::clone(self) })))
    }

    fn release(&self, source: IpAddr) {
        let mut open = self.open.lock();
        if let Some(count) = open.by_source.get_mut(&source) {
            *count -= 1;
            if *count == 0 {
                open.by_source.remove(&source);
            }
        }
        open.total = open.total.saturating_sub(1);
    }

    /// Counts a refusal; logs, at most once per interval, how many there were.
    fn refused(&self, limits: &HttpLimits, started: Instant) {
        let refused = self.refused_unlogged.fetch_add(1, Ordering::Relaxed) + 1;
        let now_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.last_refusal_log_ms.load(Ordering::Relaxed);
        if (last == 0 || now_ms.saturating_sub(last) >= REFUSAL_LOG_INTERVAL_MS)
            && self
                .last_refusal_log_ms
                .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.refused_unlogged.fetch_sub(refused, Ordering::Relaxed);
            tracing::warn!(
                refused,
                max_connections = limits.max_connections,
                max_connections_per_address = limits.max_connections_per_address,
                "management API connections refused: the connection limit is reached"
            );
        }
    }
}

/// Serves `app` on `listener` within `limits` (TLS with `tls`) until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: HttpLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let refusal = too_many_connections();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "management API: accept failed");
                tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                continue;
            }
        };
        let Some(slot) = counts.claim(peer.ip(), &limits) else {
            // Best effort and never waited for: the socket takes the few bytes or not.
            let _ = stream.try_write(&refusal);
            counts.refused(&limits, started);
            continue;
        };
        let connection = Connection { peer, slot, app: app.clone(), limits, shutdown: shutdown.clone() };
        tokio::spawn(connection.run(stream, tls.clone()));
    }
}

/// One accepted connection and what it is served with.
struct Connection {
    peer: SocketAddr,
    slot: ConnectionSlot,
    app: Router,
    limits: HttpLimits,
    shutdown: watch::Receiver<bool>,
}

impl Connection {
    async fn run(self, stream: TcpStream, tls: Option<TlsAcceptor>) {
        let activity = Arc::new(Activity::new());
        let metered = Metered { inner: stream, activity: Arc::clone(&activity) };
        match tls {
            None => self.serve(metered, false, activity).await,
            Some(acceptor) => match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(metered)).await {
                Ok(Ok(stream)) => self.serve(stream, true, activity).await,
                Ok(Err(error)) => tracing::debug!(peer = %self.peer, %error, "HTTPS handshake failed"),
                Err(_) => tracing::debug!(peer = %self.peer, "HTTPS handshake timed out"),
            },
        }
    }

    async fn serve<I>(mut self, io: I, tls: bool, activity: Arc<Activity>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = PerConnection {
            app: self.app.clone(),
            peer: self.peer,
            tls,
            slot: self.slot.clone(),
            activity: Arc::clone(&activity),
            body_idle: self.limits.idle_timeout,
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(self.limits.header_read_timeout);
        let connection = builder.serve_connection(TokioIo::new(io), service).with_upgrades();
        tokio::pin!(connection);
        let mut draining = false;
        loop {
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(error) = served {
                        tracing::trace!(peer = %self.peer, %error, "management API connection ended");
                    }
                    return;
                }
                _ = activity.stalled(self.limits.idle_timeout) => {
                    tracing::debug!(peer = %self.peer, "management API connection closed: idle");
                    return;
                }
                _ = self.shutdown.wait_for(|stop| *stop), if !draining => {
                    connection.as_mut().graceful_shutdown();
                    draining = true;
                }
            }
        }
    }
}

/// When bytes last moved on a connection, and how many of its requests are being handled.
#[derive(Debug)]
struct Activity {
    since: Instant,
    last_progress_ms: AtomicU64,
    busy: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Activity { since: Instant::now(), last_progress_ms: AtomicU64::new(0), busy: AtomicUsize::new(0) }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn progressed(&self) {
        self.last_progress_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Resolves once no byte has moved for `idle` while no handler was at work.
    async fn stalled(&self, idle: Duration) {
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        let check = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::time::sleep(check).await;
            let quiet_ms = self.now_ms().saturating_sub(self.last_progress_ms.load(Ordering::Relaxed));
            if self.busy.load(Ordering::Relaxed) == 0 && quiet_ms >= idle_ms {
                return;
            }
        }
    }

    /// Marks a handler at work until the guard goes.
    fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::Relaxed);
        Busy(Arc::clone(self))
    }
}

struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.progressed();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A socket that records when bytes move.
struct Metered<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Metered<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.progressed();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Metered<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.progressed();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router as one connection's hyper service: each request gets the connection's facts
/// (peer, TLS, slot) and its body a stall timeout, and counts as work while it is handled.
#[derive(Clone)]
struct PerConnection {
    app: Router,
    peer: SocketAddr,
    tls: bool,
    slot: ConnectionSlot,
    activity: Arc<Activity>,
    body_idle: Duration,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl hyper::service::Service<hyper::Request<Incoming>> for PerConnection {
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, request: hyper::Request<Incoming>) -> Answer {
        let mut request = request.map(|body| StallingBody::new(body, self.body_idle));
        request.extensions_mut().insert(ConnectInfo(self.peer));
        request.extensions_mut().insert(OverTls(self.tls));
        request.extensions_mut().insert(self.slot.clone());
        let busy = self.activity.busy();
        let mut app = self.app.clone();
        Box::pin(async move {
            let _busy = busy;
            tower_service::Service::call(&mut app, request).await
        })
    }
}

/// A request body that must have all arrived within a time of the handler first asking for
/// it, so that a client trickling a body cannot hold a handler (and its connection) forever.
struct StallingBody {
    inner: Incoming,
    within: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl StallingBody {
    fn new(inner: Incoming, within: Duration) -> Self {
        StallingBody { inner, within, deadline: None }
    }
}

/// A request body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
struct BodyStalled;

impl http_body::Body for StallingBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let within = self.within;
        // Armed once, at the first poll, and never moved: the whole body has that long.
        let deadline = self.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(within)));
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyStalled))));
        }
        Pin::new(&mut self.inner).poll_frame(cx).map(|frame| frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_in_all_and_per_address_and_come_back() {
        let limits = HttpLimits { max_connections: 3, max_connections_per_address: 2, ..HttpLimits::default() };
        let counts = Arc::new(Counts::default());
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = counts.claim(a, &limits).expect("a's first");
        let _second = counts.claim(a, &limits).expect("a's second");
        assert!(counts.claim(a, &limits).is_none(), "a holds its share");
        let _third = counts.claim(b, &limits).expect("b still gets one");
        assert!(counts.claim(b, &limits).is_none(), "the total is reached");
        drop(first);
        assert!(counts.claim(b, &limits).is_some(), "a slot came back");
    }

    #[test]
    fn an_ipv6_64_is_one_source() {
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(source_of(one), source_of(same));
        assert_ne!(source_of(one), source_of(other));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(source_of(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
    }
}
