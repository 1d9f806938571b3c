"""Warren against pika (Python, BlockingConnection): queue and exchange features.

Priorities, TTLs, dead-lettering with x-death, length limits and overflow, delayed messages,
delivery limits, x-expires, consumer priorities, single active consumer and tag filters.
Every assertion states what RabbitMQ does for the same frames (queue arguments are those of
classic queues, x-delivery-limit that of quorum queues, the delayed exchange that of the
rabbitmq-delayed-message-exchange plugin). Time bounds are generous: a test waits seconds
for what should take milliseconds, and only checks absence where the margin is wide.
"""

import calendar
import datetime
import time

import pika
import pika.exceptions
import pytest

from pika_helpers import Deliveries, get_message, message_count, pump_until, pump_for, assert_closed_by_broker
from pika.spec import BasicProperties

WAIT_S = 5.0  # how long to wait for something that should happen
SETTLE_S = 0.3  # how long to watch for something that should not happen


# --------------------------------------------------------------------------- helpers


def declare_queue(channel, name, **arguments):
    channel.queue_declare(queue=name, arguments=arguments or None)
    return name


def publish(channel, routing_key, body, exchange="", **properties):
    channel.basic_publish(
        exchange=exchange,
        routing_key=routing_key,
        body=body,
        properties=BasicProperties(**properties) if properties else None,
    )


def drain(channel, queue):
    """Takes every ready message (auto-ack); returns their bodies in order."""
    bodies = []
    while True:
        method, _, body = channel.basic_get(queue=queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def wait_for_count(connection, queue, expected, timeout=WAIT_S):
    """Polls message_count until it equals expected; returns the last count seen."""
    deadline = time.monotonic() + timeout
    while True:
        count = message_count(connection, queue)
        if count == expected or time.monotonic() > deadline:
            return count
        time.sleep(0.05)


def assert_connection_usable(connection, names):
    channel = connection.channel()
    queue = declare_queue(channel, names("after-error"))
    publish(channel, queue, b"still alive")
    assert get_message(channel, queue)[2] == b"still alive"
    channel.close()


def dead_letter_setup(channel, names, exchange_type="fanout", binding_key=""):
    """A dead-letter exchange and a queue bound to it; returns (exchange, queue)."""
    dlx, dlq = names("dlx"), names("dlq")
    channel.exchange_declare(exchange=dlx, exchange_type=exchange_type)
    declare_queue(channel, dlq)
    channel.queue_bind(queue=dlq, exchange=dlx, routing_key=binding_key)
    return dlx, dlq


def assert_recent_timestamp(value):
    # pika decodes an AMQP timestamp as a naive UTC datetime.
    assert isinstance(value, datetime.datetime), repr(value)
    seconds = calendar.timegm(value.utctimetuple())
    assert abs(seconds - time.time()) < 120, value


# --------------------------------------------------------------------------- priorities


def test_priority_queue_delivers_highest_priority_first_and_fifo_within_a_priority(connection, channel, names):
    queue = declare_queue(channel, names("q"), **{"x-max-priority": 10})
    channel.confirm_delivery()
    # (body, priority): no priority counts as 0; above x-max-priority counts as the maximum.
    sent = [(b"p1", 1), (b"p9", 9), (b"p5", 5), (b"none", None), (b"p200", 200), (b"p9-second", 9),
            (b"none-second", None), (b"p0", 0), (b"p10", 10)]
    for body, priority in sent:
        publish(channel, queue, body, priority=priority)
    assert message_count(connection, queue) == len(sent)

    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=100)
    deliveries = Deliveries()
    consumer.basic_consume(queue=queue, on_message_callback=deliveries, auto_ack=True)
    deliveries.wait_for(connection, len(sent))

    assert deliveries.bodies() == [b"p200", b"p10", b"p9", b"p9-second", b"p5", b"p1",
                                   b"none", b"none-second", b"p0"]
    # The priority property itself is delivered as published.
    assert [props.priority for _, props, _ in deliveries][:2] == [200, 10]


def test_priority_queue_nack_requeued_message_keeps_its_place(connection, channel, names):
    queue = declare_queue(channel, names("q"), **{"x-max-priority": 10})
    channel.confirm_delivery()
    for body, priority in [(b"a", 5), (b"b", 5), (b"c", 5), (b"low", 1)]:
        publish(channel, queue, body, priority=priority)

    method, _, body = get_message(channel, queue, auto_ack=False)
    assert body == b"a"
    channel.basic_nack(method.delivery_tag, requeue=True)

    method, _, body = get_message(channel, queue)
    assert (body, method.redelivered) == (b"a", True)
    assert drain(channel, queue) == [b"b", b"c", b"low"]


# --------------------------------------------------------------------------- TTL


def test_queue_message_ttl_removes_messages_without_a_consumer(connection, channel, names):
    queue = declare_queue(channel, names("q"), **{"x-message-ttl": 200})
    channel.confirm_delivery()
    for i in range(3):
        publish(channel, queue, f"m{i}".encode())

    assert wait_for_count(connection, queue, 0, timeout=2.0) == 0
    assert channel.basic_get(queue=queue, auto_ack=True) == (None, None, None)


def test_per_message_expiration_removes_only_that_message(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    channel.confirm_delivery()
    publish(channel, queue, b"short-lived", expiration="100")
    publish(channel, queue, b"keeper")

    assert wait_for_count(connection, queue, 1, timeout=2.0) == 1
    pump_for(connection, SETTLE_S)
    assert drain(channel, queue) == [b"keeper"]


def test_lower_of_queue_ttl_and_message_expiration_wins(connection, channel, names):
    long_queue = declare_queue(channel, names("ttl-60s"), **{"x-message-ttl": 60_000})
    short_queue = declare_queue(channel, names("ttl-100ms"), **{"x-message-ttl": 100})
    channel.confirm_delivery()
    publish(channel, long_queue, b"expires by its own expiration", expiration="100")
    publish(channel, long_queue, b"keeps the queue's 60 s")
    publish(channel, short_queue, b"expires by the queue's TTL", expiration="60000")

    assert wait_for_count(connection, long_queue, 1, timeout=2.0) == 1
    assert wait_for_count(connection, short_queue, 0, timeout=2.0) == 0
    assert drain(channel, long_queue) == [b"keeps the queue's 60 s"]


def test_expired_message_behind_a_live_head_is_removed(connection, channel, names):
    # Stricter than RabbitMQ's classic queues, which drop an expired message only when it
    # reaches the head (and count it until then): Warren's timing wheel removes it on time.
    # Consumers see the same thing either way: B is never delivered.
    queue = declare_queue(channel, names("q"))
    channel.confirm_delivery()
    publish(channel, queue, b"A", expiration="60000")
    publish(channel, queue, b"B", expiration="100")

    time.sleep(1.0)
    assert message_count(connection, queue) == 1
    assert drain(channel, queue) == [b"A"]


@pytest.mark.parametrize("ttl", ["queue", "message"], ids=["x-message-ttl-0", "expiration-0"])
def test_zero_ttl_message_reaches_a_waiting_consumer_and_is_dropped_otherwise(connection, channel, names, ttl):
    # RabbitMQ: TTL 0 expires a message on reaching the queue unless it can be delivered to a
    # consumer immediately.
    arguments = {"x-message-ttl": 0} if ttl == "queue" else {}
    expiration = "0" if ttl == "message" else None
    idle = declare_queue(channel, names("idle"), **arguments)
    consumed = declare_queue(channel, names("consumed"), **arguments)
    consumer = connection.channel()
    deliveries = Deliveries()
    consumer.basic_consume(queue=consumed, on_message_callback=deliveries, auto_ack=True)
    channel.confirm_delivery()

    publish(channel, idle, b"nobody waits", expiration=expiration)
    publish(channel, consumed, b"delivered at once", expiration=expiration)

    assert wait_for_count(connection, idle, 0, timeout=2.0) == 0
    deliveries.wait_for(connection, 1, timeout=3.0)
    assert deliveries.bodies() == [b"delivered at once"]


def test_publish_with_a_non_numeric_expiration_is_a_406_channel_error(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    publish(channel, queue, b"bad", expiration="soon")

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        # The publish has no reply: the channel.close arrives while pika awaits this one.
        channel.queue_declare(queue=names("after"))

    assert_closed_by_broker(excinfo, 406, "PRECONDITION_FAILED")
    assert message_count(connection, queue) == 0
    assert_connection_usable(connection, names)


# --------------------------------------------------------------------------- dead-lettering


def test_rejected_message_is_dead_lettered_with_x_death(connection, channel, names):
    dlx, dlq = dead_letter_setup(channel, names)
    source = names("src")
    channel.exchange_declare(exchange=source, exchange_type="direct")
    queue = declare_queue(channel, names("q"), **{"x-dead-letter-exchange": dlx})
    channel.queue_bind(queue=queue, exchange=source, routing_key="orig-key")
    channel.confirm_delivery()
    publish(channel, "orig-key", b"poison", exchange=source, headers={"app": "kept"}, correlation_id="c1")

    method, _, _ = get_message(channel, queue, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)

    method, props, body = get_message(channel, dlq)
    assert body == b"poison"
    assert method.exchange == dlx
    assert method.routing_key == "orig-key"  # no x-dead-letter-routing-key: the original key
    assert props.correlation_id == "c1"
    headers = props.headers
    assert headers["app"] == "kept"
    [death] = headers["x-death"]
    assert_recent_timestamp(death.pop("time"))
    assert death == {"count": 1, "reason": "rejected", "queue": queue, "exchange": source,
                     "routing-keys": ["orig-key"]}
    for which in ("first", "last"):
        assert headers[f"x-{which}-death-queue"] == queue
        assert headers[f"x-{which}-death-reason"] == "rejected"
        assert headers[f"x-{which}-death-exchange"] == source
    assert message_count(connection, queue) == 0


def test_expired_message_is_dead_lettered_with_original_expiration(connection, channel, names):
    dlx, dlq = dead_letter_setup(channel, names)
    queue = declare_queue(channel, names("q"), **{"x-dead-letter-exchange": dlx})
    channel.confirm_delivery()
    publish(channel, queue, b"stale", expiration="100")

    method, props, body = get_message(channel, dlq)
    assert body == b"stale"
    assert props.expiration is None, "the dead-lettered copy must not expire again"
    [death] = props.headers["x-death"]
    assert death["reason"] == "expired"
    assert death["queue"] == queue
    assert death["exchange"] == ""
    assert death["routing-keys"] == [queue]
    assert death["original-expiration"] == "100"
    assert death["count"] == 1
    assert props.headers["x-first-death-reason"] == "expired"
    assert message_count(connection, queue) == 0


def test_dead_lettered_twice_through_a_queue_increments_its_x_death_count(connection, channel, names):
    # q1 dead-letters to q2 and q2 back to q1, through a direct exchange; every death is a
    # rejection, so the cycle is allowed.
    dlx = names("dlx")
    channel.exchange_declare(exchange=dlx, exchange_type="direct")
    first = declare_queue(channel, names("q1"), **{"x-dead-letter-exchange": dlx,
                                                  "x-dead-letter-routing-key": "to-q2"})
    second = declare_queue(channel, names("q2"), **{"x-dead-letter-exchange": dlx,
                                                   "x-dead-letter-routing-key": "to-q1"})
    channel.queue_bind(queue=second, exchange=dlx, routing_key="to-q2")
    channel.queue_bind(queue=first, exchange=dlx, routing_key="to-q1")
    channel.confirm_delivery()
    publish(channel, first, b"bouncing")

    for queue in (first, second, first):  # three rejections: q1, q2, q1 again
        method, _, _ = get_message(channel, queue, auto_ack=False)
        channel.basic_reject(method.delivery_tag, requeue=False)

    method, props, body = get_message(channel, second)
    assert body == b"bouncing"
    deaths = props.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [(first, "rejected", 2), (second, "rejected", 1)]
    # The newest entry describes how the message reached q1 the second time.
    assert deaths[0]["exchange"] == dlx
    assert deaths[0]["routing-keys"] == ["to-q1"]
    assert deaths[1]["exchange"] == dlx
    assert deaths[1]["routing-keys"] == ["to-q2"]
    headers = props.headers
    assert (headers["x-first-death-queue"], headers["x-first-death-exchange"]) == (first, "")
    assert (headers["x-last-death-queue"], headers["x-last-death-exchange"]) == (first, dlx)


def test_dead_letter_routing_key_replaces_the_routing_key(connection, channel, names):
    dlx, dlq = dead_letter_setup(channel, names, exchange_type="direct", binding_key="dead")
    # A queue bound with the original key would catch the message if the key were kept.
    wrong = declare_queue(channel, names("wrong"))
    channel.queue_bind(queue=wrong, exchange=dlx, routing_key="orig")
    source = names("src")
    channel.exchange_declare(exchange=source, exchange_type="direct")
    queue = declare_queue(channel, names("q"), **{"x-dead-letter-exchange": dlx,
                                                 "x-dead-letter-routing-key": "dead"})
    channel.queue_bind(queue=queue, exchange=source, routing_key="orig")
    channel.confirm_delivery()
    publish(channel, "orig", b"rerouted", exchange=source)

    method, _, _ = get_message(channel, queue, auto_ack=False)
    channel.basic_nack(method.delivery_tag, requeue=False)

    method, props, body = get_message(channel, dlq)
    assert body == b"rerouted"
    assert (method.exchange, method.routing_key) == (dlx, "dead")
    assert props.headers["x-death"][0]["routing-keys"] == ["orig"]
    assert message_count(connection, wrong) == 0


# --------------------------------------------------------------------------- length limits


def test_max_length_drop_head_dead_letters_the_oldest_with_reason_maxlen(connection, channel, names):
    dlx, dlq = dead_letter_setup(channel, names)
    queue = declare_queue(channel, names("q"), **{"x-max-length": 2, "x-dead-letter-exchange": dlx})
    channel.confirm_delivery()
    for i in range(1, 5):
        publish(channel, queue, f"m{i}".encode())  # every publish is acked under drop-head

    assert message_count(connection, queue) == 2
    assert drain(channel, queue) == [b"m3", b"m4"]
    dropped = [get_message(channel, dlq) for _ in range(2)]
    assert [body for _, _, body in dropped] == [b"m1", b"m2"]
    for _, props, _ in dropped:
        [death] = props.headers["x-death"]
        assert (death["reason"], death["queue"], death["count"]) == ("maxlen", queue, 1)
    assert drain(channel, dlq) == []


def test_reject_publish_nacks_the_publish_and_keeps_the_queue(connection, channel, names):
    dlx, dlq = dead_letter_setup(channel, names)
    queue = declare_queue(channel, names("q"), **{"x-max-length": 2, "x-overflow": "reject-publish",
                                                 "x-dead-letter-exchange": dlx})
    channel.confirm_delivery()
    publish(channel, queue, b"m1")
    publish(channel, queue, b"m2")

    # pika's BlockingChannel raises NackError when the broker answers basic.nack.
    with pytest.raises(pika.exceptions.NackError):
        publish(channel, queue, b"m3")

    assert channel.is_open
    assert message_count(connection, queue) == 2
    assert drain(channel, queue) == [b"m1", b"m2"]
    # reject-publish (unlike reject-publish-dlx) does not dead-letter the refused message.
    pump_for(connection, SETTLE_S)
    assert message_count(connection, dlq) == 0
    publish(channel, queue, b"room again")  # acked now that the queue has room
    assert drain(channel, queue) == [b"room again"]


def test_reject_publish_dlx_dead_letters_the_refused_message(connection, channel, names):
    dlx, dlq = dead_letter_setup(channel, names)
    queue = declare_queue(channel, names("q"), **{"x-max-length": 2, "x-overflow": "reject-publish-dlx",
                                                 "x-dead-letter-exchange": dlx})
    channel.confirm_delivery()
    publish(channel, queue, b"m1")
    publish(channel, queue, b"m2")

    with pytest.raises(pika.exceptions.NackError):
        publish(channel, queue, b"m3")

    assert drain(channel, queue) == [b"m1", b"m2"]
    _, props, body = get_message(channel, dlq)
    assert body == b"m3"
    [death] = props.headers["x-death"]
    assert (death["reason"], death["queue"]) == ("maxlen", queue)
    assert drain(channel, dlq) == []


# --------------------------------------------------------------------------- delayed exchange


def delayed_exchange(channel, names, routing_type="direct"):
    exchange = names("delayed")
    channel.exchange_declare(exchange=exchange, exchange_type="x-delayed-message",
                             arguments={"x-delayed-type": routing_type})
    return exchange


def test_delayed_message_reaches_the_queue_after_its_x_delay(connection, channel, names):
    exchange = delayed_exchange(channel, names)
    queue = declare_queue(channel, names("q"))
    channel.queue_bind(queue=queue, exchange=exchange, routing_key="k")
    channel.confirm_delivery()

    published_at = time.monotonic()
    publish(channel, "k", b"later", exchange=exchange, headers={"x-delay": 500})
    time.sleep(max(0.0, 0.2 - (time.monotonic() - published_at)))
    assert message_count(connection, queue) == 0, "delivered before its x-delay"

    assert wait_for_count(connection, queue, 1, timeout=2.0) == 1
    assert time.monotonic() - published_at >= 0.45
    method, props, body = get_message(channel, queue)
    assert body == b"later"
    assert (method.exchange, method.routing_key) == (exchange, "k")
    assert props.headers["x-delay"] == 500


@pytest.mark.parametrize("headers", [None, {"x-delay": 0}, {"x-delay": -1000}], ids=["absent", "zero", "negative"])
def test_delayed_exchange_routes_at_once_without_a_positive_x_delay(connection, channel, names, headers):
    exchange = delayed_exchange(channel, names)
    queue = declare_queue(channel, names("q"))
    channel.queue_bind(queue=queue, exchange=exchange, routing_key="k")
    channel.confirm_delivery()

    publish(channel, "k", b"now", exchange=exchange, headers=headers)

    # The confirm comes after routing: a message routed at once is already queued.
    assert message_count(connection, queue) == 1
    assert get_message(channel, queue)[2] == b"now"


def test_delayed_exchange_without_x_delayed_type_is_406(connection, channel, names):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.exchange_declare(exchange=names("delayed"), exchange_type="x-delayed-message")

    assert_closed_by_broker(excinfo, 406, "PRECONDITION_FAILED")
    assert connection.is_open
    assert_connection_usable(connection, names)


def test_mandatory_unroutable_delayed_message_is_returned_at_once(connection, channel, names):
    # Warren checks the route at publish time (the RabbitMQ plugin cannot say, and returns
    # every mandatory delayed message); for an unroutable one both answer 312 at once.
    exchange = delayed_exchange(channel, names)
    returned = []
    channel.add_on_return_callback(lambda _ch, method, props, body: returned.append((method, body)))

    started = time.monotonic()
    publish(channel, "nowhere", b"lost", exchange=exchange, headers={"x-delay": 10_000})
    channel.basic_publish(exchange=exchange, routing_key="nowhere", body=b"lost", mandatory=True,
                          properties=BasicProperties(headers={"x-delay": 10_000}))

    assert pump_until(connection, lambda: returned, timeout=3.0), "no basic.return within 3 s"
    assert time.monotonic() - started < 3.0
    method, body = returned[0]
    assert (method.reply_code, method.reply_text) == (312, "NO_ROUTE")
    assert (method.exchange, method.routing_key, body) == (exchange, "nowhere", b"lost")
    pump_for(connection, SETTLE_S)
    assert len(returned) == 1, "only the mandatory publish comes back"


# --------------------------------------------------------------------------- delivery limit


def test_delivery_limit_dead_letters_after_the_limit_with_reason_delivery_limit(connection, channel, names):
    dlx, dlq = dead_letter_setup(channel, names)
    queue = declare_queue(channel, names("q"), **{"x-delivery-limit": 2, "x-dead-letter-exchange": dlx})
    channel.confirm_delivery()
    publish(channel, queue, b"hot potato")

    consumer = connection.channel()
    deliveries = []

    def nack_requeue(ch, method, props, body):
        deliveries.append((method, props, body))
        ch.basic_nack(method.delivery_tag, requeue=True)

    consumer.basic_consume(queue=queue, on_message_callback=nack_requeue)
    assert pump_until(connection, lambda: len(deliveries) >= 3), f"{len(deliveries)} deliveries"
    _, props, body = get_message(channel, dlq)
    pump_for(connection, SETTLE_S)

    assert len(deliveries) == 3
    assert [m.redelivered for m, _, _ in deliveries] == [False, True, True]
    counts = [(p.headers or {}).get("x-delivery-count") for _, p, _ in deliveries]
    assert counts == [None, 1, 2]
    assert body == b"hot potato"
    [death] = props.headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", queue, 1)
    assert message_count(connection, queue) == 0


# --------------------------------------------------------------------------- x-expires


def test_unused_queue_with_x_expires_is_deleted(connection, channel, names):
    queue = declare_queue(channel, names("q"), **{"x-expires": 500})
    # Any use (a declare, a get) restarts the countdown in RabbitMQ: look only once.
    time.sleep(2.0)

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        connection.channel().queue_declare(queue=queue, passive=True)
    assert_closed_by_broker(excinfo, 404, "NOT_FOUND")


def test_queue_with_x_expires_and_a_consumer_is_kept(connection, channel, names):
    queue = declare_queue(channel, names("q"), **{"x-expires": 500})
    deliveries = Deliveries()
    channel.basic_consume(queue=queue, on_message_callback=deliveries, auto_ack=True)

    pump_for(connection, 1.5)

    assert message_count(connection, queue) == 0  # passive declare succeeds
    publish(connection.channel(), queue, b"still here")
    deliveries.wait_for(connection, 1)
    assert deliveries.bodies() == [b"still here"]


def test_passive_declare_renews_the_x_expires_lease(connection, channel, names):
    queue = declare_queue(channel, names("q"), **{"x-expires": 1000})
    poller = connection.channel()

    for _ in range(6):  # 2.4 s in all, each look well inside the 1 s lease
        time.sleep(0.4)
        poller.queue_declare(queue=queue, passive=True)

    assert poller.queue_declare(queue=queue, passive=True).method.queue == queue


# --------------------------------------------------------------------------- consumers


def test_higher_priority_consumer_gets_messages_while_it_has_credit(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    high_channel, low_channel = connection.channel(), connection.channel()
    high, low = Deliveries(), Deliveries()
    for ch, priority, deliveries in ((high_channel, 10, high), (low_channel, 1, low)):
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(queue=queue, on_message_callback=deliveries, arguments={"x-priority": priority})
    channel.confirm_delivery()

    for i in range(4):
        publish(channel, queue, f"m{i}".encode())

    # m0 to the high consumer; with no credit left there, m1 to the low one; m2, m3 wait.
    high.wait_for(connection, 1)
    low.wait_for(connection, 1)
    pump_for(connection, SETTLE_S)
    assert (high.bodies(), low.bodies()) == ([b"m0"], [b"m1"])

    high_channel.basic_ack(high[0][0].delivery_tag)
    high.wait_for(connection, 2)
    high_channel.basic_ack(high[1][0].delivery_tag)
    high.wait_for(connection, 3)
    pump_for(connection, SETTLE_S)
    assert high.bodies() == [b"m0", b"m2", b"m3"]
    assert low.bodies() == [b"m1"]


def single_active_consumers(connection, queue):
    """Two consumers on a single-active-consumer queue: the first with prefetch 1 and manual
    acks, the second auto-ack. Returns (first channel, first tag, first, second deliveries)."""
    first_channel, second_channel = connection.channel(), connection.channel()
    first, second = Deliveries(), Deliveries()
    first_channel.basic_qos(prefetch_count=1)
    first_tag = first_channel.basic_consume(queue=queue, on_message_callback=first)
    second_channel.basic_consume(queue=queue, on_message_callback=second, auto_ack=True)
    return first_channel, first_tag, first, second


def test_single_active_consumer_only_the_first_consumer_receives(connection, channel, names):
    queue = declare_queue(channel, names("q"), **{"x-single-active-consumer": True})
    first_channel, _, first, second = single_active_consumers(connection, queue)
    channel.confirm_delivery()

    for i in range(4):
        publish(channel, queue, f"m{i}".encode())

    # The active consumer is at its prefetch limit: the others wait rather than go to the
    # second consumer.
    first.wait_for(connection, 1)
    pump_for(connection, SETTLE_S)
    assert (first.bodies(), second.bodies()) == ([b"m0"], [])

    first_channel.basic_ack(first[0][0].delivery_tag)
    first.wait_for(connection, 2)
    pump_for(connection, SETTLE_S)
    assert (first.bodies(), second.bodies()) == ([b"m0", b"m1"], [])
    assert message_count(connection, queue) == 2


def test_single_active_consumer_after_cancel_the_next_gets_new_messages(connection, channel, names):
    queue = declare_queue(channel, names("q"), **{"x-single-active-consumer": True})
    first_channel, first_tag, first, second = single_active_consumers(connection, queue)
    channel.confirm_delivery()
    publish(channel, queue, b"m0")
    first.wait_for(connection, 1)
    first_channel.basic_ack(first[0][0].delivery_tag)
    first_channel.basic_cancel(first_tag)

    for i in range(1, 3):
        publish(channel, queue, f"m{i}".encode())

    second.wait_for(connection, 2)
    pump_for(connection, SETTLE_S)
    assert (first.bodies(), second.bodies()) == ([b"m0"], [b"m1", b"m2"])


def test_single_active_consumer_after_cancel_the_next_gets_the_waiting_messages(connection, channel, names):
    queue = declare_queue(channel, names("q"), **{"x-single-active-consumer": True})
    first_channel, first_tag, first, second = single_active_consumers(connection, queue)
    channel.confirm_delivery()
    for i in range(3):
        publish(channel, queue, f"m{i}".encode())
    first.wait_for(connection, 1)
    pump_for(connection, SETTLE_S)
    assert (first.bodies(), second.bodies()) == ([b"m0"], [])

    # Cancelled while m0 is still unacked, so no ack or nack is in flight to wake the queue.
    first_channel.basic_cancel(first_tag)

    # RabbitMQ makes the second consumer active at once and delivers what is waiting.
    second.wait_for(connection, 2, timeout=3.0)
    assert second.bodies() == [b"m1", b"m2"]
    first_channel.basic_ack(first[0][0].delivery_tag)  # still valid on its channel
    assert message_count(connection, queue) == 0


# --------------------------------------------------------------------------- tag filters


def publish_tagged(channel, queue):
    channel.confirm_delivery()
    for body, tag in [(b"red-1", "red"), (b"blue-1", "blue"), (b"plain-1", None), (b"red-2", "red"),
                      (b"green-1", "green")]:
        publish(channel, queue, body, headers={"x-stream-filter-value": tag} if tag else None)


def test_tag_filter_consumer_gets_exactly_the_matching_messages(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    publish_tagged(channel, queue)
    deliveries = Deliveries()
    channel.basic_consume(queue=queue, on_message_callback=deliveries, auto_ack=True,
                          arguments={"x-stream-filter": "red"})

    deliveries.wait_for(connection, 2)
    pump_for(connection, SETTLE_S)
    assert deliveries.bodies() == [b"red-1", b"red-2"]


def test_tag_filter_list_with_match_unfiltered_gets_matching_and_untagged(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    publish_tagged(channel, queue)
    deliveries = Deliveries()
    channel.basic_consume(queue=queue, on_message_callback=deliveries, auto_ack=True,
                          arguments={"x-stream-filter": ["red", "blue"], "x-stream-match-unfiltered": True})

    deliveries.wait_for(connection, 4)
    pump_for(connection, SETTLE_S)
    assert deliveries.bodies() == [b"red-1", b"blue-1", b"plain-1", b"red-2"]
    assert message_count(connection, queue) == 1  # green: tagged, and not asked for


def test_messages_no_filter_matches_stay_in_the_queue(connection, channel, names):
    queue = declare_queue(channel, names("q"))
    publish_tagged(channel, queue)
    deliveries = Deliveries()
    channel.basic_consume(queue=queue, on_message_callback=deliveries, auto_ack=True,
                          arguments={"x-stream-filter": "red"})
    deliveries.wait_for(connection, 2)
    pump_for(connection, SETTLE_S)

    assert message_count(connection, queue) == 3
    getter = connection.channel()
    assert drain(getter, queue) == [b"blue-1", b"plain-1", b"green-1"]


def test_tag_filter_finds_a_match_behind_many_unmatched_messages(connection, channel, names):
    # Warren's exact filtering on queues: a matching message is delivered however many
    # non-matching ones wait ahead of it.
    queue = declare_queue(channel, names("q"))
    blue = BasicProperties(headers={"x-stream-filter-value": "blue"})
    for _ in range(4500):
        channel.basic_publish(exchange="", routing_key=queue, body=b"blue", properties=blue)
    publish(channel, queue, b"red", headers={"x-stream-filter-value": "red"})
    assert wait_for_count(connection, queue, 4501) == 4501
    deliveries = Deliveries()
    channel.basic_consume(queue=queue, on_message_callback=deliveries, auto_ack=True,
                          arguments={"x-stream-filter": "red"})

    deliveries.wait_for(connection, 1, timeout=3.0)
    assert deliveries.bodies() == [b"red"]
    assert message_count(connection, queue) == 4500


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    "arguments",
    [{"x-max-priority": 300}, {"x-overflow": "spill"}, {"x-message-ttl": -1}],
    ids=["max-priority-300", "overflow-spill", "message-ttl-negative"],
)
def test_invalid_queue_argument_is_a_406_channel_error(connection, channel, names, arguments):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue=names("q"), arguments=arguments)

    assert_closed_by_broker(excinfo, 406, "PRECONDITION_FAILED")
    assert connection.is_open
    assert_connection_usable(connection, names)
