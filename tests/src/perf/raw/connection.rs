//! A raw connection: the TCP socket, its read buffer, the handshake, the few synchronous
//! methods a producer or consumer sends once (basic.qos, basic.consume, confirm.select), the
//! close, and what the broker's rare methods mean to a running producer or consumer.
//!
//! Methods sent or received once per connection are encoded and parsed with amq-protocol;
//! only the hot path ([`frame`](super::frame)) is done by hand. The handshake: protocol header,
//! connection.start -> start-ok (PLAIN with the URI's user and password), tune -> tune-ok
//! (frame_max as offered, heartbeats off), connection.open (the URI's vhost), channel.open of
//! channel [`CHANNEL`]. Every wait for the broker is bounded by [`REPLY_TIMEOUT`].

use super::frame::{self, RawFrame};
use amq_protocol::auth::{Credentials, SASLMechanism};
use amq_protocol::frame::{gen_frame, AMQPFrame, WriteContext};
use amq_protocol::protocol::{basic, channel, connection, parse_class, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use amq_protocol::uri::{AMQPScheme, AMQPUri};
use anyhow::{anyhow, bail, Context};
use bytes::{Buf, BytesMut};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The one channel a producer or consumer uses.
pub const CHANNEL: u16 = 1;
/// Bytes the read buffer makes room for before each read.
pub const READ_CHUNK: usize = 256 * 1024;
/// How long the handshake and each synchronous method may wait for the broker.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a close waits for connection.close-ok.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The AMQP 0-9-1 protocol header.
const PROTOCOL_HEADER: &[u8] = b"AMQP\x00\x00\x09\x01";
/// frame_max when the broker offers 0 (no limit).
const DEFAULT_FRAME_MAX: u32 = 128 * 1024;
/// Largest frame accepted before tune (connection.start carries the server's properties).
const FRAME_MAX_BEFORE_TUNE: u32 = 1024 * 1024;

/// An open connection with channel [`CHANNEL`] open.
pub struct Connection {
    pub stream: TcpStream,
    /// Bytes read and not yet used: may already hold frames that followed a reply.
    pub input: BytesMut,
    /// The negotiated frame_max: the largest frame, overhead included.
    pub frame_max: usize,
    /// Who this is, for error messages ("consumer 3").
    pub who: String,
}

impl Connection {
    /// Connects to `uri` and opens channel [`CHANNEL`].
    pub async fn open(uri: &str, who: String) -> anyhow::Result<Self> {
        match tokio::time::timeout(REPLY_TIMEOUT, Self::open_untimed(uri, &who)).await {
            Ok(result) => result,
            Err(_) => bail!("{who}: the handshake with {uri} did not finish within {REPLY_TIMEOUT:?}"),
        }
    }

    async fn open_untimed(uri: &str, who: &str) -> anyhow::Result<Self> {
        let parsed: AMQPUri = uri.parse().map_err(|error| anyhow!("{who}: bad URI {uri}: {error}"))?;
        if parsed.scheme != AMQPScheme::AMQP {
            bail!("{who}: the raw engine speaks plain amqp:// only; use --engine lapin for {uri}");
        }
        let (host, port) = (parsed.authority.host.as_str(), parsed.authority.port);
        let stream =
            TcpStream::connect((host, port)).await.with_context(|| format!("{who}: connecting to {host}:{port}"))?;
        stream.set_nodelay(true).with_context(|| format!("{who}: setting TCP_NODELAY"))?;
        let mut connection = Connection {
            stream,
            input: BytesMut::with_capacity(READ_CHUNK),
            frame_max: FRAME_MAX_BEFORE_TUNE as usize,
            who: who.to_string(),
        };
        connection.handshake(&parsed).await?;
        Ok(connection)
    }

    async fn handshake(&mut self, uri: &AMQPUri) -> anyhow::Result<()> {
        self.write(PROTOCOL_HEADER).await?;
        let start = match self.next_method().await? {
            (0, AMQPClass::Connection(connection::AMQPMethod::Start(start))) => start,
            other => bail!("{}: expected connection.start, got {other:?}", self.who),
        };
        if !start.mechanisms.as_bytes().split(|&byte| byte == b' ').any(|mechanism| mechanism == b"PLAIN") {
            bail!("{}: the broker does not offer SASL PLAIN (it offers {})", self.who, start.mechanisms);
        }
        let user = &uri.authority.userinfo;
        let credentials = Credentials::new(user.username.as_str().into(), user.password.as_str().into());
        let start_ok = connection::StartOk {
            client_properties: client_properties(),
            mechanism: "PLAIN".into(),
            response: credentials.sasl_auth_string(SASLMechanism::Plain),
            locale: "en_US".into(),
        };
        self.send(0, AMQPClass::Connection(connection::AMQPMethod::StartOk(start_ok))).await?;
        let tune = match self.next_method().await? {
            (0, AMQPClass::Connection(connection::AMQPMethod::Tune(tune))) => tune,
            other => bail!("{}: expected connection.tune, got {other:?}", self.who),
        };
        let frame_max = negotiate_frame_max(tune.frame_max, uri.query.frame_max);
        let tune_ok = connection::TuneOk { channel_max: tune.channel_max, frame_max, heartbeat: 0 };
        self.send(0, AMQPClass::Connection(connection::AMQPMethod::TuneOk(tune_ok))).await?;
        self.frame_max = frame_max as usize;
        let virtual_host =
            ShortString::try_new(uri.vhost.clone()).with_context(|| format!("{}: vhost name", self.who))?;
        let open = connection::Open { virtual_host };
        self.send(0, AMQPClass::Connection(connection::AMQPMethod::Open(open))).await?;
        match self.next_method().await? {
            (0, AMQPClass::Connection(connection::AMQPMethod::OpenOk(_))) => {}
            other => bail!("{}: expected connection.open-ok, got {other:?}", self.who),
        }
        self.send(CHANNEL, AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}))).await?;
        match self.next_method().await? {
            (CHANNEL, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))) => Ok(()),
            other => bail!("{}: expected channel.open-ok, got {other:?}", self.who),
        }
    }

    /// Sends `method` on [`CHANNEL`] and returns the broker's reply (whatever method comes next).
    pub async fn call(&mut self, method: AMQPClass) -> anyhow::Result<AMQPClass> {
        self.send(CHANNEL, method).await?;
        match tokio::time::timeout(REPLY_TIMEOUT, self.next_method()).await {
            Ok(reply) => Ok(reply?.1),
            Err(_) => bail!("{}: no reply within {REPLY_TIMEOUT:?}", self.who),
        }
    }

    /// Encodes and writes one method frame.
    async fn send(&mut self, channel: u16, method: AMQPClass) -> anyhow::Result<()> {
        let frame = AMQPFrame::Method(channel, method);
        let bytes = gen_frame(&frame)(WriteContext::from(Vec::new()))
            .map_err(|error| anyhow!("{}: encoding {frame:?}: {error}", self.who))?
            .write;
        self.write(&bytes).await
    }

    pub async fn write(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream.write_all(bytes).await.with_context(|| format!("{}: writing to the broker", self.who))
    }

    /// Reads more bytes into the input buffer; the broker closing the socket is an error.
    pub async fn read_more(&mut self) -> anyhow::Result<()> {
        self.input.reserve(READ_CHUNK);
        let read = self.stream.read_buf(&mut self.input).await.with_context(|| format!("{}: reading", self.who))?;
        if read == 0 {
            bail!("{}: the broker closed the connection", self.who);
        }
        Ok(())
    }

    /// The next method frame, parsed by amq-protocol; heartbeats are skipped, content frames and
    /// the broker closing the connection or channel are errors.
    async fn next_method(&mut self) -> anyhow::Result<(u16, AMQPClass)> {
        loop {
            if self.input.starts_with(b"AMQP") {
                bail!("{}: the broker refused the protocol version (it answered {:?})", self.who, &self.input[..]);
            }
            let Some((raw, len)) = frame::split(&self.input, self.frame_max).with_context(|| self.who.clone())? else {
                self.read_more().await?;
                continue;
            };
            let parsed = match raw.kind {
                frame::FRAME_HEARTBEAT => None,
                frame::FRAME_METHOD => Some(self.parse_method(raw)?),
                kind => bail!("{}: expected a method, got a frame of type {kind} on channel {}", self.who, raw.channel),
            };
            self.input.advance(len);
            if let Some((channel, method)) = parsed {
                return Ok((channel, method));
            }
        }
    }

    fn parse_method(&self, raw: RawFrame<'_>) -> anyhow::Result<(u16, AMQPClass)> {
        let method = parse_class(raw.payload).map_err(|error| anyhow!("{}: unreadable method: {error:?}", self.who))?.1;
        if let Some(error) = closed(&method) {
            return Err(error.context(self.who.clone()));
        }
        Ok((raw.channel, method))
    }

    /// Closes the connection (connection.close 200, then waits a little for close-ok, discarding
    /// whatever else arrives). Errors do not matter at this point and are ignored.
    pub async fn close(mut self) {
        let close =
            connection::Close { reply_code: 200, reply_text: "warren-perf done".into(), class_id: 0, method_id: 0 };
        if self.send(0, AMQPClass::Connection(connection::AMQPMethod::Close(close))).await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.wait_for_close_ok()).await;
    }

    async fn wait_for_close_ok(&mut self) -> anyhow::Result<()> {
        loop {
            while let Some((raw, len)) = frame::split(&self.input, self.frame_max)? {
                let close_ok = raw.kind == frame::FRAME_METHOD
                    && raw.channel == 0
                    && frame::method(raw.payload)?.is(frame::CLASS_CONNECTION, frame::CONNECTION_CLOSE_OK);
                if close_ok {
                    return Ok(());
                }
                self.input.advance(len);
            }
            self.read_more().await?;
        }
    }
}

/// What a rare method (one not on the hot path) means to a running producer or consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rare {
    /// connection.blocked: the broker asks publishers to pause.
    Blocked,
    /// connection.unblocked.
    Unblocked,
    /// Nothing that matters here.
    Other,
}

/// Parses a method outside the hot path. The broker closing the connection or channel, or
/// cancelling the consumer, is an error with its reply code and text.
pub fn rare_method(payload: &[u8]) -> anyhow::Result<Rare> {
    let method = parse_class(payload).map_err(|error| anyhow!("unreadable method: {error:?}"))?.1;
    if let Some(error) = closed(&method) {
        return Err(error);
    }
    Ok(match method {
        AMQPClass::Connection(connection::AMQPMethod::Blocked(_)) => Rare::Blocked,
        AMQPClass::Connection(connection::AMQPMethod::Unblocked(_)) => Rare::Unblocked,
        _ => Rare::Other,
    })
}

/// The error that `method` means, if it ends the connection, the channel or the consumer.
fn closed(method: &AMQPClass) -> Option<anyhow::Error> {
    Some(match method {
        AMQPClass::Connection(connection::AMQPMethod::Close(close)) => anyhow!(
            "the broker closed the connection: {} {} (class {}, method {})",
            close.reply_code,
            close.reply_text,
            close.class_id,
            close.method_id
        ),
        AMQPClass::Channel(channel::AMQPMethod::Close(close)) => anyhow!(
            "the broker closed the channel: {} {} (class {}, method {})",
            close.reply_code,
            close.reply_text,
            close.class_id,
            close.method_id
        ),
        AMQPClass::Basic(basic::AMQPMethod::Cancel(cancel)) => {
            anyhow!("the broker cancelled the consumer {}", cancel.consumer_tag)
        }
        _ => return None,
    })
}

/// frame_max for tune-ok: the broker's offer (a default when it offers no limit), lowered to
/// the URI's `frame_max` if that is smaller.
fn negotiate_frame_max(offered: u32, wanted: Option<u32>) -> u32 {
    let offered = if offered == 0 { DEFAULT_FRAME_MAX } else { offered };
    wanted.filter(|&wanted| wanted > 0).map_or(offered, |wanted| wanted.min(offered))
}

/// The client properties of start-ok: who we are, and the capabilities the broker may use
/// (basic.nack for confirms, consumer cancel notifications, connection.blocked).
fn client_properties() -> FieldTable {
    let mut capabilities = FieldTable::default();
    for capability in [
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
    ] {
        capabilities.insert(capability.into(), AMQPValue::Boolean(true));
    }
    let mut properties = FieldTable::default();
    properties.insert("product".into(), AMQPValue::LongString(LongString::from("warren-perf (raw engine)")));
    properties.insert("version".into(), AMQPValue::LongString(LongString::from(env!("CARGO_PKG_VERSION"))));
    properties.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
    properties
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_max_is_the_offer_unless_the_uri_asks_for_less() {
        assert_eq!(negotiate_frame_max(131072, None), 131072);
        assert_eq!(negotiate_frame_max(0, None), DEFAULT_FRAME_MAX);
        assert_eq!(negotiate_frame_max(131072, Some(8192)), 8192);
        assert_eq!(negotiate_frame_max(8192, Some(131072)), 8192);
        assert_eq!(negotiate_frame_max(8192, Some(0)), 8192);
    }

    #[test]
    fn rare_methods_say_what_they_mean() {
        let encode = |method: AMQPClass| {
            let frame = AMQPFrame::Method(0, method);
            let bytes = gen_frame(&frame)(WriteContext::from(Vec::new())).unwrap().write;
            frame::split(&bytes, 4096).unwrap().unwrap().0.payload.to_vec()
        };
        let blocked = encode(AMQPClass::Connection(connection::AMQPMethod::Blocked(connection::Blocked {
            reason: "low on memory".into(),
        })));
        assert_eq!(rare_method(&blocked).unwrap(), Rare::Blocked);
        let close = encode(AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: 404,
            reply_text: "NOT_FOUND - no queue 'q'".into(),
            class_id: 60,
            method_id: 20,
        })));
        let error = rare_method(&close).unwrap_err().to_string();
        assert!(error.contains("404 NOT_FOUND - no queue 'q'"), "{error}");
        let cancel = encode(AMQPClass::Basic(basic::AMQPMethod::Cancel(basic::Cancel {
            consumer_tag: "warren-perf-0".into(),
            nowait: true,
        })));
        assert!(rare_method(&cancel).unwrap_err().to_string().contains("cancelled the consumer warren-perf-0"));
    }
}
