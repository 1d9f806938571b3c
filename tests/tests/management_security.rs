//! The management plane as an attacker tries it (issue #28): the HTTP port's limits with raw
//! sockets, sessions and live feeds that follow access changes, the live feed's origin check
//! with a real WebSocket client, guessing passwords beside their owner, and what the API
//! refuses that AMQP refuses. The memory figures with clients that do not read are in
//! `management_memory.rs`; the route-by-route rules in `management_authorization.rs`.

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use warren_tests::http::Api;
use warren_tests::*;
use warren_webui::HttpLimits;

fn api(broker: &TestBroker) -> Api {
    Api::new(broker.http_addr.expect("the management API runs"))
}

/// A user with `tags` and every permission in `/`.
fn add_user(admin: &Api, name: &str, tags: &str) -> Api {
    assert!(admin.put(&format!("/api/users/{name}"), json!({"password": "pw", "tags": tags})).status < 300);
    let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert!(admin.put(&format!("/api/permissions/%2F/{name}"), everything).status < 300);
    admin.as_user(Some((name, "pw")))
}

/// A TCP connection to `to` from the loopback address `from`.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(from.parse::<IpAddr>().expect("address"), 0)).expect("bind");
    socket.connect(to).await.expect("connect")
}

/// What the server sends before closing, within `within` (`None` if it keeps the socket open).
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut answer = Vec::new();
    match tokio::time::timeout(within, stream.read_to_end(&mut answer)).await {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_excess_http_connections_are_closed_and_amqp_clients_still_connect() {
    let limits = HttpLimits {
        max_connections: 12,
        max_connections_per_address: 6,
        header_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(1),
    };
    let broker = start_broker_with(|config| config.http_limits = limits).await;
    let http = broker.http_addr.expect("the management API runs");
    let mut idle = Vec::new();
    for _ in 0..6 {
        idle.push(connect_from("127.0.0.1", http).await);
    }
    let mut seventh = connect_from("127.0.0.1", http).await;
    let refused = read_until_closed(&mut seventh, Duration::from_secs(3)).await.expect("closed at once");
    assert!(refused.starts_with("HTTP/1.1 503"), "one address holds an eighth of the slots: {refused:?}");
    for _ in 0..6 {
        idle.push(connect_from("127.0.0.3", http).await);
    }
    let mut thirteenth = connect_from("127.0.0.4", http).await;
    let refused = read_until_closed(&mut thirteenth, Duration::from_secs(3)).await.expect("closed at once");
    assert!(refused.starts_with("HTTP/1.1 503"), "the total is capped: {refused:?}");

    let amqp = connect(&broker).await;
    assert!(amqp.status().connected(), "AMQP clients connect while HTTP is full");
    for socket in &mut idle {
        let closed = read_until_closed(socket, Duration::from_secs(5)).await;
        assert_eq!(closed.as_deref(), Some(""), "a socket that sends no request head is closed");
    }
    assert_eq!(api(&broker).get("/api/overview").status, 200, "the slots came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_stalls_and_an_answer_nobody_reads_end_their_connection() {
    let limits = HttpLimits { idle_timeout: Duration::from_secs(1), ..HttpLimits::default() };
    let broker = start_broker_with(|config| config.http_limits = limits).await;
    let http = broker.http_addr.expect("the management API runs");
    let mut trickle = TcpStream::connect(http).await.expect("connect");
    let head = "PUT /api/queues/%2F/q HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\
                Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{";
    trickle.write_all(head.as_bytes()).await.expect("head");
    let answer = read_until_closed(&mut trickle, Duration::from_secs(10)).await.expect("the server ends it");
    assert!(!answer.starts_with("HTTP/1.1 2"), "the stalled body is not taken: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ui_session_ends_when_its_users_password_changes() {
    let broker = start_broker().await;
    let admin = api(&broker);
    add_user(&admin, "ops", "management");
    let http = broker.http_addr.expect("the management API runs");
    let login = tokio::task::block_in_place(|| {
        let form = json!({"username": "ops", "password": "pw"});
        ureq::post(&format!("http://{http}/api/login")).send_json(form).map_err(|e| e.to_string())
    });
    let login = login.expect("login");
    let cookie = login.header("set-cookie").and_then(|c| c.split(';').next()).expect("cookie").to_string();
    let with_cookie = |path: &str| {
        let request = ureq::get(&format!("http://{http}{path}")).set("Cookie", &cookie);
        tokio::task::block_in_place(|| match request.call() {
            Ok(response) => response.status(),
            Err(ureq::Error::Status(status, _)) => status,
            Err(error) => panic!("{error}"),
        })
    };
    assert_eq!(with_cookie("/api/whoami"), 200);
    assert!(admin.put("/api/users/ops", json!({"password": "new", "tags": "management"})).status < 300);
    assert_eq!(with_cookie("/api/whoami"), 401, "the old session ended with the password change");
}

/// A live feed opened as `user` (Basic auth), with `origin` if given.
async fn open_feed(
    http: SocketAddr,
    user: &str,
    password: &str,
    origin: Option<&str>,
) -> Result<tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>, String> {
    use base64::Engine;
    let mut request = format!("ws://{http}/ws").into_client_request().map_err(|e| e.to_string())?;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let headers = request.headers_mut();
    headers.insert("authorization", format!("Basic {token}").parse().map_err(|_| "header")?);
    if let Some(origin) = origin {
        headers.insert("origin", origin.parse().map_err(|_| "header")?);
    }
    tokio_tungstenite::connect_async(request).await.map(|(socket, _)| socket).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_feed_refuses_pages_of_another_origin() {
    let broker = start_broker().await;
    let http = broker.http_addr.expect("the management API runs");
    let foreign = open_feed(http, "guest", "guest", Some("http://127.0.0.1:8080")).await;
    let refused = match foreign {
        Ok(_) => panic!("a page of another origin opened the feed"),
        Err(refused) => refused,
    };
    assert!(refused.contains("403"), "{refused}");
    let own = open_feed(http, "guest", "guest", Some(&format!("http://{http}"))).await;
    assert!(own.is_ok(), "the UI's own origin opens it: {:?}", own.err());
}

/// A page of another origin (here another port of the same host, which a SameSite cookie does
/// not tell apart) cannot change anything with the user's credentials: the API reads bodies
/// whatever their Content-Type, as RabbitMQ does, so an HTML form could otherwise post one.
/// Clients that are not browsers send no Origin and are not concerned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_origin_cannot_change_anything_through_the_api() {
    let broker = start_broker().await;
    let http = broker.http_addr.expect("the management API runs");
    let put = |queue: &str, origin: Option<String>| -> (u16, String) {
        tokio::task::block_in_place(|| {
            let mut request = ureq::put(&format!("http://{http}/api/queues/%2F/{queue}"))
                .set("authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
                .set("content-type", "text/plain");
            if let Some(origin) = &origin {
                request = request.set("origin", origin);
            }
            match request.send_string(r#"{"durable": true}"#) {
                Ok(response) => (response.status(), String::new()),
                Err(ureq::Error::Status(status, response)) => (status, response.into_string().unwrap_or_default()),
                Err(error) => panic!("PUT: {error}"),
            }
        })
    };
    let (status, text) = put("forged", Some("http://127.0.0.1:8080".to_string()));
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("another origin"), "{text}");
    assert_eq!(api(&broker).get("/api/queues/%2F/forged").status, 404, "nothing was declared");
    assert_eq!(put("from-the-ui", Some(format!("http://{http}"))).0, 201, "the UI's own origin");
    assert_eq!(put("from-a-script", None).0, 201, "a client that is not a browser");
}

/// The next message of `feed`, if one comes within `within` (`None` once it is closed).
async fn next_message(
    feed: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>,
    within: Duration,
) -> Option<Message> {
    match tokio::time::timeout(within, feed.next()).await {
        Ok(Some(Ok(message))) => Some(message),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_feed_closes_when_its_user_loses_its_rights() {
    let broker = start_broker().await;
    let admin = api(&broker);
    add_user(&admin, "watcher", "management");
    let http = broker.http_addr.expect("the management API runs");
    let mut feed = open_feed(http, "watcher", "pw", None).await.expect("feed opens");
    let hello = next_message(&mut feed, Duration::from_secs(5)).await.expect("hello");
    assert!(hello.to_text().unwrap_or_default().contains("\"hello\""), "{hello:?}");
    assert!(admin.delete("/api/permissions/%2F/watcher").status < 300);
    let changed_at = Instant::now();
    let mut closed = None;
    while changed_at.elapsed() < Duration::from_secs(5) {
        match next_message(&mut feed, Duration::from_secs(5)).await {
            Some(Message::Close(frame)) => {
                closed = Some(frame.map(|f| u16::from(f.code)));
                break;
            }
            Some(_) => continue,
            None => break,
        }
    }
    assert_eq!(closed, Some(Some(4001)), "closed with the access-changed code within seconds");
    assert!(changed_at.elapsed() < Duration::from_secs(3), "within a tick: {:?}", changed_at.elapsed());
    assert!(open_feed(http, "watcher", "pw", None).await.is_ok(), "a new feed sees what the user now may");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_feed_shows_each_user_only_its_vhosts_and_browses_only_what_it_may_read() {
    let broker = start_broker().await;
    let admin = api(&broker);
    assert!(admin.put("/api/queues/%2F/secret-stream", json!({"arguments": {"x-queue-type": "stream"}})).status < 300);
    assert!(admin.put("/api/vhosts/tenant", json!({})).status < 300);
    assert!(admin.put("/api/users/tenant", json!({"password": "pw", "tags": "management"})).status < 300);
    let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert!(admin.put("/api/permissions/tenant/tenant", everything).status < 300);
    let http = broker.http_addr.expect("the management API runs");
    let mut feed = open_feed(http, "tenant", "pw", None).await.expect("feed opens");
    let subscribe =
        json!({"type": "subscribe", "queues": {"page_size": 100}, "queue": {"vhost": "/", "name": "secret-stream"}});
    feed.send(Message::Text(subscribe.to_string().into())).await.expect("subscribe");
    let browse = json!({"type": "browse", "id": 7, "vhost": "/", "queue": "secret-stream", "offset": "first"});
    feed.send(Message::Text(browse.to_string().into())).await.expect("browse");
    let (mut tick, mut answer) = (None, None);
    while tick.is_none() || answer.is_none() {
        let message = next_message(&mut feed, Duration::from_secs(5)).await.expect("the feed answers");
        let value: Value = serde_json::from_str(message.to_text().unwrap_or("{}")).unwrap_or_default();
        match value["type"].as_str() {
            Some("tick") if value.get("queues").is_some() => tick = Some(value),
            Some("messages") => answer = Some(value),
            _ => {}
        }
    }
    let tick = tick.unwrap_or_default();
    assert_eq!(tick["queues"]["total_count"], 0, "no queue of / in its table: {tick}");
    assert!(tick.get("queue").is_none(), "nor the queue of / it asked for: {tick}");
    assert_eq!(tick["overview"]["queues"], 0);
    assert_eq!(tick["overview"]["nodes"], json!([]), "the nodes are for monitors");
    let answer = answer.unwrap_or_default();
    assert!(answer.get("messages").is_none() && answer["error"].is_string(), "browse refused: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_what_amqp_refuses_another_users_id_long_names_and_locked_queues() {
    let broker = start_broker().await;
    let admin = api(&broker);
    assert!(admin.put("/api/queues/%2F/q", json!({})).status < 300);
    let claimed =
        json!({"routing_key": "q", "payload": "x", "payload_encoding": "string", "properties": {"user_id": "bob"}});
    let forged = admin.post("/api/exchanges/%2F/amq.default/publish", claimed);
    assert_eq!(forged.status, 400);
    assert!(
        forged.body["reason"].as_str().unwrap_or_default().contains("user_id property set to 'bob'"),
        "{:?}",
        forged.body
    );
    let own =
        json!({"routing_key": "q", "payload": "x", "payload_encoding": "string", "properties": {"user_id": "guest"}});
    assert_eq!(admin.post("/api/exchanges/%2F/amq.default/publish", own).status, 200);

    let long = "q".repeat(256);
    let answer = admin.put(&format!("/api/queues/%2F/{long}"), json!({}));
    assert_eq!(answer.status, 400, "{:?}", answer.body);
    assert_eq!(admin.put(&format!("/api/exchanges/%2F/{long}"), json!({"type": "direct"})).status, 400);
    assert_eq!(admin.put(&format!("/api/queues/%2F/{}", "q".repeat(255)), json!({})).status, 201);

    let owner = connect(&broker).await;
    let owner_channel = channel(&owner).await;
    let options = lapin::options::QueueDeclareOptions { exclusive: true, durable: true, ..Default::default() };
    owner_channel.queue_declare("mine".into(), options, Default::default()).await.expect("exclusive queue");
    let get = admin.post("/api/queues/%2F/mine/get", json!({"count": 1, "ackmode": "ack_requeue_true"}));
    assert_eq!(get.status, 400);
    assert!(get.body["reason"].as_str().unwrap_or_default().contains("exclusive access"), "{:?}", get.body);
    assert_eq!(admin.get("/api/queues/%2F/mine/messages").status, 400, "its log is not browsed either");
    assert_eq!(admin.delete("/api/queues/%2F/mine/contents").status, 400, "nor purged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_right_password_is_answered_at_once_while_wrong_guesses_from_its_address_wait() {
    let broker = start_broker().await;
    let addr = broker.amqp_addr;
    let guesses: Vec<_> = (0..60)
        .map(|_| {
            tokio::spawn(async move {
                let mut client = raw_client::RawClient::connect(addr).await;
                client.log_in("guest", "wrong").await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let mut owner = raw_client::RawClient::connect(addr).await;
    let answer = owner.log_in("guest", "guest").await;
    assert!(format!("{answer:?}").contains("Tune"), "the right password logs in: {answer:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "at once, not after the guesses: {:?}", started.elapsed());
    let http = api(&broker);
    let started = Instant::now();
    assert_eq!(http.get("/api/whoami").status, 200);
    assert!(started.elapsed() < Duration::from_secs(2), "over HTTP too: {:?}", started.elapsed());
    let wrong = api(&broker).as_user(Some(("guest", "nope")));
    let started = Instant::now();
    assert_eq!(wrong.get("/api/whoami").status, 401);
    assert!(started.elapsed() >= Duration::from_millis(900), "a wrong one from there waits: {:?}", started.elapsed());
    for guess in guesses {
        guess.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_is_not_utf8_is_a_bad_request() {
    let broker = start_broker().await;
    let answer = api(&broker).get("/api/queues/%FF/q");
    assert_eq!(answer.status, 400, "{:?}", answer.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_stops_taking_messages_once_its_answer_is_two_mebibytes() {
    let broker = start_broker().await;
    let connection = connect(&broker).await;
    let publishing = channel(&connection).await;
    publishing.queue_declare("big".into(), Default::default(), Default::default()).await.expect("declare");
    let control_bytes = vec![1u8; 512 * 1024];
    for _ in 0..10 {
        let options = lapin::options::BasicPublishOptions::default();
        let published = publishing.basic_publish("".into(), "big".into(), options, &control_bytes, Default::default());
        published.await.expect("publish");
    }
    let admin = api(&broker);
    while admin.get("/api/queues/%2F/big").body["messages"] != 10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let get = json!({"count": 10, "ackmode": "ack_requeue_false", "truncate": 100_000_000});
    let answer = admin.post("/api/queues/%2F/big/get", get);
    let taken = answer.body.as_array().map(Vec::len).unwrap_or_default();
    let shown = answer.body[0]["payload"].as_str().map(str::len).unwrap_or_default();
    assert_eq!(shown, 256 * 1024, "truncate is capped at 256 KiB (six times that as JSON)");
    assert!((1..10).contains(&taken), "the answer stops near 2 MiB: {taken} messages taken");
    assert_eq!(admin.get("/api/queues/%2F/big").body["messages"], 10 - taken, "the rest stay in the queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_feed_opened_with_a_session_ends_when_the_session_is_logged_out() {
    let broker = start_broker().await;
    let http = broker.http_addr.expect("the management API runs");
    let login = tokio::task::block_in_place(|| {
        let form = json!({"username": "guest", "password": "guest"});
        ureq::post(&format!("http://{http}/api/login")).send_json(form).map_err(|e| e.to_string())
    });
    let cookie = login.expect("login").header("set-cookie").and_then(|c| c.split(';').next()).map(str::to_string);
    let cookie = cookie.expect("a session cookie");
    let mut request = format!("ws://{http}/ws").into_client_request().expect("request");
    request.headers_mut().insert("cookie", cookie.parse().expect("header"));
    let (mut feed, _) = tokio_tungstenite::connect_async(request).await.expect("feed opens with the session");
    next_message(&mut feed, Duration::from_secs(5)).await.expect("hello");
    let logout = ureq::post(&format!("http://{http}/api/logout")).set("Cookie", &cookie);
    tokio::task::block_in_place(|| logout.call().map_err(|e| e.to_string())).expect("logout");
    let logged_out = Instant::now();
    loop {
        match next_message(&mut feed, Duration::from_secs(5)).await {
            Some(Message::Close(_)) | None => break,
            Some(_) => assert!(logged_out.elapsed() < Duration::from_secs(3), "the feed outlived its session"),
        }
    }
    assert!(logged_out.elapsed() < Duration::from_secs(3), "closed within a tick: {:?}", logged_out.elapsed());
}
