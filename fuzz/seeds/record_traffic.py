"""Records real client traffic as seed corpora for the fuzz targets.

Runs a pika session (declares with arguments, binds, publishes with properties and headers,
consumes, acks, nacks, gets, transactions, confirms, deletes) through a recording TCP proxy
in front of a running Warren, then writes:
  corpus/frames/      each connection's client bytes after the protocol header
  corpus/connection/  the same after the handshake (start-ok, tune-ok, open), as the
                      `connection` target expects (it sends its own handshake first)
  corpus/methods/     each method and content-header frame payload
  corpus/segment/     the segments of the broker's data directory (2-byte index length,
                      index, log), if --data-dir is given

Usage: python record_traffic.py --port AMQP_PORT [--data-dir DIR] --out fuzz/corpus
"""

import argparse
import hashlib
import socket
import struct
import threading
from pathlib import Path

import pika

HEADER = b"AMQP\x00\x00\x09\x01"


def proxy(listener, upstream_port, recorded):
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        server = socket.create_connection(("127.0.0.1", upstream_port))
        buffer = bytearray()
        recorded.append(buffer)

        def pump(source, sink, record):
            while True:
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    try:
                        sink.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                if record is not None:
                    record.extend(data)
                sink.sendall(data)

        threading.Thread(target=pump, args=(client, server, buffer), daemon=True).start()
        threading.Thread(target=pump, args=(server, client, None), daemon=True).start()


def frames(data):
    """(type, channel, payload) of each whole frame in data."""
    at = 0
    while at + 7 <= len(data):
        kind, channel, size = struct.unpack(">BHI", data[at:at + 7])
        if at + 8 + size > len(data):
            return
        yield kind, channel, bytes(data[at + 7:at + 7 + size]), at + 8 + size
        at += 8 + size


def session(port):
    parameters = pika.ConnectionParameters(host="127.0.0.1", port=port,
                                           credentials=pika.PlainCredentials("guest", "guest"))
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    channel.exchange_declare("seed.topic", "topic", durable=True, arguments={"alternate-exchange": "amq.fanout"})
    channel.exchange_declare("seed.headers", "headers")
    channel.queue_declare("seed.q", durable=True, arguments={
        "x-max-priority": 5, "x-message-ttl": 60000, "x-max-length": 1000, "x-dead-letter-exchange": "amq.direct",
        "x-overflow": "reject-publish", "x-nested": {"list": [1, "three", True, None], "inner": {"x": -7}}})
    channel.queue_declare("seed.stream", durable=True, arguments={"x-queue-type": "stream"})
    channel.queue_declare("seed.quorum", durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 3})
    channel.queue_bind("seed.q", "seed.topic", "a.*.c")
    channel.queue_bind("seed.q", "seed.headers", arguments={"x-match": "any", "kind": "order"})
    channel.confirm_delivery()
    properties = pika.BasicProperties(content_type="application/json", content_encoding="utf-8", delivery_mode=2,
                                      priority=3, correlation_id="c-1", reply_to="seed.replies",
                                      expiration="30000", message_id="m-1", timestamp=1700000000, type="order",
                                      user_id="guest", app_id="seed", headers={"kind": "order", "n": 42})
    for body in (b"", b"{}", b"x" * 5000):
        channel.basic_publish("seed.topic", "a.b.c", body, properties)
    channel.basic_publish("", "seed.stream", b"stream", pika.BasicProperties(headers={"x-stream-filter-value": "eu"}))
    channel.basic_publish("", "seed.quorum", b"quorum")
    channel.basic_qos(prefetch_count=10)
    method, _, _ = channel.basic_get("seed.q")
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, _ = channel.basic_get("seed.q")
    channel.basic_reject(method.delivery_tag, requeue=False)
    tag = channel.basic_consume("seed.q", lambda ch, m, p, b: ch.basic_ack(m.delivery_tag))
    connection.process_data_events(time_limit=0.5)
    channel.basic_cancel(tag)
    channel.basic_consume("seed.stream", lambda ch, m, p, b: ch.basic_ack(m.delivery_tag),
                          arguments={"x-stream-offset": "first"})
    connection.process_data_events(time_limit=0.3)
    tx = connection.channel()
    tx.tx_select()
    tx.basic_publish("", "seed.q", b"in a transaction")
    tx.tx_rollback()
    tx.basic_publish("", "seed.q", b"committed")
    tx.tx_commit()
    channel.basic_publish("", "seed.q", b"kept on disk", pika.BasicProperties(delivery_mode=2))
    channel.queue_declare("seed.temp", arguments={"x-expires": 60000})
    channel.queue_purge("seed.temp")
    channel.queue_unbind("seed.q", "seed.topic", "a.*.c")
    # The durable queues stay, so that their segments can be taken as seeds.
    channel.queue_delete("seed.temp")
    channel.exchange_delete("seed.headers")
    connection.close()


def write(directory, data):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


def main():
    arguments = argparse.ArgumentParser()
    arguments.add_argument("--port", type=int, required=True)
    arguments.add_argument("--data-dir", type=Path)
    arguments.add_argument("--out", type=Path, required=True)
    options = arguments.parse_args()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    recorded = []
    threading.Thread(target=proxy, args=(listener, options.port, recorded), daemon=True).start()
    session(listener.getsockname()[1])
    listener.close()
    for stream in recorded:
        data = bytes(stream).removeprefix(HEADER)
        write(options.out / "frames", data)
        ends = [end for _, _, _, end in frames(data)]
        if len(ends) > 3:
            write(options.out / "connection", data[ends[2]:])
        for kind, _, payload, _ in frames(data):
            if kind in (1, 2):
                write(options.out / "methods", payload)
    if options.data_dir:
        for log in sorted(options.data_dir.rglob("*.log")):
            index = log.with_suffix(".idx")
            index_bytes = index.read_bytes()[:65535] if index.exists() else b""
            write(options.out / "segment", struct.pack(">H", len(index_bytes)) + index_bytes + log.read_bytes()[:1 << 20])


if __name__ == "__main__":
    main()
