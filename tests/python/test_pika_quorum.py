"""Warren against pika (Python, BlockingConnection): quorum queues on one node.

A quorum queue is declared with `x-queue-type: quorum`; its messages and state go through a
Raft log. The assertions follow RabbitMQ's quorum queues (declare rules, x-delivery-limit with
RabbitMQ 4's default of 20, x-delivery-count on redeliveries, dead-letter strategies, TTLs,
length limits and overflow, single active consumer, x-expires) plus Warren's extension:
x-max-priority as strict levels. Confirms are only sent after the commit.
"""

import time

import pika
import pika.exceptions
import pytest

from conftest import run_broker
from pika_helpers import Deliveries, assert_closed_by_broker, get_message, message_count, pump_for, pump_until
from pika.spec import BasicProperties

SETTLE_S = 0.3  # how long to watch for something that should not happen


def declare_quorum(channel, name, **arguments):
    channel.queue_declare(queue=name, durable=True, arguments={"x-queue-type": "quorum", **arguments})
    return name


def dead_letter_target(channel, names):
    """A fanout exchange and a classic queue bound to it; returns (exchange, queue)."""
    exchange, queue = names("dlx"), names("dlq")
    channel.exchange_declare(exchange=exchange, exchange_type="fanout")
    channel.queue_declare(queue=queue, durable=True)
    channel.queue_bind(queue=queue, exchange=exchange)
    return exchange, queue


def wait_count(connection, queue, count):
    assert pump_until(connection, lambda: message_count(connection, queue) == count), (
        f"{queue}: {message_count(connection, queue)} ready, expected {count}"
    )


def newest_death(properties):
    return properties.headers["x-death"][0]


@pytest.mark.parametrize(
    "options",
    [{"durable": False}, {"durable": True, "exclusive": True}, {"durable": True, "auto_delete": True}],
)
def test_quorum_queues_must_be_durable_and_neither_exclusive_nor_auto_delete(connection, names, options):
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue=names("q"), arguments={"x-queue-type": "quorum"}, **options)
    assert_closed_by_broker(excinfo, 406, "PRECONDITION_FAILED - invalid property")


@pytest.mark.parametrize(
    "argument, value",
    [
        ("x-overflow", "reject-publish-dlx"),
        ("x-dead-letter-strategy", "sometimes"),
        ("x-queue-leader-locator", "somewhere"),
        ("x-quorum-initial-group-size", 0),
        ("x-delivery-limit", -1),
    ],
)
def test_bad_quorum_arguments_are_406(connection, names, argument, value):
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        declare_quorum(channel, names("q"), **{argument: value})
    assert_closed_by_broker(excinfo, 406, f"PRECONDITION_FAILED - invalid arg '{argument}'")


def test_the_accepted_arguments_are_compared_on_redeclare(connection, channel, names):
    queue = declare_quorum(
        channel,
        names("q"),
        **{"x-quorum-initial-group-size": 3, "x-queue-leader-locator": "balanced", "x-delivery-limit": 5},
    )
    declare_quorum(
        channel, queue, **{"x-quorum-initial-group-size": 3, "x-queue-leader-locator": "balanced", "x-delivery-limit": 5}
    )
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        declare_quorum(channel, queue, **{"x-quorum-initial-group-size": 3, "x-delivery-limit": 6})
    assert_closed_by_broker(excinfo, 406, "PRECONDITION_FAILED")


def test_confirmed_publishes_are_got_in_order_and_nack_requeues_in_place_with_a_delivery_count(connection, names):
    channel = connection.channel()
    channel.confirm_delivery()
    queue = declare_quorum(channel, names("q"))
    for body in (b"one", b"two"):
        channel.basic_publish(exchange="", routing_key=queue, body=body)
    method, properties, body = get_message(channel, queue, auto_ack=False)
    assert (body, method.redelivered, method.message_count) == (b"one", False, 1)
    assert not (properties.headers or {}).get("x-delivery-count")
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, properties, body = get_message(channel, queue, auto_ack=False)
    assert (body, method.redelivered, properties.headers["x-delivery-count"]) == (b"one", True, 1)
    channel.basic_ack(method.delivery_tag)
    assert get_message(channel, queue)[2] == b"two"
    assert message_count(connection, queue) == 0


def test_the_default_delivery_limit_is_twenty_then_the_message_is_dead_lettered(connection, channel, names):
    exchange, dlq = dead_letter_target(channel, names)
    queue = declare_quorum(channel, names("q"), **{"x-dead-letter-exchange": exchange})
    channel.basic_publish(exchange="", routing_key=queue, body=b"poison")
    for attempt in range(21):
        method, properties, body = get_message(channel, queue, auto_ack=False)
        assert (properties.headers or {}).get("x-delivery-count", 0) == attempt
        channel.basic_reject(method.delivery_tag, requeue=True)
    wait_count(connection, dlq, 1)
    assert message_count(connection, queue) == 0
    _, properties, body = get_message(channel, dlq)
    assert body == b"poison"
    assert newest_death(properties)["reason"] == "delivery_limit"


def test_consumers_get_at_most_their_prefetch_then_more_as_they_ack(connection, names):
    channel = connection.channel()
    channel.confirm_delivery()
    queue = declare_quorum(channel, names("q"))
    for i in range(6):
        channel.basic_publish(exchange="", routing_key=queue, body=str(i).encode())
    consumer_channel = connection.channel()
    consumer_channel.basic_qos(prefetch_count=2)
    deliveries = Deliveries()
    consumer_channel.basic_consume(queue=queue, on_message_callback=deliveries)
    deliveries.wait_for(connection, 2)
    pump_for(connection, SETTLE_S)
    assert deliveries.bodies() == [b"0", b"1"]
    for method, _, _ in list(deliveries):
        consumer_channel.basic_ack(method.delivery_tag)
    deliveries.wait_for(connection, 4)
    assert deliveries.bodies()[:4] == [b"0", b"1", b"2", b"3"]


def test_ttl_and_expiration_dead_letter_expired_messages(connection, channel, names):
    exchange, dlq = dead_letter_target(channel, names)
    queue = declare_quorum(channel, names("q"), **{"x-dead-letter-exchange": exchange, "x-message-ttl": 100})
    channel.basic_publish(exchange="", routing_key=queue, body=b"queue ttl")
    channel.basic_publish(exchange="", routing_key=queue, body=b"own", properties=BasicProperties(expiration="20"))
    wait_count(connection, dlq, 2)
    reasons = {get_message(channel, dlq)[1].headers["x-death"][0]["reason"] for _ in range(2)}
    assert reasons == {"expired"}


def test_max_length_drops_the_head_and_reject_publish_nacks(connection, names):
    channel = connection.channel()
    channel.confirm_delivery()
    queue = declare_quorum(channel, names("q"), **{"x-max-length": 2})
    for body in (b"1", b"2", b"3"):
        channel.basic_publish(exchange="", routing_key=queue, body=body)
    assert [get_message(channel, queue)[2] for _ in range(2)] == [b"2", b"3"]
    refusing = declare_quorum(channel, names("r"), **{"x-max-length": 1, "x-overflow": "reject-publish"})
    channel.basic_publish(exchange="", routing_key=refusing, body=b"kept")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish(exchange="", routing_key=refusing, body=b"refused")
    assert message_count(connection, refusing) == 1


def test_at_least_once_dead_lettering_waits_for_a_route(connection, channel, names):
    exchange = names("dlx")
    queue = declare_quorum(
        channel,
        names("q"),
        **{
            "x-dead-letter-exchange": exchange,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        },
    )
    channel.basic_publish(exchange="", routing_key=queue, body=b"kept")
    method, _, _ = get_message(channel, queue, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)
    pump_for(connection, SETTLE_S)
    dlq = names("dlq")
    channel.exchange_declare(exchange=exchange, exchange_type="fanout")
    channel.queue_declare(queue=dlq, durable=True)
    channel.queue_bind(queue=dlq, exchange=exchange)
    wait_count(connection, dlq, 1)
    _, properties, body = get_message(channel, dlq)
    assert body == b"kept" and newest_death(properties)["reason"] == "rejected"


def test_single_active_consumer_and_consumer_priorities(connection, channel, names):
    queue = declare_quorum(channel, names("sac"), **{"x-single-active-consumer": True})
    first, second = Deliveries(), Deliveries()
    first_channel = connection.channel()
    first_channel.basic_consume(queue=queue, on_message_callback=first, auto_ack=True)
    connection.channel().basic_consume(queue=queue, on_message_callback=second, auto_ack=True)
    for body in (b"a", b"b"):
        channel.basic_publish(exchange="", routing_key=queue, body=body)
    first.wait_for(connection, 2)
    first_channel.close()
    channel.basic_publish(exchange="", routing_key=queue, body=b"c")
    second.wait_for(connection, 1)
    assert (first.bodies(), second.bodies()) == ([b"a", b"b"], [b"c"])

    ranked = declare_quorum(channel, names("prio"))
    low, high = Deliveries(), Deliveries()
    connection.channel().basic_consume(queue=ranked, on_message_callback=low, auto_ack=True)
    connection.channel().basic_consume(
        queue=ranked, on_message_callback=high, auto_ack=True, arguments={"x-priority": 5}
    )
    for body in (b"1", b"2", b"3"):
        channel.basic_publish(exchange="", routing_key=ranked, body=body)
    high.wait_for(connection, 3)
    assert low == []


def test_max_priority_is_strict_on_quorum_queues_too(connection, channel, names):
    queue = declare_quorum(channel, names("q"), **{"x-max-priority": 10})
    for body, priority in ((b"low", 1), (b"high", 9), (b"mid", 5)):
        channel.basic_publish(exchange="", routing_key=queue, body=body, properties=BasicProperties(priority=priority))
    wait_count(connection, queue, 3)
    assert [get_message(channel, queue)[2] for _ in range(3)] == [b"high", b"mid", b"low"]


def test_purge_and_an_unused_queue_expiring(connection, channel, names):
    queue = declare_quorum(channel, names("q"))
    for body in (b"1", b"2"):
        channel.basic_publish(exchange="", routing_key=queue, body=body)
    wait_count(connection, queue, 2)
    assert channel.queue_purge(queue).method.message_count == 2
    expiring = declare_quorum(channel, names("x"), **{"x-expires": 200})
    time.sleep(0.8)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        connection.channel().queue_declare(queue=expiring, passive=True)
    assert_closed_by_broker(excinfo, 404, "NOT_FOUND")


def test_a_restart_keeps_the_messages_and_redelivers_the_unacked(tmp_path):
    with run_broker(tmp_path) as (_, parameters):
        connection = pika.BlockingConnection(parameters)
        channel = connection.channel()
        channel.confirm_delivery()
        declare_quorum(channel, "q")
        for body in (b"held", b"ready"):
            channel.basic_publish(exchange="", routing_key="q", body=body)
        get_message(channel, "q", auto_ack=False)
    with run_broker(tmp_path) as (_, parameters):
        connection = pika.BlockingConnection(parameters)
        channel = connection.channel()
        method, _, body = get_message(channel, "q")
        assert (body, method.redelivered) == (b"held", True)
        method, _, body = get_message(channel, "q")
        assert (body, method.redelivered) == (b"ready", False)
        connection.close()
