//! The AMQP listener: accepts sockets and runs each connection's read loop.

use crate::config::ProtocolConfig;
use crate::connection::{Client, Connection, Phase};
use crate::frame::PROTOCOL_HEADER;
use crate::outbox::{run_writer, Outbox};
use crate::pending_reply::PendingReply;
use crate::tls::AmqpsSettings;
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{interval, interval_at, timeout, Instant, MissedTickBehavior};
use warren_delivery::{Broker, BrokerError, ReplyCode};

/// Room made in the read buffer before a read, at first: idle connections stay small.
const MIN_READ_CHUNK_BYTES: usize = 4 * 1024;
/// Room made before a read when reads keep filling the buffer (a busy publisher).
const MAX_READ_CHUNK_BYTES: usize = 64 * 1024;
/// How often a connection checks its timers before heartbeats are negotiated.
const HANDSHAKE_TICK: Duration = Duration::from_millis(500);
/// How often a connection looks for deliveries past their consumer timeout: a delivery is
/// noticed up to this long after its timeout.
const CONSUMER_TIMEOUT_CHECK: Duration = Duration::from_secs(1);
/// How long shutdown waits for connections to finish closing.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// After the close handshake, how long the broker keeps reading (and discarding) what the
/// client sent before its close, waiting for it to close its side (see [`drain_after_close`]).
const CLOSE_DRAIN_TIMEOUT: Duration = Duration::from_secs(3);
/// Room for one read while draining a closed connection.
const CLOSE_DRAIN_CHUNK_BYTES: usize = 16 * 1024;

/// Why a connection's read loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The close handshake is done (close-ok sent or received): the client may still have
    /// frames in flight behind its close.
    Closed,
    /// The client went away, or stopped answering: nothing more to read.
    Gone,
}

/// Accepts connections until `shutdown` turns true, then closes them all (320
/// CONNECTION_FORCED) and returns once they are gone or the grace period is over.
pub async fn run(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: Arc<ProtocolConfig>,
    mut shutdown: watch::Receiver<bool>,
    tls: Option<AmqpsSettings>,
) {
    let mut connections = JoinSet::new();
    let mut failures = AcceptFailures::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let (broker, config, shutdown) = (Arc::clone(&broker), Arc::clone(&config), shutdown.clone());
                    match &tls {
                        None => connections.spawn(serve(stream, peer, broker, config, shutdown)),
                        Some(tls) => connections.spawn(serve_tls(stream, peer, tls.clone(), broker, config, shutdown)),
                    };
                }
                Err(error) => failures.handle(&listener, error).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let drained = timeout(SHUTDOWN_GRACE, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(left = connections.len(), "connections did not close in time");
        connections.abort_all();
    }
}

/// What the listener does when accepting fails: out of file descriptors, the client waiting
/// in the backlog is closed at once (with a descriptor kept spare for that) instead of being
/// left hanging, and failures are logged at most once per [`ACCEPT_FAILURE_LOG_INTERVAL`].
struct AcceptFailures {
    /// An open `/dev/null`, given up for a moment to accept and close a client.
    spare: Option<std::fs::File>,
    last_logged: Option<Instant>,
    unlogged: u64,
}

/// How often failing accepts are logged at most.
const ACCEPT_FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(1);
/// Pause after a failed accept, so that a persistent failure does not spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);

impl AcceptFailures {
    fn new() -> Self {
        AcceptFailures { spare: std::fs::File::open("/dev/null").ok(), last_logged: None, unlogged: 0 }
    }

    async fn handle(&mut self, listener: &TcpListener, error: std::io::Error) {
        let out_of_descriptors = matches!(error.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE));
        // Another task may have taken the descriptor the spare gave up last time (a /proc read,
        // another listener's client): take one back as soon as any is free, or every client
        // from then on would be left hanging.
        if self.spare.is_none() {
            self.spare = std::fs::File::open("/dev/null").ok();
        }
        let refused = out_of_descriptors && self.refuse_one(listener).await;
        self.unlogged += 1;
        if self.last_logged.is_none_or(|at| at.elapsed() >= ACCEPT_FAILURE_LOG_INTERVAL) {
            let hint = if out_of_descriptors { "raise the open-files limit or set --max-connections" } else { "" };
            tracing::warn!(%error, failures = self.unlogged, refused, hint, "accept failed");
            self.last_logged = Some(Instant::now());
            self.unlogged = 0;
        }
        tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
    }

    /// Frees the spare descriptor, accepts the waiting client and closes it, then takes the
    /// spare back. Whether a client was closed.
    async fn refuse_one(&mut self, listener: &TcpListener) -> bool {
        if self.spare.take().is_none() {
            return false;
        }
        let closed = matches!(timeout(ACCEPT_RETRY_DELAY, listener.accept()).await, Ok(Ok(_)));
        self.spare = std::fs::File::open("/dev/null").ok();
        closed
    }
}

/// Runs one connection to its end.
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ProtocolConfig>,
    shutdown: watch::Receiver<bool>,
) {
    let local = stream.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let (reader, writer) = stream.into_split();
    let client = Client { peer, local, tls: false, certificate_login: None };
    serve_halves(reader, writer, client, broker, config, shutdown).await;
}

/// [`serve`] behind a TLS handshake (AMQPS), which must finish within the handshake timeout;
/// a client certificate, if the client gave one, names its user for SASL EXTERNAL.
pub async fn serve_tls(
    stream: TcpStream,
    peer: SocketAddr,
    tls: AmqpsSettings,
    broker: Arc<Broker>,
    config: Arc<ProtocolConfig>,
    shutdown: watch::Receiver<bool>,
) {
    let local = stream.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&tls.server_config));
    let stream = match timeout(config.handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        // At debug level: each is one client's doing, and a client can make any number.
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let certificate = stream.get_ref().1.peer_certificates().and_then(|chain| chain.first());
    let certificate_login = certificate.and_then(|der| crate::tls::certificate_login(der.as_ref(), tls.login_from));
    let (reader, writer) = tokio::io::split(stream);
    let client = Client { peer, local, tls: true, certificate_login };
    serve_halves(reader, writer, client, broker, config, shutdown).await;
}

async fn serve_halves<R, W>(
    mut reader: R,
    mut writer: W,
    client: Client,
    broker: Arc<Broker>,
    config: Arc<ProtocolConfig>,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let peer = client.peer;
    let mut buf = BytesMut::with_capacity(PROTOCOL_HEADER.len());
    let header = timeout(config.handshake_timeout, async {
        while buf.len() < PROTOCOL_HEADER.len() {
            match reader.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
        }
        true
    })
    .await;
    if !matches!(header, Ok(true)) {
        return;
    }
    if &buf[..PROTOCOL_HEADER.len()] != PROTOCOL_HEADER {
        tracing::debug!(%peer, "bad protocol header; replying with ours");
        let _ = writer.write_all(PROTOCOL_HEADER).await;
        let _ = writer.shutdown().await;
        return;
    }
    let _ = buf.split_to(PROTOCOL_HEADER.len());

    let (outbox, rx) = Outbox::new();
    let frame_max = Arc::new(AtomicU32::new(config.frame_max));
    let mut connection = Connection::new(broker, Arc::clone(&config), client, outbox.clone(), Arc::clone(&frame_max));
    let traffic = Arc::clone(connection.info());
    let writer_task = tokio::spawn(run_writer(writer, rx, frame_max, traffic));
    let ending = read_loop(&mut connection, &outbox, &mut reader, &mut buf, &config, &mut shutdown).await;
    connection.release();
    outbox.send(crate::outbox::Outbound::Shutdown);
    // The writer sends what is queued (close-ok or close last), then half-closes the socket;
    // meanwhile what the client still sends is read and dropped, so that it never blocks on
    // a full socket and the socket never closes with unread bytes.
    if ending == Ending::Closed {
        let _ = tokio::join!(writer_task, drain_after_close(&mut reader));
    } else {
        let _ = writer_task.await;
    }
    tracing::debug!(%peer, "connection closed");
}

/// Reads and discards until the client closes its side or [`CLOSE_DRAIN_TIMEOUT`] passes.
///
/// A client may have sent frames (publishes, say) after its `connection.close`, or before it
/// read the broker's close. Closing a socket with unread bytes makes the kernel answer with a
/// TCP reset, which can reach the client before it reads `close-ok` (it then sees ECONNRESET
/// or EPIPE instead of a clean close). Reading what it sent until it hangs up avoids that.
async fn drain_after_close(reader: &mut (impl AsyncRead + Unpin)) {
    let mut scratch = vec![0u8; CLOSE_DRAIN_CHUNK_BYTES];
    let _ = timeout(CLOSE_DRAIN_TIMEOUT, async { while matches!(reader.read(&mut scratch).await, Ok(n) if n > 0) {} })
        .await;
}

/// Reads and processes the client's frames until the connection ends. While the client has
/// too much unread (its outbox is full) nothing more is read or processed, and deliveries to
/// it wait; both resume when the outbox drains.
async fn read_loop(
    connection: &mut Connection,
    outbox: &Outbox,
    reader: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    config: &ProtocolConfig,
    shutdown: &mut watch::Receiver<bool>,
) -> Ending {
    let started = Instant::now();
    let mut last_received = Instant::now();
    let mut closing_since: Option<Instant> = None;
    let mut heartbeat_secs = 0;
    let mut sent_at_last_tick = 0;
    let mut ticker = interval(HANDSHAKE_TICK);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut read_chunk = MIN_READ_CHUNK_BYTES;
    let mut paused_since: Option<Instant> = None;
    let mut pending: Option<PendingReply> = None;
    let mut close_requests = connection.info().close_requests();
    let mut alarms = connection.subscribe_alarms();
    let mut consumer_timeouts = interval_at(Instant::now() + CONSUMER_TIMEOUT_CHECK, CONSUMER_TIMEOUT_CHECK);
    consumer_timeouts.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while connection.phase() != Phase::Closed {
        pending = pending.or_else(|| connection.take_pending());
        // A resource alarm holds a publisher back: nothing read, so TCP pushes back on it.
        let blocked = connection.follow_alarms(*alarms.borrow_and_update());
        // Nothing more is read while a reply is pending: the frames behind it wait their turn.
        let paused = connection.outbox_full() || pending.is_some();
        // Only a client that does not read what it was sent is timed out while nothing is read.
        let client_stalled = connection.outbox_full();
        paused_since = if client_stalled { Some(paused_since.unwrap_or_else(Instant::now)) } else { None };
        if buf.capacity() - buf.len() < frame_header_room() && !paused {
            buf.reserve(read_chunk);
        }
        let room = buf.capacity() - buf.len();
        tokio::select! {
            read = reader.read_buf(buf), if !paused && !blocked => match read {
                Ok(0) | Err(_) => return Ending::Gone,
                Ok(n) => {
                    connection.info().received(n);
                    // A read that fills the room means more is waiting: read more at a time.
                    read_chunk = if n >= room { (read_chunk * 2).min(MAX_READ_CHUNK_BYTES) } else { read_chunk };
                    last_received = Instant::now();
                    connection.process(buf);
                    if n >= room {
                        // More is waiting, and a busy publisher would otherwise keep its
                        // worker for a whole coop budget (~128 reads): let the consumers'
                        // writers and ack readers run between chunks.
                        tokio::task::yield_now().await;
                    }
                }
            },
            outcome = wait_for(&mut pending) => {
                if let Some(done) = pending.take() {
                    connection.complete_pending(done.channel(), outcome);
                    connection.process(buf);
                }
            },
            _ = outbox.drained() => {
                // The client caught up: the frames left waiting first, then held-back deliveries.
                last_received = Instant::now();
                connection.process(buf);
                connection.resume_deliveries();
            },
            Ok(()) = alarms.changed() => {}
            _ = consumer_timeouts.tick(), if connection.phase() == Phase::Open => connection.enforce_consumer_timeouts(),
            _ = ticker.tick() => {
                if blocked || (pending.is_some() && !client_stalled) {
                    // As RabbitMQ, a blocked client is not timed out for the heartbeats it
                    // sent that the broker has not read; nor is one waiting for a reply (a
                    // consume waiting for a replica to catch up, say).
                    last_received = Instant::now();
                }
                let phase = connection.phase();
                if matches!(phase, Phase::AwaitStartOk | Phase::AwaitTuneOk | Phase::AwaitOpen)
                    && started.elapsed() > config.handshake_timeout
                {
                    tracing::info!("handshake timed out");
                    return Ending::Gone;
                }
                if phase == Phase::Closing {
                    let since = *closing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > config.close_timeout {
                        return Ending::Gone;
                    }
                }
                let tuned = connection.tuning().heartbeat_secs;
                if phase == Phase::Open && tuned != heartbeat_secs {
                    heartbeat_secs = tuned;
                    if tuned > 0 {
                        // Beat twice per interval; a peer silent for two intervals is gone.
                        // The first tick is one half-interval from now, not at once.
                        let half_interval = Duration::from_millis(u64::from(tuned) * 500);
                        ticker = interval_at(Instant::now() + half_interval, half_interval);
                        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
                        sent_at_last_tick = connection.info().traffic_bytes().1;
                    }
                } else if heartbeat_secs > 0 && phase == Phase::Open {
                    // A client that reads nothing is not read either; it is gone if it has
                    // not drained anything (heartbeats included) for as long.
                    let heard = paused_since.unwrap_or(last_received);
                    if heard.elapsed() > Duration::from_secs(2 * u64::from(heartbeat_secs)) {
                        tracing::info!(client_stalled, "missed heartbeats from client; closing");
                        return Ending::Gone;
                    }
                    sent_at_last_tick = beat_if_silent(connection, sent_at_last_tick);
                }
            },
            Ok(()) = close_requests.changed() => {
                // An operator closes it (the management API), with a reason for the client.
                let reason = close_requests.borrow_and_update().clone().unwrap_or_default();
                let reason = warren_delivery::client_text::sanitize(&reason, warren_delivery::client_text::MAX_TEXT_BYTES);
                tracing::info!(%reason, "connection closed by an operator");
                connection.close_connection(BrokerError::new(ReplyCode::ConnectionForced, reason));
            },
            _ = shutdown.changed() => {
                if connection.phase() == Phase::Open {
                    connection.close_connection(BrokerError::new(ReplyCode::ConnectionForced, "broker shutdown"));
                } else {
                    return Ending::Gone;
                }
            }
        }
    }
    Ending::Closed
}

/// Sends a heartbeat if nothing was sent to the client since the last tick (as RabbitMQ: any
/// frame tells the client the broker is alive), and returns the bytes sent so far.
///
/// Heartbeats come only after a half-interval of silence, never straight after the handshake:
/// some clients (amqprs) treat any frame that arrives after they sent `connection.close`,
/// other than `close-ok`, as a broken connection, so an early heartbeat made a client that
/// opens, works and closes within a second fail its close now and then.
fn beat_if_silent(connection: &Connection, sent_at_last_tick: u64) -> u64 {
    let (_, sent) = connection.info().traffic_bytes();
    if sent == sent_at_last_tick {
        connection.send_heartbeat();
    }
    sent
}

/// The outcome of the pending reply; never completes when there is none.
async fn wait_for(pending: &mut Option<PendingReply>) -> crate::pending_reply::Outcome {
    match pending {
        Some(pending) => pending.outcome().await,
        None => std::future::pending().await,
    }
}

fn frame_header_room() -> usize {
    crate::frame::FRAME_OVERHEAD_BYTES * 8
}
