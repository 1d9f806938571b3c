//! `warren ctl`'s HTTP client for the management API: Basic auth, JSON both ways, and errors
//! that say what to fix (the broker not reachable, 401, 404 and the API's own reason).

use super::CtlError;
use serde_json::Value;

/// The management API of one node, as one user.
#[derive(Debug, Clone)]
pub struct Client {
    url: String,
    user: String,
    password: String,
}

/// Percent-encodes a path segment (a vhost "/" is "%2F", as RabbitMQ's API expects).
pub fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The management API's port when a node is named without one (RabbitMQ's).
const DEFAULT_API_PORT: u16 = 15672;

/// The API's URL for `node`: a URL as it is; a node as rabbitmqctl's `-n` names one
/// (`warren@host`, `host`, `host:port`), its API over HTTP (port 15672 unless given).
pub fn api_url(node: &str) -> String {
    if node.contains("://") {
        return node.to_string();
    }
    let host = node.rsplit_once('@').map_or(node, |(_, host)| host);
    let has_port = host.rsplit_once(':').is_some_and(|(_, port)| port.parse::<u16>().is_ok());
    if has_port {
        format!("http://{host}")
    } else {
        format!("http://{host}:{DEFAULT_API_PORT}")
    }
}

impl Client {
    /// The API at `url` (`http://HOST:PORT`), as `user`.
    pub fn new(url: &str, user: &str, password: &str) -> Self {
        Client { url: url.trim_end_matches('/').to_string(), user: user.to_string(), password: password.to_string() }
    }

    fn request(&self, method: &str, path: &str) -> (String, ureq::Request) {
        use base64::Engine;
        let url = format!("{}{path}", self.url);
        let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", self.user, self.password));
        let request = ureq::request(method, &url).set("Authorization", &format!("Basic {credentials}"));
        (url, request)
    }

    fn answer(&self, url: &str, sent: Result<ureq::Response, ureq::Error>) -> Result<Value, CtlError> {
        let response = sent.map_err(|e| self.failed(url, e))?;
        let text =
            response.into_string().map_err(|e| CtlError::Failed(format!("{url}: cannot read the answer: {e}")))?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| CtlError::Failed(format!("{url}: the answer is not JSON: {e}")))
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Result<Value, CtlError> {
        let (url, request) = self.request("GET", path);
        self.answer(&url, request.call())
    }

    /// A health check at `path`: `Ok` with the API's answer when healthy (200),
    /// [`CtlError::Unhealthy`] with its reason when it answers 503, or a broker that cannot be
    /// reached (a node that is not running fails every check).
    pub fn check(&self, path: &str) -> Result<Value, CtlError> {
        let (url, request) = self.request("GET", path);
        match request.call() {
            Err(ureq::Error::Status(503, response)) => {
                let body: Value = response.into_json().unwrap_or(Value::Null);
                Err(CtlError::Unhealthy(unhealthy_text(&body)))
            }
            Err(ureq::Error::Transport(transport)) => {
                Err(CtlError::Unhealthy(format!("the node at {} is not reachable: {transport}", self.url)))
            }
            sent => self.answer(&url, sent),
        }
    }

    /// The API's root URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `GET path`, or `None` if the API answers 404.
    pub fn get_if_exists(&self, path: &str) -> Result<Option<Value>, CtlError> {
        let (url, request) = self.request("GET", path);
        match request.call() {
            Err(ureq::Error::Status(404, _)) => Ok(None),
            sent => self.answer(&url, sent).map(Some),
        }
    }

    /// `method path` with a JSON `body`.
    pub fn send(&self, method: &str, path: &str, body: &Value) -> Result<Value, CtlError> {
        let (url, request) = self.request(method, path);
        self.answer(&url, request.send_json(body.clone()))
    }

    /// `DELETE path`, with `headers`.
    pub fn delete(&self, path: &str, headers: &[(&str, &str)]) -> Result<Value, CtlError> {
        let (url, mut request) = self.request("DELETE", path);
        for (name, value) in headers {
            request = request.set(name, value);
        }
        self.answer(&url, request.call())
    }

    fn failed(&self, url: &str, error: ureq::Error) -> CtlError {
        match error {
            ureq::Error::Status(401, _) => CtlError::Failed(format!(
                "{url}: 401 not authorised: check --user and --password (user '{}')",
                self.user
            )),
            ureq::Error::Status(status, response) => {
                let body: Value = response.into_json().unwrap_or(Value::Null);
                let reason = body["reason"].as_str().unwrap_or("");
                CtlError::Failed(format!("{url}: {status} {reason}"))
            }
            ureq::Error::Transport(transport) => CtlError::Failed(format!(
                "cannot reach the management API at {}: {transport} (is the broker running with --http-listen? \
                 give --url http://HOST:PORT)",
                self.url
            )),
        }
    }
}

/// A failed health check's answer as one line: its reason, then what it names.
fn unhealthy_text(body: &Value) -> String {
    let reason = body["reason"].as_str().unwrap_or("the health check failed");
    let mut named = Vec::new();
    for key in ["alarms", "queues", "missing"] {
        if !body[key].is_null() {
            named.push(format!("{key}: {}", body[key]));
        }
    }
    if named.is_empty() {
        reason.to_string()
    } else {
        format!("{reason} ({})", named.join("; "))
    }
}
