"""Warren against pika: policies and operator policies as RabbitMQ has them. A policy set,
changed and cleared through the management API (as rabbitmqadmin and rabbitmqctl set them)
takes effect at once on classic and quorum queues and streams that already hold messages (a
quorum queue's through its Raft log; a stream's retention deletes whole segments), with
RabbitMQ's precedence
between a queue's own x-arguments and the policy, its apply-to and priority, and operator
policies that user policies cannot lift. Nothing is lost: what a limit pushes out goes to the
dead-letter exchange the policy names."""

import base64
import json
import time
import urllib.error
import urllib.request

import pika
import pytest

from conftest import free_port, run_broker, wait_for_port
from pika_helpers import get_message, message_count
from test_pika_streams import read_all


def api_call(port, method, path, body=None):
    """(status, parsed body or None) of one management API request as guest."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read()
            return answer.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


@pytest.fixture
def broker_with_api(tmp_path):
    """A broker of its own; yields (pika connection, management port, data directory)."""
    http = free_port()
    with run_broker(tmp_path, ["--http-listen", f"127.0.0.1:{http}"]) as (_, parameters):
        wait_for_port(http)
        connection = pika.BlockingConnection(parameters)
        yield connection, http, tmp_path
        if connection.is_open:
            connection.close()


def set_policy(port, name, pattern, definition, priority=0, apply_to="queues", kind="policies"):
    body = {"pattern": pattern, "definition": definition, "priority": priority, "apply-to": apply_to}
    status, answer = api_call(port, "PUT", f"/api/{kind}/%2F/{name}", body)
    assert status in (201, 204), answer


def publish(channel, queue, bodies):
    for body in bodies:
        channel.basic_publish("", queue, body.encode(), pika.BasicProperties(delivery_mode=2))


def drain(channel, queue):
    """Every ready message's body, in order (taken)."""
    bodies = []
    while True:
        method, _, body = channel.basic_get(queue=queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body.decode())


def wait_count(connection, queue, count, timeout=5.0):
    deadline = time.monotonic() + timeout
    while message_count(connection, queue) != count:
        assert time.monotonic() < deadline, f"{queue} holds {message_count(connection, queue)}, not {count}"
        time.sleep(0.05)


def queue_json(port, name):
    status, answer = api_call(port, "GET", f"/api/queues/%2F/{name}")
    assert status == 200, answer
    return answer


def test_a_policy_added_changed_and_cleared_takes_effect_on_a_queue_holding_messages(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.queue_declare("dead", durable=True)
    channel.queue_declare("orders.eu", durable=True)
    publish(channel, "orders.eu", [f"m{i}" for i in range(6)])
    assert message_count(connection, "orders.eu") == 6

    # Added: the limit applies at once, the oldest go to the dead-letter exchange.
    set_policy(port, "limits", r"^orders\.", {"max-length": 4, "dead-letter-exchange": "",
                                              "dead-letter-routing-key": "dead"})
    wait_count(connection, "orders.eu", 4)
    wait_count(connection, "dead", 2)
    shown = queue_json(port, "orders.eu")
    assert shown["policy"] == "limits"
    assert shown["effective_policy_definition"]["max-length"] == 4

    # Changed: a higher limit lets more in; nothing already there is lost.
    set_policy(port, "limits", r"^orders\.", {"max-length": 6, "dead-letter-exchange": "",
                                              "dead-letter-routing-key": "dead"})
    publish(channel, "orders.eu", ["m6", "m7", "m8"])
    wait_count(connection, "orders.eu", 6)
    wait_count(connection, "dead", 3)

    # Cleared: no limit any more.
    status, _ = api_call(port, "DELETE", "/api/policies/%2F/limits")
    assert status == 204
    publish(channel, "orders.eu", ["m9", "m10"])
    wait_count(connection, "orders.eu", 8)
    assert "policy" not in queue_json(port, "orders.eu")
    kept, dead = drain(channel, "orders.eu"), drain(channel, "dead")
    assert sorted(kept + dead, key=lambda b: int(b[1:])) == [f"m{i}" for i in range(11)], "nothing lost"


def test_a_ttl_from_a_policy_dead_letters_what_is_published_under_it(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.queue_declare("expired")
    channel.queue_declare("short.lived")
    set_policy(port, "ttl", r"^short\.", {"message-ttl": 200, "dead-letter-exchange": "",
                                          "dead-letter-routing-key": "expired"})
    publish(channel, "short.lived", ["a", "b"])
    wait_count(connection, "expired", 2)
    assert message_count(connection, "short.lived") == 0


def test_arguments_and_policies_combine_key_by_key_as_rabbitmq_documents(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    for name in ["own-dlx-target", "policy-dlx-target"]:
        channel.queue_declare(name)
    # The lower of x-max-length and the policy's; the queue's own dead-letter exchange wins.
    channel.queue_declare("both", arguments={"x-max-length": 2, "x-dead-letter-exchange": "",
                                             "x-dead-letter-routing-key": "own-dlx-target"})
    channel.queue_declare("policy-only")
    set_policy(port, "p", "^(both|policy-only)$", {"max-length": 3, "dead-letter-exchange": "",
                                                   "dead-letter-routing-key": "policy-dlx-target"})
    publish(channel, "both", ["1", "2", "3", "4"])
    publish(channel, "policy-only", ["1", "2", "3", "4"])
    wait_count(connection, "both", 2)
    wait_count(connection, "own-dlx-target", 2)
    wait_count(connection, "policy-only", 3)
    wait_count(connection, "policy-dlx-target", 1)


def test_apply_to_and_the_highest_priority_decide_which_policy_applies(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.queue_declare("jobs")
    set_policy(port, "exchanges-only", "^jobs$", {"alternate-exchange": "amq.fanout"}, apply_to="exchanges")
    assert "policy" not in queue_json(port, "jobs")
    set_policy(port, "low", "^jobs$", {"max-length": 1}, priority=1)
    set_policy(port, "high", "^job", {"max-length": 3}, priority=5)
    assert queue_json(port, "jobs")["policy"] == "high"
    publish(channel, "jobs", ["1", "2", "3", "4"])
    wait_count(connection, "jobs", 3)
    # A policy holding a key classic queues do not support stays off them (RabbitMQ's rule).
    set_policy(port, "streams", "^jobs$", {"max-age": "1D"}, priority=10)
    assert queue_json(port, "jobs")["policy"] == "high"


def test_an_alternate_exchange_from_a_policy_takes_what_an_exchange_does_not_route(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.exchange_declare("unrouted", "fanout")
    channel.queue_declare("caught")
    channel.queue_bind("caught", "unrouted")
    channel.exchange_declare("orders", "direct")
    channel.exchange_declare("own-ae", "fanout")
    channel.exchange_declare("with-own", "direct", arguments={"alternate-exchange": "own-ae"})
    set_policy(port, "ae", "^(orders|with-own)$", {"alternate-exchange": "unrouted"}, apply_to="exchanges")
    channel.basic_publish("orders", "nowhere", b"lost?")
    wait_count(connection, "caught", 1)
    channel.basic_publish("with-own", "nowhere", b"to its own")
    time.sleep(0.2)
    assert message_count(connection, "caught") == 1, "the exchange's own argument wins"
    status, shown = api_call(port, "GET", "/api/exchanges/%2F/orders")
    assert status == 200, shown
    assert (shown["policy"], shown["operator_policy"]) == ("ae", "")
    assert shown["effective_policy_definition"] == {"alternate-exchange": "unrouted"}
    status, listed = api_call(port, "GET", "/api/exchanges/%2F")
    assert status == 200, listed
    by_name = {exchange["name"]: exchange for exchange in listed}
    assert by_name["with-own"]["policy"] == "ae"
    assert "policy" not in by_name["unrouted"], "no policy applies to it"


def test_an_operator_policy_caps_what_the_policy_and_the_arguments_allow(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.queue_declare("capped", arguments={"x-max-length": 100})
    set_policy(port, "generous", "^capped$", {"max-length": 50})
    set_policy(port, "cap", ".*", {"max-length": 2}, kind="operator-policies")
    shown = queue_json(port, "capped")
    assert (shown["policy"], shown["operator_policy"]) == ("generous", "cap")
    assert shown["effective_policy_definition"]["max-length"] == 2
    publish(channel, "capped", ["1", "2", "3"])
    wait_count(connection, "capped", 2)
    status, answer = api_call(port, "PUT", "/api/operator-policies/%2F/dlx",
                              {"pattern": ".*", "definition": {"dead-letter-exchange": "x"}})
    assert status == 400 and "cannot be set by an operator policy" in answer["reason"], answer


def test_bad_policies_are_refused_with_what_to_fix(broker_with_api):
    _, port, _ = broker_with_api
    for definition, expected in [
        ({"message-ttl": -1}, "message-ttl"),
        ({"overflow": "spill"}, "overflow"),
        ({"no-such-key": 1}, "is not a policy key"),
        ({}, "sets no key"),
    ]:
        status, answer = api_call(port, "PUT", "/api/policies/%2F/bad", {"pattern": ".*", "definition": definition})
        assert status == 400 and expected in answer["reason"], answer
    status, answer = api_call(port, "PUT", "/api/policies/%2F/bad",
                              {"pattern": "(", "definition": {"max-length": 1}})
    assert status == 400 and "regular expression" in answer["reason"], answer
    status, answer = api_call(port, "PUT", "/api/policies/%2F/bad",
                              {"pattern": ".*", "definition": {"max-length": 1}, "apply-to": "both"})
    assert status == 400 and "apply-to" in answer["reason"], answer
    status, _ = api_call(port, "DELETE", "/api/policies/%2F/never-set")
    assert status == 404


def test_keys_of_features_warren_lacks_are_accepted_and_reported(broker_with_api):
    _, port, _ = broker_with_api
    set_policy(port, "mirrored", ".*", {"ha-mode": "all", "max-length": 10}, apply_to="all")
    status, listed = api_call(port, "GET", "/api/policies/%2F")
    assert status == 200
    [policy] = [p for p in listed if p["name"] == "mirrored"]
    assert "ha-mode" in policy["no_effect"] and "max-length" not in policy["no_effect"]


def test_a_quorum_queue_takes_a_policy_added_changed_and_cleared_through_its_log(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.queue_declare("qq-dead", durable=True)
    channel.queue_declare("qq.orders", durable=True, arguments={"x-queue-type": "quorum"})
    publish(channel, "qq.orders", [f"m{i}" for i in range(6)])
    wait_count(connection, "qq.orders", 6)
    dead_letter = {"dead-letter-exchange": "", "dead-letter-routing-key": "qq-dead"}

    # Added: the limit applies at once (drop-head), the oldest are dead-lettered.
    set_policy(port, "qq-limits", r"^qq\.", {"max-length": 4, **dead_letter}, apply_to="quorum_queues")
    wait_count(connection, "qq.orders", 4)
    wait_count(connection, "qq-dead", 2)
    shown = queue_json(port, "qq.orders")
    assert shown["policy"] == "qq-limits"
    assert shown["effective_policy_definition"]["max-length"] == 4

    # Changed: no length limit, a delivery limit of 1: the second return dead-letters.
    set_policy(port, "qq-limits", r"^qq\.", {"delivery-limit": 1, **dead_letter}, apply_to="quorum_queues")
    publish(channel, "qq.orders", ["m6", "m7"])
    wait_count(connection, "qq.orders", 6)
    for _ in range(2):
        method, _, body = channel.basic_get("qq.orders", auto_ack=False)
        assert body == b"m2"
        channel.basic_nack(method.delivery_tag, requeue=True)
    wait_count(connection, "qq-dead", 3)
    wait_count(connection, "qq.orders", 5)

    # Cleared: the queue's own arguments again (RabbitMQ 4's default delivery limit of 20).
    status, _ = api_call(port, "DELETE", "/api/policies/%2F/qq-limits")
    assert status == 204
    for _ in range(3):
        method, _, body = channel.basic_get("qq.orders", auto_ack=False)
        assert body == b"m3"
        channel.basic_nack(method.delivery_tag, requeue=True)
    wait_count(connection, "qq.orders", 5)
    assert "policy" not in queue_json(port, "qq.orders")
    kept, dead = drain(channel, "qq.orders"), drain(channel, "qq-dead")
    assert sorted(kept + dead, key=lambda b: int(b[1:])) == [f"m{i}" for i in range(8)], "nothing lost"


def test_a_quorum_queue_keeps_its_policy_over_a_restart(tmp_path):
    http = free_port()
    args = ["--http-listen", f"127.0.0.1:{http}"]
    with run_broker(tmp_path, args) as (_, parameters):
        wait_for_port(http)
        connection = pika.BlockingConnection(parameters)
        channel = connection.channel()
        channel.queue_declare("qq-kept", durable=True, arguments={"x-queue-type": "quorum"})
        set_policy(http, "qq-limit", "^qq-kept$", {"max-length": 2})
        publish(channel, "qq-kept", ["1", "2", "3"])
        wait_count(connection, "qq-kept", 2)
        connection.close()
    with run_broker(tmp_path, args) as (_, parameters):
        wait_for_port(http)
        connection = pika.BlockingConnection(parameters)
        channel = connection.channel()
        assert queue_json(http, "qq-kept")["policy"] == "qq-limit"
        publish(channel, "qq-kept", ["4"])
        wait_count(connection, "qq-kept", 2)
        assert get_message(channel, "qq-kept")[2] == b"3", "the replayed log kept the limit"
        connection.close()


SMALL_SEGMENTS = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 1024}
RECORD_BODY = "r" * 100


def wait_below(connection, queue, limit, timeout=5.0):
    """Waits until `queue` holds fewer than `limit` messages; returns how many it holds."""
    deadline = time.monotonic() + timeout
    while (count := message_count(connection, queue)) >= limit:
        assert time.monotonic() < deadline, f"{queue} still holds {count}"
        time.sleep(0.05)
    return count


def test_a_stream_takes_its_retention_from_a_policy_added_changed_and_cleared(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.queue_declare("st.events", durable=True, arguments=SMALL_SEGMENTS)
    # For a stream the policy's retention wins over the stream's own argument (RabbitMQ's rule).
    own_limit = {**SMALL_SEGMENTS, "x-max-length-bytes": 1_000_000}
    channel.queue_declare("st.own-limit", durable=True, arguments=own_limit)
    for stream in ("st.events", "st.own-limit"):
        publish(channel, stream, [RECORD_BODY] * 60)
        wait_count(connection, stream, 60)

    # Added: the oldest whole segments go at once.
    set_policy(port, "st-retention", r"^st\.", {"max-length-bytes": 3000}, apply_to="streams")
    for stream in ("st.events", "st.own-limit"):
        kept = wait_below(connection, stream, 60)
        assert 0 < kept <= 30, f"{stream} keeps about 3000 bytes of records, not {kept}"
    shown = queue_json(port, "st.events")
    assert shown["policy"] == "st-retention"
    assert shown["effective_policy_definition"]["max-length-bytes"] == 3000
    kept = message_count(connection, "st.events")
    offsets = read_all(connection, "st.events", kept, **{"x-stream-offset": "first"}).offsets()
    assert offsets == list(range(60 - kept, 60)), "what is kept is the newest, every one of it"

    # Changed: an age instead of a size: the size no longer limits, sealed segments age out.
    set_policy(port, "st-retention", r"^st\.", {"max-age": "1s"}, apply_to="streams")
    publish(channel, "st.events", [RECORD_BODY] * 40)
    wait_count(connection, "st.events", kept + 40)
    wait_below(connection, "st.events", 12, timeout=8.0)

    # Cleared: the stream's own arguments (no retention): everything published is kept.
    status, _ = api_call(port, "DELETE", "/api/policies/%2F/st-retention")
    assert status == 204
    before = message_count(connection, "st.events")
    publish(channel, "st.events", [RECORD_BODY] * 60)
    wait_count(connection, "st.events", before + 60)
    time.sleep(2.5)
    assert message_count(connection, "st.events") == before + 60, "no age check once the policy is cleared"
    assert "policy" not in queue_json(port, "st.events")


def test_a_stream_keeps_its_policy_over_a_restart(tmp_path):
    http = free_port()
    args = ["--http-listen", f"127.0.0.1:{http}"]
    with run_broker(tmp_path, args) as (_, parameters):
        wait_for_port(http)
        connection = pika.BlockingConnection(parameters)
        connection.channel().queue_declare("st-kept", durable=True, arguments=SMALL_SEGMENTS)
        set_policy(http, "st-limit", "^st-kept$", {"max-length-bytes": 3000}, apply_to="streams")
        connection.close()
    with run_broker(tmp_path, args) as (_, parameters):
        wait_for_port(http)
        connection = pika.BlockingConnection(parameters)
        assert queue_json(http, "st-kept")["policy"] == "st-limit"
        channel = connection.channel()
        channel.confirm_delivery()
        publish(channel, "st-kept", [RECORD_BODY] * 60)
        assert message_count(connection, "st-kept") <= 30, "the reopened stream keeps the policy's retention"
        connection.close()


def wait_gone(port, name, timeout=5.0):
    """Waits until the API no longer shows queue `name` (a passive declare would use it)."""
    deadline = time.monotonic() + timeout
    while api_call(port, "GET", f"/api/queues/%2F/{name}")[0] != 404:
        assert time.monotonic() < deadline, f"{name} was not deleted"
        time.sleep(0.05)


def test_expires_from_a_policy_deletes_unused_queues_and_the_lower_value_wins(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.queue_declare("idle.classic")
    channel.queue_declare("idle.own-longer", arguments={"x-expires": 600_000})
    channel.queue_declare("idle.quorum", durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_declare("busy.classic")
    set_policy(port, "idle", r"^idle\.", {"expires": 300})
    for name in ("idle.classic", "idle.own-longer", "idle.quorum"):
        wait_gone(port, name)
    assert api_call(port, "GET", "/api/queues/%2F/busy.classic")[0] == 200, "a queue it does not match stays"


def test_a_dead_letter_strategy_from_a_policy_keeps_a_quorum_queues_dead_letters_until_routed(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.queue_declare("qq.safe", durable=True, arguments={"x-queue-type": "quorum"})
    set_policy(port, "safe", r"^qq\.safe$", {"dead-letter-exchange": "", "dead-letter-routing-key": "late-target",
                                              "dead-letter-strategy": "at-least-once",
                                              "overflow": "reject-publish"}, apply_to="quorum_queues")
    assert queue_json(port, "qq.safe")["effective_policy_definition"]["dead-letter-strategy"] == "at-least-once"
    publish(channel, "qq.safe", ["kept until routed"])
    wait_count(connection, "qq.safe", 1)
    method, _, _ = channel.basic_get("qq.safe", auto_ack=False)
    channel.basic_nack(method.delivery_tag, requeue=False)
    time.sleep(1.5)
    # No queue takes it yet: at-least-once keeps it (at-most-once would have dropped it).
    channel.queue_declare("late-target", durable=True)
    wait_count(connection, "late-target", 1, timeout=8.0)
    assert get_message(channel, "late-target")[2] == b"kept until routed"


def test_a_new_stream_takes_its_segment_size_from_a_policy(broker_with_api):
    connection, port, _ = broker_with_api
    set_policy(port, "small", r"^st-small$", {"stream-max-segment-size-bytes": 1024, "max-length-bytes": 3000},
               apply_to="streams")
    channel = connection.channel()
    channel.queue_declare("st-small", durable=True, arguments={"x-queue-type": "stream"})
    publish(channel, "st-small", [RECORD_BODY] * 60)
    # Segments of the default 64 MiB would keep all 60: retention deletes whole segments.
    kept = wait_below(connection, "st-small", 60)
    assert 0 < kept <= 30, kept


def test_queue_mode_and_version_are_accepted_with_no_effect(broker_with_api):
    connection, port, _ = broker_with_api
    channel = connection.channel()
    channel.queue_declare("lazy")
    set_policy(port, "lazy", "^lazy$", {"queue-mode": "lazy", "queue-version": 2, "max-length": 1})
    status, listed = api_call(port, "GET", "/api/policies/%2F/lazy")
    assert status == 200, listed
    assert {"queue-mode", "queue-version"} <= set(listed["no_effect"]), listed
    assert queue_json(port, "lazy")["policy"] == "lazy", "the policy applies; those keys do nothing"
    publish(channel, "lazy", ["1", "2"])
    wait_count(connection, "lazy", 1)


def test_policies_survive_a_restart_and_apply_to_recovered_queues(tmp_path):
    http = free_port()
    args = ["--http-listen", f"127.0.0.1:{http}"]
    with run_broker(tmp_path, args) as (_, parameters):
        wait_for_port(http)
        connection = pika.BlockingConnection(parameters)
        channel = connection.channel()
        channel.queue_declare("kept", durable=True)
        set_policy(http, "limit", "^kept$", {"max-length": 2})
        connection.close()
    with run_broker(tmp_path, args) as (_, parameters):
        wait_for_port(http)
        connection = pika.BlockingConnection(parameters)
        channel = connection.channel()
        assert queue_json(http, "kept")["policy"] == "limit"
        publish(channel, "kept", ["1", "2", "3"])
        wait_count(connection, "kept", 2)
        assert get_message(channel, "kept")[2] == b"2", "the oldest was dropped"
        connection.close()
