"""Warren against pika (BlockingConnection): connection-level behaviour RabbitMQ clients rely
on, as RabbitMQ behaves: connection.update-secret, and channel_max as a limit on how many
channels are open (not on their numbers)."""

import pika
import pika.exceptions
import pytest

from conftest import run_broker
from pika_helpers import get_message

CHANNEL_MAX = 3


def test_update_secret_is_answered_and_the_connection_carries_on(connection, names):
    # RabbitMQ's internal users' credentials never expire, so the new secret is not checked
    # again: the broker answers update-secret-ok (pika waits for it) and keeps the connection.
    connection.update_secret("a-refreshed-token", "token refresh")
    connection.update_secret("another-token", "second refresh")

    channel = connection.channel()
    queue = names("q")
    channel.queue_declare(queue=queue)
    channel.basic_publish(exchange="", routing_key=queue, body=b"after update-secret")
    assert get_message(channel, queue)[2] == b"after update-secret"


@pytest.fixture
def limited_broker(tmp_path):
    """A broker offering channel_max = CHANNEL_MAX; yields pika parameters for it."""
    with run_broker(tmp_path, ["--channel-max", str(CHANNEL_MAX)]) as (_, parameters):
        yield parameters


def test_any_channel_number_may_be_opened_below_channel_max(limited_broker):
    connection = pika.BlockingConnection(limited_broker)
    try:
        # Numbers far above channel_max are fine while fewer than channel_max are open.
        for number in (65535, 1000, 7):
            channel = connection.channel(channel_number=number)
            assert channel.channel_number == number
            channel.queue_declare(queue="", exclusive=True)
    finally:
        connection.close()


def test_opening_one_channel_more_than_channel_max_closes_the_connection_with_530(limited_broker):
    connection = pika.BlockingConnection(limited_broker)
    for number in range(1, CHANNEL_MAX + 1):
        connection.channel(channel_number=number)

    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as excinfo:
        connection.channel(channel_number=CHANNEL_MAX + 1)
    assert excinfo.value.reply_code == 530
    assert excinfo.value.reply_text == (
        f"NOT_ALLOWED - number of channels opened ({CHANNEL_MAX}) has reached "
        f"the negotiated channel_max ({CHANNEL_MAX})"
    )


def test_a_closed_channel_frees_its_place_under_channel_max(limited_broker):
    connection = pika.BlockingConnection(limited_broker)
    try:
        channels = [connection.channel() for _ in range(CHANNEL_MAX)]
        channels[0].close()
        extra = connection.channel(channel_number=60000)
        extra.queue_declare(queue="", exclusive=True)
    finally:
        connection.close()
