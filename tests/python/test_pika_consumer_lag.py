"""Consumer lag of stream consumer groups, seen by an operator (issue 32): the committed offset,
the stream's last offset and the lag of each group (each partition of a super stream), and each
consumer's last delivered offset, in the management API (`/api/stream/groups`,
`/api/stream/consumers`), in `/metrics` (`warren_stream_group_offset_lag`) and in `warren ctl`
(`list_stream_consumer_groups`, `list_stream_group_consumers`, `list_stream_consumers`), against
offsets the test knows because it acked them itself."""

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request

import pika

from conftest import DEFAULT_BIN
from pika_helpers import pump_for, pump_until
from test_pika_policies import api_call, broker_with_api  # noqa: F401  (a fixture)
from test_pika_streams import confirmed_channel, consume, declare_stream, publish_many

GROUP = "x-consumer-group"
OFFSET = "x-stream-offset"


def enc(name):
    return urllib.parse.quote(name, safe="")


def ctl(port, *args):
    """The parsed JSON of one `warren ctl` verb against the broker's API."""
    binary = os.environ.get("WARREN_BIN", str(DEFAULT_BIN))
    command = [binary, "ctl", "--url", f"http://127.0.0.1:{port}", "--formatter", "json", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def groups_of(port, name):
    status, rows = api_call(port, "GET", f"/api/stream/groups/%2F/{enc(name)}")
    assert status == 200, rows
    return rows


def lag_samples(port):
    """The warren_stream_group_offset_lag samples of /metrics, by their labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("warren_stream_group_offset_lag{"):
            labels, value = line.rsplit(" ", 1)
            samples[labels[len("warren_stream_group_offset_lag"):]] = float(value)
    return samples


def wait_for(check, timeout_s=5.0):
    """Polls `check` until it returns a true value (the API reads offsets committed a moment
    after the acks that move them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_a_groups_lag_and_its_consumer_offset_against_known_acks(broker_with_api, names):
    connection, port, _ = broker_with_api
    channel = confirmed_channel(connection)
    stream = declare_stream(channel, names("s"))
    publish_many(channel, stream, 10)

    consumer, deliveries, tag = consume(connection, stream, ack=False, **{GROUP: "g", OFFSET: "first"})
    deliveries.wait_for(connection, 10)
    # Acks 0..2 and 4: everything below 3 is acked, so the group commits 3; 7 to go.
    consumer.basic_ack(deliveries.tag_of(2), multiple=True)
    consumer.basic_ack(deliveries.tag_of(4))
    pump_for(connection, 0.2)

    def committed_three():
        rows = groups_of(port, stream)
        return rows if rows and rows[0]["committed_offset"] == 3 else None

    rows = wait_for(committed_three)
    assert rows, groups_of(port, stream)
    [row] = rows
    assert (row["group"], row["stream"], row["super_stream"], row["partition"]) == ("g", stream, None, None)
    assert (row["last_offset"], row["offset_lag"]) == (9, 7)
    [member] = row["consumers"]
    assert (member["consumer_tag"], member["offset"], member["active"]) == (tag, 9, True)
    assert member["channel_details"]["connection_name"]

    status, consumers = api_call(port, "GET", "/api/stream/consumers/%2F")
    assert status == 200
    [mine] = [c for c in consumers if c["queue"]["name"] == stream]
    assert (mine["offset"], mine["offset_lag"], mine["active"], mine["properties"]["group"]) == (9, 0, True, "g")

    labels = f'{{vhost="/",stream="{stream}",group="g",partition=""}}'
    assert lag_samples(port).get(labels) == 7.0, lag_samples(port)

    # Live: five more messages, not yet delivered-and-acked, lengthen the lag.
    consumer.basic_cancel(tag)
    publish_many(channel, stream, 5, start=10)
    rows = wait_for(lambda: [r for r in groups_of(port, stream) if r["offset_lag"] == 12])
    assert rows and rows[0]["last_offset"] == 14, groups_of(port, stream)
    assert rows[0]["consumers"] == []
    assert lag_samples(port).get(labels) == 12.0

    [listed] = [g for g in ctl(port, "list_stream_consumer_groups", "-p", "/") if g["stream"] == stream]
    assert listed == {
        "stream": stream,
        "reference": "g",
        "partition_index": None,
        "committed_offset": 3,
        "last_offset": 14,
        "offset_lag": 12,
    }


def declare_super_stream(channel, name, partitions):
    channel.exchange_declare(name, "direct", durable=True, arguments={"x-super-stream": True})
    streams = []
    for index in range(partitions):
        stream = declare_stream(channel, f"{name}-{index}")
        channel.queue_bind(stream, name, routing_key=str(index), arguments={"x-stream-partition-order": index})
        streams.append(stream)
    return streams


def test_a_super_stream_groups_lag_per_partition(broker_with_api, names):
    connection, port, _ = broker_with_api
    channel = confirmed_channel(connection)
    name = names("super")
    first, second = declare_super_stream(channel, name, 2)
    for index, count in ((0, 4), (1, 6)):
        for i in range(count):
            channel.basic_publish(name, str(index), f"p{index}-{i}".encode(), pika.BasicProperties(delivery_mode=2))

    # One member of group "sg" reads both partitions and acks everything but the last two of
    # the second partition.
    reader = connection.channel()
    reader.basic_qos(prefetch_count=100)
    got = []
    tag = reader.basic_consume(name, lambda ch, method, props, body: got.append((method, props)),
                               arguments={GROUP: "sg", OFFSET: "first"})
    pump_until(connection, lambda: len(got) == 10)
    for method, props in got:
        partition, offset = props.headers["x-stream-partition"], props.headers[OFFSET]
        if not (partition == 1 and offset >= 4):
            reader.basic_ack(method.delivery_tag)
    pump_for(connection, 0.2)

    def settled():
        rows = groups_of(port, name)
        lags = {r["stream"]: (r["partition"], r["committed_offset"], r["offset_lag"]) for r in rows}
        return lags if lags == {first: (0, 4, 0), second: (1, 4, 2)} else None

    assert wait_for(settled), groups_of(port, name)
    samples = lag_samples(port)
    assert samples.get(f'{{vhost="/",stream="{name}",group="sg",partition="{first}"}}') == 0.0, samples
    assert samples.get(f'{{vhost="/",stream="{name}",group="sg",partition="{second}"}}') == 2.0, samples

    members = ctl(port, "list_stream_group_consumers", "-p", "/", "--stream", name, "--reference", "sg")
    assert sorted((m["stream"], m["state"]) for m in members) == [(first, "active"), (second, "active")]
    assert {m["consumer_tag"] for m in members} == {tag}
    reader.basic_cancel(tag)

    status, missing = api_call(port, "GET", f"/api/stream/groups/%2F/{enc(names('nothing'))}")
    assert status == 404 and "no stream or super stream" in missing["reason"], missing
