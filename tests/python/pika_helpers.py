"""Helpers shared by the pika suites: waiting on pika's I/O loop, reading queue state, and
checking what the broker closed."""

import time

WAIT_S = 5.0  # how long to wait for something that should happen


def get_message(channel, queue, auto_ack=True, timeout=WAIT_S):
    """basic.get until a message arrives; returns (method, properties, body)."""
    deadline = time.monotonic() + timeout
    while True:
        method, properties, body = channel.basic_get(queue=queue, auto_ack=auto_ack)
        if method is not None:
            return method, properties, body
        if time.monotonic() > deadline:
            raise AssertionError(f"no message arrived on {queue!r} within {timeout}s")
        time.sleep(0.02)


def message_count(connection, queue):
    """Ready-message count, read with a passive declare on a fresh channel."""
    channel = connection.channel()
    try:
        return channel.queue_declare(queue=queue, passive=True).method.message_count
    finally:
        channel.close()


def pump_until(connection, predicate, timeout=WAIT_S):
    """Runs pika's I/O loop (which dispatches deliveries) until predicate() is true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        connection.process_data_events(time_limit=0.02)
    return True


def pump_for(connection, seconds):
    pump_until(connection, lambda: False, timeout=seconds)


def assert_closed_by_broker(excinfo, code, text):
    error = excinfo.value
    assert error.reply_code == code, f"reply code {error.reply_code} ({error.reply_text})"
    assert error.reply_text.startswith(text), error.reply_text


class Deliveries(list):
    """A basic_consume callback that records (method, properties, body) triples."""

    def __call__(self, channel, method, properties, body):
        self.append((method, properties, body))

    def bodies(self):
        return [body for _, _, body in self]

    def wait_for(self, connection, count, timeout=WAIT_S):
        assert pump_until(connection, lambda: len(self) >= count, timeout), (
            f"expected {count} deliveries, got {len(self)} ({self.bodies()}) within {timeout}s"
        )
