//! The one authorization layer of the management API and its live feed, with RabbitMQ's rules:
//! a user's tags decide which routes it may use, its access to a vhost decides whether it
//! sees the vhost at all, and its configure/write/read patterns decide each operation on an
//! exchange or queue, exactly as AMQP decides them ([`Operation`] is the shared table).
//!
//! Every route is declared with a [`Rule`] (see `route_table`); [`enforce`] authenticates the
//! caller, checks the rule against the path (and, for declares, the arguments in the body),
//! and hands the handler a [`Caller`]. A handler can only get a `Caller` through this layer.
//! What a caller may not see is absent from lists and totals: handlers filter with
//! [`Caller::may_see_vhost`] and [`Caller::sees_connection_of`]. The live feed checks each
//! subscription with the same functions ([`Gate::object`]).
//!
//! Answers as RabbitMQ's: 401 for a missing tag or permission, 404 for a vhost the caller may
//! not see (as for one that does not exist, so that its existence is not told).

use crate::api::Management;
use crate::authentication;
use crate::error::ApiError;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::collections::HashMap;
use warren_delivery::access::{Operation, User};
use warren_delivery::Broker;

/// Largest request body the API reads (the layer to decide, and every handler: the router's
/// body limit).
pub const MAX_BODY_BYTES: usize = 2 << 20;
/// The queue RabbitMQ's aliveness test declares, publishes to and reads.
pub const ALIVENESS_QUEUE: &str = "aliveness-test";

/// What a route needs of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Nothing: no login (the UI's files, the login itself, Prometheus metrics).
    Public,
    /// Any management tag; the answer holds only what the caller may see.
    Management,
    /// `monitoring` or `administrator`.
    Monitoring,
    /// `administrator`.
    Administrator,
    /// `policymaker` or `administrator`, and the path's vhost (if it names one) visible: what
    /// changing policies and parameters asks, as in RabbitMQ.
    Policymaker,
    /// The path's vhost, which the caller must see: administrators and monitoring users see
    /// every vhost, others those they have permissions in.
    Vhost,
    /// An operation on an exchange or queue of the path's vhost: the vhost must be visible and
    /// the caller's permissions there must allow the operation.
    Object(ObjectOp),
    /// A client connection (or one of its channels) the path names.
    Connection(ConnectionOp),
}

/// The operations on exchanges and queues the API makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectOp {
    /// Declares the exchange `{name}` (its `alternate-exchange` argument counts).
    DeclareExchange,
    /// Deletes the exchange `{name}`.
    DeleteExchange,
    /// Publishes to the exchange `{name}`.
    Publish,
    /// Declares the queue `{name}` (its `x-dead-letter-exchange` argument counts).
    DeclareQueue,
    /// Deletes the queue `{name}`.
    DeleteQueue,
    /// Takes, purges or reads by offset the messages of the queue `{name}`.
    ReadQueue,
    /// Binds or unbinds `{destination}` to the exchange `{source}`.
    Bind,
    /// RabbitMQ's aliveness test: declares, publishes to and reads [`ALIVENESS_QUEUE`].
    AlivenessTest,
}

/// What is done with a client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionOp {
    /// Shows the connection `{name}` or its channels.
    Read,
    /// Shows the channel `{name}` ("connection (number)").
    ReadChannel,
    /// Closes the connection `{name}`.
    Close,
}

impl Rule {
    /// What the rule asks, as README's route table says it.
    pub fn describe(&self) -> &'static str {
        match self {
            Rule::Public => "none (no login)",
            Rule::Management => "any management tag; only what the user may see",
            Rule::Monitoring => "`monitoring` or `administrator`",
            Rule::Administrator => "`administrator`",
            Rule::Policymaker => "`policymaker` or `administrator`, and the vhost visible to the user",
            Rule::Vhost => "the vhost visible to the user",
            Rule::Object(op) => op.describe(),
            Rule::Connection(ConnectionOp::Read | ConnectionOp::ReadChannel) => {
                "the user's own connection, or `monitoring`"
            }
            Rule::Connection(ConnectionOp::Close) => "the user's own connection, or `administrator`",
        }
    }

    /// Whether the rule decides by what the body says (the arguments of a declare).
    fn reads_body(&self) -> bool {
        matches!(self, Rule::Object(ObjectOp::DeclareExchange | ObjectOp::DeclareQueue))
    }
}

impl ObjectOp {
    fn describe(&self) -> &'static str {
        match self {
            ObjectOp::DeclareExchange => {
                "configure on the exchange (and write on its alternate exchange, read on it, if it has one)"
            }
            ObjectOp::DeleteExchange => "configure on the exchange",
            ObjectOp::Publish => "write on the exchange",
            ObjectOp::DeclareQueue => {
                "configure on the queue (and write on its dead-letter exchange, read on it, if it has one)"
            }
            ObjectOp::DeleteQueue => "configure on the queue",
            ObjectOp::ReadQueue => "read on the queue",
            ObjectOp::Bind => "write on the destination, read on the source",
            ObjectOp::AlivenessTest => "configure, write and read on `aliveness-test`, write on `amq.default`",
        }
    }
}

/// The authenticated user of a request, and what its tags let it do.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Its name.
    pub user: String,
    administrator: bool,
    monitor: bool,
    policymaker: bool,
    /// The revision of the user's access it was authenticated under: once it changes (a new
    /// password, tags or permissions, a deletion), the caller's sessions and feeds end.
    pub revision: u64,
    /// The UI session it came with, if any: a feed opened with it ends with it.
    session: Option<String>,
}

impl Caller {
    /// `user`, authenticated under `revision`, in UI session `session` if it came with one.
    pub fn of(user: &User, revision: u64, session: Option<String>) -> Self {
        use warren_delivery::access::user::tags;
        Caller {
            user: user.name.clone(),
            administrator: user.is_administrator(),
            monitor: user.is_administrator() || user.has_tag(tags::MONITORING),
            policymaker: user.is_administrator() || user.has_tag(tags::POLICYMAKER),
            revision,
            session,
        }
    }

    /// Whether it is tagged `administrator`.
    pub fn is_administrator(&self) -> bool {
        self.administrator
    }

    /// Whether it may see everything (`monitoring` or `administrator`).
    pub fn is_monitor(&self) -> bool {
        self.monitor
    }

    /// Whether it sees vhost `name` and its objects: monitors see every vhost, others those
    /// they have permissions in.
    pub fn may_see_vhost(&self, broker: &Broker, name: &str) -> bool {
        self.monitor || broker.access().permissions_of(name, &self.user).is_some()
    }

    /// Whether it sees the connections (channels, consumers) of `user`: its own, or all if it
    /// is a monitor.
    pub fn sees_connection_of(&self, user: &str) -> bool {
        self.monitor || self.user == user
    }

    /// Whether its access is as it was when it authenticated (its user still exists, with the
    /// same password, tags and permissions) and its session, if it had one, is still open
    /// (not logged out or expired).
    pub fn is_current(&self, api: &Management) -> bool {
        let same_access = api.broker().access().user_revision(&self.user) == Some(self.revision);
        let session_open = self.session.as_deref().is_none_or(|token| api.sessions().find(token).is_some());
        same_access && session_open
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    /// The caller the authorization layer found; a handler of a route without the layer gets
    /// an error rather than an unchecked caller.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "this route has no authorization rule"))
    }
}

/// A route's rule with what it is checked against.
#[derive(Clone)]
pub struct Gate {
    management: Management,
    rule: Rule,
}

/// The layer of every route: authenticates, checks the route's rule, and passes the request
/// on with its [`Caller`]; answers 401 or 404 otherwise.
pub async fn enforce(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    match gate.admit(request).await {
        Ok(request) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

fn not_authorised(why: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, why).without_challenge()
}

fn hidden_vhost(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no vhost '{name}'"))
}

/// The path's parameters, percent-decoded.
pub type Params = HashMap<String, String>;

fn param<'a>(params: &'a Params, name: &str) -> Result<&'a str, ApiError> {
    params
        .get(name)
        .map(String::as_str)
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("the route has no {{{name}}}")))
}

impl Gate {
    /// `rule` checked for `management`.
    pub fn new(management: Management, rule: Rule) -> Self {
        Gate { management, rule }
    }

    async fn admit(&self, request: Request) -> Result<Request, ApiError> {
        if self.rule == Rule::Public {
            return Ok(request);
        }
        let (mut parts, body) = request.into_parts();
        let caller = authentication::authenticate(&parts, &self.management).await?;
        let params: Params = match Path::<Params>::from_request_parts(&mut parts, &()).await {
            Ok(Path(params)) => params,
            Err(PathRejection::MissingPathParams(_)) => Params::new(),
            Err(bad) => return Err(ApiError::new(StatusCode::BAD_REQUEST, format!("invalid path: {bad}"))),
        };
        let body = if self.rule.reads_body() {
            let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|_| {
                let why = format!("the request body did not arrive in time, or is over {MAX_BODY_BYTES} bytes");
                ApiError::new(StatusCode::BAD_REQUEST, why)
            })?;
            let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            self.decide(&caller, &params, &json)?;
            Body::from(bytes)
        } else {
            self.decide(&caller, &params, &Value::Null)?;
            body
        };
        parts.extensions.insert(caller);
        Ok(Request::from_parts(parts, body))
    }

    fn decide(&self, caller: &Caller, params: &Params, body: &Value) -> Result<(), ApiError> {
        let api = &self.management;
        match self.rule {
            Rule::Public | Rule::Management => Ok(()),
            Rule::Monitoring if caller.is_monitor() => Ok(()),
            Rule::Monitoring => Err(not_authorised("Not monitor user")),
            Rule::Administrator if caller.is_administrator() => Ok(()),
            Rule::Administrator => Err(not_authorised("Not administrator user")),
            Rule::Policymaker if !caller.policymaker => Err(not_authorised("Not policymaker user")),
            Rule::Policymaker => match params.get("vhost") {
                Some(vhost) => visible_vhost(api, caller, vhost),
                None => Ok(()),
            },
            Rule::Vhost => visible_vhost(api, caller, param(params, "vhost")?),
            Rule::Object(op) => object(api, caller, op, params, body),
            Rule::Connection(op) => connection(api, caller, op, param(params, "name")?),
        }
    }
}

/// `Ok` if `caller` sees vhost `name`; 404 if it does not exist or is not visible.
pub fn visible_vhost(api: &Management, caller: &Caller, name: &str) -> Result<(), ApiError> {
    let broker = api.broker();
    if broker.vhost(name).is_none() || !caller.may_see_vhost(broker, name) {
        return Err(hidden_vhost(name));
    }
    Ok(())
}

/// `Ok` if `caller` may make `op` on the objects `params` name (the `{vhost}`, `{name}`,
/// `{source}`, `{kind}` and `{destination}` of the path), given the request's `body`.
pub fn object(api: &Management, caller: &Caller, op: ObjectOp, params: &Params, body: &Value) -> Result<(), ApiError> {
    let vhost = param(params, "vhost")?;
    visible_vhost(api, caller, vhost)?;
    let argument = |key: &str| body.get("arguments").and_then(|a| a.get(key)).and_then(Value::as_str);
    let operations = match op {
        ObjectOp::DeclareExchange => {
            let exchange = crate::api::exchange_name(param(params, "name")?);
            vec![Operation::DeclareExchange { exchange, alternate: argument("alternate-exchange") }]
        }
        ObjectOp::DeleteExchange => {
            vec![Operation::DeleteExchange { exchange: crate::api::exchange_name(param(params, "name")?) }]
        }
        ObjectOp::Publish => vec![Operation::Publish { exchange: crate::api::exchange_name(param(params, "name")?) }],
        ObjectOp::DeclareQueue => vec![Operation::DeclareQueue {
            queue: param(params, "name")?,
            dead_letter_exchange: argument("x-dead-letter-exchange"),
        }],
        ObjectOp::DeleteQueue => vec![Operation::DeleteQueue { queue: param(params, "name")? }],
        ObjectOp::ReadQueue => vec![Operation::Read { queue: param(params, "name")? }],
        ObjectOp::Bind => vec![binding(params)?],
        ObjectOp::AlivenessTest => vec![
            Operation::DeclareQueue { queue: ALIVENESS_QUEUE, dead_letter_exchange: None },
            Operation::Publish { exchange: "" },
            Operation::Read { queue: ALIVENESS_QUEUE },
        ],
    };
    let access = api.broker().access();
    for operation in &operations {
        access.authorize(&caller.user, vhost, operation).map_err(|refused| not_authorised(refused.text))?;
    }
    Ok(())
}

/// `Ok` if `caller` may make `op` on the connection (or channel) `name`; 404 if there is none.
fn connection(api: &Management, caller: &Caller, op: ConnectionOp, name: &str) -> Result<(), ApiError> {
    let connection_name = match op {
        ConnectionOp::ReadChannel => name.rsplit_once(" (").map_or(name, |(connection, _)| connection),
        ConnectionOp::Read | ConnectionOp::Close => name,
    };
    let connections = api.broker().connections();
    let Some(info) = connections.named(connection_name) else {
        let what = if op == ConnectionOp::ReadChannel { "channel" } else { "connection" };
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no {what} '{name}'")));
    };
    let owner = info.handshake().user.unwrap_or_default();
    let allowed = match op {
        ConnectionOp::Read | ConnectionOp::ReadChannel => caller.sees_connection_of(&owner),
        ConnectionOp::Close => caller.is_administrator() || caller.user == owner,
    };
    if !allowed {
        return Err(not_authorised("User not authorised to access object"));
    }
    Ok(())
}

/// The bind or unbind a binding route names: a queue (`q`) or an exchange (`e`) destination.
fn binding(params: &Params) -> Result<Operation<'_>, ApiError> {
    let (source, destination) = (param(params, "source")?, param(params, "destination")?);
    let source = crate::api::exchange_name(source);
    if crate::api::to_exchange(param(params, "kind")?)? {
        Ok(Operation::BindExchange { source, destination })
    } else {
        Ok(Operation::BindQueue { exchange: source, queue: destination })
    }
}
