//! A blocking HTTP client for the management API tests: each call answers the status and
//! the JSON body (or `null`), whatever the status.

use serde_json::Value;

/// The management API of a running broker, as a user.
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    credentials: Option<(String, String)>,
}

/// An answer: the status, the body as JSON (`null` if it is not), and the headers wanted.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub location: Option<String>,
}

impl Api {
    /// The API at `addr`, as guest.
    pub fn new(addr: std::net::SocketAddr) -> Self {
        Api { base: format!("http://{addr}"), credentials: Some(("guest".into(), "guest".into())) }
    }

    /// The same API as `user` with `password`, or with no credentials (`None`).
    pub fn as_user(&self, credentials: Option<(&str, &str)>) -> Self {
        Api { base: self.base.clone(), credentials: credentials.map(|(u, p)| (u.to_string(), p.to_string())) }
    }

    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Answer {
        let url = format!("{}{path}", self.base);
        let mut request = ureq::request(method, &url);
        if let Some((user, password)) = &self.credentials {
            use base64::Engine;
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            request = request.set("Authorization", &format!("Basic {token}"));
        }
        for (name, value) in headers {
            request = request.set(name, value);
        }
        let response = match body {
            Some(body) => request.send_json(body.clone()),
            None => request.call(),
        };
        let response = match response {
            Ok(response) => response,
            Err(ureq::Error::Status(_, response)) => response,
            Err(error) => panic!("{method} {url}: {error}"),
        };
        let status = response.status();
        let location = response.header("location").map(str::to_string);
        let text = response.into_string().unwrap_or_default();
        Answer { status, body: serde_json::from_str(&text).unwrap_or(Value::Null), location }
    }

    pub fn get(&self, path: &str) -> Answer {
        tokio::task::block_in_place(|| self.request("GET", path, &[], None))
    }

    /// The body of a GET as text (the Prometheus endpoints), whatever the status.
    pub fn get_text(&self, path: &str) -> String {
        let url = format!("{}{path}", self.base);
        tokio::task::block_in_place(|| match ureq::get(&url).call() {
            Ok(response) | Err(ureq::Error::Status(_, response)) => response.into_string().unwrap_or_default(),
            Err(error) => panic!("GET {url}: {error}"),
        })
    }

    pub fn put(&self, path: &str, body: Value) -> Answer {
        tokio::task::block_in_place(|| self.request("PUT", path, &[], Some(&body)))
    }

    pub fn post(&self, path: &str, body: Value) -> Answer {
        tokio::task::block_in_place(|| self.request("POST", path, &[], Some(&body)))
    }

    pub fn delete(&self, path: &str) -> Answer {
        tokio::task::block_in_place(|| self.request("DELETE", path, &[], None))
    }

    pub fn delete_with(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        tokio::task::block_in_place(|| self.request("DELETE", path, headers, None))
    }
}
