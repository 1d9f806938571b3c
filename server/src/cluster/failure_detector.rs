//! The cluster's failure detector: one watch per pair of nodes instead of a heartbeat per
//! quorum queue. Quorum queues' groups send no heartbeats and call no elections on their own
//! (see `warren_delivery::quorum::HEARTBEAT_INTERVAL_MS`); this task watches which peers the
//! transport is connected to (its connections carry their own heartbeats and close after a
//! second of silence) and acts for the groups this node runs a member of:
//! - a peer came (back): the groups this node leads send a heartbeat, which brings the peer's
//!   members up to date;
//! - a disconnected peer silent for [`PEER_DOWN_AFTER_MS`] counts as down, here and in the
//!   answers to other nodes' pre-votes;
//! - a member that has lost its leader (its node is down, or none has been known for
//!   [`NO_LEADER_GRACE`]) campaigns: a pre-vote, then an election (see `super::election`,
//!   which also says who runs first);
//! - a group still without a leader after [`LEADERLESS_TIMER_AFTER_MS`] has openraft's own
//!   election timer turned on as well, until it has one (the last resort, should campaigns
//!   keep failing).

use super::catalog_group::METADATA_GROUP;
use super::election::{self, Group, PreVoteAnswer, PreVoter};
use super::nodes::Nodes;
use super::raft_router::RaftRouter;
use super::raft_rpc::RaftGroupId;
use super::service::{ClusterTransport, PeerRequest, PeerResponse};
use openraft::{Raft, ServerState};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the detector looks, besides when a link comes or goes and when a disconnected
/// peer comes to count as down.
const TICK_MS: u64 = 200;
/// How long a peer must stay silent before it counts as down and its groups elect new
/// leaders: longer than the transport takes to redial a link that healed (its backoff is
/// capped at 250 ms), so a blip elects nobody. Counted from the last thing that arrived: a
/// hung or black-holed peer, whose link closed after the transport's idle timeout, counts as
/// down as soon as its link closes.
pub const PEER_DOWN_AFTER_MS: u64 = 500;
/// How long a group may be without a leader before openraft's election timer is turned on
/// as well as the campaigns.
pub const LEADERLESS_TIMER_AFTER_MS: u64 = 10_000;

/// How long a member that knows of no leader at all waits before it campaigns: a new group's
/// initializer calls its first election at once, and the others should not run against it.
const NO_LEADER_GRACE: Duration = Duration::from_millis(1_000);

/// What the detector knows of a peer.
#[derive(Debug, Clone, Copy)]
struct Peer {
    up: bool,
    since: Instant,
}

impl Peer {
    /// Whether it counts as up: connected, or not disconnected long enough to be down.
    fn counts_as_up(&self, now: Instant) -> bool {
        self.up || now.duration_since(self.since) < Duration::from_millis(PEER_DOWN_AFTER_MS)
    }
}

/// Runs the detector until the transport shuts down.
pub async fn run(transport: ClusterTransport, router: RaftRouter, nodes: Arc<Nodes>) {
    let mut peers: HashMap<u64, Peer> = HashMap::new();
    let mut leaderless: HashMap<RaftGroupId, Instant> = HashMap::new();
    let campaigns = Campaigns::default();
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
    let mut links = transport.link_changes();
    // When a disconnected peer will count as down: looked at then, not at the next tick.
    let mut next_down: Option<Instant> = None;
    loop {
        let down_at = next_down.map(tokio::time::Instant::from_std);
        tokio::select! {
            _ = tick.tick() => {}
            changed = links.changed() => {
                if changed.is_err() {
                    return; // The transport is gone.
                }
            }
            () = sleep_until_if(down_at) => {}
        }
        let connected = transport.connected_peers();
        let now = Instant::now();
        let mut up_now = HashSet::new();
        for (id, name) in nodes.peers() {
            let up = connected.contains(&name);
            if peers.get(&id).map(|peer| peer.up) != Some(up) {
                // A peer that fell silent until its link's idle timeout is down since then.
                let since = if up { now } else { transport.silent_since(&name).unwrap_or(now) };
                peers.insert(id, Peer { up, since });
                if up {
                    heartbeat_led_groups(&router).await;
                }
            }
            if peers.get(&id).is_some_and(|peer| peer.counts_as_up(now)) {
                up_now.insert(id);
            }
        }
        router.set_peers_up(up_now);
        let down_after = Duration::from_millis(PEER_DOWN_AFTER_MS);
        next_down = peers.values().filter(|p| p.counts_as_up(now) && !p.up).map(|p| p.since + down_after).min();
        let voters = TransportVoters { transport: transport.clone(), nodes: Arc::clone(&nodes) };
        look_after_groups(&router, &campaigns, &voters, &mut leaderless, now);
    }
}

/// Sleeps until `at`, or for ever without one.
async fn sleep_until_if(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The groups this node's members campaign in now.
#[derive(Clone, Default)]
struct Campaigns(Arc<Mutex<HashSet<RaftGroupId>>>);

impl Campaigns {
    /// Marks `group` as campaigning; false if it already is.
    fn start(&self, group: &RaftGroupId) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(group.clone())
    }

    fn end(&self, group: &RaftGroupId) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(group);
    }
}

/// For every member here (the catalog's too): a campaign if it has lost its leader and runs
/// none yet, and openraft's election timer while its group has had no known leader for
/// [`LEADERLESS_TIMER_AFTER_MS`] (off again once it has one: with heartbeats off, a
/// follower's timer would unseat an idle leader).
fn look_after_groups(
    router: &RaftRouter,
    campaigns: &Campaigns,
    voters: &TransportVoters,
    leaderless: &mut HashMap<RaftGroupId, Instant>,
    now: Instant,
) {
    let mut watch = GroupWatch { router, campaigns, voters, leaderless, still: HashMap::new(), now };
    for (group, raft) in router.members() {
        watch.look_after(group, &raft);
    }
    if let Some(catalog) = router.catalog() {
        watch.look_after(RaftGroupId::new(METADATA_GROUP), catalog.raft());
    }
    let still = std::mem::take(&mut watch.still);
    *leaderless = still;
}

/// One pass of [`look_after_groups`].
struct GroupWatch<'a> {
    router: &'a RaftRouter,
    campaigns: &'a Campaigns,
    voters: &'a TransportVoters,
    /// The groups without a known leader at the last pass, since when.
    leaderless: &'a HashMap<RaftGroupId, Instant>,
    /// The same, as this pass finds them.
    still: HashMap<RaftGroupId, Instant>,
    now: Instant,
}

impl GroupWatch<'_> {
    fn look_after<C: Group>(&mut self, group: RaftGroupId, raft: &Raft<C>) {
        let router = self.router;
        let (lost, none_known) = {
            let watch = raft.metrics();
            let metrics = watch.borrow();
            (election::leader_lost(&metrics, |id| router.peer_is_up(id)), election::leader_lost(&metrics, |_| true))
        };
        let since = self.leaderless.get(&group).copied();
        // A group that never had a leader here may be forming: its initializer elects first.
        let forming = none_known && since.is_none_or(|since| self.now.duration_since(since) < NO_LEADER_GRACE);
        if lost && !forming && self.campaigns.start(&group) {
            let (router, campaigns, voters, raft) =
                (router.clone(), self.campaigns.clone(), self.voters.clone(), raft.clone());
            let group = group.clone();
            tokio::spawn(async move {
                let is_up = |id| router.peer_is_up(id);
                election::campaign(group.clone(), raft, voters, is_up).await;
                campaigns.end(&group);
            });
        }
        if !none_known {
            if since.is_some() {
                raft.runtime_config().elect(false);
            }
            return;
        }
        let since = since.unwrap_or(self.now);
        if self.now.duration_since(since) >= Duration::from_millis(LEADERLESS_TIMER_AFTER_MS) {
            raft.runtime_config().elect(true);
        }
        self.still.insert(group, since);
    }
}

/// The other nodes, asked for pre-votes over the transport.
#[derive(Clone)]
struct TransportVoters {
    transport: ClusterTransport,
    nodes: Arc<Nodes>,
}

impl PreVoter for TransportVoters {
    async fn ask(&self, voter: u64, group: RaftGroupId, last_log_index: u64) -> Option<PreVoteAnswer> {
        let name = self.nodes.name_of(voter)?;
        let request = PeerRequest::PreVote { group, last_log_index };
        let timeout = Duration::from_millis(election::PRE_VOTE_TIMEOUT_MS);
        match self.transport.request_within(&name, request, timeout).await {
            Ok(PeerResponse::PreVote(answer)) => answer,
            _ => None,
        }
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
