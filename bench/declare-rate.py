"""Declares durable queues with a binding each, one at a time and synchronously, as one
client (pika) would, and prints how long each block of declares took.

    declare-rate.py HOST PORT --queues N [--block B] [--prefix P] [--vhost V]
    declare-rate.py HOST PORT --await-queue NAME
    declare-rate.py HOST PORT --churn CHANGES [--clients K]

The second form waits until queue NAME can be declared passively (the broker is up and has
recovered it) and prints how long that took. The third declares the durable queue
`declare-rate-kept`, then makes CHANGES definition changes from K clients at once (each
declares and deletes a durable queue of its own, over and over: the catalog stays small while
its history grows), printing the rate every 10% of the way.

Each queue is declared durable and bound to the durable topic exchange `declare-rate` with
its own name as the key. Prints one line per block ("queues 1-1000: 2.31 s, 433/s") and a
summary with the rate and the ratio of the last block's time to the first's: a cost per
declare that does not grow with the number of definitions keeps that ratio near 1.
"""

import argparse
import multiprocessing
import sys
import time

import pika


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--block", type=int, default=1_000)
    parser.add_argument("--prefix", default="declare-rate")
    parser.add_argument("--vhost", default="/")
    parser.add_argument("--await-queue")
    parser.add_argument("--churn", type=int)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    if args.await_queue:
        return await_queue(args)
    if args.churn:
        return churn(args)

    params = pika.ConnectionParameters(args.host, args.port, virtual_host=args.vhost, heartbeat=0)
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.exchange_declare("declare-rate", exchange_type="topic", durable=True)
    blocks = []
    started = time.monotonic()
    block_started = started
    for i in range(1, args.queues + 1):
        name = f"{args.prefix}-{i:07d}"
        channel.queue_declare(name, durable=True)
        channel.queue_bind(name, "declare-rate", routing_key=name)
        if i % args.block == 0 or i == args.queues:
            now = time.monotonic()
            count = i - (len(blocks) * args.block)
            blocks.append(now - block_started)
            print(
                f"queues {i - count + 1}-{i}: {now - block_started:.2f} s, {count / (now - block_started):.0f}/s",
                flush=True,
            )
            block_started = now
    total = time.monotonic() - started
    connection.close()
    first, last = blocks[0], blocks[-1]
    print(
        f"total: {args.queues} durable queues with a binding each in {total:.1f} s, "
        f"{args.queues / total:.0f} declare+bind pairs/s; last block / first block = {last / first:.2f}"
    )


def churn_worker(host, port, vhost, worker, pairs, done):
    params = pika.ConnectionParameters(host, port, virtual_host=vhost, heartbeat=0)
    channel = pika.BlockingConnection(params).channel()
    name = f"declare-rate-churn-{worker}"
    for _ in range(pairs):
        channel.queue_declare(name, durable=True)
        channel.queue_delete(name)
        with done.get_lock():
            done.value += 2


def churn(args):
    params = pika.ConnectionParameters(args.host, args.port, virtual_host=args.vhost, heartbeat=0)
    connection = pika.BlockingConnection(params)
    connection.channel().queue_declare("declare-rate-kept", durable=True)
    connection.close()
    pairs = args.churn // (2 * args.clients)
    done = multiprocessing.Value("q", 0)
    workers = [
        multiprocessing.Process(target=churn_worker, args=(args.host, args.port, args.vhost, w, pairs, done))
        for w in range(args.clients)
    ]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    total = pairs * 2 * args.clients
    reported = 0
    while any(worker.is_alive() for worker in workers):
        time.sleep(0.5)
        if done.value - reported >= total // 10:
            reported = done.value
            elapsed = time.monotonic() - started
            print(f"{reported} changes in {elapsed:.0f} s, {reported / elapsed:.0f}/s", flush=True)
    failed = [worker.exitcode for worker in workers if worker.exitcode != 0]
    elapsed = time.monotonic() - started
    print(f"total: {done.value} definition changes from {args.clients} clients in {elapsed:.1f} s, "
          f"{done.value / elapsed:.0f}/s")
    return 1 if failed else 0


def await_queue(args):
    params = pika.ConnectionParameters(args.host, args.port, virtual_host=args.vhost, heartbeat=0)
    started = time.monotonic()
    while time.monotonic() - started < 600:
        try:
            connection = pika.BlockingConnection(params)
            connection.channel().queue_declare(args.await_queue, passive=True)
            connection.close()
            print(f"queue {args.await_queue} declared passively {time.monotonic() - started:.2f} s after the start")
            return 0
        except Exception:  # not up yet: refused, reset, or a handshake that timed out
            time.sleep(0.01)
    print(f"queue {args.await_queue} not there after 600 s")
    return 1


if __name__ == "__main__":
    sys.exit(main())
