//! One client connection: the handshake, then frames routed to channels, then the close.
//!
//! The connection task owns the read half of the socket and all protocol state; a writer task
//! owns the write half (see `outbox`). `Connection` itself is synchronous: it is fed whole
//! frames and queues its replies, so the same code serves the socket loop and the tests.

use crate::channel::Channel;
use crate::config::ProtocolConfig;
use crate::connection_context::ConnectionContext;
use crate::frame::{self, RawFrame, FRAME_MIN_SIZE_BYTES};
use crate::outbox::{Outbound, Outbox};
use crate::pending_reply::{Answer, PendingReply};
use crate::publisher_block::PublisherBlock;
use crate::sasl;
use crate::server_properties::server_properties;
use amq_protocol::protocol::{access, channel, connection, parse_class, AMQPClass};
use amq_protocol::types::{LongString, ShortString};
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use warren_delivery::connections::{ConnectionInfo, Registered};
use warren_delivery::resource_alarm::AlarmState;
use warren_delivery::{client_text, Broker, BrokerError, ConnectionId, ReplyCode};

/// Class id of `connection`: its methods' errors are connection errors.
const CONNECTION_CLASS_ID: u16 = 10;

/// Where the handshake stands, or whether the connection is closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `connection.start` sent; awaiting start-ok.
    AwaitStartOk,
    /// `connection.tune` sent; awaiting tune-ok.
    AwaitTuneOk,
    /// Tuned; awaiting `connection.open`.
    AwaitOpen,
    /// Open for channels.
    Open,
    /// `connection.close` sent; awaiting close-ok.
    Closing,
    /// Done: the socket is to be closed.
    Closed,
}

/// Values agreed in `connection.tune-ok`.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Highest channel number.
    pub channel_max: u16,
    /// Largest frame.
    pub frame_max: u32,
    /// Heartbeat interval in seconds (0: none).
    pub heartbeat_secs: u16,
}

/// The protocol state of one connection.
pub struct Connection {
    id: ConnectionId,
    broker: Arc<Broker>,
    config: Arc<ProtocolConfig>,
    peer: SocketAddr,
    outbox: Outbox,
    frame_max: Arc<AtomicU32>,
    tuning: Tuning,
    phase: Phase,
    context: Option<ConnectionContext>,
    channels: HashMap<u16, Channel>,
    /// Channels the broker closed, whose close-ok has not arrived.
    closing_channels: HashSet<u16>,
    /// A method's reply is pending: no further frame is processed until it is sent.
    pending: Option<PendingReply>,
    /// The pending reply was handed to the read loop and has not completed yet.
    waiting: bool,
    /// Class and method of the method being handled, for close replies.
    current_method: (u16, u16),
    /// Who logged in (escaped for logs), once authenticated.
    user: Option<String>,
    /// Its entry in the broker's connection list (it leaves the list with the connection).
    registered: Registered,
    /// Whether a resource alarm holds this connection's publishing back.
    publisher_block: PublisherBlock,
    /// The user name as the client sent it (`user` is escaped for logs).
    login: String,
    /// A login refusal held back by the failed-login delay of its address.
    delayed_refusal: Option<BrokerError>,
    /// The user the client's TLS certificate names, for SASL EXTERNAL.
    certificate_login: Option<String>,
}

/// Who is at the other end of a connection.
#[derive(Debug)]
pub struct Client {
    /// Its address.
    pub peer: SocketAddr,
    /// The broker's address it connected to.
    pub local: SocketAddr,
    /// Whether it connected over TLS.
    pub tls: bool,
    /// The user its TLS client certificate names, if it gave one.
    pub certificate_login: Option<String>,
}

fn short(s: String) -> ShortString {
    let mut s = s;
    if s.len() > 255 {
        let mut cut = 255;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    ShortString::try_new(s).unwrap_or_default()
}

fn reply_text(error: &BrokerError) -> ShortString {
    short(format!("{} - {}", error.code.name(), error.text))
}

impl Connection {
    /// A connection that has received a valid protocol header; queues `connection.start`.
    /// If the client's TLS certificate names a user, SASL EXTERNAL is offered too.
    pub fn new(
        broker: Arc<Broker>,
        config: Arc<ProtocolConfig>,
        client: Client,
        outbox: Outbox,
        frame_max: Arc<AtomicU32>,
    ) -> Self {
        frame_max.store(config.frame_max, Ordering::Release);
        let tuning = Tuning {
            channel_max: config.channel_max,
            frame_max: config.frame_max,
            heartbeat_secs: config.heartbeat_secs,
        };
        let id = broker.next_connection_id();
        let Client { peer, local, tls, certificate_login } = client;
        let registered = broker.connections().open(id, (peer, local), tls);
        let connection = Connection {
            id,
            broker,
            config,
            peer,
            outbox,
            frame_max,
            tuning,
            phase: Phase::AwaitStartOk,
            context: None,
            channels: HashMap::new(),
            closing_channels: HashSet::new(),
            pending: None,
            waiting: false,
            current_method: (0, 0),
            user: None,
            registered,
            publisher_block: PublisherBlock::default(),
            login: String::new(),
            delayed_refusal: None,
            certificate_login,
        };
        let start = connection::Start {
            version_major: 0,
            version_minor: 9,
            server_properties: server_properties(),
            mechanisms: LongString::from(sasl::mechanisms(connection.certificate_login.is_some())),
            locales: LongString::from("en_US"),
        };
        connection.outbox.method(0, AMQPClass::Connection(connection::AMQPMethod::Start(start)));
        connection
    }

    /// Where the connection stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The values agreed in tuning (the offer, until tune-ok).
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Feeds the whole frames in `buf` to the connection, until the client has too much
    /// unread (see [`Outbox::is_full`]): the rest stays in `buf` for after it drains.
    pub fn process(&mut self, buf: &mut BytesMut) {
        while !matches!(self.phase, Phase::Closed) && !self.waiting && !self.outbox.is_full() {
            match frame::next_frame(buf, self.tuning.frame_max) {
                Ok(Some(frame)) => self.handle_frame(frame),
                Ok(None) => break,
                Err(error) => {
                    // The stream cannot be resynchronised: say why, then hang up.
                    buf.clear();
                    self.current_method = (0, 0);
                    self.close_connection(BrokerError::new(ReplyCode::FrameError, error.to_string()));
                    self.phase = Phase::Closed;
                }
            }
        }
        for channel in self.channels.values_mut() {
            channel.flush_confirms();
        }
    }

    fn handle_frame(&mut self, frame: RawFrame) {
        match self.phase {
            Phase::Closed => {}
            Phase::Closing => self.handle_while_closing(frame),
            Phase::Open if frame.channel != 0 => self.handle_channel_frame(frame),
            _ => {
                if let Err(error) = self.handle_connection_frame(frame) {
                    self.close_connection(error);
                }
            }
        }
    }

    fn parse_method(&mut self, payload: &Bytes) -> Result<AMQPClass, BrokerError> {
        if payload.len() < 4 {
            return Err(BrokerError::new(ReplyCode::FrameError, "method frame shorter than its ids"));
        }
        let class_id = u16::from_be_bytes([payload[0], payload[1]]);
        let method_id = u16::from_be_bytes([payload[2], payload[3]]);
        self.current_method = (class_id, method_id);
        if let Err(error) = crate::table_fields::check_depth(payload) {
            // Before decoding: the decoder would recurse once per level.
            let text = format!("method {class_id}.{method_id}: {error}");
            return Err(if class_id == CONNECTION_CLASS_ID {
                BrokerError::new(ReplyCode::SyntaxError, text)
            } else {
                BrokerError::precondition_failed(text)
            });
        }
        if let Some(method) = crate::hot_methods::decode(payload) {
            return Ok(method);
        }
        match parse_class(&payload[..]) {
            Ok(([], method)) => Ok(method),
            Ok(_) => Err(BrokerError::new(
                ReplyCode::FrameError,
                format!("method {class_id}.{method_id} has trailing bytes"),
            )),
            Err(_) if known_method(class_id, method_id) => Err(BrokerError::new(
                ReplyCode::FrameError,
                format!("cannot decode the arguments of method {class_id}.{method_id}"),
            )),
            Err(_) => Err(BrokerError::command_invalid(format!("unknown method {class_id}.{method_id}"))),
        }
    }

    fn handle_while_closing(&mut self, frame: RawFrame) {
        if frame.channel != 0 || frame.kind != frame::FRAME_METHOD {
            return;
        }
        match self.parse_method(&frame.payload) {
            Ok(AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))) => self.phase = Phase::Closed,
            Ok(AMQPClass::Connection(connection::AMQPMethod::Close(_))) => {
                self.send_connection(connection::AMQPMethod::CloseOk(connection::CloseOk {}));
                self.phase = Phase::Closed;
            }
            _ => {}
        }
    }

    fn handle_connection_frame(&mut self, frame: RawFrame) -> Result<(), BrokerError> {
        // A close for a frame that is not a method blames none (class and method 0).
        self.current_method = (0, 0);
        match frame.kind {
            frame::FRAME_HEARTBEAT if frame.channel == 0 => return Ok(()),
            frame::FRAME_METHOD if frame.channel == 0 => {}
            _ if self.phase != Phase::Open => {
                return Err(BrokerError::new(ReplyCode::UnexpectedFrame, "expected a connection method on channel 0"))
            }
            frame::FRAME_HEARTBEAT => {
                return Err(BrokerError::new(ReplyCode::FrameError, "heartbeat frame on a non-zero channel"))
            }
            _ => return Err(BrokerError::new(ReplyCode::UnexpectedFrame, "content frame on channel 0")),
        }
        let method = self.parse_method(&frame.payload)?;
        let AMQPClass::Connection(method) = method else {
            return Err(BrokerError::command_invalid("only connection methods are valid on channel 0"));
        };
        match (self.phase, method) {
            (Phase::AwaitStartOk, connection::AMQPMethod::StartOk(start_ok)) => self.start_ok(start_ok),
            (Phase::AwaitTuneOk, connection::AMQPMethod::TuneOk(tune_ok)) => self.tune_ok(tune_ok),
            (Phase::AwaitOpen, connection::AMQPMethod::Open(open)) => self.open(open),
            (_, connection::AMQPMethod::Close(_)) => {
                self.send_connection(connection::AMQPMethod::CloseOk(connection::CloseOk {}));
                self.phase = Phase::Closed;
                Ok(())
            }
            (Phase::Open, connection::AMQPMethod::Blocked(_) | connection::AMQPMethod::Unblocked(_)) => Ok(()),
            (Phase::Open, connection::AMQPMethod::UpdateSecret(update)) => {
                self.update_secret(&update);
                Ok(())
            }
            (phase, other) => Err(BrokerError::command_invalid(format!("{other:?} is not valid in phase {phase:?}"))),
        }
    }

    /// `connection.start-ok`: the login is checked at once. A refusal from an address that
    /// failed too often waits its turn (sent once the wait is over, see
    /// [`Connection::complete_pending`]); a right password never waits.
    fn start_ok(&mut self, start_ok: connection::StartOk) -> Result<(), BrokerError> {
        let offered = sasl::mechanisms(self.certificate_login.is_some());
        if !offered.split_whitespace().any(|m| m == start_ok.mechanism.as_str()) {
            // The specification: close "without sending any further data" (RabbitMQ does too).
            let mechanism = client_text::sanitize(start_ok.mechanism.as_str(), client_text::MAX_TEXT_BYTES);
            tracing::info!(peer = %self.peer, %mechanism, "closing connection: the client chose a mechanism not offered");
            self.phase = Phase::Closed;
            return Ok(());
        }
        let login = crate::login::log_in(&self.broker, &start_ok, self.peer, self.certificate_login.as_deref());
        match login {
            Ok(user) => self.logged_in(user, start_ok),
            Err(crate::login::Refused { error, answer_after: None }) => Err(error),
            Err(crate::login::Refused { error, answer_after: Some(delay) }) => {
                tracing::debug!(peer = %self.peer, ?delay, "refusal delayed: too many failures from this address");
                self.delayed_refusal = Some(error);
                self.pending = Some(PendingReply::new(0, async move {
                    tokio::time::sleep(delay).await;
                    Ok(Answer::Nothing)
                }));
                self.waiting = true;
                Ok(())
            }
        }
    }

    fn logged_in(&mut self, login: String, start_ok: connection::StartOk) -> Result<(), BrokerError> {
        self.login = login;
        let user = client_text::sanitize(&self.login, client_text::MAX_TEXT_BYTES);
        tracing::debug!(peer = %self.peer, user, "authenticated");
        self.publisher_block.set_client_properties(&start_ok.client_properties);
        let shown = shown_client_properties(&start_ok.client_properties);
        self.registered.info().logged_in(&user, start_ok.mechanism.as_str(), shown);
        self.user = Some(user);
        let tune = connection::Tune {
            channel_max: self.config.channel_max,
            frame_max: self.config.frame_max,
            heartbeat: self.config.heartbeat_secs,
        };
        self.send_connection(connection::AMQPMethod::Tune(tune));
        self.phase = Phase::AwaitTuneOk;
        Ok(())
    }

    /// `connection.update-secret`: the client refreshes its credentials (an OAuth 2 token, say)
    /// on an open connection. As with RabbitMQ's internal user store, whose credentials never
    /// expire, the new secret is not checked again: the broker logs the request and answers
    /// `update-secret-ok`. Re-validating belongs to token back-ends, which Warren has not yet.
    fn update_secret(&mut self, update: &connection::UpdateSecret) {
        let reason = client_text::sanitize(update.reason.as_str(), client_text::MAX_TEXT_BYTES);
        let user = self.user.as_deref().unwrap_or_default();
        tracing::info!(peer = %self.peer, user, reason, "client updated its secret");
        self.send_connection(connection::AMQPMethod::UpdateSecretOk(connection::UpdateSecretOk {}));
    }

    fn tune_ok(&mut self, tune_ok: connection::TuneOk) -> Result<(), BrokerError> {
        let not_allowed = |text: String| BrokerError::new(ReplyCode::NotAllowed, text);
        let frame_max = if tune_ok.frame_max == 0 { self.config.frame_max } else { tune_ok.frame_max };
        if frame_max < FRAME_MIN_SIZE_BYTES {
            return Err(not_allowed(format!("frame_max={frame_max} < {FRAME_MIN_SIZE_BYTES} min size")));
        }
        if frame_max > self.config.frame_max {
            return Err(not_allowed(format!("frame_max={frame_max} > {} max size", self.config.frame_max)));
        }
        let channel_max = if tune_ok.channel_max == 0 { self.config.channel_max } else { tune_ok.channel_max };
        if self.config.channel_max != 0 && channel_max > self.config.channel_max {
            return Err(not_allowed(format!("channel_max={channel_max} > {} max", self.config.channel_max)));
        }
        self.tuning = Tuning { channel_max, frame_max, heartbeat_secs: tune_ok.heartbeat };
        self.registered.info().tuned(channel_max, frame_max, tune_ok.heartbeat);
        self.frame_max.store(frame_max, Ordering::Release);
        self.phase = Phase::AwaitOpen;
        Ok(())
    }

    fn open(&mut self, open: connection::Open) -> Result<(), BrokerError> {
        self.check_connection_limit()?;
        let name = open.virtual_host.as_str();
        let vhost = crate::login::open_vhost(&self.broker, name, &self.login)?;
        self.context = Some(ConnectionContext {
            id: self.id,
            vhost,
            outbox: self.outbox.clone(),
            max_message_bytes: self.config.max_message_bytes,
            frame_max: self.tuning.frame_max,
            user: self.login.clone(),
            broker: Arc::clone(&self.broker),
        });
        self.send_connection(connection::AMQPMethod::OpenOk(connection::OpenOk {}));
        self.registered.info().opened(name);
        self.phase = Phase::Open;
        Ok(())
    }

    /// `--max-connections`: this connection (counted since it was accepted) may not open
    /// past the limit.
    fn check_connection_limit(&self) -> Result<(), BrokerError> {
        let Some(max) = self.config.max_connections else { return Ok(()) };
        let open = self.broker.connections().count();
        if open <= max {
            return Ok(());
        }
        tracing::warn!(peer = %self.peer, open, max, "connection refused: the broker's connection limit is reached");
        Err(BrokerError::new(ReplyCode::NotAllowed, format!("connection limit ({max}) is reached")))
    }

    fn handle_channel_frame(&mut self, frame: RawFrame) {
        let id = frame.channel;
        if self.closing_channels.contains(&id) {
            self.handle_on_closing_channel(frame);
            return;
        }
        if let Err(error) = self.dispatch_channel_frame(frame) {
            self.fail(id, error);
        }
    }

    /// A method on `channel` failed: a connection error (503, 504, ...) closes the
    /// connection, any other the channel.
    fn fail(&mut self, channel: u16, error: BrokerError) {
        if error.code.is_connection_error() {
            self.close_connection(error);
        } else {
            self.close_channel(channel, error);
        }
    }

    fn handle_on_closing_channel(&mut self, frame: RawFrame) {
        if frame.kind != frame::FRAME_METHOD {
            return;
        }
        match self.parse_method(&frame.payload) {
            Ok(AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))) => {
                self.closing_channels.remove(&frame.channel);
            }
            Ok(AMQPClass::Channel(channel::AMQPMethod::Close(_))) => {
                self.closing_channels.remove(&frame.channel);
                self.outbox
                    .method(frame.channel, AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})));
            }
            _ => {}
        }
    }

    fn dispatch_channel_frame(&mut self, frame: RawFrame) -> Result<(), BrokerError> {
        let id = frame.channel;
        let Some(ctx) = &self.context else { return Ok(()) };
        match frame.kind {
            frame::FRAME_METHOD => {}
            frame::FRAME_HEARTBEAT => {
                self.current_method = (0, 0);
                return Err(BrokerError::new(ReplyCode::FrameError, "heartbeat frame on a non-zero channel"));
            }
            kind => {
                let channel = self.channels.get_mut(&id).ok_or_else(|| channel_not_open(id))?;
                self.current_method = (60, 40);
                self.publisher_block.published();
                return if kind == frame::FRAME_HEADER {
                    channel.handle_header(ctx, frame.payload)
                } else {
                    channel.handle_body(ctx, frame.payload)
                };
            }
        }
        let method = self.parse_method(&frame.payload)?;
        let Some(ctx) = &self.context else { return Ok(()) };
        if let Some(channel) = self.channels.get(&id) {
            if channel.expects_content() {
                return Err(BrokerError::new(
                    ReplyCode::UnexpectedFrame,
                    format!("expected content frames on channel {id}, got a method"),
                ));
            }
        }
        match method {
            AMQPClass::Channel(channel::AMQPMethod::Open(_)) => {
                if self.channels.contains_key(&id) {
                    return Err(BrokerError::new(ReplyCode::ChannelError, format!("channel {id} is already open")));
                }
                self.check_channel_limit()?;
                let user_limits = ctx.broker.access().user_limits(&ctx.user);
                user_limits.check_channel(&ctx.user, || ctx.broker.channels_of(&ctx.user))?;
                let channel = Channel::open(id, ctx);
                self.registered.info().channel_opened(id, Arc::clone(channel.session()));
                self.channels.insert(id, channel);
                self.outbox.method(id, AMQPClass::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})));
                Ok(())
            }
            AMQPClass::Access(access::AMQPMethod::Request(_)) => {
                self.channels.get(&id).ok_or_else(|| channel_not_open(id))?;
                self.outbox.method(id, AMQPClass::Access(access::AMQPMethod::RequestOk(access::RequestOk {})));
                Ok(())
            }
            AMQPClass::Channel(method) => self.channel_class_method(id, method),
            AMQPClass::Connection(_) => Err(BrokerError::command_invalid(format!("connection method on channel {id}"))),
            other => {
                let channel = self.channels.get_mut(&id).ok_or_else(|| channel_not_open(id))?;
                let handled = channel.handle_method(ctx, other);
                if let Some(pending) = channel.take_pending() {
                    self.pending = Some(pending);
                    self.waiting = true;
                }
                handled
            }
        }
    }

    /// The reply a method is waiting for, for the read loop to await; frames are processed
    /// again once it is given to [`Connection::complete_pending`].
    pub fn take_pending(&mut self) -> Option<PendingReply> {
        self.pending.take()
    }

    /// A pending reply is ready: it goes out (or its error closes the channel), and frames
    /// are processed again.
    pub fn complete_pending(&mut self, channel: u16, outcome: crate::pending_reply::Outcome) {
        self.waiting = false;
        if channel == 0 {
            if let Some(error) = self.delayed_refusal.take() {
                self.close_connection(error);
            }
            return;
        }
        if !self.channels.contains_key(&channel) {
            return;
        }
        match outcome {
            Ok(Answer::Method(reply)) => self.outbox.method(channel, reply),
            Ok(Answer::MethodThenCancel(reply, deleted)) => {
                self.outbox.method(channel, reply);
                drop(deleted);
            }
            Ok(Answer::Frames(frames)) => self.outbox.send(Outbound::Frames(frames)),
            Ok(Answer::Nothing) => {}
            Err(error) => self.fail(channel, error),
        }
    }

    /// `channel_max` limits how many channels are open at once, not their numbers (any of
    /// 1-65535 may be used), as RabbitMQ applies it; 0 means no limit. A channel the broker
    /// closed still counts until the client's close-ok frees its number.
    fn check_channel_limit(&self) -> Result<(), BrokerError> {
        let limit = usize::from(self.tuning.channel_max);
        let opened = self.channels.len() + self.closing_channels.len();
        if limit != 0 && opened >= limit {
            return Err(BrokerError::new(
                ReplyCode::NotAllowed,
                format!("number of channels opened ({opened}) has reached the negotiated channel_max ({limit})"),
            ));
        }
        Ok(())
    }

    fn channel_class_method(&mut self, id: u16, method: channel::AMQPMethod) -> Result<(), BrokerError> {
        let channel = self.channels.get_mut(&id).ok_or_else(|| channel_not_open(id))?;
        match method {
            channel::AMQPMethod::Close(_) => {
                channel.close();
                self.channels.remove(&id);
                self.registered.info().channel_closed(id);
                self.outbox.method(id, AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})));
            }
            channel::AMQPMethod::Flow(flow) => {
                channel.set_flow(flow.active);
                let ok = channel::FlowOk { active: flow.active };
                self.outbox.method(id, AMQPClass::Channel(channel::AMQPMethod::FlowOk(ok)));
            }
            channel::AMQPMethod::FlowOk(_) => {}
            other => return Err(BrokerError::command_invalid(format!("{other:?} is sent by servers, not clients"))),
        }
        Ok(())
    }

    /// Closes, with 406, every channel whose oldest unacknowledged delivery has waited past
    /// its consumer timeout (see [`warren_delivery::Session::timed_out`]); what it held goes
    /// back to its queues, as when the client closes it (a quorum queue counts each return as
    /// a failed delivery).
    pub fn enforce_consumer_timeouts(&mut self) {
        let now_ms = warren_delivery::clock::now_ms();
        let timed_out: Vec<(u16, u64)> = (self.channels.iter())
            .filter_map(|(id, channel)| {
                Some((*id, channel.session().timed_out(now_ms, self.config.consumer_timeout_ms)?))
            })
            .collect();
        for (id, timeout_ms) in timed_out {
            tracing::warn!(peer = %self.peer, channel = id, timeout_ms, "consumer timeout: closing the channel");
            self.current_method = (0, 0);
            let text = format!(
                "delivery acknowledgement on channel {id} timed out. Timeout value used: {timeout_ms} ms \
                 (--consumer-timeout, or x-consumer-timeout on the queue or the consumer)"
            );
            self.close_channel(id, BrokerError::precondition_failed(text));
        }
    }

    /// Closes one channel with `error`'s code, as `channel.close`.
    fn close_channel(&mut self, id: u16, error: BrokerError) {
        tracing::debug!(peer = %self.peer, channel = id, %error, "closing channel");
        if let Some(mut channel) = self.channels.remove(&id) {
            channel.close();
        }
        self.registered.info().channel_closed(id);
        self.closing_channels.insert(id);
        let (class_id, method_id) = self.current_method;
        let close =
            channel::Close { reply_code: error.code.code(), reply_text: reply_text(&error), class_id, method_id };
        self.outbox.method(id, AMQPClass::Channel(channel::AMQPMethod::Close(close)));
    }

    /// Closes the connection with `error`'s code, as `connection.close`.
    pub fn close_connection(&mut self, error: BrokerError) {
        if matches!(self.phase, Phase::Closing | Phase::Closed) {
            return;
        }
        tracing::info!(peer = %self.peer, %error, "closing connection");
        let (class_id, method_id) = self.current_method;
        let close =
            connection::Close { reply_code: error.code.code(), reply_text: reply_text(&error), class_id, method_id };
        self.send_connection(connection::AMQPMethod::Close(close));
        self.release();
        self.phase = Phase::Closing;
    }

    fn send_connection(&self, method: connection::AMQPMethod) {
        self.outbox.method(0, AMQPClass::Connection(method));
    }

    /// Closes channels (requeueing what they had not acked) and drops exclusive queues.
    pub fn release(&mut self) {
        for (_, mut channel) in self.channels.drain() {
            channel.close();
        }
        if let Some(ctx) = &self.context {
            ctx.vhost.connection_closed(self.id);
        }
    }

    /// Its entry in the broker's connection list.
    pub fn info(&self) -> &Arc<ConnectionInfo> {
        self.registered.info()
    }

    /// Whether the client has so much unread that the connection takes no more work.
    pub fn outbox_full(&self) -> bool {
        self.outbox.is_full()
    }

    /// The client caught up: deliveries held back on every channel resume.
    pub fn resume_deliveries(&self) {
        for channel in self.channels.values() {
            channel.resume();
        }
    }

    /// The broker's resource alarms, for the read loop to follow.
    pub fn subscribe_alarms(&self) -> tokio::sync::watch::Receiver<AlarmState> {
        self.broker.alarms().subscribe()
    }

    /// Follows the resource alarms (see [`PublisherBlock`]): tells the client if it is now
    /// blocked or unblocked. Returns whether reading is held back.
    pub fn follow_alarms(&mut self, alarms: AlarmState) -> bool {
        if self.phase == Phase::Open {
            if let Some(told) = self.publisher_block.follow(alarms) {
                self.send_connection(told);
            }
        }
        self.publisher_block.is_blocked()
    }

    /// Queues a heartbeat frame.
    pub fn send_heartbeat(&self) {
        let mut out = BytesMut::with_capacity(frame::FRAME_OVERHEAD_BYTES);
        frame::put_heartbeat(&mut out);
        self.outbox.send(Outbound::Frames(out.freeze()));
    }
}

fn channel_not_open(id: u16) -> BrokerError {
    BrokerError::new(ReplyCode::ChannelError, format!("expected 'channel.open' on channel {id}"))
}

/// Whether (class, method) names a method of AMQP 0-9-1.
fn known_method(class_id: u16, method_id: u16) -> bool {
    let methods: &[u16] = match class_id {
        10 => &[10, 11, 20, 21, 30, 31, 40, 41, 50, 51, 60, 61, 70, 71],
        20 => &[10, 11, 20, 21, 40, 41],
        30 => &[10, 11],
        40 => &[10, 11, 20, 21, 30, 31, 40, 51],
        50 => &[10, 11, 20, 21, 30, 31, 40, 41, 50, 51],
        60 => &[10, 11, 20, 21, 30, 31, 40, 50, 60, 70, 71, 72, 80, 90, 100, 110, 111, 120],
        85 => &[10, 11],
        90 => &[10, 11, 20, 21, 30, 31],
        _ => &[],
    };
    methods.contains(&method_id)
}

/// Client properties the management API shows (`product`, `version`, `platform`,
/// `information`, `connection_name`), as text escaped and cut for display.
fn shown_client_properties(properties: &amq_protocol::types::FieldTable) -> Vec<(String, String)> {
    const SHOWN: [&str; 5] = ["product", "version", "platform", "information", "connection_name"];
    let text = |value: &amq_protocol::types::AMQPValue| match value {
        amq_protocol::types::AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        amq_protocol::types::AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    };
    SHOWN
        .iter()
        .filter_map(|key| {
            let value = properties.inner().get(*key).and_then(text)?;
            Some((key.to_string(), client_text::sanitize(&value, client_text::MAX_TEXT_BYTES)))
        })
        .collect()
}

#[cfg(test)]
mod tests;
