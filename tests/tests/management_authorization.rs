//! The management API's authorization, route by route: every route the router declares
//! (`warren_webui::route_rules`, the list README's table is generated from) is requested by
//! each kind of user RabbitMQ distinguishes, and the answer is compared with what the route's
//! rule allows that user: through (any answer but 401, 403 and a hidden vhost's 404), refused
//! (401), or hidden (404). A new route is walked as soon as it is declared.

use serde_json::{json, Value};
use warren_server::ctl::encode_path_segment;
use warren_tests::http::{Answer, Api};
use warren_tests::*;
use warren_webui::authorization::{ConnectionOp, Rule};
use warren_webui::route_table::{RouteRule, Verb};

/// Who makes a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// No credentials.
    Anonymous,
    /// Every permission in `/`, no tag: AMQP only.
    AmqpOnly,
    /// `management`, every permission in `/`.
    Manager,
    /// `policymaker`, every permission in `/`.
    Policymaker,
    /// `management`, permissions `^mine-` in `/` (the fixture's objects are `theirs-*`).
    Restricted,
    /// `management`, permissions only in another vhost.
    Outsider,
    /// `monitoring`, no permissions at all.
    Monitor,
    /// guest: `administrator`, every permission in `/`.
    Administrator,
}

const CASES: [Case; 8] = [
    Case::Anonymous,
    Case::AmqpOnly,
    Case::Manager,
    Case::Policymaker,
    Case::Restricted,
    Case::Outsider,
    Case::Monitor,
    Case::Administrator,
];
const PASSWORD: &str = "secret";

impl Case {
    fn user(self) -> Option<&'static str> {
        match self {
            Case::Anonymous => None,
            Case::AmqpOnly => Some("amqp-only"),
            Case::Manager => Some("manager"),
            Case::Policymaker => Some("policymaker"),
            Case::Restricted => Some("restricted"),
            Case::Outsider => Some("outsider"),
            Case::Monitor => Some("monitor"),
            Case::Administrator => Some("guest"),
        }
    }

    fn api(self, admin: &Api) -> Api {
        match self {
            Case::Administrator => admin.clone(),
            _ => admin.as_user(self.user().map(|user| (user, PASSWORD))),
        }
    }
}

/// What a rule lets a case do with the fixture: the objects of `/` named `theirs-*`, the
/// administrator's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    Through,
    Refused,
    Hidden,
}

/// The model the layer is held to, written apart from it: RabbitMQ's rules for each case.
fn expected(route: &RouteRule, case: Case) -> Expected {
    use Expected::{Hidden, Refused, Through};
    let management_user = !matches!(case, Case::Anonymous | Case::AmqpOnly);
    if route.path == "/api/login" {
        return if management_user { Through } else { Refused };
    }
    if route.rule == Rule::Public {
        return Through;
    }
    if !management_user {
        return Refused;
    }
    let administrator = case == Case::Administrator;
    let monitor = administrator || case == Case::Monitor;
    let sees_root = monitor || !matches!(case, Case::Outsider);
    let may_change_theirs = matches!(case, Case::Administrator | Case::Manager | Case::Policymaker);
    let allowed = |yes: bool| if yes { Through } else { Refused };
    match route.rule {
        Rule::Public | Rule::Management => Through,
        Rule::Monitoring => allowed(monitor),
        Rule::Administrator => allowed(administrator),
        Rule::Policymaker if !matches!(case, Case::Administrator | Case::Policymaker) => Refused,
        Rule::Policymaker => Through,
        Rule::Vhost if !sees_root => Hidden,
        Rule::Vhost => Through,
        Rule::Object(_) if !sees_root => Hidden,
        Rule::Object(_) => allowed(may_change_theirs),
        Rule::Connection(ConnectionOp::Read | ConnectionOp::ReadChannel) => allowed(monitor),
        Rule::Connection(ConnectionOp::Close) => allowed(administrator),
    }
}

/// What the routes are requested about.
struct Fixture {
    broker: TestBroker,
    admin: Api,
    connection: Option<(lapin::Connection, lapin::Channel)>,
}

fn must(answer: Answer, what: &str) -> Answer {
    assert!(answer.status < 300, "fixture: {what}: {} {:?}", answer.status, answer.body);
    answer
}

impl Fixture {
    async fn new() -> Fixture {
        let broker = start_broker().await;
        let admin = Api::new(broker.http_addr.expect("the management API runs"));
        must(admin.put("/api/vhosts/other", json!({})), "vhost other");
        let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
        let users = [
            ("amqp-only", "", Some(("%2F", everything.clone()))),
            ("manager", "management", Some(("%2F", everything.clone()))),
            ("policymaker", "policymaker", Some(("%2F", everything.clone()))),
            (
                "restricted",
                "management",
                Some(("%2F", json!({"configure": "^mine-", "write": "^mine-", "read": "^mine-"}))),
            ),
            ("outsider", "management", Some(("other", everything.clone()))),
            ("monitor", "monitoring", None),
        ];
        for (user, tags, permissions) in users {
            must(admin.put(&format!("/api/users/{user}"), json!({"password": PASSWORD, "tags": tags})), user);
            if let Some((vhost, spec)) = permissions {
                must(admin.put(&format!("/api/permissions/{vhost}/{user}"), spec), "permissions");
            }
        }
        let mut fixture = Fixture { broker, admin, connection: None };
        fixture.restore().await;
        fixture
    }

    /// Puts back what a request may have changed: the objects, the target user and vhost,
    /// the administrator's connection.
    async fn restore(&mut self) {
        let admin = &self.admin;
        must(admin.put("/api/exchanges/%2F/theirs-x", json!({"type": "direct", "durable": true})), "exchange");
        must(admin.put("/api/queues/%2F/theirs-q", json!({"durable": true})), "queue");
        must(admin.post("/api/bindings/%2F/e/theirs-x/q/theirs-q", json!({"routing_key": "k"})), "binding");
        must(admin.put("/api/users/target-user", json!({"password": PASSWORD, "tags": ""})), "target user");
        must(admin.put("/api/vhosts/target-vhost", json!({})), "target vhost");
        if self.listed_connection().is_none() {
            // A connection the broker closed may not know it yet: a new one, listed.
            let connection = connect(&self.broker).await;
            let channel = channel(&connection).await;
            self.connection = Some((connection, channel));
            for _ in 0..100 {
                if self.listed_connection().is_some() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }

    /// The administrator's connection as the API lists it.
    fn listed_connection(&self) -> Option<String> {
        let listed = self.admin.get("/api/connections").body;
        let found = listed.as_array().into_iter().flatten().find(|c| c["user"] == "guest" && c["channels"] == 1);
        found.and_then(|c| c["name"].as_str()).map(str::to_string)
    }

    fn connection_name(&self) -> String {
        let listed = self.listed_connection();
        listed.unwrap_or_else(|| panic!("not listed: {}", self.admin.get("/api/connections").body))
    }

    /// The route's path with its parameters filled in, and the body to send.
    fn request(&self, route: &RouteRule) -> (String, Option<Value>) {
        let connection = self.connection_name();
        let changes_vhost = route.path == "/api/vhosts/{vhost}" && route.verb != Verb::Get;
        let name = match route.path {
            p if p.starts_with("/api/queues/") => "theirs-q".to_string(),
            p if p.starts_with("/api/exchanges/") => "theirs-x".to_string(),
            p if p.starts_with("/api/users/") => "target-user".to_string(),
            p if p.starts_with("/api/connections/") => encode_path_segment(&connection),
            p if p.starts_with("/api/channels/") => encode_path_segment(&format!("{connection} (1)")),
            _ => "max-connections".to_string(),
        };
        let port = self.broker.amqp_addr.port().to_string();
        let vhost = if changes_vhost { "target-vhost" } else { "%2F" };
        let path = route
            .path
            .replace("{vhost}", vhost)
            .replace("{name}", &name)
            .replace("{user}", "target-user")
            .replace("{source}", "theirs-x")
            .replace("{kind}", "q")
            .replace("{destination}", "theirs-q")
            .replace("{props}", "k")
            .replace("{side}", "source")
            .replace("{node}", "nobody@nowhere")
            .replace("{port}", &port);
        (path, body(route))
    }
}

/// A valid body for each route that takes one.
fn body(route: &RouteRule) -> Option<Value> {
    let body = match (route.verb, route.path) {
        (Verb::Get | Verb::Delete, _) => return None,
        (_, "/api/vhosts/{vhost}") => json!({"description": "t"}),
        (_, "/api/users/{name}") => json!({"password": PASSWORD, "tags": ""}),
        (_, "/api/permissions/{vhost}/{user}") => json!({"configure": ".*", "write": ".*", "read": ".*"}),
        (_, "/api/vhost-limits/{vhost}/{name}") => json!({"value": 100}),
        (_, p) if p.contains("policies/") => json!({"pattern": "^theirs-", "definition": {"max-length": 10}}),
        (_, "/api/resource-limits") => json!({"disk_free_limit": "50MB"}),
        (_, "/api/exchanges/{vhost}/{name}") => json!({"type": "direct", "durable": true}),
        (_, "/api/queues/{vhost}/{name}") => json!({"durable": true}),
        (_, "/api/exchanges/{vhost}/{name}/publish") => {
            json!({"routing_key": "theirs-q", "payload": "x", "payload_encoding": "string", "properties": {}})
        }
        (_, "/api/queues/{vhost}/{name}/get") => json!({"count": 1, "ackmode": "ack_requeue_true"}),
        (_, "/api/login") => json!({"username": "manager", "password": PASSWORD}),
        (_, "/api/cluster/join") => json!({"node": "nobody@127.0.0.1:1"}),
        (_, p) if p.contains("/replicas/") => json!({"node": "nobody@nowhere"}),
        (_, p) if p.starts_with("/api/bindings/") => json!({"routing_key": "k"}),
        _ => json!({}),
    };
    Some(body)
}

fn send(api: &Api, verb: Verb, path: &str, body: Option<Value>) -> Answer {
    match (verb, body) {
        (Verb::Get, _) => api.get(path),
        (Verb::Delete, _) => api.delete(path),
        (Verb::Put, body) => api.put(path, body.unwrap_or(Value::Null)),
        (Verb::Post, body) => api.post(path, body.unwrap_or(Value::Null)),
    }
}

/// The login route decides by the body's credentials, not the request's.
fn login_body(case: Case) -> Option<Value> {
    let password = if case == Case::Administrator { "guest" } else { PASSWORD };
    Some(json!({"username": case.user().unwrap_or("nobody"), "password": password}))
}

fn verdict(answer: &Answer) -> Expected {
    let hidden = answer.status == 404 && answer.body["reason"].as_str().is_some_and(|r| r.starts_with("no vhost"));
    match answer.status {
        401 | 403 => Expected::Refused,
        _ if hidden => Expected::Hidden,
        _ => Expected::Through,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_each_kind_of_user_as_its_rule_says() {
    let mut fixture = Fixture::new().await;
    let routes = warren_webui::route_rules();
    assert!(routes.len() > 60, "the router's routes are listed: {}", routes.len());
    let mut wrong = Vec::new();
    for route in &routes {
        for case in CASES {
            // Only a change needs the fixture put back.
            if route.verb != Verb::Get || route.path.starts_with("/api/connections/") {
                fixture.restore().await;
            }
            let (path, mut body) = fixture.request(route);
            if route.path == "/api/login" {
                body = login_body(case);
            }
            let answer = send(&case.api(&fixture.admin), route.verb, &path, body);
            let (want, got) = (expected(route, case), verdict(&answer));
            if want != got {
                wrong.push(format!(
                    "{} {path} as {case:?}: expected {want:?}, got {} {}",
                    route.verb.as_str(),
                    answer.status,
                    answer.body
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{} answers differ from the rules:\n{}", wrong.len(), wrong.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_limited_to_mine_acts_on_its_own_objects_and_sees_only_its_vhosts() {
    let fixture = Fixture::new().await;
    let restricted = Case::Restricted.api(&fixture.admin);
    assert_eq!(restricted.put("/api/queues/%2F/mine-q", json!({"durable": true})).status, 201);
    assert_eq!(restricted.put("/api/exchanges/%2F/mine-x", json!({"type": "fanout"})).status, 201);
    assert_eq!(restricted.post("/api/bindings/%2F/e/mine-x/q/mine-q", json!({"routing_key": ""})).status, 201);
    let published = restricted.post(
        "/api/exchanges/%2F/mine-x/publish",
        json!({"routing_key": "", "payload": "hi", "payload_encoding": "string", "properties": {}}),
    );
    assert_eq!((published.status, published.body["routed"].as_bool()), (200, Some(true)), "{:?}", published.body);
    let got = restricted.post("/api/queues/%2F/mine-q/get", json!({"count": 1, "ackmode": "ack_requeue_false"}));
    assert_eq!(got.body[0]["payload"], "hi", "{:?}", got.body);
    let refused = restricted.delete("/api/queues/%2F/theirs-q");
    assert_eq!(refused.status, 401);
    assert_eq!(refused.body["reason"], "access to queue 'theirs-q' in vhost '/' refused for user 'restricted'");
    let dead_letter_elsewhere = json!({"durable": true, "arguments": {"x-dead-letter-exchange": "theirs-x"}});
    assert_eq!(restricted.put("/api/queues/%2F/mine-dlx", dead_letter_elsewhere).status, 401, "write on the DLX");
    assert_eq!(restricted.delete("/api/queues/%2F/mine-q").status, 204);

    let outsider = Case::Outsider.api(&fixture.admin);
    let vhosts: Vec<Value> = outsider.get("/api/vhosts").body.as_array().cloned().unwrap_or_default();
    assert_eq!(vhosts.iter().map(|v| v["name"].clone()).collect::<Vec<_>>(), vec![json!("other")]);
    assert_eq!(outsider.get("/api/queues").body, json!([]), "no queue of / is listed");
    let overview = outsider.get("/api/overview").body;
    assert_eq!(overview["object_totals"]["queues"], 0, "totals count only what it sees: {overview}");
    assert_eq!(overview["object_totals"]["connections"], 0);
    assert!(overview.get("listeners").is_none(), "the node's listeners are for monitors");
    let monitor = Case::Monitor.api(&fixture.admin);
    assert!(monitor.get("/api/queues").body.as_array().is_some_and(|q| q.iter().any(|q| q["name"] == "theirs-q")));
    assert_eq!(monitor.get("/api/overview").body["object_totals"]["connections"], 1, "monitors see everyone's");
}
