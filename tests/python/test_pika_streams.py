"""Warren against pika (Python, BlockingConnection): streams.

A stream is a queue declared with `x-queue-type: stream`: an append-only log that consumers
read from an offset, where acks only return credit and retention (by size or age, whole
segments at a time) is what removes messages. The assertions follow RabbitMQ's streams over
AMQP 0-9-1 (declare rules, retention arguments, `x-stream-offset` specs and header, the
prefetch and ack requirements, refusal of basic.get), plus Warren's extensions: exact tag
filtering (no Bloom-filter false positives) and named consumer groups (`x-consumer-group`)
whose committed offsets the broker keeps, durably.
"""

import calendar
import datetime
import time
import zlib

import pika
import pika.exceptions
import pytest

from conftest import run_broker
from pika_helpers import Deliveries, assert_closed_by_broker, message_count, pump_for, pump_until
from pika.spec import BasicProperties

SETTLE_S = 0.3  # how long to watch for something that should not happen
OFFSET = "x-stream-offset"
TAG = "x-stream-filter-value"


# --------------------------------------------------------------------------- helpers


def declare_stream(channel, name, **arguments):
    channel.queue_declare(queue=name, durable=True, arguments={"x-queue-type": "stream", **arguments})
    return name


def publish(channel, stream, body, tag=None, **properties):
    headers = dict(properties.pop("headers", None) or {})
    if tag is not None:
        headers[TAG] = tag
    if headers:
        properties["headers"] = headers
    channel.basic_publish(
        exchange="",
        routing_key=stream,
        body=body,
        properties=BasicProperties(**properties) if properties else None,
    )


def publish_many(channel, stream, count, start=0, prefix="m"):
    """Publishes count messages prefix<start>..; returns their bodies."""
    bodies = [f"{prefix}{i}".encode() for i in range(start, start + count)]
    for body in bodies:
        publish(channel, stream, body)
    return bodies


def assert_waits_then_gets_new(connection, channel, stream, deliveries, start, count):
    """A consumer at the end of the stream gets nothing until a publish, then exactly the
    count new messages, offsets start.. (bodies m<start>..)."""
    pump_for(connection, SETTLE_S)
    assert deliveries.bodies() == []
    bodies = publish_many(channel, stream, count, start=start)
    deliveries.wait_for(connection, count)
    pump_for(connection, SETTLE_S)
    assert (deliveries.bodies(), deliveries.offsets()) == (bodies, list(range(start, start + count)))


def publish_fast(connection, stream, bodies, tags=None):
    """Publishes without waiting for a confirm per message, then confirms the last one: on
    one channel publishes are handled in order, so all of them are in the stream after."""
    channel = connection.channel()
    tags = tags or [None] * len(bodies)
    for body, tag in list(zip(bodies, tags))[:-1]:
        publish(channel, stream, body, tag=tag)
    channel.confirm_delivery()
    publish(channel, stream, bodies[-1], tag=tags[-1])
    channel.close()


def confirmed_channel(connection):
    channel = connection.channel()
    channel.confirm_delivery()
    return channel


class StreamDeliveries(Deliveries):
    """Records deliveries; acks each one at once when ack=True."""

    def __init__(self, ack=True):
        super().__init__()
        self.ack = ack

    def __call__(self, channel, method, properties, body):
        super().__call__(channel, method, properties, body)
        if self.ack:
            channel.basic_ack(method.delivery_tag)

    def offsets(self):
        return [properties.headers[OFFSET] for _, properties, _ in self]

    def tag_of(self, offset):
        for method, properties, _ in self:
            if properties.headers[OFFSET] == offset:
                return method.delivery_tag
        raise AssertionError(f"offset {offset} was not delivered (got {self.offsets()})")


def consume(connection, stream, prefetch=100, ack=True, **arguments):
    """A consumer on its own channel; returns (channel, deliveries, consumer tag)."""
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    deliveries = StreamDeliveries(ack=ack)
    tag = channel.basic_consume(queue=stream, on_message_callback=deliveries, arguments=arguments or None)
    return channel, deliveries, tag


def read_all(connection, stream, expected, **arguments):
    """Consumes with these arguments until `expected` deliveries arrived, checks that no more
    come, cancels; returns the deliveries."""
    channel, deliveries, tag = consume(connection, stream, **arguments)
    deliveries.wait_for(connection, expected)
    pump_for(connection, SETTLE_S)
    assert len(deliveries) == expected, deliveries.offsets()
    channel.basic_cancel(tag)
    channel.close()
    return deliveries


def assert_refused(excinfo, *fragments):
    assert_closed_by_broker(excinfo, 406, "PRECONDITION_FAILED")
    for fragment in fragments:
        assert fragment in excinfo.value.reply_text, excinfo.value.reply_text


def assert_absent(connection, name):
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue=name, passive=True)
    assert excinfo.value.reply_code == 404


def sleep_past_next_second(margin=0.05):
    """Sleeps until just past the next whole second; returns that second (epoch seconds)."""
    second = int(time.time()) + 1
    time.sleep(max(0.0, second + margin - time.time()))
    return second


# --------------------------------------------------------------------------- declare


def test_declare_stream_and_message_count_is_what_it_holds(connection, names):
    channel = confirmed_channel(connection)
    declared = channel.queue_declare(queue=names("s"), durable=True, arguments={"x-queue-type": "stream"})
    stream = declared.method.queue
    assert declared.method.message_count == 0
    publish_many(channel, stream, 7)
    assert message_count(connection, stream) == 7
    # Redeclaring with the same arguments is fine and reports the messages held.
    again = channel.queue_declare(queue=stream, durable=True, arguments={"x-queue-type": "stream"})
    assert again.method.message_count == 7


@pytest.mark.parametrize(
    "flags",
    [{"durable": False}, {"durable": True, "exclusive": True}, {"durable": True, "auto_delete": True}],
    ids=["non-durable", "exclusive", "auto-delete"],
)
def test_stream_must_be_durable_and_neither_exclusive_nor_auto_delete(connection, names, flags):
    channel = connection.channel()
    stream = names("s")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue=stream, arguments={"x-queue-type": "stream"}, **flags)
    assert_refused(excinfo)
    assert_absent(connection, stream)


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-max-age": "7D"},
        {"x-max-age": "12h"},
        {"x-max-age": "30m"},
        {"x-max-age": "10s"},
        {"x-max-length-bytes": 1},
        {"x-max-length-bytes": 20_000_000_000},
        {"x-stream-max-segment-size-bytes": 1024},
        {"x-max-age": "1D", "x-max-length-bytes": 1_000_000, "x-stream-max-segment-size-bytes": 65536},
    ],
    ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()),
)
def test_valid_retention_arguments_are_accepted(connection, names, arguments):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"), **arguments)
    publish(channel, stream, b"kept")
    assert message_count(connection, stream) == 1


@pytest.mark.parametrize(
    "name,value",
    [
        ("x-max-age", "12"),
        ("x-max-age", "0s"),
        ("x-max-age", "10x"),
        ("x-max-age", 10),
        ("x-max-length-bytes", 0),
        ("x-max-length-bytes", -5),
        ("x-max-length-bytes", "big"),
        ("x-stream-max-segment-size-bytes", 1023),
        ("x-stream-max-segment-size-bytes", 10),
        ("x-max-priority", 5),
        ("x-message-ttl", 1000),
        ("x-expires", 60000),
        ("x-max-length", 10),
        ("x-overflow", "reject-publish"),
        ("x-dead-letter-exchange", "dlx"),
        ("x-dead-letter-routing-key", "dead"),
        ("x-delivery-limit", 3),
        ("x-single-active-consumer", True),
    ],
)
def test_invalid_or_classic_only_arguments_are_refused_with_406(connection, names, name, value):
    channel = connection.channel()
    stream = names("s")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        declare_stream(channel, stream, **{name: value})
    assert_refused(excinfo, name)
    assert_absent(connection, stream)


@pytest.mark.parametrize(
    "arguments,differs",
    [
        ({"x-queue-type": "stream", "x-max-age": "1h", "x-max-length-bytes": 100000}, "x-max-age"),
        ({"x-queue-type": "stream", "x-max-age": "2h", "x-max-length-bytes": 5000}, "x-max-length-bytes"),
        ({"x-queue-type": "stream", "x-max-age": "2h", "x-max-length-bytes": 100000,
          "x-stream-max-segment-size-bytes": 4096}, "x-stream-max-segment-size-bytes"),
        ({"x-queue-type": "classic", "x-max-age": "2h", "x-max-length-bytes": 100000}, "x-queue-type"),
    ],
    ids=["max-age", "max-length-bytes", "segment-size", "queue-type"],
)
def test_redeclare_with_different_stream_arguments_is_refused_with_406(connection, names, arguments, differs):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"), **{"x-max-age": "2h", "x-max-length-bytes": 100000})
    publish(channel, stream, b"kept")
    other = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        other.queue_declare(queue=stream, durable=True, arguments=arguments)
    assert_refused(excinfo, "inequivalent", differs)
    assert message_count(connection, stream) == 1


def test_server_named_stream(connection):
    channel = confirmed_channel(connection)
    stream = channel.queue_declare(queue="", durable=True, arguments={"x-queue-type": "stream"}).method.queue
    assert stream.startswith("amq.gen-")
    publish(channel, stream, b"one")
    assert read_all(connection, stream, 1, **{OFFSET: "first"}).bodies() == [b"one"]
    channel.queue_delete(queue=stream)


# --------------------------------------------------------------------------- publish and offsets


def test_offsets_start_at_zero_are_dense_and_every_delivery_carries_its_offset(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    bodies = publish_many(channel, stream, 20)

    deliveries = read_all(connection, stream, 20, **{OFFSET: "first"})
    assert deliveries.bodies() == bodies
    offsets = deliveries.offsets()
    assert offsets == list(range(20))
    assert all(isinstance(offset, int) for offset in offsets)  # pika decodes 'l' as an int subclass


def test_delivery_keeps_properties_and_headers_and_adds_the_offset(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish(channel, stream, b"first")
    publish(channel, stream, b"payload", tag="blue", headers={"app": "kept", "n": 7},
            content_type="text/plain", correlation_id="c-1", delivery_mode=2)

    deliveries = read_all(connection, stream, 2, **{OFFSET: "first"})
    method, properties, body = deliveries[1]
    assert body == b"payload"
    assert method.routing_key == stream
    assert method.exchange == ""
    assert (properties.content_type, properties.correlation_id, properties.delivery_mode) == ("text/plain", "c-1", 2)
    assert properties.headers == {"app": "kept", "n": 7, TAG: "blue", OFFSET: 1}
    assert deliveries[0][1].headers == {OFFSET: 0}


def test_publish_through_an_exchange_binding_reaches_the_stream(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    exchange = names("x")
    channel.exchange_declare(exchange=exchange, exchange_type="direct")
    channel.queue_bind(queue=stream, exchange=exchange, routing_key="k")
    channel.basic_publish(exchange=exchange, routing_key="k", body=b"routed")
    channel.basic_publish(exchange=exchange, routing_key="other", body=b"not routed")
    assert message_count(connection, stream) == 1
    deliveries = read_all(connection, stream, 1, **{OFFSET: "first"})
    assert (deliveries.bodies(), deliveries[0][0].exchange) == ([b"routed"], exchange)


def test_offset_first_reads_everything_in_order(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    bodies = publish_many(channel, stream, 5)
    deliveries = read_all(connection, stream, 5, **{OFFSET: "first"})
    assert (deliveries.bodies(), deliveries.offsets()) == (bodies, [0, 1, 2, 3, 4])


def test_offset_last_starts_at_the_newest_message_then_follows(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)

    _, deliveries, _ = consume(connection, stream, **{OFFSET: "last"})
    deliveries.wait_for(connection, 1)
    pump_for(connection, SETTLE_S)
    assert (deliveries.bodies(), deliveries.offsets()) == ([b"m9"], [9])

    publish_many(channel, stream, 2, start=10)
    deliveries.wait_for(connection, 3)
    assert (deliveries.bodies(), deliveries.offsets()) == ([b"m9", b"m10", b"m11"], [9, 10, 11])


@pytest.mark.parametrize("arguments", [{OFFSET: "next"}, {}], ids=["next", "default"])
def test_offset_next_and_the_default_get_only_messages_published_after_subscribing(connection, names, arguments):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 5)

    _, deliveries, _ = consume(connection, stream, **arguments)
    assert_waits_then_gets_new(connection, channel, stream, deliveries, start=5, count=3)


@pytest.mark.parametrize("offset", [0, 4, 9], ids=lambda o: f"offset-{o}")
def test_integer_offset_starts_exactly_there(connection, names, offset):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)
    deliveries = read_all(connection, stream, 10 - offset, **{OFFSET: offset})
    assert deliveries.offsets() == list(range(offset, 10))
    assert deliveries.bodies() == [f"m{i}".encode() for i in range(offset, 10)]


@pytest.mark.parametrize("offset", [10, 11, 10**12], ids=["end", "end+1", "huge-long"])
def test_integer_offset_at_or_beyond_the_end_means_next(connection, names, offset):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)

    _, deliveries, _ = consume(connection, stream, **{OFFSET: offset})
    assert_waits_then_gets_new(connection, channel, stream, deliveries, start=10, count=2)


def test_timestamp_and_interval_offsets_start_at_the_first_message_at_or_after_that_time(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    older = publish_many(channel, stream, 3, prefix="old")
    # An AMQP timestamp has whole seconds: everything older was appended before `boundary`.
    boundary = sleep_past_next_second()
    time.sleep(1.0)  # the "older" messages are now more than a second old
    newer = publish_many(channel, stream, 4, start=3, prefix="new")

    # An interval goes back from now: 1s covers only the newer messages, 1h all of them.
    from_one_second = read_all(connection, stream, 4, **{OFFSET: "1s"})
    assert (from_one_second.bodies(), from_one_second.offsets()) == (newer, [3, 4, 5, 6])

    # pika encodes a datetime as an AMQP timestamp ('T'), in seconds, via utctimetuple().
    at = datetime.datetime.fromtimestamp(boundary, tz=datetime.timezone.utc)
    assert calendar.timegm(at.utctimetuple()) == boundary
    from_timestamp = read_all(connection, stream, 4, **{OFFSET: at})
    assert (from_timestamp.bodies(), from_timestamp.offsets()) == (newer, [3, 4, 5, 6])

    from_one_hour = read_all(connection, stream, 7, **{OFFSET: "1h"})
    assert from_one_hour.bodies() == older + newer
    assert from_one_hour.offsets() == list(range(7))


def test_timestamp_in_the_future_means_next(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 3)
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)

    _, deliveries, _ = consume(connection, stream, **{OFFSET: future})
    assert_waits_then_gets_new(connection, channel, stream, deliveries, start=3, count=1)


def test_timestamp_in_the_past_reads_everything(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    bodies = publish_many(channel, stream, 3)
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    deliveries = read_all(connection, stream, 3, **{OFFSET: past})
    assert (deliveries.bodies(), deliveries.offsets()) == (bodies, [0, 1, 2])


@pytest.mark.parametrize("value", ["middle", "5", "12", -1, True], ids=repr)
def test_malformed_offset_spec_is_refused_with_406(connection, names, value):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        consumer.basic_consume(queue=stream, on_message_callback=Deliveries(), arguments={OFFSET: value})
    assert_refused(excinfo, OFFSET)


# --------------------------------------------------------------------------- consuming


def test_acks_remove_nothing_and_another_consumer_reads_everything_again(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    bodies = publish_many(channel, stream, 6)

    first_reader = read_all(connection, stream, 6, **{OFFSET: "first"})
    assert first_reader.bodies() == bodies
    assert message_count(connection, stream) == 6

    second_reader = read_all(connection, stream, 6, **{OFFSET: "first"})
    assert (second_reader.bodies(), second_reader.offsets()) == (bodies, list(range(6)))
    assert message_count(connection, stream) == 6


def test_nack_and_reject_remove_nothing_either(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 4)
    consumer, deliveries, _ = consume(connection, stream, ack=False, **{OFFSET: "first"})
    deliveries.wait_for(connection, 4)
    tags = [method.delivery_tag for method, _, _ in deliveries]
    consumer.basic_nack(tags[0], requeue=True)
    consumer.basic_nack(tags[1], requeue=False)
    consumer.basic_reject(tags[2], requeue=True)
    consumer.basic_reject(tags[3], requeue=False)
    pump_for(connection, SETTLE_S)
    # A stream does not requeue: nothing comes again to this consumer.
    assert deliveries.offsets() == [0, 1, 2, 3]
    assert message_count(connection, stream) == 4
    assert read_all(connection, stream, 4, **{OFFSET: "first"}).offsets() == [0, 1, 2, 3]


def test_caught_up_consumer_gets_new_messages_as_they_are_published(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 3)
    _, deliveries, _ = consume(connection, stream, **{OFFSET: "first"})
    deliveries.wait_for(connection, 3)
    for i in range(3, 8):
        publish(channel, stream, f"m{i}".encode())
        deliveries.wait_for(connection, i + 1)
    pump_for(connection, SETTLE_S)
    assert deliveries.offsets() == list(range(8))
    assert deliveries.bodies() == [f"m{i}".encode() for i in range(8)]


def test_prefetch_bounds_unacked_deliveries_and_acks_return_credit(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)
    consumer, deliveries, _ = consume(connection, stream, prefetch=3, ack=False, **{OFFSET: "first"})
    deliveries.wait_for(connection, 3)
    pump_for(connection, SETTLE_S)
    assert deliveries.offsets() == [0, 1, 2]

    consumer.basic_ack(deliveries.tag_of(1), multiple=True)  # acks 0 and 1
    deliveries.wait_for(connection, 5)
    pump_for(connection, SETTLE_S)
    assert deliveries.offsets() == [0, 1, 2, 3, 4]

    # Credit returned while caught up is used by live publishes too.
    consumer.basic_ack(deliveries.tag_of(4), multiple=True)
    deliveries.wait_for(connection, 8)
    pump_for(connection, SETTLE_S)
    assert deliveries.offsets() == list(range(8))
    consumer.basic_ack(deliveries.tag_of(7), multiple=True)
    deliveries.wait_for(connection, 10)
    pump_for(connection, SETTLE_S)
    assert deliveries.offsets() == list(range(10))  # 8 and 9 unacked: one credit left
    publish_many(channel, stream, 5, start=10)
    deliveries.wait_for(connection, 11)
    pump_for(connection, SETTLE_S)
    assert deliveries.offsets() == list(range(11))
    consumer.basic_ack(deliveries.tag_of(10), multiple=True)
    deliveries.wait_for(connection, 14)
    pump_for(connection, SETTLE_S)
    assert deliveries.offsets() == list(range(14))
    consumer.basic_ack(deliveries.tag_of(13), multiple=True)
    deliveries.wait_for(connection, 15)
    pump_for(connection, SETTLE_S)
    assert deliveries.offsets() == list(range(15))


def test_consumer_with_auto_ack_is_refused_with_406(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 2)
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        consumer.basic_consume(queue=stream, on_message_callback=Deliveries(), auto_ack=True,
                               arguments={OFFSET: "first"})
    assert_refused(excinfo)
    assert message_count(connection, stream) == 2


def test_consumer_without_basic_qos_is_refused_with_406(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    consumer = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        consumer.basic_consume(queue=stream, on_message_callback=Deliveries(), arguments={OFFSET: "first"})
    assert_refused(excinfo)


@pytest.mark.parametrize("auto_ack", [False, True], ids=["ack", "no-ack"])
def test_basic_get_on_a_stream_is_540_and_closes_the_connection(broker, connection, names, auto_ack):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 2)
    getter = pika.BlockingConnection(broker)
    # As RabbitMQ: NOT_IMPLEMENTED, which closes the connection, not just the channel.
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as excinfo:
        getter.channel().basic_get(queue=stream, auto_ack=auto_ack)
    assert excinfo.value.reply_code == 540
    assert excinfo.value.reply_text.startswith("NOT_IMPLEMENTED")
    assert message_count(connection, stream) == 2


def test_purge_keeps_a_streams_messages(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 3)
    # RabbitMQ refuses queue.purge on a stream; Warren answers purge-ok with 0. Either way
    # nothing may be removed.
    try:
        purger = connection.channel()
        purger.queue_purge(queue=stream)
    except pika.exceptions.ChannelClosedByBroker:
        pass
    assert message_count(connection, stream) == 3


def test_deleting_a_stream_cancels_its_consumers_and_removes_it(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 3)
    consumer, deliveries, _ = consume(connection, stream, **{OFFSET: "first"})
    deliveries.wait_for(connection, 3)
    channel.queue_delete(queue=stream)
    assert pump_until(connection, lambda: not consumer.consumer_tags), "the consumer was not cancelled"
    assert_absent(connection, stream)


# --------------------------------------------------------------------------- filtering


def publish_tagged(channel, stream):
    """Messages tagged red, green, blue or not at all; returns [(offset, body, tag)]."""
    plan = ["red", None, "green", "blue", "red", None, "blue", "green", "red", "redder", "re", "RED"]
    sent = []
    for offset, tag in enumerate(plan):
        body = f"{offset}:{tag}".encode()
        publish(channel, stream, body, tag=tag)
        sent.append((offset, body, tag))
    return sent


@pytest.mark.parametrize(
    "arguments,wanted",
    [
        ({"x-stream-filter": "red"}, {"red"}),
        ({"x-stream-filter": ["red"]}, {"red"}),
        ({"x-stream-filter": ["green", "blue"]}, {"green", "blue"}),
        ({"x-stream-filter": "red", "x-stream-match-unfiltered": False}, {"red"}),
        ({"x-stream-filter": "red", "x-stream-match-unfiltered": True}, {"red", None}),
        ({"x-stream-filter": ["blue", "green"], "x-stream-match-unfiltered": True}, {"blue", "green", None}),
        ({"x-stream-filter": "purple"}, set()),
        ({"x-stream-filter": "purple", "x-stream-match-unfiltered": True}, {None}),
    ],
    ids=["red", "[red]", "[green,blue]", "red-no-unfiltered", "red+unfiltered", "[blue,green]+unfiltered",
         "nothing-matches", "only-unfiltered"],
)
def test_filter_delivers_exactly_the_matching_messages(connection, names, arguments, wanted):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    sent = publish_tagged(channel, stream)
    expected = [(offset, body) for offset, body, tag in sent if tag in wanted]

    # From the log...
    _, deliveries, _ = consume(connection, stream, **{OFFSET: "first"}, **arguments)
    if expected:
        deliveries.wait_for(connection, len(expected))
    pump_for(connection, SETTLE_S)
    assert list(zip(deliveries.offsets(), deliveries.bodies())) == expected

    # ...and live, to a consumer waiting at the end.
    more = publish_tagged(channel, stream)
    expected += [(offset + len(sent), body) for offset, body, tag in more if tag in wanted]
    if expected:
        deliveries.wait_for(connection, len(expected))
    pump_for(connection, SETTLE_S)
    assert list(zip(deliveries.offsets(), deliveries.bodies())) == expected
    for _, properties, _ in deliveries:
        assert properties.headers.get(TAG) in wanted


def test_filter_has_no_false_positives_even_for_tags_with_the_same_crc32(connection, names):
    # Two tags with the same CRC-32: a filter on the hash alone would deliver both.
    tag, twin = "tag-29685295", "tag-32060020"
    assert zlib.crc32(tag.encode()) == zlib.crc32(twin.encode())
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    for i in range(40):
        publish(channel, stream, f"{i}".encode(), tag=tag if i % 10 == 0 else twin)

    _, deliveries, _ = consume(connection, stream, **{OFFSET: "first", "x-stream-filter": tag})
    deliveries.wait_for(connection, 4)
    publish(channel, stream, b"live-twin", tag=twin)
    publish(channel, stream, b"live-tag", tag=tag)
    deliveries.wait_for(connection, 5)
    pump_for(connection, SETTLE_S)
    assert deliveries.offsets() == [0, 10, 20, 30, 41]
    assert deliveries.bodies() == [b"0", b"10", b"20", b"30", b"live-tag"]


def test_filter_with_many_tags_skips_non_matching_messages_under_prefetch(connection, names):
    # 300 messages over 30 tags, prefetch 2: prefetch counts only delivered messages, so
    # the consumer reaches all 10 matching ones, however far apart.
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_fast(connection, stream, [f"{i}".encode() for i in range(300)], [f"t{i % 30}" for i in range(300)])
    deliveries = read_all(connection, stream, 10, prefetch=2, **{OFFSET: "first", "x-stream-filter": "t7"})
    assert deliveries.offsets() == list(range(7, 300, 30))


@pytest.mark.parametrize(
    "arguments",
    [{"x-stream-filter": 5}, {"x-stream-filter": ["a", 5]}, {"x-stream-filter": "a", "x-stream-match-unfiltered": "yes"}],
    ids=["filter-int", "filter-array-with-int", "match-unfiltered-string"],
)
def test_malformed_filter_arguments_are_refused_with_406(connection, names, arguments):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        consumer.basic_consume(queue=stream, on_message_callback=Deliveries(), arguments=arguments)
    assert_refused(excinfo, "x-stream-")


# --------------------------------------------------------------------------- consumer groups


GROUP = "x-consumer-group"


def test_group_resumes_at_its_committed_offset_after_the_consumer_restarts(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)

    consumer, deliveries, tag = consume(connection, stream, ack=False, **{GROUP: "g", OFFSET: "first"})
    deliveries.wait_for(connection, 10)
    # Acks 0, 1, 2, 4 and 5 but not 3: everything below 3 is acked, so the group commits 3.
    consumer.basic_ack(deliveries.tag_of(2), multiple=True)
    consumer.basic_ack(deliveries.tag_of(4))
    consumer.basic_ack(deliveries.tag_of(5))
    consumer.basic_cancel(tag)
    consumer.close()

    # The group's offset wins over x-stream-offset ("next" would get nothing).
    resumed = read_all(connection, stream, 7, **{GROUP: "g", OFFSET: "next"})
    assert resumed.offsets() == [3, 4, 5, 6, 7, 8, 9]

    # That consumer acked everything: the group now resumes at the end, and sees new messages.
    publish_many(channel, stream, 2, start=10)
    again = read_all(connection, stream, 2, **{GROUP: "g", OFFSET: "first"})
    assert again.offsets() == [10, 11]


def test_group_without_a_committed_offset_starts_at_x_stream_offset(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)
    assert read_all(connection, stream, 1, **{GROUP: "from-last", OFFSET: "last"}).offsets() == [9]
    assert read_all(connection, stream, 4, **{GROUP: "from-six", OFFSET: 6}).offsets() == [6, 7, 8, 9]
    # The default start is next: nothing until a publish.
    _, deliveries, _ = consume(connection, stream, **{GROUP: "from-next"})
    assert_waits_then_gets_new(connection, channel, stream, deliveries, start=10, count=1)


def test_group_has_one_active_consumer_and_the_next_takes_over_from_the_committed_offset(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)

    first, first_deliveries, _ = consume(connection, stream, prefetch=5, ack=False, **{GROUP: "g", OFFSET: "first"})
    first_deliveries.wait_for(connection, 5)
    _, second_deliveries, _ = consume(connection, stream, prefetch=100, **{GROUP: "g", OFFSET: "first"})
    pump_for(connection, SETTLE_S)
    assert first_deliveries.offsets() == [0, 1, 2, 3, 4]
    assert second_deliveries.offsets() == [], "only one consumer of a group is active"

    first.basic_ack(first_deliveries.tag_of(2), multiple=True)  # commits 3
    first_deliveries.wait_for(connection, 8)
    pump_for(connection, SETTLE_S)
    assert first_deliveries.offsets() == list(range(8))
    assert second_deliveries.offsets() == []

    # The active consumer goes away with 3..7 unacked: the second resumes at 3.
    first.close()
    second_deliveries.wait_for(connection, 7)
    pump_for(connection, SETTLE_S)
    assert second_deliveries.offsets() == list(range(3, 10))
    assert second_deliveries.bodies() == [f"m{i}".encode() for i in range(3, 10)]

    # It is now the active consumer: new messages go to it.
    publish_many(channel, stream, 2, start=10)
    second_deliveries.wait_for(connection, 9)
    assert second_deliveries.offsets() == list(range(3, 12))


def test_group_takeover_after_basic_cancel_of_the_active_consumer(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 6)

    first, first_deliveries, first_tag = consume(connection, stream, ack=False, **{GROUP: "g", OFFSET: "first"})
    first_deliveries.wait_for(connection, 6)
    _, second_deliveries, _ = consume(connection, stream, **{GROUP: "g", OFFSET: "first"})
    first.basic_ack(first_deliveries.tag_of(3), multiple=True)  # commits 4
    pump_for(connection, SETTLE_S)
    assert second_deliveries.offsets() == []

    first.basic_cancel(first_tag)
    second_deliveries.wait_for(connection, 2)
    pump_for(connection, SETTLE_S)
    assert second_deliveries.offsets() == [4, 5]


def test_an_inactive_group_member_leaving_changes_nothing(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 4)
    _, active, _ = consume(connection, stream, **{GROUP: "g", OFFSET: "first"})
    active.wait_for(connection, 4)
    waiting, waiting_deliveries, _ = consume(connection, stream, **{GROUP: "g", OFFSET: "first"})
    waiting.close()
    publish_many(channel, stream, 2, start=4)
    active.wait_for(connection, 6)
    pump_for(connection, SETTLE_S)
    assert active.offsets() == list(range(6))
    assert waiting_deliveries.offsets() == []


def test_two_groups_on_one_stream_are_independent(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)

    # Both read concurrently; g1 acks everything, g2 only below 4.
    g1_channel, g1, _ = consume(connection, stream, **{GROUP: "g1", OFFSET: "first"})
    g2_channel, g2, g2_tag = consume(connection, stream, ack=False, **{GROUP: "g2", OFFSET: "first"})
    g1.wait_for(connection, 10)
    g2.wait_for(connection, 10)
    assert g1.offsets() == g2.offsets() == list(range(10))
    g2_channel.basic_ack(g2.tag_of(3), multiple=True)
    g2_channel.basic_cancel(g2_tag)
    # A consumer outside any group is not affected by either.
    assert read_all(connection, stream, 10, **{OFFSET: "first"}).offsets() == list(range(10))

    # g1's consumer kept running: as the group's active consumer it gets new messages.
    publish_many(channel, stream, 2, start=10)
    g1.wait_for(connection, 12)
    assert g1.offsets() == list(range(12))
    assert read_all(connection, stream, 8, **{GROUP: "g2", OFFSET: "first"}).offsets() == list(range(4, 12))
    # g1 acked all twelve: after its consumer goes, a new one starts at 12.
    g1_channel.close()
    publish_many(channel, stream, 1, start=12)
    assert read_all(connection, stream, 1, **{GROUP: "g1", OFFSET: "first"}).offsets() == [12]
    # The same group name on another stream is another group.
    other = declare_stream(channel, names("other"))
    publish_many(channel, other, 3)
    assert read_all(connection, other, 3, **{GROUP: "g2", OFFSET: "first"}).offsets() == [0, 1, 2]


def test_group_nack_with_requeue_does_not_move_the_committed_offset(connection, names):
    # The committed offset is the one below which the group acked everything. A nack with
    # requeue=True says "not processed, give it back": a stream cannot requeue, but the group
    # must not count it as done, or the next member skips it.
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 6)
    consumer, deliveries, tag = consume(connection, stream, ack=False, **{GROUP: "g", OFFSET: "first"})
    deliveries.wait_for(connection, 6)
    consumer.basic_ack(deliveries.tag_of(1), multiple=True)
    consumer.basic_nack(deliveries.tag_of(2), requeue=True)
    consumer.basic_ack(deliveries.tag_of(3))
    consumer.basic_ack(deliveries.tag_of(4))
    consumer.basic_cancel(tag)

    resumed = read_all(connection, stream, 4, **{GROUP: "g", OFFSET: "first"})
    assert resumed.offsets() == [2, 3, 4, 5]


def test_group_member_closing_its_channel_with_prefetched_messages_loses_none(connection, names):
    # What pika does on BlockingChannel.close(): it cancels the consumer and rejects (with
    # requeue=True) the deliveries it had received but not yet handed to the callback. None
    # of them was processed, so the group must read them again.
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)
    consumer, deliveries, _ = consume(connection, stream, prefetch=5, ack=False, **{GROUP: "g", OFFSET: "first"})
    time.sleep(0.3)  # the deliveries reach pika's socket; the callback never runs
    consumer.close()
    assert deliveries.offsets() == []

    resumed = read_all(connection, stream, 10, **{GROUP: "g", OFFSET: "first"})
    assert resumed.offsets() == list(range(10))


@pytest.mark.parametrize("value", ["", "x" * 256, 5], ids=["empty", "256-bytes", "int"])
def test_malformed_group_name_is_refused_with_406(connection, names, value):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        consumer.basic_consume(queue=stream, on_message_callback=Deliveries(), arguments={GROUP: value})
    assert_refused(excinfo, GROUP)


def test_stream_and_group_offsets_survive_a_broker_restart(tmp_path):
    stream = "py.restart.stream"
    with run_broker(tmp_path) as (_, parameters):
        connection = pika.BlockingConnection(parameters)
        channel = confirmed_channel(connection)
        declare_stream(channel, stream, **{"x-max-age": "7D"})
        for i in range(10):
            publish(channel, stream, f"m{i}".encode(), tag="odd" if i % 2 else "even", delivery_mode=2)
        consumer, deliveries, _ = consume(connection, stream, ack=False, **{GROUP: "g", OFFSET: "first"})
        deliveries.wait_for(connection, 10)
        consumer.basic_ack(deliveries.tag_of(6), multiple=True)  # commits 7
        _, other_group, _ = consume(connection, stream, **{GROUP: "h", OFFSET: "first"})
        other_group.wait_for(connection, 10)  # h acks everything: commits 10
        pump_for(connection, SETTLE_S)
        connection.close()

    with run_broker(tmp_path) as (_, parameters):
        connection = pika.BlockingConnection(parameters)
        assert message_count(connection, stream) == 10
        channel = confirmed_channel(connection)
        # The declare with the same arguments still matches the stored stream.
        declare_stream(channel, stream, **{"x-max-age": "7D"})

        resumed = read_all(connection, stream, 3, **{GROUP: "g", OFFSET: "first"})
        assert (resumed.offsets(), resumed.bodies()) == ([7, 8, 9], [b"m7", b"m8", b"m9"])
        everything = read_all(connection, stream, 10, **{OFFSET: "first"})
        assert everything.bodies() == [f"m{i}".encode() for i in range(10)]
        assert [p.headers[TAG] for _, p, _ in everything] == ["odd" if i % 2 else "even" for i in range(10)]
        filtered = read_all(connection, stream, 5, **{OFFSET: "first", "x-stream-filter": "odd"})
        assert filtered.offsets() == [1, 3, 5, 7, 9]

        # New messages continue the offsets; group h resumes at the end.
        publish(channel, stream, b"m10")
        assert read_all(connection, stream, 1, **{GROUP: "h", OFFSET: "first"}).offsets() == [10]
        connection.close()


def test_confirmed_messages_survive_a_broker_crash(tmp_path):
    # A confirm is sent after the fsync that covers the message: a SIGKILL right after the
    # last confirm loses nothing.
    stream = "py.crash.stream"
    with run_broker(tmp_path) as (process, parameters):
        connection = pika.BlockingConnection(parameters)
        channel = confirmed_channel(connection)
        declare_stream(channel, stream)
        bodies = publish_many(channel, stream, 30)
        process.kill()
        process.wait()

    with run_broker(tmp_path) as (_, parameters):
        connection = pika.BlockingConnection(parameters)
        assert message_count(connection, stream) == 30
        everything = read_all(connection, stream, 30, **{OFFSET: "first"})
        assert (everything.bodies(), everything.offsets()) == (bodies, list(range(30)))
        connection.close()


# --------------------------------------------------------------------------- retention


def test_retention_by_size_drops_the_oldest_segments(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"), **{"x-stream-max-segment-size-bytes": 4096,
                                                    "x-max-length-bytes": 10000})
    body = b"x" * 100
    publish_fast(connection, stream, [body + f"{i:03d}".encode() for i in range(300)])

    held = message_count(connection, stream)
    # 10000 bytes cannot hold more than 100 bodies of 100 bytes; at least one sealed segment
    # besides the active one stays.
    assert 0 < held < 100, held
    deliveries = read_all(connection, stream, held, **{OFFSET: "first"})
    offsets = deliveries.offsets()
    assert offsets[0] > 0
    assert offsets == list(range(300 - held, 300))
    assert deliveries.bodies()[-1] == body + b"299"
    assert deliveries.bodies()[0] == body + f"{offsets[0]:03d}".encode()
    # An integer offset below the first one held is clamped to it.
    assert read_all(connection, stream, held, **{OFFSET: 0}).offsets() == offsets


def test_retention_by_age_drops_old_segments_about_every_second(connection, names):
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"), **{"x-max-age": "1s", "x-stream-max-segment-size-bytes": 4096})
    control = declare_stream(channel, names("control"), **{"x-stream-max-segment-size-bytes": 4096})
    body = b"y" * 100
    publish_fast(connection, stream, [body] * 200)
    publish_fast(connection, control, [body] * 200)

    # Retention checks every second and segments expire one second after their newest
    # message: within about three seconds the sealed segments are gone.
    deadline = time.monotonic() + 4.0
    while message_count(connection, stream) == 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    held = message_count(connection, stream)
    assert held < 200, "no segment was deleted by x-max-age"
    assert held > 0, "the active segment is kept"

    deliveries = read_all(connection, stream, held, **{OFFSET: "first"})
    assert deliveries.offsets()[0] > 0
    assert deliveries.offsets() == list(range(200 - held, 200))
    # A stream without x-max-age keeps everything.
    assert message_count(connection, control) == 200
    # The stream keeps working: new messages continue the offsets.
    _, reader, _ = consume(connection, stream, **{OFFSET: "last"})
    reader.wait_for(connection, 1)
    publish(channel, stream, b"later")
    reader.wait_for(connection, 2)
    assert reader.offsets() == [199, 200]
    assert reader.bodies() == [body, b"later"]


# --------------------------------------------------------------------------- super streams


def declare_super_stream(channel, name, partitions):
    """A super stream in RabbitMQ's layout, made with plain 0-9-1 methods as RabbitMQ's tools
    make it: a direct exchange with x-super-stream, streams NAME-i bound with key i and
    x-stream-partition-order i."""
    channel.exchange_declare(exchange=name, exchange_type="direct", durable=True, arguments={"x-super-stream": True})
    for i in range(partitions):
        declare_stream(channel, f"{name}-{i}")
        channel.queue_bind(
            queue=f"{name}-{i}", exchange=name, routing_key=str(i), arguments={"x-stream-partition-order": i}
        )


def test_x_partition_key_goes_where_rabbitmq_stream_clients_hash_it(connection, names):
    # mmh3 is an independent implementation of the hash RabbitMQ's stream clients route by:
    # murmur3 32-bit, seed 104729, the unsigned value modulo the partitions.
    import mmh3
    channel = confirmed_channel(connection)
    name = names("orders")
    partitions = 4
    declare_super_stream(channel, name, partitions)
    expected = [0] * partitions
    for i in range(200):
        key = f"customer-{i % 37}"
        channel.basic_publish(
            exchange=name,
            routing_key="ignored",
            body=f"{key}/{i}".encode(),
            properties=BasicProperties(headers={"x-partition-key": key}),
        )
        expected[mmh3.hash(key.encode(), 104729, signed=False) % partitions] += 1
    assert [message_count(connection, f"{name}-{i}") for i in range(partitions)] == expected
    # Without the header, the routing key picks the partition bound with it.
    channel.basic_publish(exchange=name, routing_key="2", body=b"by key")
    assert message_count(connection, f"{name}-2") == expected[2] + 1
