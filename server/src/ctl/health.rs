//! rabbitmq-diagnostics' health-check verbs: each asks the node's health-check route (or, for
//! `check_port_connectivity`, connects to its listeners) and says what it found; a failed
//! check exits with 69 (EX_UNAVAILABLE), as rabbitmq-diagnostics' do, so scripts and probes
//! written for RabbitMQ read the outcome unchanged.

use super::client::{encode, Client};
use super::output::say;
use super::CtlError;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long `check_port_connectivity` waits for each listener to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often `await_startup` asks again.
const STARTUP_POLL: Duration = Duration::from_millis(200);

/// The health checks, by the route each asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// `check_running` and `ping`: the node answers.
    Running,
    /// `check_local_alarms`.
    LocalAlarms,
    /// `check_alarms`.
    Alarms,
    /// `check_port_listener PORT`.
    PortListener(u16),
    /// `check_protocol_listener PROTOCOL`.
    ProtocolListener(String),
    /// `check_virtual_hosts`.
    VirtualHosts,
    /// `check_if_node_is_quorum_critical`.
    QuorumCritical,
}

impl Check {
    fn path(&self) -> String {
        match self {
            Check::Running => "/api/overview".to_string(),
            Check::LocalAlarms => "/api/health/checks/local-alarms".to_string(),
            Check::Alarms => "/api/health/checks/alarms".to_string(),
            Check::PortListener(port) => format!("/api/health/checks/port-listener/{port}"),
            Check::ProtocolListener(protocol) => format!("/api/health/checks/protocol-listener/{}", encode(protocol)),
            Check::VirtualHosts => "/api/health/checks/virtual-hosts".to_string(),
            Check::QuorumCritical => "/api/health/checks/node-is-quorum-critical".to_string(),
        }
    }

    fn passed(&self) -> String {
        match self {
            Check::Running => "the node is running".to_string(),
            Check::LocalAlarms | Check::Alarms => "no alarms are in effect".to_string(),
            Check::PortListener(port) => format!("a listener is active on port {port}"),
            Check::ProtocolListener(protocol) => format!("a listener for protocol {protocol} is active"),
            Check::VirtualHosts => "every virtual host is running".to_string(),
            Check::QuorumCritical => "no quorum queue would lose its quorum if this node stopped".to_string(),
        }
    }
}

/// Runs `check` and says that it passed; a failure is [`CtlError::Unhealthy`].
pub fn run(client: &Client, check: &Check) -> Result<(), CtlError> {
    client.check(&check.path())?;
    say(&format!("{}\n", check.passed()));
    Ok(())
}

/// `check_port_connectivity`: connects to every listener the node reports.
pub fn port_connectivity(client: &Client) -> Result<(), CtlError> {
    let overview = client.check("/api/overview")?;
    let host = api_host(client.url());
    let mut failures = Vec::new();
    let listeners = overview["listeners"].as_array().cloned().unwrap_or_default();
    for listener in &listeners {
        let (Some(port), protocol) = (listener["port"].as_u64(), listener["protocol"].as_str().unwrap_or("?")) else {
            continue;
        };
        let target = format!("{host}:{port}");
        if let Err(error) = connect(&target) {
            failures.push(format!("{protocol} on {target}: {error}"));
        }
    }
    if !failures.is_empty() {
        return Err(CtlError::Unhealthy(format!("cannot connect to listeners: {}", failures.join("; "))));
    }
    say(&format!("connected to {} listener(s) of the node\n", listeners.len()));
    Ok(())
}

/// `await_startup`: waits until the node answers, at most `timeout`.
pub fn await_startup(client: &Client, timeout: Duration) -> Result<(), CtlError> {
    let deadline = Instant::now() + timeout;
    loop {
        match client.check("/api/overview") {
            Ok(_) => {
                say("the node is running\n");
                return Ok(());
            }
            Err(CtlError::Unhealthy(_)) if Instant::now() < deadline => std::thread::sleep(STARTUP_POLL),
            Err(CtlError::Unhealthy(why)) => {
                return Err(CtlError::Unhealthy(format!("the node did not start within {timeout:?}: {why}")))
            }
            Err(other) => return Err(other),
        }
    }
}

/// The host part of the API's URL (`http://HOST:PORT`), where its listeners are reached.
fn api_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host.to_string(),
        _ => authority.to_string(),
    }
}

fn connect(target: &str) -> Result<(), String> {
    let addresses: Vec<SocketAddr> = target.to_socket_addrs().map_err(|e| e.to_string())?.collect();
    let mut last = String::from("no address");
    for address in addresses {
        match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(error) => last = error.to_string(),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_host_is_where_listeners_are_reached() {
        assert_eq!(api_host("http://127.0.0.1:15672"), "127.0.0.1");
        assert_eq!(api_host("https://broker.example:443/"), "broker.example");
        assert_eq!(api_host("http://[::1]:15672"), "[::1]");
        assert_eq!(api_host("http://localhost"), "localhost");
    }
}
