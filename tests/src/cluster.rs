//! A three-node cluster of real `warren` processes on 127.0.0.1 ports, for the cluster
//! tests: started from the binary, with or without a fault-injecting proxy on every link.

use crate::fault_proxy::FaultProxy;
use crate::process::WarrenProcess;
use lapin::{Connection, ConnectionProperties};
use std::path::Path;

/// A cluster of processes, stopped when dropped.
pub struct Cluster {
    pub nodes: Vec<Option<WarrenProcess>>,
    /// Each node's data directory and command line, to restart it.
    pub starts: Vec<(std::path::PathBuf, Vec<String>)>,
    /// The proxy on each link (dialling node, dialled node), if the links are proxied.
    pub proxies: std::collections::HashMap<(usize, usize), FaultProxy>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in self.nodes.iter_mut().filter_map(Option::take) {
            node.kill9();
        }
    }
}

pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

pub const NAMES: [&str; 3] = ["warren@a", "warren@b", "warren@c"];

/// Starts three nodes whose data directories are under `dir`; with `proxied`, every link goes
/// through a [`FaultProxy`] (the node whose name sorts first dials: it is told the proxy's
/// address as its peer's).
pub async fn start_cluster(dir: &Path, proxied: bool) -> Cluster {
    let secret = dir.join("secret");
    std::fs::write(&secret, "the cluster's shared secret\n").expect("secret");
    let secret = secret.to_string_lossy().to_string();
    let ports: Vec<u16> = NAMES.iter().map(|_| free_port()).collect();
    let mut proxies = std::collections::HashMap::new();
    if proxied {
        for dialler in 0..NAMES.len() {
            for (dialled, port) in ports.iter().enumerate().skip(dialler + 1) {
                let target = std::net::SocketAddr::from(([127, 0, 0, 1], *port));
                proxies.insert((dialler, dialled), FaultProxy::start(target).await.expect("proxy"));
            }
        }
    }
    let mut starts = Vec::new();
    for (me, name) in NAMES.iter().enumerate() {
        let peers: Vec<String> = (0..NAMES.len())
            .map(|other| {
                let addr = match proxies.get(&(me, other)) {
                    Some(proxy) => proxy.addr.to_string(),
                    None => format!("127.0.0.1:{}", ports[other]),
                };
                format!("{}@{addr}", NAMES[other])
            })
            .collect();
        let listen = format!("127.0.0.1:{}", ports[me]);
        let peers = peers.join(",");
        let args =
            ["--node-name", name, "--peers", &peers, "--cluster-listen", &listen, "--cluster-secret-file", &secret];
        starts.push((dir.join(name), args.iter().map(|a| a.to_string()).collect::<Vec<String>>()));
    }
    let nodes = tokio::task::block_in_place(|| starts.iter().map(|(dir, args)| Some(start_node(dir, args))).collect());
    Cluster { nodes, starts, proxies }
}

pub fn start_node(dir: &Path, args: &[String]) -> WarrenProcess {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    WarrenProcess::start(dir, &args)
}

impl Cluster {
    /// Starts node `node` again on its data directory.
    pub fn restart(&mut self, node: usize) {
        let (dir, args) = &self.starts[node];
        self.nodes[node] = Some(tokio::task::block_in_place(|| start_node(dir, args)));
    }

    /// Cuts every link of node `node` (it needs proxied links).
    pub fn isolate(&self, node: usize) {
        for ((dialler, dialled), proxy) in &self.proxies {
            if *dialler == node || *dialled == node {
                proxy.cut();
            }
        }
    }

    /// Heals every link.
    pub fn heal(&self) {
        self.proxies.values().for_each(FaultProxy::heal);
    }

    pub async fn connect(&self, node: usize) -> Connection {
        let uri = self.nodes[node].as_ref().expect("running").uri();
        Connection::connect(&uri, ConnectionProperties::default()).await.expect("connect")
    }
}
