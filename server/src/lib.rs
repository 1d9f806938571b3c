//! warren-server: the `warren` broker process.
//!
//! Configuration, the listeners, and the lifecycle: start, run, shut down gracefully. The
//! binary (`main.rs`) adds logging (`logging`) and signal handling; tests start brokers through [`start`].

pub mod allocator;
pub mod cluster;
pub mod config;
pub mod ctl;
pub mod logging;
pub mod open_files;
pub mod tls;

pub use config::Config;
pub use warren_delivery::access::AccessSettings;
pub use warren_delivery::resource_alarm::{MemoryWatermark, ResourceLimits};

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use warren_delivery::message_store::LogStoreConfig;
use warren_delivery::Broker;

/// A broker that could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory cannot be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The stored definitions or queues cannot be recovered.
    #[error("cannot recover the broker's data in {path}: {source}")]
    Recovery {
        /// The data directory.
        path: std::path::PathBuf,
        /// What failed.
        source: warren_delivery::BrokerError,
    },
    /// This process already runs as another node (one node per process).
    #[error("cannot take node name: {0}")]
    NodeName(#[from] warren_delivery::node::NameAlreadySet),
    /// The inter-node transport cannot start.
    #[error(transparent)]
    Cluster(#[from] cluster::service::ClusterStartError),
    /// The cluster's catalog group cannot start.
    #[error(transparent)]
    Catalog(#[from] cluster::catalog_group::CatalogStartError),
    /// The seeds learnt at `join_cluster` cannot be read.
    #[error(transparent)]
    JoinedSeeds(#[from] cluster::join::JoinError),
    /// A TLS listener is on and its certificate, key or CA cannot be used.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The AMQP address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why (in use, no permission).
        source: std::io::Error,
    },
}

/// A started broker.
pub struct RunningBroker {
    /// The address the AMQP listener is bound to.
    pub amqp_addr: SocketAddr,
    /// The broker core.
    pub broker: Arc<Broker>,
    /// The inter-node transport, when this node has a cluster listener or peers.
    pub cluster: Option<cluster::ClusterTransport>,
    /// The address the management API is bound to, if it runs.
    pub http_addr: Option<SocketAddr>,
    /// The address of the AMQPS listener, if it runs.
    pub amqps_addr: Option<SocketAddr>,
    /// The address of the Stream protocol listener, if it runs.
    pub stream_addr: Option<SocketAddr>,
    /// The address of the management API over HTTPS, if it runs.
    pub https_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    /// The AMQP listeners (plain, and AMQPS if on).
    tasks: Vec<JoinHandle<()>>,
}

impl RunningBroker {
    /// Closes every connection (320 CONNECTION_FORCED) and waits for the listener to stop.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        if let Some(cluster) = &self.cluster {
            cluster.shutdown().await;
        }
        self.broker.close();
    }
}

/// Checks memory and disk against the alarms' thresholds every
/// [`ALARM_CHECK_INTERVAL_MS`](warren_delivery::resource_alarm::ALARM_CHECK_INTERVAL_MS) until
/// the broker is dropped.
async fn watch_resources(broker: std::sync::Weak<Broker>, data_dir: std::path::PathBuf) {
    let period = std::time::Duration::from_millis(warren_delivery::resource_alarm::ALARM_CHECK_INTERVAL_MS);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let Some(broker) = broker.upgrade() else { return };
        broker.alarms().check(&data_dir);
    }
}

/// Drives the broker's timing wheel (TTLs, queue expiry, delayed messages) until the broker
/// is dropped.
async fn run_timers(broker: std::sync::Weak<Broker>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(warren_delivery::scheduler::TICK_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_report = tokio::time::Instant::now();
    let mut last_collect = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let Some(broker) = broker.upgrade() else { return };
        broker.fire_timers(warren_delivery::clock::now_ms());
        if last_collect.elapsed() >= allocator::COLLECT_INTERVAL {
            last_collect = tokio::time::Instant::now();
            allocator::return_freed_memory();
        }
        if last_report.elapsed() >= LATENESS_REPORT_INTERVAL {
            last_report = tokio::time::Instant::now();
            let lateness = broker.take_firing_lateness();
            if lateness.fired > 0 {
                tracing::info!(
                    fired = lateness.fired,
                    max_late_ms = lateness.max_late_ms,
                    later_than_50ms = lateness.late,
                    "delayed messages fired"
                );
            }
        }
    }
}

/// Where the management API listens: HTTP, and HTTPS with its TLS configuration; and within
/// which limits.
struct ManagementListens {
    environment: warren_webui::Environment,
    http: Option<SocketAddr>,
    https: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
    limits: warren_webui::HttpLimits,
}

/// `limits` with at most an eighth of the open-files limit in connections (HTTP and HTTPS
/// each), so that management clients can never take the descriptors AMQP clients need.
fn within_open_files(mut limits: warren_webui::HttpLimits) -> warren_webui::HttpLimits {
    if let Some(open_files) = open_files::current_limit() {
        let share = open_files::http_connection_share(open_files);
        if share < limits.max_connections {
            limits = warren_webui::HttpLimits { max_connections: share, ..limits };
            limits.max_connections_per_address = limits.max_connections_per_address.min(share);
        }
    }
    limits
}

/// Binds `listen` for the management API; a port that cannot be bound is logged, and the
/// broker runs without it.
async fn bind_management(listen: SocketAddr, flag: &str) -> Option<(TcpListener, SocketAddr)> {
    match TcpListener::bind(listen).await {
        Ok(listener) => {
            let addr = listener.local_addr().ok()?;
            Some((listener, addr))
        }
        Err(error) => {
            tracing::error!(%listen, %error, "the management API is not started there: its address cannot be bound (set {flag})");
            None
        }
    }
}

/// Serves the management API where `listens` say; returns the HTTP and HTTPS addresses.
async fn start_management(
    listens: ManagementListens,
    (broker, view, mut listeners): (Arc<Broker>, Arc<dyn warren_webui::ClusterView>, Vec<warren_webui::Listener>),
    shutdown: watch::Receiver<bool>,
) -> (Option<SocketAddr>, Option<SocketAddr>, warren_webui::Management) {
    let http = match listens.http {
        Some(listen) => bind_management(listen, "--http-listen").await,
        None => None,
    };
    let https = match listens.https {
        Some((listen, tls)) => bind_management(listen, "--https-listen").await.map(|(l, addr)| (l, addr, tls)),
        None => None,
    };
    let (http_addr, https_addr) = (http.as_ref().map(|h| h.1), https.as_ref().map(|h| h.1));
    listeners.extend(http_addr.map(|addr| warren_webui::Listener { protocol: "http", addr }));
    listeners.extend(https_addr.map(|addr| warren_webui::Listener { protocol: "https", addr }));
    let management = warren_webui::Management::new(broker, view, listeners)
        .with_log_levels(Arc::new(crate::logging::LogLevels))
        .with_environment(listens.environment);
    if http.is_some() || https.is_some() {
        warren_webui::start_sampler(&management, shutdown.clone());
    }
    let limits = within_open_files(listens.limits);
    if let Some((listener, addr)) = http {
        tracing::info!(http_addr = %addr, max_connections = limits.max_connections, "management API listening");
        tokio::spawn(warren_webui::serve(listener, None, management.clone(), limits, shutdown.clone()));
    }
    if let Some((listener, addr, tls)) = https {
        tracing::info!(https_addr = %addr, "management API listening over HTTPS");
        tokio::spawn(warren_webui::serve(listener, Some(tls), management.clone(), limits, shutdown));
    }
    (http_addr, https_addr, management)
}

/// How often the firing lateness of delayed messages is logged.
const LATENESS_REPORT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Creates the data directory, binds the listener and starts serving.
pub async fn start(config: Config) -> Result<RunningBroker, StartError> {
    warren_delivery::node::set_local_name(&config.cluster.node_name)?;
    if config.cluster.pretend_previous_release {
        warren_delivery::feature_flags::pretend_previous_release();
    }
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|source| StartError::DataDir { path: config.data_dir.clone(), source })?;
    let listener = TcpListener::bind(config.amqp_listen)
        .await
        .map_err(|source| StartError::Listen { addr: config.amqp_listen, source })?;
    let amqp_addr = listener.local_addr().map_err(|source| StartError::Listen { addr: config.amqp_listen, source })?;
    // TLS files are checked before anything else starts: a bad one stops the start, named.
    let amqps = match config.amqps_listen {
        Some(addr) => {
            let tls = config.tls.server_config("--amqps-listen", &[])?;
            let listener = TcpListener::bind(addr).await.map_err(|source| StartError::Listen { addr, source })?;
            Some((listener, tls))
        }
        None => None,
    };
    let stream_listener = bind_stream_listener(config.stream_listen).await;
    let https_tls = match config.https_listen {
        Some(addr) => Some((addr, config.tls.server_config("--https-listen", &[b"http/1.1"])?)),
        None => None,
    };
    let store_config = LogStoreConfig {
        flush_policy: config.fsync.flush_policy(),
        // A record holds the whole message: the body plus routing and properties.
        max_record_bytes: usize::try_from(config.protocol.max_message_bytes)
            .unwrap_or(usize::MAX)
            .saturating_add(1 << 20),
        transient_memory_budget_bytes: config.queue_memory_budget_bytes,
        ..LogStoreConfig::default()
    };
    let router = cluster::RaftRouter::new();
    let joined_seeds = cluster::join::stored_seeds(&config.data_dir)?;
    let mut cluster_settings = config.cluster.clone();
    for seed in &joined_seeds {
        if !cluster_settings.peers.iter().any(|peer| peer.name == seed.name) {
            cluster_settings.peers.push(seed.clone());
        }
    }
    let cluster = cluster::service::start_with(&cluster_settings, router.clone()).await?;
    let nodes = Arc::new(cluster::Nodes::new(&cluster_settings.node_name, &cluster_settings.peers));
    let replication = cluster.as_ref().map(|transport| {
        let name = &config.cluster.cluster_name;
        cluster::replication::ClusterReplication::new(name, Arc::clone(&nodes), transport.clone(), router.clone())
    });
    let core_replication: Arc<dyn warren_delivery::quorum::Replication> = match &replication {
        Some(replication) => Arc::clone(replication) as Arc<dyn warren_delivery::quorum::Replication>,
        None => warren_delivery::quorum::SingleNode::shared(),
    };
    let forwarding = cluster
        .as_ref()
        .map(|transport| cluster::forwarding::ClusterForwarding::new(transport.clone(), Arc::clone(&nodes)));
    let core_forwarding: Arc<dyn warren_delivery::remote::Forwarding> = match &forwarding {
        Some(forwarding) => Arc::clone(forwarding) as Arc<dyn warren_delivery::remote::Forwarding>,
        None => Arc::new(warren_delivery::remote::NoForwarding),
    };
    let log_config = store_config.log_config();
    let broker = Broker::open_clustered(
        &config.data_dir,
        store_config,
        &config.access,
        core_replication,
        core_forwarding,
        // Every node runs the catalog, which records each definition change first.
        true,
    )
    .map_err(|source| StartError::Recovery { path: config.data_dir.clone(), source })?;
    if let Some(forwarding) = &forwarding {
        forwarding.serve(broker.forwarder());
        router.set_forwarder(Arc::clone(broker.forwarder()));
    }
    let settings = cluster::catalog_group::CatalogSettings {
        cluster_name: config.cluster.cluster_name.clone(),
        snapshot_interval_entries: config.cluster.metadata_snapshot_interval_entries,
    };
    if replication.is_none() {
        cluster::catalog_group::start_alone(&broker, &config.data_dir, &settings, log_config.clone()).await?;
    }
    if let Some(replication) = &replication {
        let dir = &config.data_dir;
        let may_initialize = joined_seeds.is_empty();
        cluster::catalog_group::start(
            replication,
            &router,
            &broker,
            dir,
            &settings,
            log_config.clone(),
            may_initialize,
        )
        .await?;
        router.set_join_desk(cluster::join::Desk::new(Arc::clone(&nodes), router.clone()));
        let joiner = cluster::join::Joiner::new(replication, router.clone(), &broker, dir, &settings, log_config);
        replication.set_joiner(joiner);
        replication.watch_peers();
    }
    let (shutdown, shutdown_rx) = watch::channel(false);
    let view: Arc<dyn warren_webui::ClusterView> = match &replication {
        Some(replication) => Arc::clone(replication) as Arc<dyn warren_webui::ClusterView>,
        None => Arc::new(cluster::replication::OneNode {
            node: config.cluster.node_name.clone(),
            cluster: config.cluster.cluster_name.clone(),
        }),
    };
    let mut listeners = vec![warren_webui::Listener { protocol: "amqp", addr: amqp_addr }];
    if let Some(addr) = cluster.as_ref().and_then(|transport| transport.local_addr()) {
        listeners.push(warren_webui::Listener { protocol: "clustering", addr });
    }
    let (amqps, amqps_addr) = match amqps {
        Some((listener, tls)) => {
            let addr = listener.local_addr().ok();
            listeners.extend(addr.map(|addr| warren_webui::Listener { protocol: "amqp/ssl", addr }));
            (Some((listener, tls)), addr)
        }
        None => (None, None),
    };
    let stream_addr = stream_listener.as_ref().and_then(|listener| listener.local_addr().ok());
    listeners.extend(stream_addr.map(|addr| warren_webui::Listener { protocol: "stream", addr }));
    let environment = warren_webui::Environment {
        settings: config.shown.clone(),
        config_file: config.config_file.clone(),
        data_dir: config.data_dir.clone(),
        log_file: config.log.file.clone(),
    };
    let listens =
        ManagementListens { environment, http: config.http_listen, https: https_tls, limits: config.http_limits };
    let (http_addr, https_addr, management) =
        start_management(listens, (broker.clone(), view, listeners), shutdown_rx.clone()).await;
    router.set_figures_source(Arc::new(move || management.node_figures()));
    // The alarms hold from the first client on.
    broker.alarms().set_limits(config.resource_limits);
    broker.alarms().check(&config.data_dir);
    let protocol = Arc::new(config.protocol.clone());
    let mut tasks = vec![tokio::spawn(warren_amqp::listener::run(
        listener,
        Arc::clone(&broker),
        Arc::clone(&protocol),
        shutdown_rx.clone(),
        None,
    ))];
    if let (Some(listener), Some(addr)) = (stream_listener, stream_addr) {
        let mut settings = config.stream.clone();
        settings.advertised_port = config.stream_advertised_port.unwrap_or(addr.port());
        tracing::info!(stream_addr = %addr, "accepting Stream protocol connections");
        let run = warren_stream_protocol::listener::run(
            listener,
            Arc::clone(&broker),
            Arc::new(settings),
            shutdown_rx.clone(),
        );
        tasks.push(tokio::spawn(run));
    }
    if let Some((listener, server_config)) = amqps {
        let settings = warren_amqp::tls::AmqpsSettings { server_config, login_from: config.tls.login_from };
        tracing::info!(amqps_addr = ?amqps_addr, "accepting AMQP 0-9-1 over TLS");
        tasks.push(tokio::spawn(warren_amqp::listener::run(
            listener,
            Arc::clone(&broker),
            protocol,
            shutdown_rx,
            Some(settings),
        )));
    }
    tokio::spawn(run_timers(Arc::downgrade(&broker)));
    tokio::spawn(watch_resources(Arc::downgrade(&broker), config.data_dir.clone()));
    tracing::info!(%amqp_addr, data_dir = %config.data_dir.display(), "Warren is accepting AMQP 0-9-1 connections");
    Ok(RunningBroker { amqp_addr, broker, cluster, http_addr, amqps_addr, stream_addr, https_addr, shutdown, tasks })
}

/// The Stream protocol's listener, if it is on: an address that cannot be bound (RabbitMQ's
/// own stream plugin holds 5552 on this machine, say) is logged, and the broker runs without
/// it, as without the management API.
async fn bind_stream_listener(addr: Option<SocketAddr>) -> Option<TcpListener> {
    let addr = addr?;
    match TcpListener::bind(addr).await {
        Ok(listener) => Some(listener),
        Err(error) => {
            tracing::warn!(%addr, %error, "cannot listen for Stream protocol connections; running without them");
            None
        }
    }
}
