"""Warren against pika: RabbitMQ's direct reply-to, as its documentation (and pika's own
direct_reply_to example) uses it: the requester consumes from amq.rabbitmq.reply-to with
auto_ack and publishes requests with reply_to=amq.rabbitmq.reply-to on that channel; the
responder replies to the reply_to it sees, through the default exchange."""

import pika
import pika.exceptions
import pytest

from pika_helpers import Deliveries, get_message

REPLY_TO = "amq.rabbitmq.reply-to"


def test_rpc_over_direct_reply_to(connection, names):
    server_queue = names("rpc")
    channel = connection.channel()
    channel.queue_declare(queue=server_queue, exclusive=True, auto_delete=True)

    def serve(ch, method, properties, body):
        ch.basic_publish(
            exchange="",
            routing_key=properties.reply_to,
            properties=pika.BasicProperties(correlation_id=properties.correlation_id),
            body=b"Polo for " + body,
        )
        ch.basic_ack(delivery_tag=method.delivery_tag)

    seen_reply_to = []
    channel.basic_consume(server_queue, lambda ch, m, p, b: (seen_reply_to.append(p.reply_to), serve(ch, m, p, b)))
    replies = Deliveries()
    channel.basic_consume(REPLY_TO, replies, auto_ack=True)

    for n in range(3):
        channel.basic_publish(
            exchange="",
            routing_key=server_queue,
            body=b"Marco %d" % n,
            properties=pika.BasicProperties(reply_to=REPLY_TO, correlation_id=str(n)),
        )
    replies.wait_for(connection, 3)

    assert replies.bodies() == [b"Polo for Marco 0", b"Polo for Marco 1", b"Polo for Marco 2"]
    assert [props.correlation_id for _, props, _ in replies] == ["0", "1", "2"]
    # The responder saw one generated name for the channel, never the pseudo-queue itself.
    assert len(set(seen_reply_to)) == 1
    assert seen_reply_to[0].startswith(REPLY_TO + ".")
    assert all(method.routing_key == seen_reply_to[0] for method, _, _ in replies)


def test_consuming_replies_with_manual_acks_is_refused_with_406(connection):
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.basic_consume(REPLY_TO, lambda *args: None, auto_ack=False)
    assert excinfo.value.reply_code == 406
    assert excinfo.value.reply_text == "PRECONDITION_FAILED - reply consumer cannot acknowledge"


def test_asking_for_a_reply_without_consuming_replies_is_refused_with_406(connection, names):
    channel = connection.channel()
    queue = names("rpc")
    channel.queue_declare(queue=queue)
    channel.basic_publish(exchange="", routing_key=queue, body=b"?", properties=pika.BasicProperties(reply_to=REPLY_TO))
    # The broker closes the channel; pika raises it on the channel's next synchronous method.
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue=queue, passive=True)
    assert excinfo.value.reply_code == 406
    assert excinfo.value.reply_text == "PRECONDITION_FAILED - fast reply consumer does not exist"


def test_a_reply_to_a_requester_that_left_comes_back_when_mandatory(broker, names):
    requester = pika.BlockingConnection(broker)
    responder = pika.BlockingConnection(broker)
    try:
        queue = names("rpc")
        asker = requester.channel()
        asker.queue_declare(queue=queue)
        asker.basic_consume(REPLY_TO, lambda *args: None, auto_ack=True)
        asker.basic_publish(exchange="", routing_key=queue, body=b"?", properties=pika.BasicProperties(reply_to=REPLY_TO))

        answerer = responder.channel()
        answerer.confirm_delivery()
        _, properties, _ = get_message(answerer, queue)
        requester.close()

        with pytest.raises(pika.exceptions.UnroutableError):
            answerer.basic_publish(exchange="", routing_key=properties.reply_to, body=b"too late", mandatory=True)
        # Without mandatory it is dropped quietly (and still confirmed).
        answerer.basic_publish(exchange="", routing_key=properties.reply_to, body=b"too late")
        assert answerer.is_open
    finally:
        if requester.is_open:
            requester.close()
        responder.close()
