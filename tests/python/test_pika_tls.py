"""Warren against pika over TLS (AMQPS), with a CA made here by openssl: PLAIN over TLS, and
a client certificate with SASL EXTERNAL (the user is the certificate's common name)."""

import base64
import json
import ssl
import subprocess
import urllib.request

import pika
import pika.credentials
import pytest

from conftest import free_port, run_broker, wait_for_port


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path):
    """ca.pem, server.pem/server.key (localhost) and client.pem/client.key (CN=carol)."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "1", "-subj", "/CN=Warren pika test CA", cwd=tmp_path)
    (tmp_path / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    (tmp_path / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject in (("server", "/CN=localhost"), ("client", "/CN=carol")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", subject, cwd=tmp_path)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext", cwd=tmp_path)
    return tmp_path


@pytest.fixture
def tls_broker(pki):
    amqps, http = free_port(), free_port()
    args = ["--amqps-listen", f"127.0.0.1:{amqps}", "--http-listen", f"127.0.0.1:{http}",
            "--ssl-cert-file", str(pki / "server.pem"), "--ssl-key-file", str(pki / "server.key"),
            "--ssl-ca-file", str(pki / "ca.pem"), "--ssl-cert-login-from", "common_name"]
    with run_broker(pki, args):
        wait_for_port(http)
        wait_for_port(amqps)
        yield amqps, http


def context(pki, with_certificate):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if with_certificate:
        ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return ctx


def put(http, path, body):
    request = urllib.request.Request(f"http://127.0.0.1:{http}{path}", data=json.dumps(body).encode(), method="PUT")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status


def round_trip(parameters):
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", queue, b"over tls")
    assert channel.basic_get(queue, auto_ack=True)[2] == b"over tls"
    connection.close()


def test_plain_login_over_tls(pki, tls_broker):
    amqps, _ = tls_broker
    round_trip(pika.ConnectionParameters(
        host="localhost", port=amqps, credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(context(pki, False), "localhost")))


def test_external_login_with_a_client_certificate(pki, tls_broker):
    amqps, http = tls_broker
    assert put(http, "/api/users/carol", {"password_hash": "", "tags": ""}) == 201
    assert put(http, "/api/permissions/%2F/carol", {"configure": ".*", "write": ".*", "read": ".*"}) == 201
    round_trip(pika.ConnectionParameters(
        host="localhost", port=amqps, credentials=pika.credentials.ExternalCredentials(),
        ssl_options=pika.SSLOptions(context(pki, True), "localhost")))
