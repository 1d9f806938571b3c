//! The handshake that opens every inter-node connection, before anything else is read.
//!
//! 1. The dialer sends `Hello` (protocol version, cluster name, its node name, a random nonce).
//! 2. The acceptor checks version and cluster name and answers `Challenge` (the same fields for
//!    itself, its own nonce, and its proof).
//! 3. The dialer checks the acceptor's proof and name and sends its own `Proof`.
//! 4. The acceptor checks that proof, asks the transport whether to admit the peer, and sends
//!    `Accepted` (or `Refused` with a reason at any step).
//!
//! A proof is HMAC-SHA256 under the shared secret over a transcript of both names, both
//! nonces, the version and the cluster name, labelled with the prover's role, so that neither
//! side's proof can be replayed or reflected. The secret itself is never sent. Frames are
//! limited to [`MAX_HANDSHAKE_FRAME_BYTES`] until the peer is authenticated; the caller bounds
//! the whole exchange with a timeout, and the acceptor's steps before authentication with
//! shorter deadlines (`AcceptDeadlines`).

use super::frame::{self, FrameError, FramedStream, MAX_FRAME_BYTES, MAX_HANDSHAKE_FRAME_BYTES};
use super::peer_address::check_name;
use super::secret::{ClusterSecret, PROOF_BYTES};
use futures_util::{SinkExt, StreamExt};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::future::Future;
use tokio::net::TcpStream;
use tokio::time::Instant;
use warren_delivery::client_text::sanitize;

/// The inter-node protocol version; both sides must speak the same.
pub const PROTOCOL_VERSION: u32 = 6;
/// Length of a handshake nonce.
const NONCE_BYTES: usize = 32;
/// Most bytes of a peer's text (names, refusal reasons) kept in errors and logs.
const MAX_PEER_TEXT_BYTES: usize = 256;
/// Role labels in the proven transcript.
const DIALER_ROLE: &[u8] = b"warren-cluster dialer";
const ACCEPTOR_ROLE: &[u8] = b"warren-cluster acceptor";

/// Who this node is, as the handshake presents it.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The cluster's name; peers must have the same.
    pub cluster_name: String,
    /// This node's name.
    pub node_name: String,
    /// The shared secret.
    pub secret: ClusterSecret,
}

/// A handshake that did not end in an authenticated connection. Texts from the peer are
/// escaped and cut.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection.
    #[error("the peer closed the connection during the handshake")]
    Closed,
    /// The peer sent bytes that are not a handshake message, or too long a frame.
    #[error("the peer sent garbage: {0}")]
    Garbage(String),
    /// A message out of order.
    #[error("unexpected handshake message: {0}")]
    Unexpected(&'static str),
    /// Another protocol version.
    #[error("the peer speaks protocol version {theirs}, this node {PROTOCOL_VERSION}")]
    Version {
        /// The peer's version.
        theirs: u32,
    },
    /// Another cluster.
    #[error("the peer belongs to cluster {theirs:?}, this node to {ours:?}")]
    ClusterName {
        /// The peer's cluster name, sanitized.
        theirs: String,
        /// Ours.
        ours: String,
    },
    /// The peer's node name is not a valid name.
    #[error("the peer's node name {0:?} is not valid")]
    BadName(String),
    /// The dialled node announced another name than the seed list gives.
    #[error("dialled node {expected:?} but {actual:?} answered")]
    WrongPeer {
        /// The name in the seed list.
        expected: String,
        /// The name it announced, sanitized.
        actual: String,
    },
    /// The peer's proof does not match: it does not know the secret.
    #[error("the peer {0:?} failed to prove the cluster secret")]
    BadProof(String),
    /// This node refused the authenticated peer.
    #[error("peer {peer:?} not admitted: {reason}")]
    NotAdmitted {
        /// The peer.
        peer: String,
        /// Why.
        reason: String,
    },
    /// The peer refused this node.
    #[error("refused by the peer: {0}")]
    Refused(String),
    /// Encoding a message failed (a bug, not the peer's doing).
    #[error("{0}")]
    Encode(FrameError),
    /// The peer did not send the named message by its deadline.
    #[error("the peer sent no {0} in time")]
    TimedOut(&'static str),
}

/// When the dialer's messages must have reached an accepting node. A real peer sends them
/// within a round trip; these deadlines, shorter than the whole handshake's timeout, make
/// sure a party that cannot authenticate (a silent socket, a scanner) holds one of the
/// listener's few handshake slots only briefly.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcceptDeadlines {
    /// For `Hello`, the first message.
    pub hello: Instant,
    /// For `Proof`, which authenticates the dialer.
    pub proof: Instant,
}

#[derive(Debug, Serialize, Deserialize)]
enum HandshakeMessage {
    Hello { version: u32, cluster: String, node: String, nonce: [u8; NONCE_BYTES] },
    Challenge { version: u32, cluster: String, node: String, nonce: [u8; NONCE_BYTES], proof: [u8; PROOF_BYTES] },
    Proof { proof: [u8; PROOF_BYTES] },
    Accepted,
    Refused { reason: String },
}

/// The fields both proofs cover.
struct Transcript<'a> {
    cluster: &'a str,
    dialer: &'a str,
    acceptor: &'a str,
    dialer_nonce: &'a [u8; NONCE_BYTES],
    acceptor_nonce: &'a [u8; NONCE_BYTES],
}

impl Transcript<'_> {
    /// The bytes proven by `role`, every field prefixed by its length.
    fn bytes(&self, role: &[u8]) -> Vec<u8> {
        let fields: [&[u8]; 7] = [
            role,
            &PROTOCOL_VERSION.to_be_bytes(),
            self.cluster.as_bytes(),
            self.dialer.as_bytes(),
            self.acceptor.as_bytes(),
            self.dialer_nonce,
            self.acceptor_nonce,
        ];
        let mut out = Vec::with_capacity(fields.iter().map(|f| f.len() + 4).sum());
        for field in fields {
            out.extend_from_slice(&u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(field);
        }
        out
    }
}

/// Runs the dialer's side on a fresh connection to `expected_peer`; returns the framed
/// stream, ready for [`MAX_FRAME_BYTES`] frames.
pub(crate) async fn dial(
    stream: TcpStream,
    identity: &Identity,
    expected_peer: &str,
) -> Result<FramedStream, HandshakeError> {
    let mut framed = frame::framed(stream, MAX_HANDSHAKE_FRAME_BYTES);
    let dialer_nonce = nonce();
    let hello = HandshakeMessage::Hello {
        version: PROTOCOL_VERSION,
        cluster: identity.cluster_name.clone(),
        node: identity.node_name.clone(),
        nonce: dialer_nonce,
    };
    send(&mut framed, &hello).await?;
    let HandshakeMessage::Challenge { version, cluster, node, nonce: acceptor_nonce, proof } =
        receive(&mut framed).await?
    else {
        return Err(HandshakeError::Unexpected("expected a challenge"));
    };
    if let Err(error) = check_peer(version, &cluster, &node, identity) {
        return refuse(&mut framed, error).await;
    }
    if node != expected_peer {
        let error = HandshakeError::WrongPeer { expected: expected_peer.to_string(), actual: peer_text(&node) };
        return refuse(&mut framed, error).await;
    }
    let transcript = Transcript {
        cluster: &identity.cluster_name,
        dialer: &identity.node_name,
        acceptor: &node,
        dialer_nonce: &dialer_nonce,
        acceptor_nonce: &acceptor_nonce,
    };
    if !identity.secret.verify(&transcript.bytes(ACCEPTOR_ROLE), &proof) {
        return refuse(&mut framed, HandshakeError::BadProof(peer_text(&node))).await;
    }
    let proof = identity.secret.prove(&transcript.bytes(DIALER_ROLE));
    send(&mut framed, &HandshakeMessage::Proof { proof }).await?;
    match receive(&mut framed).await? {
        HandshakeMessage::Accepted => Ok(authenticated(framed)),
        _ => Err(HandshakeError::Unexpected("expected accepted")),
    }
}

/// Runs the acceptor's side on a fresh incoming connection: the dialer must send `Hello` and
/// `Proof` by `deadlines`. `admit` decides, once the peer has proven the secret, whether this
/// node takes it (an error string says why not). Returns the peer's node name and the framed
/// stream, ready for [`MAX_FRAME_BYTES`] frames.
pub(crate) async fn accept(
    stream: TcpStream,
    identity: &Identity,
    deadlines: AcceptDeadlines,
    admit: impl FnOnce(&str) -> Result<(), String>,
) -> Result<(String, FramedStream), HandshakeError> {
    let mut framed = frame::framed(stream, MAX_HANDSHAKE_FRAME_BYTES);
    let HandshakeMessage::Hello { version, cluster, node, nonce: dialer_nonce } =
        by(deadlines.hello, "hello", receive(&mut framed)).await?
    else {
        return Err(HandshakeError::Unexpected("expected hello"));
    };
    if let Err(error) = check_peer(version, &cluster, &node, identity) {
        return refuse(&mut framed, error).await;
    }
    let acceptor_nonce = nonce();
    let transcript = Transcript {
        cluster: &identity.cluster_name,
        dialer: &node,
        acceptor: &identity.node_name,
        dialer_nonce: &dialer_nonce,
        acceptor_nonce: &acceptor_nonce,
    };
    let proof = by(deadlines.proof, "proof", challenge(&mut framed, identity, &transcript)).await?;
    if !identity.secret.verify(&transcript.bytes(DIALER_ROLE), &proof) {
        return refuse(&mut framed, HandshakeError::BadProof(peer_text(&node))).await;
    }
    if let Err(reason) = admit(&node) {
        return refuse(&mut framed, HandshakeError::NotAdmitted { peer: node, reason }).await;
    }
    send(&mut framed, &HandshakeMessage::Accepted).await?;
    Ok((node, authenticated(framed)))
}

/// The acceptor's middle step: sends its challenge (with its own proof) and returns the
/// dialer's proof, not yet checked.
async fn challenge(
    framed: &mut FramedStream,
    identity: &Identity,
    transcript: &Transcript<'_>,
) -> Result<[u8; PROOF_BYTES], HandshakeError> {
    let challenge = HandshakeMessage::Challenge {
        version: PROTOCOL_VERSION,
        cluster: identity.cluster_name.clone(),
        node: identity.node_name.clone(),
        nonce: *transcript.acceptor_nonce,
        proof: identity.secret.prove(&transcript.bytes(ACCEPTOR_ROLE)),
    };
    send(framed, &challenge).await?;
    match receive(framed).await? {
        HandshakeMessage::Proof { proof } => Ok(proof),
        _ => Err(HandshakeError::Unexpected("expected a proof")),
    }
}

/// Runs `step` until `deadline`; past it, the peer sent no `message` in time.
async fn by<T>(
    deadline: Instant,
    message: &'static str,
    step: impl Future<Output = Result<T, HandshakeError>>,
) -> Result<T, HandshakeError> {
    tokio::time::timeout_at(deadline, step).await.unwrap_or(Err(HandshakeError::TimedOut(message)))
}

/// Checks the peer's version, cluster name and node name.
fn check_peer(version: u32, cluster: &str, node: &str, identity: &Identity) -> Result<(), HandshakeError> {
    if version != PROTOCOL_VERSION {
        return Err(HandshakeError::Version { theirs: version });
    }
    if cluster != identity.cluster_name {
        return Err(HandshakeError::ClusterName { theirs: peer_text(cluster), ours: identity.cluster_name.clone() });
    }
    if check_name(node).is_err() || node == identity.node_name {
        return Err(HandshakeError::BadName(peer_text(node)));
    }
    Ok(())
}

/// Tells the peer why it is refused (best effort), then returns `error`.
async fn refuse<T>(framed: &mut FramedStream, error: HandshakeError) -> Result<T, HandshakeError> {
    let reason = match &error {
        // Say no more than needed to a peer that has not proven the secret.
        HandshakeError::BadProof(_) => "authentication failed".to_string(),
        other => other.to_string(),
    };
    let _ = send(framed, &HandshakeMessage::Refused { reason }).await;
    Err(error)
}

async fn send(framed: &mut FramedStream, message: &HandshakeMessage) -> Result<(), HandshakeError> {
    let bytes = frame::encode(message, MAX_HANDSHAKE_FRAME_BYTES).map_err(HandshakeError::Encode)?;
    framed.send(bytes).await?;
    Ok(())
}

async fn receive(framed: &mut FramedStream) -> Result<HandshakeMessage, HandshakeError> {
    let frame = match framed.next().await {
        None => return Err(HandshakeError::Closed),
        Some(Err(error)) if error.kind() == std::io::ErrorKind::InvalidData => {
            return Err(HandshakeError::Garbage(error.to_string()))
        }
        Some(Err(error)) => return Err(HandshakeError::Io(error)),
        Some(Ok(frame)) => frame,
    };
    match frame::decode(&frame) {
        Ok(HandshakeMessage::Refused { reason }) => Err(HandshakeError::Refused(peer_text(&reason))),
        Ok(message) => Ok(message),
        Err(error) => Err(HandshakeError::Garbage(error.to_string())),
    }
}

/// The framed stream with the authenticated frame limit.
fn authenticated(mut framed: FramedStream) -> FramedStream {
    framed.codec_mut().set_max_frame_length(MAX_FRAME_BYTES);
    framed
}

fn nonce() -> [u8; NONCE_BYTES] {
    let mut nonce = [0; NONCE_BYTES];
    rand::thread_rng().fill_bytes(&mut nonce);
    nonce
}

/// A peer's text, safe to log.
fn peer_text(text: &str) -> String {
    sanitize(text, MAX_PEER_TEXT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn identity(node: &str, cluster: &str, secret: &[u8]) -> Identity {
        Identity {
            cluster_name: cluster.to_string(),
            node_name: node.to_string(),
            secret: ClusterSecret::from_bytes(secret.to_vec()),
        }
    }

    /// Runs both sides on a loopback connection: the dialer's and the acceptor's results.
    async fn exchange(
        dialer: Identity,
        acceptor: Identity,
        expected: &str,
    ) -> (Result<FramedStream, HandshakeError>, Result<(String, FramedStream), HandshakeError>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let accepting = async {
            let (stream, _) = listener.accept().await.expect("accept");
            accept(stream, &acceptor, deadlines(TEST_DEADLINE_MS, TEST_DEADLINE_MS), |_| Ok(())).await
        };
        let dialling = async {
            let stream = TcpStream::connect(addr).await.expect("connect");
            dial(stream, &dialer, expected).await
        };
        tokio::join!(dialling, accepting)
    }

    const SECRET: &[u8] = b"0123456789abcdef";
    /// Deadlines for tests in which the dialer does its part.
    const TEST_DEADLINE_MS: u64 = 5_000;
    /// Deadlines for tests in which the dialer stalls.
    const SHORT_DEADLINE_MS: u64 = 100;

    fn deadlines(hello_ms: u64, proof_ms: u64) -> AcceptDeadlines {
        let now = Instant::now();
        AcceptDeadlines {
            hello: now + std::time::Duration::from_millis(hello_ms),
            proof: now + std::time::Duration::from_millis(proof_ms),
        }
    }

    /// Accepts one connection with short deadlines while `dialer` runs (and stalls) on the
    /// other end; the acceptor's result.
    async fn accept_stalling<F>(dialer: impl FnOnce(TcpStream) -> F) -> Result<(String, FramedStream), HandshakeError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let stream = TcpStream::connect(listener.local_addr().expect("address")).await.expect("connect");
        let stalling = tokio::spawn(dialer(stream));
        let (accepted, _) = listener.accept().await.expect("accept");
        let acceptor = identity("b", "c", SECRET);
        let result = accept(accepted, &acceptor, deadlines(SHORT_DEADLINE_MS, 2 * SHORT_DEADLINE_MS), |_| Ok(())).await;
        stalling.abort();
        result
    }

    #[tokio::test]
    async fn a_dialer_that_says_nothing_misses_the_hello_deadline() {
        let started = Instant::now();
        let result = accept_stalling(|stream| async move {
            let _keep_open = stream;
            std::future::pending::<()>().await;
        })
        .await;
        assert!(matches!(result, Err(HandshakeError::TimedOut("hello"))), "{result:?}");
        assert!(started.elapsed() < std::time::Duration::from_millis(TEST_DEADLINE_MS));
    }

    #[tokio::test]
    async fn a_dialer_that_sends_hello_but_no_proof_misses_the_proof_deadline() {
        let result = accept_stalling(|stream| async move {
            let mut framed = frame::framed(stream, MAX_HANDSHAKE_FRAME_BYTES);
            let hello = HandshakeMessage::Hello {
                version: PROTOCOL_VERSION,
                cluster: "c".to_string(),
                node: "a".to_string(),
                nonce: nonce(),
            };
            send(&mut framed, &hello).await.expect("hello sent");
            std::future::pending::<()>().await;
        })
        .await;
        assert!(matches!(result, Err(HandshakeError::TimedOut("proof"))), "{result:?}");
    }

    #[tokio::test]
    async fn nodes_with_the_same_secret_and_cluster_authenticate_each_other() {
        let (dialed, accepted) = exchange(identity("a", "c", SECRET), identity("b", "c", SECRET), "b").await;
        assert!(dialed.is_ok(), "{dialed:?}");
        assert_eq!(accepted.expect("accepted").0, "a");
    }

    #[tokio::test]
    async fn a_wrong_secret_fails_the_proof_on_both_sides() {
        let (dialed, accepted) =
            exchange(identity("a", "c", b"another secret!!"), identity("b", "c", SECRET), "b").await;
        // The dialer checks the acceptor's proof first, and refuses.
        assert!(matches!(dialed, Err(HandshakeError::BadProof(_))), "{dialed:?}");
        assert!(matches!(accepted, Err(HandshakeError::Refused(_))), "{accepted:?}");
    }

    #[tokio::test]
    async fn another_cluster_is_refused_by_the_acceptor() {
        let (dialed, accepted) = exchange(identity("a", "other", SECRET), identity("b", "c", SECRET), "b").await;
        assert!(matches!(accepted, Err(HandshakeError::ClusterName { .. })), "{accepted:?}");
        assert!(matches!(dialed, Err(HandshakeError::Refused(_))), "{dialed:?}");
    }

    #[tokio::test]
    async fn a_node_answering_under_another_name_is_refused_by_the_dialer() {
        let (dialed, accepted) = exchange(identity("a", "c", SECRET), identity("b", "c", SECRET), "z").await;
        assert!(matches!(dialed, Err(HandshakeError::WrongPeer { .. })), "{dialed:?}");
        assert!(accepted.is_err());
    }

    #[test]
    fn each_role_proves_a_different_transcript() {
        let (n1, n2) = ([1; NONCE_BYTES], [2; NONCE_BYTES]);
        let t = Transcript { cluster: "c", dialer: "a", acceptor: "b", dialer_nonce: &n1, acceptor_nonce: &n2 };
        assert_ne!(t.bytes(DIALER_ROLE), t.bytes(ACCEPTOR_ROLE));
        let swapped = Transcript { cluster: "c", dialer: "b", acceptor: "a", dialer_nonce: &n1, acceptor_nonce: &n2 };
        assert_ne!(t.bytes(DIALER_ROLE), swapped.bytes(DIALER_ROLE));
    }
}
