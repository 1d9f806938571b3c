"""Warren against pika (Python, BlockingConnection): core AMQP 0-9-1 behaviour.

Every assertion states what RabbitMQ does for the same frames.
"""

import signal
import time

import pika
import pika.exceptions
import pytest

from pika_helpers import Deliveries, get_message, message_count, pump_until, pump_for, assert_closed_by_broker
from pika.spec import BasicProperties

WAIT_S = 5.0  # how long to wait for something that should happen
SETTLE_S = 0.3  # how long to watch for something that should not happen


# --------------------------------------------------------------------------- helpers


def declare_queue(channel, name, **kwargs):
    channel.queue_declare(queue=name, **kwargs)
    return name


def publish(channel, routing_key, body, exchange="", **kwargs):
    channel.basic_publish(exchange=exchange, routing_key=routing_key, body=body, **kwargs)


def get_bodies(channel, queue, expected_count):
    """Takes exactly expected_count messages (auto-ack), then asserts the queue is empty."""
    bodies = [get_message(channel, queue)[2] for _ in range(expected_count)]
    assert channel.basic_get(queue=queue, auto_ack=True) == (None, None, None), (
        f"{queue!r} holds more than the {expected_count} expected messages"
    )
    return bodies


def assert_connection_usable(connection, names):
    """A new channel on the connection can declare, publish and get."""
    channel = connection.channel()
    queue = declare_queue(channel, names("after-error"))
    publish(channel, queue, b"still alive")
    assert get_message(channel, queue)[2] == b"still alive"
    channel.close()


# --------------------------------------------------------------------------- topology


def test_direct_exchange_routes_to_bound_queue_by_key(channel, names):
    exchange, queue = names("x"), names("q")
    channel.exchange_declare(exchange=exchange, exchange_type="direct")
    declare_queue(channel, queue)
    channel.queue_bind(queue=queue, exchange=exchange, routing_key="green")

    publish(channel, "red", b"unbound key", exchange=exchange)
    publish(channel, "green", b"bound key", exchange=exchange)

    method, _, body = get_message(channel, queue)
    assert body == b"bound key"
    assert method.exchange == exchange
    assert method.routing_key == "green"
    assert get_bodies(channel, queue, 0) == []


def test_topic_star_matches_one_word_and_hash_matches_zero_or_more(channel, names):
    exchange = names("topic")
    channel.exchange_declare(exchange=exchange, exchange_type="topic")
    patterns = {"star": "stock.*.nyse", "hash": "stock.#", "tail": "#.error"}
    queues = {}
    for label, pattern in patterns.items():
        queues[label] = declare_queue(channel, names(label))
        channel.queue_bind(queue=queues[label], exchange=exchange, routing_key=pattern)

    keys = ["stock.ibm.nyse", "stock.nyse", "stock.ibm.x.nyse", "stock", "bond.ibm.nyse", "app.db.error", "error"]
    for key in keys:
        publish(channel, key, key.encode(), exchange=exchange)

    assert get_bodies(channel, queues["star"], 1) == [b"stock.ibm.nyse"]
    assert get_bodies(channel, queues["hash"], 4) == [b"stock.ibm.nyse", b"stock.nyse", b"stock.ibm.x.nyse", b"stock"]
    assert get_bodies(channel, queues["tail"], 2) == [b"app.db.error", b"error"]


def test_fanout_delivers_a_copy_to_every_bound_queue(channel, names):
    exchange = names("fanout")
    channel.exchange_declare(exchange=exchange, exchange_type="fanout")
    first, second = declare_queue(channel, names("q1")), declare_queue(channel, names("q2"))
    channel.queue_bind(queue=first, exchange=exchange, routing_key="ignored")
    channel.queue_bind(queue=second, exchange=exchange)

    publish(channel, "any-key", b"broadcast", exchange=exchange)

    assert get_bodies(channel, first, 1) == [b"broadcast"]
    assert get_bodies(channel, second, 1) == [b"broadcast"]


# --------------------------------------------------------------------------- consuming


def test_consumed_message_is_gone_once_acked(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    publish(channel, queue, b"hello")
    deliveries = Deliveries()
    tag = channel.basic_consume(queue=queue, on_message_callback=deliveries)

    deliveries.wait_for(connection, 1)
    method, _, body = deliveries[0]
    assert body == b"hello"
    assert method.consumer_tag == tag
    assert method.redelivered is False
    channel.basic_ack(method.delivery_tag)
    channel.basic_cancel(tag)
    channel.close()  # an unacked message would be requeued here

    assert message_count(connection, queue) == 0


def test_nack_with_requeue_redelivers_same_body_flagged_redelivered(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    publish(channel, queue, b"try again")
    deliveries = Deliveries()
    channel.basic_consume(queue=queue, on_message_callback=deliveries)

    deliveries.wait_for(connection, 1)
    first, _, _ = deliveries[0]
    assert first.redelivered is False
    channel.basic_nack(first.delivery_tag, requeue=True)

    deliveries.wait_for(connection, 2)
    second, _, body = deliveries[1]
    assert body == b"try again"
    assert second.redelivered is True
    assert second.delivery_tag != first.delivery_tag
    channel.basic_ack(second.delivery_tag)
    pump_for(connection, SETTLE_S)
    assert len(deliveries) == 2


def test_basic_get_returns_the_message_then_get_empty(channel, names):
    queue = declare_queue(channel, names("q"))
    publish(channel, queue, b"one")
    publish(channel, queue, b"two")

    method, _, body = get_message(channel, queue, auto_ack=False)
    assert body == b"one"
    assert method.redelivered is False
    assert method.message_count == 1  # messages still in the queue
    channel.basic_ack(method.delivery_tag)

    method, _, body = get_message(channel, queue)
    assert body == b"two"
    assert method.message_count == 0

    assert channel.basic_get(queue=queue, auto_ack=True) == (None, None, None)


def test_prefetch_count_caps_unacked_deliveries(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    for i in range(5):
        publish(channel, queue, f"m{i}".encode())
    channel.basic_qos(prefetch_count=2)
    deliveries = Deliveries()
    channel.basic_consume(queue=queue, on_message_callback=deliveries)

    deliveries.wait_for(connection, 2)
    pump_for(connection, SETTLE_S)
    assert [body for _, _, body in deliveries] == [b"m0", b"m1"]

    channel.basic_ack(deliveries[0][0].delivery_tag)
    deliveries.wait_for(connection, 3)
    pump_for(connection, SETTLE_S)
    assert len(deliveries) == 3

    channel.basic_ack(deliveries[2][0].delivery_tag, multiple=True)
    deliveries.wait_for(connection, 5)
    assert [body for _, _, body in deliveries] == [f"m{i}".encode() for i in range(5)]


def test_properties_and_headers_round_trip(channel, names):
    queue = declare_queue(channel, names("q"))
    headers = {
        "string": "héllo",
        "int": 42,
        "negative": -7,
        "int64": 2**40,
        "true": True,
        "false": False,
        "array": [1, "two", True, {"in": "array"}],
        "table": {"nested": {"deeper": "yes", "n": 3}, "list": ["a", "b"]},
    }
    sent = BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers=headers,
        delivery_mode=2,
        priority=5,
        correlation_id="corr-123",
        reply_to="reply.queue",
        message_id="msg-456",
        timestamp=1_700_000_000,
        type="order.created",
        app_id="pika-test",
    )
    publish(channel, queue, b'{"k": 1}', properties=sent)

    _, received, body = get_message(channel, queue)

    assert body == b'{"k": 1}'
    assert received.headers == headers
    for field in ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
                  "reply_to", "message_id", "timestamp", "type", "app_id"):
        assert getattr(received, field) == getattr(sent, field), field
    assert received.expiration is None and received.user_id is None


def test_unacked_messages_are_requeued_flagged_redelivered_when_channel_closes(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    publish(channel, queue, b"unfinished")
    consumer = connection.channel()
    deliveries = Deliveries()
    consumer.basic_consume(queue=queue, on_message_callback=deliveries)
    deliveries.wait_for(connection, 1)
    consumer.close()

    method, _, body = get_message(channel, queue)
    assert body == b"unfinished"
    assert method.redelivered is True


def test_reject_without_requeue_drops_the_message(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    publish(channel, queue, b"poison")
    method, _, _ = get_message(channel, queue, auto_ack=False)

    channel.basic_reject(method.delivery_tag, requeue=False)

    assert message_count(connection, queue) == 0
    assert channel.basic_get(queue=queue, auto_ack=True) == (None, None, None)


@pytest.mark.parametrize("size", [0, 1_000_000], ids=["empty", "1MB-many-frames"])
def test_body_round_trips_at_size(channel, names, size):
    queue = declare_queue(channel, names("q"))
    body = bytes(i % 251 for i in range(size))

    publish(channel, queue, body)

    assert get_message(channel, queue)[2] == body


def test_server_named_exclusive_queue_is_locked_to_and_deleted_with_its_connection(broker, channel, names):
    queue = channel.queue_declare(queue="", exclusive=True).method.queue
    assert queue.startswith("amq.gen-")
    other = pika.BlockingConnection(broker)
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
            other.channel().queue_declare(queue=queue, passive=True)
        assert_closed_by_broker(excinfo, 405, "RESOURCE_LOCKED")

        channel.connection.close()

        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
            other.channel().queue_declare(queue=queue, passive=True)
        assert_closed_by_broker(excinfo, 404, "NOT_FOUND")
    finally:
        other.close()


def test_deleting_a_consumed_queue_sends_basic_cancel_to_the_consumer(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    cancelled = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = channel.basic_consume(queue=queue, on_message_callback=Deliveries())

    deleter = connection.channel()
    deleter.queue_delete(queue=queue)

    assert pump_until(connection, lambda: cancelled), "no basic.cancel from the broker"
    assert cancelled[0].consumer_tag == tag
    assert channel.is_open


def test_purge_and_delete_report_message_counts(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    for i in range(3):
        publish(channel, queue, f"p{i}".encode())
    assert message_count(connection, queue) == 3

    assert channel.queue_purge(queue=queue).method.message_count == 3
    publish(channel, queue, b"after purge")
    assert channel.queue_delete(queue=queue).method.message_count == 1


def test_many_confirmed_messages_are_consumed_in_publish_order(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    channel.confirm_delivery()
    count = 1000
    for i in range(count):
        publish(channel, queue, str(i).encode())
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=50)
    received = []

    def on_message(ch, method, _properties, body):
        received.append(int(body))
        ch.basic_ack(method.delivery_tag)

    consumer.basic_consume(queue=queue, on_message_callback=on_message)

    assert pump_until(connection, lambda: len(received) >= count), f"got {len(received)} of {count}"
    assert received == list(range(count))


# --------------------------------------------------------------------------- publishing


def test_publisher_confirms_ack_every_publish(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    channel.confirm_delivery()

    for i in range(10):
        # With confirms on, pika blocks until basic.ack; a basic.nack raises NackError.
        publish(channel, queue, f"c{i}".encode(), mandatory=True)

    assert message_count(connection, queue) == 10


def test_mandatory_unroutable_publish_is_returned_with_312_no_route(connection, channel, names):
    exchange = names("x")
    channel.exchange_declare(exchange=exchange, exchange_type="direct")
    returned = []
    channel.add_on_return_callback(lambda _ch, method, props, body: returned.append((method, props, body)))

    publish(channel, "nowhere", b"lost", exchange=exchange, mandatory=True,
            properties=BasicProperties(correlation_id="r1"))

    assert pump_until(connection, lambda: returned), "no basic.return arrived"
    method, properties, body = returned[0]
    assert method.reply_code == 312
    assert method.reply_text == "NO_ROUTE"
    assert method.exchange == exchange
    assert method.routing_key == "nowhere"
    assert body == b"lost"
    assert properties.correlation_id == "r1"


def test_mandatory_unroutable_publish_with_confirms_is_returned_then_acked(channel, names):
    channel.confirm_delivery()

    # pika raises UnroutableError when basic.return precedes the basic.ack.
    with pytest.raises(pika.exceptions.UnroutableError) as excinfo:
        publish(channel, names("no-such-queue"), b"lost", mandatory=True)

    [returned] = excinfo.value.messages
    assert returned.method.reply_code == 312
    assert returned.method.reply_text == "NO_ROUTE"
    assert returned.body == b"lost"
    assert channel.is_open


# --------------------------------------------------------------------------- errors


def test_passive_declare_of_missing_queue_closes_only_that_channel_with_404(connection, names):
    bystander = connection.channel()
    doomed = connection.channel()

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        doomed.queue_declare(queue=names("missing"), passive=True)

    assert_closed_by_broker(excinfo, 404, "NOT_FOUND")
    assert doomed.is_closed
    assert connection.is_open
    assert bystander.is_open
    bystander.queue_declare(queue=names("bystander"))
    assert_connection_usable(connection, names)


def test_redeclaring_queue_with_different_durable_closes_channel_with_406(connection, channel, names):
    queue = declare_queue(channel, names("q"), durable=False)
    doomed = connection.channel()

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        doomed.queue_declare(queue=queue, durable=True)

    assert_closed_by_broker(excinfo, 406, "PRECONDITION_FAILED")
    assert doomed.is_closed
    assert connection.is_open
    assert channel.is_open
    assert channel.queue_declare(queue=queue, passive=True).method.queue == queue
    assert_connection_usable(connection, names)


def test_publish_to_missing_exchange_closes_channel_with_404(connection, channel, names):
    publish(channel, "key", b"nowhere", exchange=names("missing-x"))

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        # The publish has no reply: the channel.close arrives while pika awaits this one.
        channel.queue_declare(queue=names("q"))

    assert_closed_by_broker(excinfo, 404, "NOT_FOUND")
    assert connection.is_open
    assert_connection_usable(connection, names)


def test_ack_of_unknown_delivery_tag_closes_channel_with_406(connection, channel, names):
    channel.basic_ack(delivery_tag=99)

    # basic.ack has no reply: the broker's channel.close surfaces on the next call, or, when it
    # arrived before that call was made, pika refuses the call and keeps the reason.
    try:
        channel.queue_declare(queue=names("q"))
        raise AssertionError("the channel stayed open after an unknown delivery tag")
    except pika.exceptions.ChannelClosedByBroker as error:
        reason = error
    except pika.exceptions.ChannelWrongStateError:
        reason = channel._closing_reason  # pylint: disable=protected-access

    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker), reason
    assert reason.reply_code == 406, reason
    assert reason.reply_text.startswith("PRECONDITION_FAILED"), reason.reply_text
    assert connection.is_open
    assert_connection_usable(connection, names)


def test_declaring_a_queue_with_reserved_amq_prefix_is_refused_with_403(connection, channel, names):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue="amq." + names("q"))

    assert_closed_by_broker(excinfo, 403, "ACCESS_REFUSED")
    assert_connection_usable(connection, names)


# --------------------------------------------------------------------------- broker lifecycle


def test_broker_shutdown_closes_connections_with_320_connection_forced(private_broker):
    process, parameters = private_broker
    connection = pika.BlockingConnection(parameters)

    process.send_signal(signal.SIGTERM)

    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as excinfo:
        pump_until(connection, lambda: False)
    assert excinfo.value.reply_code == 320
    assert excinfo.value.reply_text.startswith("CONNECTION_FORCED")
    assert process.wait(timeout=10) == 0
