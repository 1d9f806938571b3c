//! Logging in: the client's SASL response checked against the broker's access control, and
//! the vhost it opens. Failed logins are counted, logged with the peer address at most once
//! a second per address, and an address that fails too often has its next refusals answered
//! late; a right password is answered at once (see
//! [`warren_delivery::access::LoginThrottle`]).

use crate::sasl;
use amq_protocol::protocol::connection;
use std::net::SocketAddr;
use std::time::Duration;
use warren_delivery::{Broker, BrokerError, ReplyCode, VirtualHost};

/// A refused login.
#[derive(Debug)]
pub struct Refused {
    /// The refusal to send.
    pub error: BrokerError,
    /// How long to hold it back: the address has been failing too often.
    pub answer_after: Option<Duration>,
}

/// Checks `start_ok` from `peer` (whose TLS certificate names `certificate_login`, if it gave
/// one); the user it logged in as (as the client sent the name).
pub fn log_in(
    broker: &Broker,
    start_ok: &connection::StartOk,
    peer: SocketAddr,
    certificate_login: Option<&str>,
) -> Result<String, Refused> {
    let mechanism = start_ok.mechanism.as_str();
    let refused = |why: String| {
        BrokerError::access_refused(format!("Login was refused using authentication mechanism {mechanism}: {why}"))
    };
    let outcome = if mechanism == sasl::EXTERNAL {
        external(broker, certificate_login, peer)
    } else {
        sasl::decode(mechanism, start_ok.response.as_bytes()).map_err(|e| (String::new(), e.to_string())).and_then(
            |login| {
                let checked = broker.access().authenticate(&login.username, &login.password, peer.ip());
                checked.map(|_| login.username.clone()).map_err(|e| (login.username, e.to_string()))
            },
        )
    };
    let access = broker.access();
    match outcome {
        Ok(user) => {
            access.count_login(peer.ip(), &user, mechanism, None);
            Ok(user)
        }
        Err((user, why)) => {
            let answer_after = access.count_login(peer.ip(), &user, mechanism, Some(&why));
            Err(Refused { error: refused(why), answer_after })
        }
    }
}

/// SASL EXTERNAL: the user the client certificate names, which must exist (its password is
/// not asked).
fn external(broker: &Broker, certificate_login: Option<&str>, peer: SocketAddr) -> Result<String, (String, String)> {
    let Some(name) = certificate_login else {
        return Err((String::new(), "EXTERNAL needs a TLS client certificate".to_string()));
    };
    match broker.access().authenticate_external(name, peer.ip()) {
        Ok(_) => Ok(name.to_string()),
        Err(error) => Err((name.to_string(), error.to_string())),
    }
}

/// The vhost `connection.open` names, if it exists, `user` may use it, and its connection
/// limit and the user's let one more in (530 NOT_ALLOWED otherwise, with RabbitMQ's texts).
pub fn open_vhost(broker: &Broker, name: &str, user: &str) -> Result<std::sync::Arc<VirtualHost>, BrokerError> {
    let not_allowed = |text: String| BrokerError::new(ReplyCode::NotAllowed, text);
    let vhost = broker.vhost(name).ok_or_else(|| not_allowed(format!("vhost '{name}' not found")))?;
    if broker.access().permissions_of(name, user).is_none() {
        return Err(not_allowed(format!("access to vhost '{name}' refused for user '{user}'")));
    }
    // This connection is not counted yet (it counts once it opened).
    broker.access().user_limits(user).check_connection(user, || broker.connections_of(user))?;
    if let Some(max) = vhost.limits().max_connections {
        // This connection is counted once it opened: those already open are compared.
        if broker.connections_in(name) >= max as usize {
            return Err(not_allowed(format!(
                "access to vhost '{name}' refused for user '{user}': connection limit ({max}) is reached"
            )));
        }
    }
    Ok(vhost)
}
