"""Warren against pika: RabbitMQ's 0-9-1 semantics where a broker may choose, done as
RabbitMQ does them. The consumer timeout (406 on the channel, the delivery requeued),
argument values RabbitMQ refuses (406 PRECONDITION_FAILED), basic.recover without requeue
(540 NOT_IMPLEMENTED, which closes the connection; basic.get on a stream is in
test_pika_streams.py).
"""

import pika
import pika.exceptions
import pytest

from conftest import run_broker
from pika_helpers import Deliveries, get_message, pump_until, assert_closed_by_broker

TIMEOUT_MS = 1000


def closing_reason(channel):
    """The broker's channel.close, once pika has seen it."""
    return channel._closing_reason  # pylint: disable=protected-access


def hold_one_unacked(connection, queue, queue_arguments=None, consumer_arguments=None):
    """Declares queue, publishes one message and consumes it on a new channel without acking;
    returns that channel."""
    channel = connection.channel()
    channel.queue_declare(queue=queue, arguments=queue_arguments)
    channel.basic_publish(exchange="", routing_key=queue, body=b"held")
    deliveries = Deliveries()
    channel.basic_consume(queue=queue, on_message_callback=deliveries, arguments=consumer_arguments)
    deliveries.wait_for(connection, 1)
    return channel


def test_a_delivery_unacked_past_the_consumer_timeout_closes_its_channel(tmp_path, names):
    with run_broker(tmp_path, ["--consumer-timeout", str(TIMEOUT_MS)]) as (_, parameters):
        connection = pika.BlockingConnection(parameters)
        holder = hold_one_unacked(connection, names("slow"))

        assert pump_until(connection, lambda: holder.is_closed, timeout=5), "the channel stayed open"
        reason = closing_reason(holder)
        assert reason.reply_code == 406, reason
        assert reason.reply_text.startswith("PRECONDITION_FAILED - delivery acknowledgement on channel"), reason
        assert f"{TIMEOUT_MS} ms" in reason.reply_text, reason

        assert connection.is_open, "only the channel closes"
        method, _, body = get_message(connection.channel(), names("slow"))
        assert (body, method.redelivered) == (b"held", True)
        connection.close()


def test_x_consumer_timeout_on_the_queue_and_on_the_consumer(connection, names):
    short = {"x-consumer-timeout": TIMEOUT_MS}
    by_queue = hold_one_unacked(connection, names("q"), queue_arguments=short)
    by_consumer = hold_one_unacked(connection, names("c"), consumer_arguments=short)
    untimed = hold_one_unacked(connection, names("untimed"))

    assert pump_until(connection, lambda: by_queue.is_closed and by_consumer.is_closed, timeout=5)
    assert closing_reason(by_queue).reply_code == 406
    assert closing_reason(by_consumer).reply_code == 406
    assert untimed.is_open, "the broker's own timeout (30 minutes) has not passed"


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-queue-mode": "bogus"},
        {"x-queue-version": 3},
        {"x-message-ttl": 2**32},
        {"x-expires": 0},
        {"x-max-priority": 256},
        {"x-consumer-timeout": 0},
        {"x-queue-leader-locator": "nearest", "x-queue-type": "quorum"},
        # Validated whatever the queue's type, as RabbitMQ does.
        {"x-max-age": "forever"},
        {"x-max-in-memory-length": -1},
    ],
)
def test_argument_values_rabbitmq_refuses_are_406(connection, names, arguments):
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue=names("q"), durable=True, arguments=arguments)
    assert_closed_by_broker(excinfo, 406, "PRECONDITION_FAILED - invalid arg")
    assert next(iter(arguments)) in excinfo.value.reply_text


def test_argument_values_rabbitmq_accepts(connection, names):
    channel = connection.channel()
    channel.queue_declare(
        queue=names("q"),
        arguments={"x-queue-mode": "lazy", "x-queue-version": 2, "x-max-priority": 0, "x-message-ttl": 2**32 - 1},
    )


def test_recover_without_requeue_is_540_and_closes_the_connection(connection, names):
    channel = connection.channel()
    queue = names("q")
    channel.queue_declare(queue=queue)
    channel.basic_publish(exchange="", routing_key=queue, body=b"a")
    get_message(channel, queue, auto_ack=False)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as excinfo:
        channel.basic_recover(requeue=False)
    assert excinfo.value.reply_code == 540
    assert excinfo.value.reply_text.startswith("NOT_IMPLEMENTED")
