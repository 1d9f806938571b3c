//! One Stream-protocol connection: the handshake (PeerProperties, SASL, Tune, Open), then
//! the client's commands, answered in order.
//!
//! The connection reads frames and handles each as it comes; what it sends goes to its
//! writer ([`crate::outbound`]), which also turns the subscriptions' deliveries into chunks.
//! A frame the connection cannot read closes it with the protocol's code (`Close` with
//! UnknownFrame or FrameTooLarge), after which it reads nothing more.

use crate::command::{key, ResponseCode, COMMANDS};
use crate::frame::{next_frame, FrameError, HANDSHAKE_FRAME_MAX_BYTES};
use crate::outbound::{write_loop, Outbound};
use crate::request::Request;
use crate::response;
use crate::settings::StreamSettings;
use crate::{handlers, publisher::Publisher, subscription::Subscription};
use bytes::BytesMut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use warren_delivery::client_text::{sanitize, MAX_TEXT_BYTES};
use warren_delivery::connections::{ClientProtocol, Registered};
use warren_delivery::{Broker, VirtualHost};

/// How often the streams of the connection's publishers are checked for deletion.
const PUBLISHED_STREAMS_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long a client has to open the connection (RabbitMQ's handshake timeout).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes asked of the socket per read.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// The only SASL mechanism offered on a plain listener.
pub const PLAIN: &str = "PLAIN";
/// Client properties kept for the management API, at most, and bytes of each.
const MAX_SHOWN_PROPERTIES: usize = 32;
const MAX_PROPERTY_BYTES: usize = 256;

/// Where the handshake is.
#[derive(Debug)]
enum Phase {
    /// Before SaslAuthenticate succeeded.
    Anonymous,
    /// Logged in as this user; waiting for Tune and Open.
    Authenticated(String),
    /// Open in a vhost.
    Open { user: String, vhost: Arc<VirtualHost> },
}

/// What a handler wants done with the connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Read on.
    Continue,
    /// Stop reading: the connection is closing.
    Stop,
}

/// A connection's state, as the command handlers see it.
pub struct Connection {
    pub(crate) broker: Arc<Broker>,
    pub(crate) settings: Arc<StreamSettings>,
    pub(crate) peer: SocketAddr,
    pub(crate) out: UnboundedSender<Outbound>,
    phase: Phase,
    pub(crate) frame_max: u32,
    pub(crate) heartbeat_secs: u32,
    /// Deliver's newest version the client reads (2 once it said so).
    pub(crate) deliver_version: u16,
    pub(crate) publishers: HashMap<u8, Publisher>,
    pub(crate) subscriptions: HashMap<u8, Arc<Subscription>>,
    /// Its entry in the broker's connections (the management API lists and closes it).
    registered: Registered,
    /// The client's PeerProperties, escaped and cut, until it logs in.
    client_properties: Vec<(String, String)>,
}

/// Serves one connection until it closes.
pub async fn serve<S>(
    socket: S,
    (peer, local): (SocketAddr, SocketAddr),
    broker: Arc<Broker>,
    settings: Arc<StreamSettings>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let id = broker.next_connection_id();
    let registered = broker.connections().open_speaking(ClientProtocol::Stream, id, (peer, local), false);
    let (mut reader, writer) = tokio::io::split(socket);
    let (out, inbox) = unbounded_channel();
    let writing = tokio::spawn(write_loop(writer, inbox, Arc::clone(registered.info())));
    let mut connection = Connection {
        registered,
        client_properties: Vec::new(),
        broker,
        settings,
        peer,
        out,
        phase: Phase::Anonymous,
        frame_max: HANDSHAKE_FRAME_MAX_BYTES,
        heartbeat_secs: 0,
        deliver_version: 1,
        publishers: HashMap::new(),
        subscriptions: HashMap::new(),
    };
    connection.read_loop(&mut reader).await;
    connection.end();
    let _ = connection.out.send(Outbound::Shutdown);
    drop(connection);
    let _ = writing.await;
}

impl Connection {
    async fn read_loop(&mut self, reader: &mut (impl AsyncRead + Unpin)) {
        let mut buffer = BytesMut::with_capacity(READ_BUFFER_BYTES);
        let mut close_requests = self.registered.info().close_requests();
        let mut stream_checks = tokio::time::interval(PUBLISHED_STREAMS_CHECK_INTERVAL);
        loop {
            loop {
                match next_frame(&mut buffer, self.frame_max) {
                    Ok(Some(frame)) => {
                        if self.handle_frame(frame).await == Next::Stop {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::info!(peer = %self.peer, %error, "stream connection closed: a frame it refuses");
                        let code = match error {
                            FrameError::TooLarge { .. } => ResponseCode::FrameTooLarge,
                            FrameError::TooSmall(_) => ResponseCode::UnknownFrame,
                        };
                        self.close(code, &error.to_string());
                        return;
                    }
                }
            }
            let read = tokio::select! {
                read = tokio::time::timeout(self.read_timeout(), reader.read_buf(&mut buffer)) => read,
                _ = stream_checks.tick() => {
                    self.forget_deleted_streams();
                    continue;
                }
                _ = close_requests.changed() => {
                    let reason = close_requests.borrow().clone().unwrap_or_default();
                    tracing::info!(peer = %self.peer, %reason, "stream connection closed by an operator");
                    self.close(ResponseCode::Ok, &reason);
                    return;
                }
            };
            match read {
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(bytes)) => self.registered.info().received(bytes),
                Err(_) => {
                    tracing::info!(peer = %self.peer, "stream connection closed: nothing heard in time");
                    self.close(ResponseCode::InternalError, "heartbeat timeout");
                    return;
                }
            }
        }
    }

    /// How long the client may stay silent: the handshake's timeout until it opened, then
    /// two heartbeats (forever without heartbeats).
    fn read_timeout(&self) -> Duration {
        match (&self.phase, self.heartbeat_secs) {
            (Phase::Open { .. }, 0) => Duration::from_secs(u64::from(u32::MAX)),
            (Phase::Open { .. }, secs) => Duration::from_secs(2 * u64::from(secs)),
            _ => HANDSHAKE_TIMEOUT,
        }
    }

    async fn handle_frame(&mut self, frame: bytes::Bytes) -> Next {
        let request = match Request::decode(frame) {
            Ok(request) => request,
            Err(error) => {
                tracing::info!(peer = %self.peer, %error, "stream connection closed: a frame it cannot read");
                self.close(ResponseCode::UnknownFrame, &error.to_string());
                return Next::Stop;
            }
        };
        tracing::trace!(peer = %self.peer, ?request, "stream request");
        match (&self.phase, request) {
            (_, Request::Heartbeat) => Next::Continue,
            (_, Request::Close { correlation_id, .. }) => {
                self.send(|out| response::plain(out, key::CLOSE, correlation_id, ResponseCode::Ok));
                Next::Stop
            }
            (_, Request::CloseResponse { .. }) => Next::Stop,
            (_, Request::PeerProperties { correlation_id, properties }) => {
                self.client_properties = shown_properties(properties);
                let product = concat!("Warren ", env!("CARGO_PKG_VERSION"));
                let properties = [("product", "Warren"), ("version", env!("CARGO_PKG_VERSION")), ("platform", product)];
                self.send(|out| response::peer_properties(out, correlation_id, &properties));
                Next::Continue
            }
            (_, Request::SaslHandshake { correlation_id }) => {
                self.send(|out| response::sasl_handshake(out, correlation_id, &[PLAIN]));
                Next::Continue
            }
            (Phase::Anonymous, Request::SaslAuthenticate { correlation_id, mechanism, data }) => {
                self.authenticate(correlation_id, &mechanism, data.as_deref())
            }
            (_, Request::Tune { frame_max, heartbeat_secs }) => {
                self.tuned(frame_max, heartbeat_secs);
                Next::Continue
            }
            (Phase::Authenticated(_), Request::Open { correlation_id, vhost }) => self.open(correlation_id, &vhost),
            (Phase::Open { .. }, Request::ExchangeCommandVersions { correlation_id, commands }) => {
                let deliver = commands.iter().find(|(command, _, _)| *command == key::DELIVER);
                self.deliver_version = deliver.map_or(1, |(_, _, max)| (*max).clamp(1, 2));
                self.send(|out| response::exchange_command_versions(out, correlation_id, COMMANDS));
                Next::Continue
            }
            (Phase::Open { user, vhost }, request) => {
                let (user, vhost) = (user.clone(), Arc::clone(vhost));
                handlers::handle(self, &user, &vhost, request).await;
                Next::Continue
            }
            (_, request) => {
                let reason = sanitize(&format!("{request:?} before the connection is open"), MAX_TEXT_BYTES);
                tracing::info!(peer = %self.peer, %reason, "stream connection closed: a command before it opened");
                self.close(ResponseCode::UnknownFrame, &reason);
                Next::Stop
            }
        }
    }

    fn authenticate(&mut self, correlation_id: u32, mechanism: &str, data: Option<&[u8]>) -> Next {
        if mechanism != PLAIN {
            let code = ResponseCode::SaslMechanismNotSupported;
            self.send(|out| response::sasl_authenticate(out, correlation_id, code));
            return Next::Continue;
        }
        let Some((user, password)) = data.and_then(plain_login) else {
            self.send(|out| response::sasl_authenticate(out, correlation_id, ResponseCode::SaslError));
            return Next::Continue;
        };
        let access = self.broker.access();
        match access.authenticate(&user, &password, self.peer.ip()) {
            Ok(_) => {
                access.count_login(self.peer.ip(), &user, mechanism, None);
                let shown = sanitize(&user, MAX_TEXT_BYTES);
                self.registered.info().logged_in(&shown, mechanism, std::mem::take(&mut self.client_properties));
                self.send(|out| response::sasl_authenticate(out, correlation_id, ResponseCode::Ok));
                let (frame_max, heartbeat) = (self.settings.frame_max_bytes, self.settings.heartbeat_secs);
                self.send(|out| response::tune(out, frame_max, heartbeat));
                self.phase = Phase::Authenticated(user);
                Next::Continue
            }
            Err(error) => {
                access.count_login(self.peer.ip(), &user, mechanism, Some(&error.to_string()));
                let code = match error {
                    warren_delivery::access::AuthError::LoopbackOnly(_) => {
                        ResponseCode::SaslAuthenticationFailureLoopback
                    }
                    warren_delivery::access::AuthError::BadCredentials => ResponseCode::AuthenticationFailure,
                };
                self.send(|out| response::sasl_authenticate(out, correlation_id, code));
                // RabbitMQ closes the connection after a failed login.
                Next::Stop
            }
        }
    }

    /// The client's Tune: the smaller of both sides' frame sizes and heartbeats (0 is none).
    fn tuned(&mut self, frame_max: u32, heartbeat_secs: u32) {
        let smaller = |ours: u32, theirs: u32| match (ours, theirs) {
            (0, theirs) => theirs,
            (ours, 0) => ours,
            (ours, theirs) => ours.min(theirs),
        };
        self.frame_max = smaller(self.settings.frame_max_bytes, frame_max);
        self.heartbeat_secs = smaller(self.settings.heartbeat_secs, heartbeat_secs);
        let shown_heartbeat = u16::try_from(self.heartbeat_secs).unwrap_or(u16::MAX);
        self.registered.info().tuned(0, self.frame_max, shown_heartbeat);
        if self.heartbeat_secs > 0 {
            tokio::spawn(send_heartbeats(self.out.clone(), self.heartbeat_secs));
        }
    }

    fn open(&mut self, correlation_id: u32, name: &str) -> Next {
        let Phase::Authenticated(user) = &self.phase else { return Next::Stop };
        let user = user.clone();
        let allowed = self.broker.vhost(name).filter(|_| self.broker.access().permissions_of(name, &user).is_some());
        let Some(vhost) = allowed else {
            let code = ResponseCode::VirtualHostAccessFailure;
            self.send(|out| response::open(out, correlation_id, code, &[]));
            return Next::Stop;
        };
        let port = self.settings.advertised_port.to_string();
        let properties = [("advertised_host", self.settings.advertised_host.as_str()), ("advertised_port", &port)];
        self.send(|out| response::open(out, correlation_id, ResponseCode::Ok, &properties));
        self.registered.info().opened(name);
        self.phase = Phase::Open { user, vhost };
        Next::Continue
    }

    /// Publishers whose stream was deleted are told (MetadataUpdate, as RabbitMQ tells them)
    /// and forgotten. Subscriptions learn it from their consumer's cancellation.
    fn forget_deleted_streams(&mut self) {
        let Phase::Open { vhost, .. } = &self.phase else { return };
        let vhost = Arc::clone(vhost);
        let gone: Vec<u8> = self
            .publishers
            .iter()
            .filter(|(_, p)| !handlers::stream_queue(&vhost, &p.stream).is_some_and(|q| Arc::ptr_eq(&q, &p.queue)))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.registered.info().publisher_deleted(id);
            if let Some(publisher) = self.publishers.remove(&id) {
                let stream = publisher.stream;
                self.send(|out| response::metadata_update(out, ResponseCode::StreamNotAvailable, &stream));
            }
        }
    }

    /// Its entry in the broker's connections.
    pub(crate) fn registered(&self) -> &Registered {
        &self.registered
    }

    /// Encodes frames with `write` and hands them to the writer.
    pub(crate) fn send(&self, write: impl FnOnce(&mut BytesMut)) {
        let mut frames = BytesMut::new();
        write(&mut frames);
        let _ = self.out.send(Outbound::Frames(frames));
    }

    /// Sends a Close the server starts.
    fn close(&self, code: ResponseCode, reason: &str) {
        self.send(|out| response::close(out, 1, code, reason));
    }

    /// The connection is over: its subscriptions end, their deliveries back in the streams.
    fn end(&mut self) {
        for (_, subscription) in self.subscriptions.drain() {
            subscription.session.close();
        }
        self.publishers.clear();
    }
}

/// The client's properties as the management API shows them: escaped, cut, a few.
fn shown_properties(properties: Vec<(String, String)>) -> Vec<(String, String)> {
    let shown = |text: &str| sanitize(text, MAX_PROPERTY_BYTES);
    properties.iter().take(MAX_SHOWN_PROPERTIES).map(|(key, value)| (shown(key), shown(value))).collect()
}

/// PLAIN's response: `[authzid] NUL authcid NUL password`.
fn plain_login(data: &[u8]) -> Option<(String, String)> {
    let mut parts = data.splitn(3, |byte| *byte == 0);
    let (_authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    Some((String::from_utf8(user.to_vec()).ok()?, String::from_utf8(password.to_vec()).ok()?))
}

async fn send_heartbeats(out: UnboundedSender<Outbound>, secs: u32) {
    let mut ticks = tokio::time::interval(Duration::from_secs(u64::from(secs)));
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let mut frame = BytesMut::new();
        response::heartbeat(&mut frame);
        if out.send(Outbound::Frames(frame)).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plain_login;

    #[test]
    fn a_plain_response_names_the_user_and_password() {
        assert_eq!(plain_login(b"\0guest\0secret"), Some(("guest".into(), "secret".into())));
        assert_eq!(plain_login(b"admin\0guest\0pass\0word"), Some(("guest".into(), "pass\0word".into())));
        assert_eq!(plain_login(b"guest"), None);
    }
}
