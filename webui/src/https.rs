//! HTTPS: a listener that hands axum TLS streams. Handshakes run side by side (a slow client
//! holds up nobody) and must finish within [`HANDSHAKE_TIMEOUT`]; a failed one is logged at
//! debug level and dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Time a client has to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait before accepting again after accept failed (out of descriptors).
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);

type Handshake = Option<(TlsStream<TcpStream>, SocketAddr)>;

/// A TCP listener whose connections are TLS.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Handshake>,
}

impl TlsListener {
    /// TLS with `config` on `tcp`.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        TlsListener { tcp, acceptor: TlsAcceptor::from(config), handshakes: JoinSet::new() }
    }
}

async fn handshake(acceptor: TlsAcceptor, tcp: TcpStream, peer: SocketAddr) -> Handshake {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => Some((stream, peer)),
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "HTTPS handshake failed");
            None
        }
        Err(_) => None,
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        self.handshakes.spawn(handshake(self.acceptor.clone(), tcp, peer));
                    }
                    Err(_) => tokio::time::sleep(ACCEPT_RETRY_DELAY).await,
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(ready)) = done {
                        return ready;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
