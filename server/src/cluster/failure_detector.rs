//! The cluster's failure detector: one watch per pair of nodes instead of a heartbeat per
//! quorum queue. Quorum queues' groups send no heartbeats and call no elections on their own
//! (see `warren_delivery::quorum::HEARTBEAT_INTERVAL_MS`); this task watches which peers the
//! transport is connected to (its connections carry their own keep-alives) and acts for the
//! groups this node runs a member of:
//! - a peer came (back): the groups this node leads send a heartbeat, which brings the peer's
//!   members up to date;
//! - a peer is gone for [`PEER_DOWN_AFTER_MS`]: the groups it led call an election here,
//!   each after a delay of its own (so that the followers of one group do not split votes);
//! - a group with no known leader for [`LEADERLESS_ELECT_AFTER_MS`] (all its members
//!   restarted, say, or a first election that split), or whose leader left it (a member
//!   removed itself), has openraft's own election timer turned on until a leader is known.
//!   Its timer, not ours, must decide who runs: openraft makes a member that saw a longer log
//!   than its own wait longer before it runs again, so the most up-to-date member gets to
//!   run first and win. Elections called on a fixed cadence of ours kept the members in the
//!   same order every round, and a member with a shorter log and a higher node id took each
//!   new term first, so that the one that could win always ran at a term already taken:
//!   leaderless for good (seen in soak runs after a leader's kill and restart).

use super::nodes::Nodes;
use super::raft_router::RaftRouter;
use super::raft_rpc::{raft_node_id, RaftGroupId};
use super::service::ClusterTransport;
use openraft::ServerState;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the detector looks.
const TICK_MS: u64 = 200;
/// How long a peer must stay disconnected before its groups elect a new leader: longer than
/// the transport takes to redial a link that healed (its backoff is capped at 250 ms), so a
/// blip elects nobody; short, since a hung peer was already silent for the transport's idle
/// timeout before its link closed.
pub const PEER_DOWN_AFTER_MS: u64 = 500;
/// How long a group may have no known leader before it calls an election.
pub const LEADERLESS_ELECT_AFTER_MS: u64 = 3_000;
/// Elections of one group are spread over this many ms across its members.
const ELECTION_SPREAD_MS: u64 = 600;

/// What the detector knows of a peer.
#[derive(Debug, Clone, Copy)]
struct Peer {
    up: bool,
    since: Instant,
    /// Whether its groups were asked to elect in this outage.
    handled: bool,
}

/// Runs the detector until the transport shuts down.
pub async fn run(transport: ClusterTransport, router: RaftRouter, nodes: Arc<Nodes>) {
    let me = raft_node_id(transport.node_name());
    let mut peers: HashMap<u64, Peer> = HashMap::new();
    let mut leaderless: HashMap<RaftGroupId, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
    loop {
        tick.tick().await;
        let connected = transport.connected_peers();
        let now = Instant::now();
        for (id, name) in nodes.peers() {
            let up = connected.contains(&name);
            let peer = peers.entry(id).or_insert(Peer { up: !up, since: now, handled: false });
            if up != peer.up {
                *peer = Peer { up, since: now, handled: false };
                if up {
                    heartbeat_led_groups(&router).await;
                }
            }
            if !peer.up && !peer.handled && now.duration_since(peer.since) >= Duration::from_millis(PEER_DOWN_AFTER_MS)
            {
                peer.handled = true;
                tracing::info!(peer = %name, "cluster peer down: its quorum queue groups elect new leaders");
                elect_where_led_by(&router, me, id);
            }
        }
        elect_leaderless(&router, &mut leaderless, now);
    }
}

/// The groups this node leads send a heartbeat (a peer came: its members catch up).
async fn heartbeat_led_groups(router: &RaftRouter) {
    for (_, raft) in router.members() {
        if raft.metrics().borrow().state == ServerState::Leader {
            let _ = raft.trigger().heartbeat().await;
        }
    }
}

/// Calls an election in every group here whose leader is node `gone`, each after its delay.
fn elect_where_led_by(router: &RaftRouter, me: u64, gone: u64) {
    for (group, raft) in router.members() {
        if raft.metrics().borrow().current_leader != Some(gone) {
            continue;
        }
        let delay = election_delay(&group, me);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if raft.metrics().borrow().current_leader == Some(gone) {
                let _ = raft.trigger().elect().await;
            }
        });
    }
}

/// Whether this node's member sees no leader it can follow: none known, or one that is no
/// longer a voter of the group (it removed itself).
fn without_leader(metrics: &openraft::RaftMetrics<u64, openraft::BasicNode>) -> bool {
    if metrics.state == ServerState::Leader {
        return false;
    }
    let membership = metrics.membership_config.membership();
    let voter = |id: u64| membership.voter_ids().any(|v| v == id);
    match metrics.current_leader {
        None => true,
        Some(leader) => !voter(leader) && voter(metrics.id),
    }
}

/// Groups without a leader for long enough get openraft's election timer, until they have
/// one again (with heartbeats off, a follower's timer would otherwise unseat an idle leader).
fn elect_leaderless(router: &RaftRouter, leaderless: &mut HashMap<RaftGroupId, Instant>, now: Instant) {
    let mut still = HashMap::new();
    for (group, raft) in router.members() {
        let metrics = raft.metrics().borrow().clone();
        let since = leaderless.get(&group).copied();
        if !without_leader(&metrics) {
            if since.is_some() {
                raft.runtime_config().elect(false);
            }
            continue;
        }
        let since = since.unwrap_or(now);
        if now.duration_since(since) >= Duration::from_millis(LEADERLESS_ELECT_AFTER_MS) {
            raft.runtime_config().elect(true);
        }
        still.insert(group, since);
    }
    *leaderless = still;
}

/// How long this node's member of `group` waits before calling an election: a share of the
/// spread picked by a hash of the group and the node (so that a group's members start
/// apart), plus a random share drawn anew each time. Without the random part, members that
/// split the vote once would call their next elections at the same moments, at the same
/// term, and split it again every time (seen: a group leaderless for good after its old
/// leader came back).
fn election_delay(group: &RaftGroupId, me: u64) -> Duration {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (group, me).hash(&mut hasher);
    let jitter = rand::Rng::gen_range(&mut rand::thread_rng(), 0..ELECTION_SPREAD_MS);
    Duration::from_millis(hasher.finish() % ELECTION_SPREAD_MS + jitter)
}
