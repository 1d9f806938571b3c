//! AMQPS and HTTPS against a CA made here with rcgen: lapin over TLS with PLAIN, with a client
//! certificate and SASL EXTERNAL (the user from the certificate's DN, or its CN), a client
//! without a certificate refused when one is required, the management API over HTTPS, and
//! startup errors that name the file to fix.

use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::{Connection, ConnectionProperties};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_server::tls::CertLoginFrom;
use warren_server::tls::TlsSettings;
use warren_tests::http::Api;
use warren_tests::start_broker_with;
use warren_tests::TestBroker;

/// A CA, a server certificate for localhost and 127.0.0.1 (PEM files in a directory), and
/// client certificates issued on demand.
struct Pki {
    dir: tempfile::TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// A client's certificate and key, PEM.
struct ClientCert {
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new() -> Self {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "Warren test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("CA");
        let mut server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).expect("params");
        server.distinguished_name.push(DnType::CommonName, "localhost");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().expect("key");
        let server_cert = server.signed_by(&server_key, &ca).expect("server certificate");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write");
        std::fs::write(dir.path().join("server.pem"), server_cert.pem()).expect("write");
        std::fs::write(dir.path().join("server.key"), server_key.serialize_pem()).expect("write");
        Pki { dir, ca }
    }

    /// A client certificate with subject `CN=common_name` (the order of a longer subject is
    /// the unit test's, in amqp/src/tls.rs, on a certificate made by openssl).
    fn client(&self, common_name: &str) -> ClientCert {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.ca).expect("client certificate");
        ClientCert { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn settings(&self, ca: bool, fail_if_no_peer_cert: bool, login_from: CertLoginFrom) -> TlsSettings {
        TlsSettings {
            cert_file: Some(self.path("server.pem")),
            key_file: Some(self.path("server.key")),
            ca_file: ca.then(|| self.path("ca.pem")),
            fail_if_no_peer_cert,
            login_from,
        }
    }
}

async fn tls_broker(settings: TlsSettings) -> TestBroker {
    start_broker_with(move |config| {
        config.amqps_listen = Some(([127, 0, 0, 1], 0).into());
        config.https_listen = Some(([127, 0, 0, 1], 0).into());
        config.tls = settings;
    })
    .await
}

/// Connects lapin over TLS to `broker` with `query` (`?auth_mechanism=external`), trusting
/// the test CA, presenting `client` if given.
async fn connect_tls(
    broker: &TestBroker,
    pki: &Pki,
    credentials: &str,
    query: &str,
    client: Option<&ClientCert>,
) -> lapin::Result<Connection> {
    let port = broker.amqps_addr.expect("AMQPS listener").port();
    let uri = format!("amqps://{credentials}localhost:{port}/%2f{query}");
    let identity =
        client.map(|c| OwnedIdentity::PKCS8 { pem: c.cert_pem.clone().into(), key: c.key_pem.clone().into() });
    let tls = OwnedTLSConfig { identity, cert_chain: Some(pki.ca.pem()) };
    let runtime = lapin::runtime::default_runtime()?;
    Connection::connect_with_config(&uri, ConnectionProperties::default(), tls, runtime).await
}

/// Publishes and gets one message on `connection`: the connection works.
async fn round_trip(connection: &Connection) {
    let channel = warren_tests::channel(connection).await;
    let queue = channel.queue_declare("".into(), Default::default(), Default::default()).await.expect("declare");
    channel
        .basic_publish("".into(), queue.name().clone(), Default::default(), b"over tls", Default::default())
        .await
        .expect("publish");
    let got = channel.basic_get(queue.name().clone(), lapin::options::BasicGetOptions { no_ack: true }).await;
    assert_eq!(got.expect("get").expect("a message").data, b"over tls");
}

fn api(broker: &TestBroker) -> Api {
    Api::new(broker.http_addr.expect("management API"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_log_in_over_tls_with_a_password_or_with_their_certificate() {
    let pki = Pki::new();
    let broker = tls_broker(pki.settings(true, false, CertLoginFrom::DistinguishedName)).await;
    let plain = connect_tls(&broker, &pki, "guest:guest@", "", None).await.expect("PLAIN over TLS");
    round_trip(&plain).await;

    // The user is the certificate's DN, RFC 4514 as RabbitMQ writes it; it has no password.
    let api = api(&broker);
    assert_eq!(api.put("/api/users/CN=alice", json!({"password_hash": "", "tags": ""})).status, 201);
    let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert_eq!(api.put("/api/permissions/%2F/CN=alice", everything).status, 201);
    let alice = pki.client("alice");
    // Kept open while the list is read: a dropped lapin connection closes.
    let external = connect_tls(&broker, &pki, "", "?auth_mechanism=external", Some(&alice)).await;
    let external = external.expect("EXTERNAL with the certificate");
    round_trip(&external).await;
    let connections = api.get("/api/connections").body;
    let listed = connections.as_array().expect("list");
    let alice_listed = listed.iter().find(|c| c["user"] == "CN=alice");
    assert_eq!(alice_listed.map(|c| &c["ssl"]), Some(&json!(true)), "{connections}");
    assert!(listed.iter().all(|c| c["ssl"] == json!(true)), "every connection came over TLS: {connections}");

    // A certificate whose user does not exist, and EXTERNAL without a certificate, are refused.
    let stranger = pki.client("mallory");
    let refused = connect_tls(&broker, &pki, "", "?auth_mechanism=external", Some(&stranger)).await;
    warren_tests::assert_code(refused, 403, "a certificate of no user");
    let no_cert = connect_tls(&broker, &pki, "", "?auth_mechanism=external", None).await;
    assert!(no_cert.is_err(), "EXTERNAL without a certificate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_common_name_can_be_the_user_and_a_certificate_can_be_required() {
    let pki = Pki::new();
    let broker = tls_broker(pki.settings(true, true, CertLoginFrom::CommonName)).await;
    let api = api(&broker);
    assert_eq!(api.put("/api/users/bob", json!({"password_hash": "", "tags": ""})).status, 201);
    let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert_eq!(api.put("/api/permissions/%2F/bob", everything).status, 201);
    let bob = pki.client("bob");
    let connection = connect_tls(&broker, &pki, "", "?auth_mechanism=external", Some(&bob)).await;
    round_trip(&connection.expect("EXTERNAL as the CN")).await;
    let without = connect_tls(&broker, &pki, "guest:guest@", "", None).await;
    assert!(without.is_err(), "--ssl-fail-if-no-peer-cert refuses a client without a certificate");
    // The plain listener still serves.
    round_trip(&warren_tests::connect(&broker).await).await;
}

/// One request over HTTPS to `broker`'s management API; the whole answer, headers included.
async fn https_request(broker: &TestBroker, pki: &Pki, request: &str) -> String {
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    let ca = tokio_rustls::rustls::pki_types::CertificateDer::from(pki.ca.der().to_vec());
    roots.add(ca).expect("CA");
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(broker.https_addr.expect("HTTPS listener")).await.expect("connect");
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("handshake");
    tls.write_all(request.as_bytes()).await.expect("request");
    let mut answer = String::new();
    tls.read_to_string(&mut answer).await.expect("answer");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_api_answers_over_https() {
    let pki = Pki::new();
    let broker = tls_broker(pki.settings(false, false, CertLoginFrom::DistinguishedName)).await;
    let request = "GET /api/overview HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nConnection: close\r\n\r\n";
    let answer = https_request(&broker, &pki, request).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"product_name\":\"Warren\""), "{answer}");
    assert!(answer.contains("\"protocol\":\"https\""), "the overview lists the HTTPS listener: {answer}");
    let headers = answer.to_lowercase();
    assert!(headers.contains("strict-transport-security: max-age="), "HSTS over HTTPS: {answer}");
    assert!(headers.contains("content-security-policy: frame-ancestors 'none'"), "{answer}");
    assert!(headers.contains("x-frame-options: deny"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_session_cookie_is_secure_over_https_and_not_over_http() {
    let pki = Pki::new();
    let broker = tls_broker(pki.settings(false, false, CertLoginFrom::DistinguishedName)).await;
    let form = r#"{"username":"guest","password":"guest"}"#;
    let login = format!(
        "POST /api/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    );
    let answer = https_request(&broker, &pki, &login).await;
    let cookie = answer.lines().find(|l| l.to_lowercase().starts_with("set-cookie:")).unwrap_or_default();
    assert!(cookie.contains("HttpOnly") && cookie.contains("; Secure"), "{answer}");
    let plain = std::net::TcpStream::connect(broker.http_addr.expect("HTTP listener"));
    let mut plain = plain.expect("connect");
    std::io::Write::write_all(&mut plain, login.as_bytes()).expect("request");
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut plain, &mut answer).expect("answer");
    let cookie = answer.lines().find(|l| l.to_lowercase().starts_with("set-cookie:")).unwrap_or_default();
    assert!(cookie.contains("HttpOnly") && !cookie.contains("Secure"), "{answer}");
    assert!(!answer.to_lowercase().contains("strict-transport-security"), "no HSTS over plain HTTP: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_certificate_files_stop_the_start_and_are_named() {
    let pki = Pki::new();
    let start = |settings: TlsSettings| async move {
        let config = warren_server::Config {
            amqp_listen: ([127, 0, 0, 1], 0).into(),
            http_listen: None,
            amqps_listen: Some(([127, 0, 0, 1], 0).into()),
            data_dir: tempfile::tempdir().expect("tempdir").keep(),
            tls: settings,
            ..warren_server::Config::default()
        };
        match warren_server::start(config).await {
            Ok(_) => panic!("started with unusable TLS files"),
            Err(error) => error.to_string(),
        }
    };
    let mut missing = pki.settings(false, false, CertLoginFrom::DistinguishedName);
    missing.cert_file = Some(pki.path("nowhere.pem"));
    let error = start(missing).await;
    assert!(error.contains("--ssl-cert-file") && error.contains("nowhere.pem"), "{error}");

    let other_key = pki.path("other.key");
    std::fs::write(&other_key, KeyPair::generate().expect("key").serialize_pem()).expect("write");
    let mut mismatched = pki.settings(false, false, CertLoginFrom::DistinguishedName);
    mismatched.key_file = Some(other_key);
    let error = start(mismatched).await;
    assert!(error.contains("other.key") && error.contains("does not go with"), "{error}");

    let not_pem = pki.path("garbage.pem");
    std::fs::write(&not_pem, "not a certificate").expect("write");
    let mut garbage = pki.settings(false, false, CertLoginFrom::DistinguishedName);
    garbage.ca_file = Some(not_pem);
    let error = start(garbage).await;
    assert!(error.contains("--ssl-ca-file") && error.contains("garbage.pem"), "{error}");

    let mut nothing = pki.settings(false, false, CertLoginFrom::DistinguishedName);
    nothing.cert_file = None;
    let error = start(nothing).await;
    assert!(error.contains("--amqps-listen needs --ssl-cert-file"), "{error}");
}
