//! A fault-injecting TCP proxy for cluster tests: one per inter-node link, which the
//! dialling node is told is its peer's address. The test cuts it (open connections are
//! closed, new ones dropped at once), black-holes it (bytes are held, nothing is closed: a
//! peer that hangs or a network that drops packets), delays it (every chunk waits before it
//! is passed on), and heals it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Bytes read per chunk.
const CHUNK_BYTES: usize = 64 * 1024;

/// What the proxy does to the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Faults {
    cut: bool,
    held: bool,
    delay_ms: u64,
}

/// A proxy in front of one node's cluster listener.
pub struct FaultProxy {
    /// Where the proxy listens (give this to the dialling node as its peer's address).
    pub addr: SocketAddr,
    faults: Arc<watch::Sender<Faults>>,
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let faults = Arc::new(watch::Sender::new(Faults::default()));
        tokio::spawn(accept(listener, target, Arc::clone(&faults)));
        Ok(FaultProxy { addr, faults })
    }

    /// Cuts the link: open connections close, new ones are dropped.
    pub fn cut(&self) {
        self.faults.send_modify(|f| f.cut = true);
    }

    /// Black-holes the link: what arrives is held (a chunk, then TCP's flow control), nothing
    /// is closed; the nodes must notice the silence themselves.
    pub fn black_hole(&self) {
        self.faults.send_modify(|f| f.held = true);
    }

    /// Heals the link (and removes any delay).
    pub fn heal(&self) {
        self.faults.send_replace(Faults::default());
    }

    /// Delays every chunk passed on by `delay`.
    pub fn delay(&self, delay: Duration) {
        self.faults.send_modify(|f| f.delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, faults: Arc<watch::Sender<Faults>>) {
    while let Ok((client, _)) = listener.accept().await {
        if faults.borrow().cut {
            drop(client);
            continue;
        }
        let faults = faults.subscribe();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(target).await else { return };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::select! {
                _ = pass(client_read, server_write, faults.clone()) => {}
                _ = pass(server_read, client_write, faults.clone()) => {}
                _ = until_cut(faults) => {}
            }
        });
    }
}

/// Copies `from` to `to`, each chunk after the current delay.
async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut faults: watch::Receiver<Faults>,
) {
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if faults.wait_for(|f| !f.held).await.is_err() {
            return;
        }
        let delay_ms = faults.borrow().delay_ms;
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn until_cut(mut faults: watch::Receiver<Faults>) {
    let _ = faults.wait_for(|f| f.cut).await;
}
