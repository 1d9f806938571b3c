//! What one scrape reads: the node's figures, taken once, and the objects whose families
//! have a sample each (queues, channels, connections, Raft members, virtual hosts,
//! exchanges), listed once and read as the scraper reaches their lines.

use crate::api::stream_consumers::{group_rows, GroupRow};
use crate::api::Management;
use std::sync::Arc;
use warren_delivery::connections::ConnectionInfo;
use warren_delivery::exchange::Exchange;
use warren_delivery::latency::HistogramSnapshot;
use warren_delivery::quorum::RaftFigures;
use warren_delivery::resource_alarm::{AlarmState, ResourceUsage};
use warren_delivery::{Queue, Session, VirtualHost};

/// The process's figures from `/proc` (0 where there is no `/proc`).
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessFigures {
    pub resident_bytes: u64,
    pub open_fds: u64,
    pub open_sockets: u64,
    pub max_fds: u64,
    /// Bytes the process made the kernel read from storage (`read_bytes` of /proc/self/io).
    pub storage_read_bytes: u64,
    /// Bytes the process made the kernel write to storage (`write_bytes`).
    pub storage_written_bytes: u64,
}

impl ProcessFigures {
    /// Reads them now.
    pub(crate) fn read() -> Self {
        let mut figures = ProcessFigures::default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        figures.resident_bytes = field(&status, "VmRSS:") * 1024;
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            for entry in entries.flatten() {
                figures.open_fds += 1;
                let is_socket = std::fs::read_link(entry.path())
                    .is_ok_and(|target| target.as_os_str().as_encoded_bytes().starts_with(b"socket:"));
                figures.open_sockets += u64::from(is_socket);
            }
        }
        figures.max_fds = max_open_files();
        let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        figures.storage_read_bytes = field(&io, "read_bytes:");
        figures.storage_written_bytes = field(&io, "write_bytes:");
        figures
    }
}

/// The number after `name` on its line of `text`, 0 if absent.
fn field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// The soft limit on open files (`Max open files` in /proc/self/limits); 0 if unknown.
fn max_open_files() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    field(&limits, "Max open files")
}

/// The node's figures at one scrape.
#[derive(Debug, Clone)]
pub struct NodeFigures {
    pub process: ProcessFigures,
    pub usage: ResourceUsage,
    pub alarms: AlarmState,
    pub uptime_seconds: f64,
    pub logins_succeeded: u64,
    pub logins_failed: u64,
    pub fsync: HistogramSnapshot,
    pub delayed: u64,
    pub timers_pending: u64,
    pub publishers: u64,
    pub consumers: u64,
    pub connections: u64,
    pub channels: u64,
    pub queues: u64,
}

/// A channel, with its name.
pub struct ChannelObject {
    pub name: String,
    pub session: Arc<Session>,
}

/// A Raft member on this node: whose it is, and its figures.
pub struct RaftObject {
    pub vhost: Arc<str>,
    /// The queue's or stream's name; `metadata` for the catalog (whose vhost is empty).
    pub queue: String,
    pub figures: RaftFigures,
}

/// A follower of a Raft group led here, and how far behind it is.
pub struct FollowerObject {
    pub vhost: Arc<str>,
    pub queue: String,
    /// The follower's node.
    pub follower: String,
    /// Entries it lacks of the leader's log.
    pub behind: u64,
}

/// The catalog's Raft member, in the Raft families: no queue's, so no vhost's.
const METADATA_GROUP_LABEL: &str = "metadata";

/// Everything one scrape reads.
pub struct Scrape {
    pub node: NodeFigures,
    pub queues: Vec<(Arc<str>, Arc<Queue>)>,
    pub channels: Vec<ChannelObject>,
    pub connections: Vec<Arc<ConnectionInfo>>,
    pub raft: Vec<RaftObject>,
    pub followers: Vec<FollowerObject>,
    pub vhosts: Vec<Arc<VirtualHost>>,
    pub exchanges: Vec<(Arc<str>, Arc<Exchange>)>,
    pub stream_groups: Vec<GroupRow>,
}

impl Scrape {
    /// Reads the node and lists its objects; only those of the virtual hosts `only` names,
    /// if it names any.
    pub fn now(api: &Management, only: &[String]) -> Scrape {
        let broker = api.broker();
        let wanted = |vhost: &str| only.is_empty() || only.iter().any(|name| name == vhost);
        let all_vhosts = broker.vhosts();
        let mut scrape = Scrape {
            node: node_figures(api, &all_vhosts),
            queues: Vec::new(),
            channels: Vec::new(),
            connections: Vec::new(),
            raft: Vec::new(),
            followers: Vec::new(),
            vhosts: Vec::new(),
            exchanges: Vec::new(),
            stream_groups: Vec::new(),
        };
        for vhost in all_vhosts.into_iter().filter(|v| wanted(v.name())) {
            let name: Arc<str> = vhost.name().into();
            for queue in vhost.queues() {
                if let Some(figures) = queue.replicas().and_then(|group| group.raft_figures()) {
                    let queue = queue.name().to_string();
                    scrape.raft.push(RaftObject { vhost: Arc::clone(&name), queue, figures });
                }
                scrape.queues.push((Arc::clone(&name), queue));
            }
            scrape.exchanges.extend(vhost.exchanges().into_iter().map(|e| (Arc::clone(&name), e)));
            scrape.stream_groups.extend(group_rows(&vhost));
            scrape.vhosts.push(vhost);
        }
        if let (Some(catalog), true) = (broker.catalog(), only.is_empty()) {
            let (vhost, queue) = (Arc::from(""), METADATA_GROUP_LABEL.to_string());
            scrape.raft.push(RaftObject { vhost, queue, figures: catalog.raft_figures() });
        }
        for raft in &scrape.raft {
            for (follower, behind) in &raft.figures.followers_behind {
                let (vhost, queue, follower) = (Arc::clone(&raft.vhost), raft.queue.clone(), follower.clone());
                scrape.followers.push(FollowerObject { vhost, queue, follower, behind: *behind });
            }
        }
        for connection in broker.connections().all() {
            let vhost = connection.handshake().vhost.unwrap_or_default();
            if !wanted(&vhost) {
                continue;
            }
            for (number, session) in connection.channels() {
                let name = crate::api::connections::channel_name(&connection, number);
                scrape.channels.push(ChannelObject { name, session });
            }
            scrape.connections.push(connection);
        }
        scrape
    }
}

fn node_figures(api: &Management, vhosts: &[Arc<VirtualHost>]) -> NodeFigures {
    let broker = api.broker();
    let connections = broker.connections().all();
    let sessions: Vec<Arc<Session>> = connections.iter().flat_map(|c| c.channels()).map(|(_, s)| s).collect();
    let throttle = broker.access().throttle();
    let delayed = vhosts.iter().flat_map(|v| v.exchanges()).filter_map(|e| e.delayed().map(|d| d.pending())).sum();
    NodeFigures {
        process: ProcessFigures::read(),
        usage: broker.alarms().usage(),
        alarms: broker.alarms().state(),
        uptime_seconds: api.uptime_ms() as f64 / 1000.0,
        logins_succeeded: throttle.succeeded_total(),
        logins_failed: throttle.failed_total(),
        fsync: warren_delivery::latency::FSYNC_LATENCY.snapshot(),
        delayed,
        timers_pending: broker.pending_timers() as u64,
        publishers: sessions.iter().filter(|s| s.stats().is_publisher()).count() as u64,
        consumers: sessions.iter().map(|s| s.consumers().len() as u64).sum(),
        connections: connections.len() as u64,
        channels: sessions.len() as u64,
        queues: vhosts.iter().map(|v| v.queues().len() as u64).sum(),
    }
}
