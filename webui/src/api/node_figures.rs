//! A node's figures as `GET /api/nodes` shows them, with RabbitMQ's names: memory and its
//! watermark, disk free and its limit, file descriptors and sockets, connections, uptime,
//! listeners, files. Each node reads its own; a node asks its peers for theirs through the cluster
//! ([`super::ClusterView::peer_figures`]), so the struct crosses the wire.

use super::Management;
use serde::{Deserialize, Serialize};

/// One node's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeFigures {
    /// Memory the broker uses, in bytes.
    pub mem_used: u64,
    /// The memory high watermark, in bytes: publishers are blocked above it.
    pub mem_limit: u64,
    /// Whether the memory alarm is on.
    pub mem_alarm: bool,
    /// Free bytes on the data directory's disk.
    pub disk_free: u64,
    /// The disk free limit, in bytes: publishers are blocked below it.
    pub disk_free_limit: u64,
    /// Whether the disk alarm is on.
    pub disk_free_alarm: bool,
    /// Open file descriptors.
    pub fd_used: u64,
    /// The open-files limit.
    pub fd_total: u64,
    /// Open sockets.
    pub sockets_used: u64,
    /// Client connections (AMQP).
    pub connections: u64,
    /// Milliseconds since the node started.
    pub uptime: u64,
    /// Where it listens.
    pub listeners: Vec<ListenerFigure>,
    /// Its configuration file, if any (a list, as RabbitMQ's).
    pub config_files: Vec<String>,
    /// Its data directory.
    pub db_dir: String,
    /// Its log file, if it logs to one.
    pub log_files: Vec<String>,
}

/// A listener as `/api/nodes` and `/api/overview` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerFigure {
    /// `amqp`, `amqp/ssl`, `http`, `https`, `clustering`.
    pub protocol: String,
    /// The address it is bound to.
    pub ip_address: String,
    /// The port.
    pub port: u16,
}

impl Management {
    /// This node's figures, read now.
    pub fn node_figures(&self) -> NodeFigures {
        let alarms = self.broker().alarms();
        let (usage, state) = (alarms.usage(), alarms.state());
        let process = crate::metrics::ProcessFigures::read();
        let (config_files, db_dir, log_files) = self.environment().node_fields();
        NodeFigures {
            mem_used: usage.memory_used_bytes,
            mem_limit: usage.memory_limit_bytes,
            mem_alarm: state.memory,
            disk_free: usage.disk_free_bytes,
            disk_free_limit: usage.disk_free_limit_bytes,
            disk_free_alarm: state.disk,
            fd_used: process.open_fds,
            fd_total: process.max_fds,
            sockets_used: process.open_sockets,
            connections: self.broker().connections().count() as u64,
            uptime: self.uptime_ms(),
            listeners: self.listeners().iter().map(ListenerFigure::of).collect(),
            config_files,
            db_dir,
            log_files,
        }
    }
}

impl ListenerFigure {
    fn of(listener: &super::Listener) -> Self {
        ListenerFigure {
            protocol: listener.protocol.to_string(),
            ip_address: listener.addr.ip().to_string(),
            port: listener.addr.port(),
        }
    }
}
