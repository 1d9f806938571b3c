"""Warren against pika: permissions checked on every AMQP operation as RabbitMQ's
access-control table says (each allowed, and refused with 403 and RabbitMQ's text), users and
permissions made through the management API as rabbitmqadmin makes them, and vhosts."""

import base64
import json
import urllib.request

import pika
import pika.exceptions
import pytest

from conftest import free_port, run_broker, wait_for_port


def api_call(port, method, path, body=None, user=("guest", "guest")):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    token = base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status


@pytest.fixture
def erin(tmp_path):
    """A broker where erin may configure and read erin.*, write erin.* and the default
    exchange; guest made bob.q and bob.x. Yields (erin's parameters, guest's channel)."""
    http = free_port()
    with run_broker(tmp_path, ["--http-listen", f"127.0.0.1:{http}"]) as (_, guest_parameters):
        wait_for_port(http)
        assert api_call(http, "PUT", "/api/users/erin", {"password": "pw", "tags": ""}) == 201
        permissions = {"configure": "^erin\\.", "write": "^(erin\\.|amq\\.default$)", "read": "^erin\\."}
        assert api_call(http, "PUT", "/api/permissions/%2F/erin", permissions) == 201
        guest = pika.BlockingConnection(guest_parameters)
        setup = guest.channel()
        setup.queue_declare("bob.q")
        setup.exchange_declare("bob.x", "fanout")
        parameters = pika.ConnectionParameters(
            host="127.0.0.1", port=guest_parameters.port, credentials=pika.PlainCredentials("erin", "pw"))
        yield parameters, http
        guest.close()


def refused(connection, operation, text):
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        operation(channel)
    assert closed.value.reply_code == 403
    assert closed.value.reply_text == f"ACCESS_REFUSED - {text}"


def test_each_operation_is_allowed_or_refused_by_the_permissions(erin):
    parameters, _ = erin
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    channel.queue_declare("erin.q")
    channel.exchange_declare("erin.x", "fanout")
    channel.queue_bind("erin.q", "erin.x")
    channel.queue_declare("bob.q", passive=True)
    channel.confirm_delivery()
    channel.basic_publish("", "erin.q", b"hello")
    method, _, body = channel.basic_get("erin.q", auto_ack=True)
    assert body == b"hello"
    channel.queue_purge("erin.q")
    channel.basic_consume("erin.q", lambda *args: None)

    who = "in vhost '/' refused for user 'erin'"
    refused(connection, lambda ch: ch.queue_declare("bob.new"), f"access to queue 'bob.new' {who}")
    refused(connection, lambda ch: ch.exchange_declare("bob.y", "direct"), f"access to exchange 'bob.y' {who}")
    refused(connection, lambda ch: ch.queue_bind("erin.q", "bob.x"), f"access to exchange 'bob.x' {who}")
    refused(connection, lambda ch: ch.queue_bind("bob.q", "erin.x"), f"access to queue 'bob.q' {who}")
    refused(connection, lambda ch: ch.basic_get("bob.q"), f"access to queue 'bob.q' {who}")
    refused(connection, lambda ch: ch.basic_consume("bob.q", lambda *a: None), f"access to queue 'bob.q' {who}")
    refused(connection, lambda ch: ch.queue_purge("bob.q"), f"access to queue 'bob.q' {who}")
    refused(connection, lambda ch: ch.queue_delete("bob.q"), f"access to queue 'bob.q' {who}")
    refused(connection, lambda ch: ch.exchange_delete("bob.x"), f"access to exchange 'bob.x' {who}")
    refused(connection, lambda ch: ch.queue_declare("erin.dl", arguments={"x-dead-letter-exchange": "bob.x"}),
            f"access to exchange 'bob.x' {who}")

    def publish_to_bob(ch):
        ch.confirm_delivery()
        ch.basic_publish("bob.x", "", b"no")

    refused(connection, publish_to_bob, f"access to exchange 'bob.x' {who}")
    assert connection.is_open, "refusals close channels, not the connection"
    connection.close()


def test_a_vhost_without_permissions_cannot_be_opened(erin):
    parameters, http = erin
    assert api_call(http, "PUT", "/api/vhosts/elsewhere", {}) == 201
    elsewhere = pika.ConnectionParameters(host=parameters.host, port=parameters.port,
                                          virtual_host="elsewhere", credentials=parameters.credentials)
    # pika reports a close at connection.open as a probable access denial.
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as closed:
        pika.BlockingConnection(elsewhere)
    assert "(530) \"NOT_ALLOWED - access to vhost 'elsewhere' refused for user 'erin'\"" in str(closed.value)
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api_call(http, "PUT", "/api/permissions/elsewhere/erin", everything) == 201
    pika.BlockingConnection(elsewhere).close()


def test_a_wrong_password_is_refused(erin):
    parameters, _ = erin
    wrong = pika.ConnectionParameters(host=parameters.host, port=parameters.port,
                                      credentials=pika.PlainCredentials("erin", "nope"))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(wrong)


def test_topic_permissions_check_routing_keys_on_publish_and_binding_keys_on_bind(erin):
    parameters, http = erin
    # erin may publish to amq.topic (write on it) and bind her queues from it (read on it).
    assert api_call(http, "PUT", "/api/permissions/%2F/erin",
                    {"configure": "^erin\\.", "write": "^(erin\\..*|amq\\.topic)$", "read": "^(erin\\..*|amq\\.topic)$"}) == 204
    topic = {"exchange": "amq.topic", "write": "^{username}\\.", "read": "^(news|{username})\\."}
    assert api_call(http, "PUT", "/api/topic-permissions/%2F/erin", topic) == 201
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("erin.inbox")
    channel.queue_bind("erin.inbox", "amq.topic", "erin.#")
    channel.queue_bind("erin.inbox", "amq.topic", "news.*")
    channel.basic_publish("amq.topic", "erin.note", b"mine")
    assert channel.queue_declare("erin.inbox", passive=True).method.message_count == 1

    refused(connection, lambda ch: ch.queue_bind("erin.inbox", "amq.topic", "bob.#"),
            "read access to topic 'bob.#' in exchange 'amq.topic' in vhost '/' refused for user 'erin'")
    publisher = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        publisher.basic_publish("amq.topic", "bob.note", b"not hers")
        publisher.queue_declare("erin.inbox", passive=True)  # a round trip: the close arrives
    assert closed.value.reply_code == 403
    assert closed.value.reply_text == (
        "ACCESS_REFUSED - write access to topic 'bob.note' in exchange 'amq.topic' in vhost '/' refused for user 'erin'")

    # Other exchanges are not checked by topic; cleared, amq.topic is not either.
    assert api_call(http, "DELETE", "/api/topic-permissions/%2F/erin") == 204
    again = connection.channel()
    again.basic_publish("amq.topic", "bob.note", b"allowed now")
    again.queue_bind("erin.inbox", "amq.topic", "bob.#")
    connection.close()


def test_user_limits_cap_connections_and_channels_with_rabbitmqs_texts(erin):
    parameters, http = erin
    assert api_call(http, "PUT", "/api/user-limits/erin/max-connections", {"value": 1}) == 204
    assert api_call(http, "PUT", "/api/user-limits/erin/max-channels", {"value": 2}) == 204
    first = pika.BlockingConnection(parameters)
    # pika reports a close at connection.open as a probable access denial, with the broker's text.
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused_open:
        pika.BlockingConnection(parameters)
    assert "(530)" in str(refused_open.value)
    assert "connection refused for user 'erin': user connection limit (1) is reached" in str(refused_open.value)
    first.channel()
    first.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        first.channel()
    assert closed.value.reply_code == 530
    assert "has reached the maximum allowed user limit of (2)" in closed.value.reply_text

    # A limit cleared lets the next one in; another user is not limited by erin's.
    assert api_call(http, "DELETE", "/api/user-limits/erin/max-connections") == 204
    second = pika.BlockingConnection(parameters)
    second.close()
