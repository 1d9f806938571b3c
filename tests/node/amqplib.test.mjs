// Warren against amqplib (Node.js, promise API): core AMQP 0-9-1 behaviour.
//
// Every assertion states what RabbitMQ does for the same frames.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import amqp from 'amqplib';
import { startBroker } from './warren-broker.mjs';

const WAIT_MS = 5_000; // how long to wait for something that should happen
const SETTLE_MS = 300; // how long to watch for something that should not happen
const TEST_TIMEOUT_MS = 15_000;

let broker;
before(async () => {
  broker = await startBroker();
});
after(async () => {
  await broker?.stop();
});

// ----------------------------------------------------------------------------- helpers

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A test with a timeout, so a missing frame fails the test instead of hanging the run. */
const it = (name, fn) => test(name, { timeout: TEST_TIMEOUT_MS }, fn);

async function waitUntil(predicate, what, timeout = WAIT_MS) {
  const deadline = Date.now() + timeout;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await sleep(10);
  }
}

/** Entity names unique to the running test: names('q') -> 'node.<test>.q.<hex>'. */
function namer(t) {
  const token = randomUUID().slice(0, 8);
  const slug = t.name.replace(/[^A-Za-z0-9]+/g, '-').slice(0, 80);
  return (suffix) => `node.${slug}.${suffix}.${token}`;
}

/** A connection closed when the test ends; `closedByBroker()` tells whether it was lost. */
async function connect(t) {
  const connection = await amqp.connect(broker.url);
  let lost = false;
  connection.on('close', () => {
    lost = true;
  });
  connection.on('error', () => {});
  connection.closedByBroker = () => lost;
  t.after(() => (lost ? undefined : connection.close().catch(() => {})));
  return connection;
}

async function setup(t, { confirm = false } = {}) {
  const connection = await connect(t);
  const channel = confirm ? await connection.createConfirmChannel() : await connection.createChannel();
  return { connection, channel, names: namer(t) };
}

async function declareQueue(channel, name, options = {}) {
  await channel.assertQueue(name, { durable: false, ...options });
  return name;
}

/** basic.get until a message arrives. */
async function getMessage(channel, queue, { noAck = true } = {}) {
  let message;
  const deadline = Date.now() + WAIT_MS;
  while (!(message = await channel.get(queue, { noAck }))) {
    if (Date.now() > deadline) throw new Error(`no message arrived on ${queue} within ${WAIT_MS} ms`);
    await sleep(20);
  }
  return message;
}

/** Takes exactly `count` messages (auto-ack) as strings, then asserts the queue is empty. */
async function getBodies(channel, queue, count) {
  const bodies = [];
  for (let i = 0; i < count; i++) bodies.push((await getMessage(channel, queue)).content.toString());
  assert.equal(await channel.get(queue, { noAck: true }), false, `${queue} holds more than ${count} messages`);
  return bodies;
}

/** Ready-message count, read with a passive declare on a fresh channel. */
async function messageCount(connection, queue) {
  const channel = await connection.createChannel();
  const { messageCount: count } = await channel.checkQueue(queue);
  await channel.close();
  return count;
}

/** Consumes `queue`, recording every delivery. */
async function consume(channel, queue, options = {}) {
  const messages = [];
  const { consumerTag } = await channel.consume(queue, (message) => messages.push(message), options);
  messages.consumerTag = consumerTag;
  messages.waitFor = (count) => waitUntil(() => messages.length >= count, `${count} deliveries (have ${messages.length})`);
  return messages;
}

/** Publishes on a confirm channel; resolves on basic.ack, rejects on basic.nack. */
function publishConfirmed(channel, exchange, routingKey, body, options = {}) {
  return new Promise((resolve, reject) => {
    channel.publish(exchange, routingKey, Buffer.from(body), options, (error) => (error ? reject(error) : resolve()));
  });
}

/** Asserts that a broker close error carries `code` and reply text starting with `text`. */
function closedWith(code, text, classId, methodId) {
  return (error) => {
    assert.equal(error.code, code, error.message);
    assert.match(error.message, new RegExp(`with message "${text}`));
    assert.equal(error.classId, classId);
    assert.equal(error.methodId, methodId);
    return true;
  };
}

/** A new channel on the connection can declare, publish and get. */
async function assertConnectionUsable(connection, names) {
  const channel = await connection.createChannel();
  const queue = await declareQueue(channel, names('after-error'));
  channel.sendToQueue(queue, Buffer.from('still alive'));
  assert.equal((await getMessage(channel, queue)).content.toString(), 'still alive');
  await channel.close();
}

/** Opens a channel that records the 'error' it gets and resolves `closed` when it closes. */
async function channelExpectingError(connection) {
  const channel = await connection.createChannel();
  const errors = [];
  channel.on('error', (error) => errors.push(error));
  channel.errors = errors;
  // Not events.once: that rejects on the 'error' event which precedes 'close'.
  channel.closed = new Promise((resolve) => channel.once('close', resolve));
  return channel;
}

const QUEUE_CLASS = 50;
const QUEUE_DECLARE = 10;
const BASIC_CLASS = 60;
const BASIC_PUBLISH = 40;
const BASIC_ACK = 80;

// ----------------------------------------------------------------------------- topology

it('direct exchange routes to the queue bound with the key', async (t) => {
  const { channel, names } = await setup(t);
  const exchange = names('x');
  await channel.assertExchange(exchange, 'direct', { durable: false });
  const queue = await declareQueue(channel, names('q'));
  await channel.bindQueue(queue, exchange, 'green');

  channel.publish(exchange, 'red', Buffer.from('unbound key'));
  channel.publish(exchange, 'green', Buffer.from('bound key'));

  const message = await getMessage(channel, queue);
  assert.equal(message.content.toString(), 'bound key');
  assert.equal(message.fields.exchange, exchange);
  assert.equal(message.fields.routingKey, 'green');
  assert.deepEqual(await getBodies(channel, queue, 0), []);
});

it('topic * matches exactly one word and # matches zero or more', async (t) => {
  const { channel, names } = await setup(t);
  const exchange = names('topic');
  await channel.assertExchange(exchange, 'topic', { durable: false });
  const patterns = { star: 'stock.*.nyse', hash: 'stock.#', tail: '#.error' };
  const queues = {};
  for (const [label, pattern] of Object.entries(patterns)) {
    queues[label] = await declareQueue(channel, names(label));
    await channel.bindQueue(queues[label], exchange, pattern);
  }

  const keys = ['stock.ibm.nyse', 'stock.nyse', 'stock.ibm.x.nyse', 'stock', 'bond.ibm.nyse', 'app.db.error', 'error'];
  for (const key of keys) channel.publish(exchange, key, Buffer.from(key));

  assert.deepEqual(await getBodies(channel, queues.star, 1), ['stock.ibm.nyse']);
  assert.deepEqual(await getBodies(channel, queues.hash, 4), ['stock.ibm.nyse', 'stock.nyse', 'stock.ibm.x.nyse', 'stock']);
  assert.deepEqual(await getBodies(channel, queues.tail, 2), ['app.db.error', 'error']);
});

it('fanout delivers a copy to every bound queue', async (t) => {
  const { channel, names } = await setup(t);
  const exchange = names('fanout');
  await channel.assertExchange(exchange, 'fanout', { durable: false });
  const first = await declareQueue(channel, names('q1'));
  const second = await declareQueue(channel, names('q2'));
  await channel.bindQueue(first, exchange, 'ignored');
  await channel.bindQueue(second, exchange, '');

  channel.publish(exchange, 'any-key', Buffer.from('broadcast'));

  assert.deepEqual(await getBodies(channel, first, 1), ['broadcast']);
  assert.deepEqual(await getBodies(channel, second, 1), ['broadcast']);
});

// ----------------------------------------------------------------------------- consuming

it('consumed message is gone once acked', async (t) => {
  const { connection, channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'));
  channel.sendToQueue(queue, Buffer.from('hello'));
  const messages = await consume(channel, queue);

  await messages.waitFor(1);
  const [message] = messages;
  assert.equal(message.content.toString(), 'hello');
  assert.equal(message.fields.consumerTag, messages.consumerTag);
  assert.equal(message.fields.redelivered, false);
  channel.ack(message);
  await channel.cancel(messages.consumerTag);
  await channel.close(); // an unacked message would be requeued here

  assert.equal(await messageCount(connection, queue), 0);
});

it('nack with requeue redelivers the same body flagged redelivered', async (t) => {
  const { channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'));
  channel.sendToQueue(queue, Buffer.from('try again'));
  const messages = await consume(channel, queue);

  await messages.waitFor(1);
  assert.equal(messages[0].fields.redelivered, false);
  channel.nack(messages[0], false, true);

  await messages.waitFor(2);
  const redelivery = messages[1];
  assert.equal(redelivery.content.toString(), 'try again');
  assert.equal(redelivery.fields.redelivered, true);
  assert.notEqual(redelivery.fields.deliveryTag, messages[0].fields.deliveryTag);
  channel.ack(redelivery);
  await sleep(SETTLE_MS);
  assert.equal(messages.length, 2);
});

it('basic.get returns the message, then get-empty', async (t) => {
  const { channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'));
  channel.sendToQueue(queue, Buffer.from('one'));
  channel.sendToQueue(queue, Buffer.from('two'));

  const first = await getMessage(channel, queue, { noAck: false });
  assert.equal(first.content.toString(), 'one');
  assert.equal(first.fields.redelivered, false);
  assert.equal(first.fields.messageCount, 1); // messages still in the queue
  channel.ack(first);

  const second = await getMessage(channel, queue);
  assert.equal(second.content.toString(), 'two');
  assert.equal(second.fields.messageCount, 0);

  assert.equal(await channel.get(queue, { noAck: true }), false);
});

it('prefetch count caps unacked deliveries', async (t) => {
  const { channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'));
  for (let i = 0; i < 5; i++) channel.sendToQueue(queue, Buffer.from(`m${i}`));
  await channel.prefetch(2);
  const messages = await consume(channel, queue);
  const bodies = () => messages.map((m) => m.content.toString());

  await messages.waitFor(2);
  await sleep(SETTLE_MS);
  assert.deepEqual(bodies(), ['m0', 'm1']);

  channel.ack(messages[0]);
  await messages.waitFor(3);
  await sleep(SETTLE_MS);
  assert.equal(messages.length, 3);

  channel.ack(messages[2], true); // multiple: acks m1 and m2
  await messages.waitFor(5);
  assert.deepEqual(bodies(), ['m0', 'm1', 'm2', 'm3', 'm4']);
});

it('properties and headers round-trip unchanged', async (t) => {
  const { channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'));
  const headers = {
    string: 'héllo',
    byte: 42,
    short: 1000,
    int: 100_000,
    negative: -7,
    int64: 2 ** 40,
    double: 2.5,
    true: true,
    false: false,
    void: null,
    array: [1, 'two', true, { in: 'array' }],
    table: { nested: { deeper: 'yes', n: 3 }, list: ['a', 'b'] },
  };
  const sent = {
    contentType: 'application/json',
    contentEncoding: 'utf-8',
    headers,
    deliveryMode: 2,
    priority: 5,
    correlationId: 'corr-123',
    replyTo: 'reply.queue',
    messageId: 'msg-456',
    timestamp: 1_700_000_000,
    type: 'order.created',
    appId: 'amqplib-test',
  };
  channel.sendToQueue(queue, Buffer.from('{"k":1}'), sent);

  const message = await getMessage(channel, queue);

  assert.equal(message.content.toString(), '{"k":1}');
  assert.deepEqual(message.properties.headers, headers);
  for (const [field, value] of Object.entries(sent)) {
    if (field !== 'headers') assert.equal(message.properties[field], value, field);
  }
  assert.equal(message.properties.expiration, undefined);
  assert.equal(message.properties.userId, undefined);
});

it('unacked messages are requeued flagged redelivered when their channel closes', async (t) => {
  const { connection, channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'));
  channel.sendToQueue(queue, Buffer.from('unfinished'));
  const consumer = await connection.createChannel();
  const messages = await consume(consumer, queue);
  await messages.waitFor(1);
  await consumer.close();

  const message = await getMessage(channel, queue);
  assert.equal(message.content.toString(), 'unfinished');
  assert.equal(message.fields.redelivered, true);
});

it('reject without requeue drops the message', async (t) => {
  const { connection, channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'));
  channel.sendToQueue(queue, Buffer.from('poison'));
  const message = await getMessage(channel, queue, { noAck: false });

  channel.reject(message, false);

  assert.equal(await messageCount(connection, queue), 0);
  assert.equal(await channel.get(queue, { noAck: true }), false);
});

for (const [label, size] of [['empty', 0], ['1 MB, many frames', 1_000_000]]) {
  it(`body round-trips: ${label}`, async (t) => {
    const { channel, names } = await setup(t);
    const queue = await declareQueue(channel, names('q'));
    const body = Buffer.alloc(size, 0);
    for (let i = 0; i < size; i++) body[i] = i % 251;

    channel.sendToQueue(queue, body);

    assert.ok((await getMessage(channel, queue)).content.equals(body));
  });
}

it('server-named exclusive queue is locked to, and deleted with, its connection', async (t) => {
  const { connection, channel } = await setup(t);
  const { queue } = await channel.assertQueue('', { exclusive: true });
  assert.match(queue, /^amq\.gen-/);
  const other = await connect(t);

  const intruder = await channelExpectingError(other);
  await assert.rejects(intruder.checkQueue(queue), closedWith(405, 'RESOURCE_LOCKED', QUEUE_CLASS, QUEUE_DECLARE));

  await connection.close();

  const checker = await channelExpectingError(other);
  await assert.rejects(checker.checkQueue(queue), closedWith(404, 'NOT_FOUND', QUEUE_CLASS, QUEUE_DECLARE));
});

it('deleting a consumed queue sends basic.cancel to the consumer', async (t) => {
  const { connection, channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'));
  const deliveries = [];
  const cancels = [];
  channel.on('cancel', (fields) => cancels.push(fields));
  const { consumerTag } = await channel.consume(queue, (message) => deliveries.push(message));

  const deleter = await connection.createChannel();
  await deleter.deleteQueue(queue);

  await waitUntil(() => cancels.length > 0, 'basic.cancel from the broker');
  assert.equal(cancels[0].consumerTag, consumerTag);
  assert.deepEqual(deliveries, [null]); // amqplib tells the consumer with null
  await declareQueue(channel, names('still-open'));
});

it('purge and delete report message counts', async (t) => {
  const { connection, channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'));
  for (let i = 0; i < 3; i++) channel.sendToQueue(queue, Buffer.from(`p${i}`));
  assert.equal(await messageCount(connection, queue), 3);

  assert.equal((await channel.purgeQueue(queue)).messageCount, 3);
  channel.sendToQueue(queue, Buffer.from('after purge'));
  assert.equal((await channel.deleteQueue(queue)).messageCount, 1);
});

it('many confirmed messages are consumed in publish order', async (t) => {
  const { connection, channel, names } = await setup(t, { confirm: true });
  const queue = await declareQueue(channel, names('q'));
  const count = 1000;
  for (let i = 0; i < count; i++) channel.publish('', queue, Buffer.from(String(i)));
  await channel.waitForConfirms();

  const consumer = await connection.createChannel();
  await consumer.prefetch(50);
  const received = [];
  await consumer.consume(queue, (message) => {
    received.push(Number(message.content.toString()));
    consumer.ack(message);
  });

  await waitUntil(() => received.length >= count, `${count} deliveries (have ${received.length})`);
  assert.deepEqual(received, Array.from({ length: count }, (_, i) => i));
});

// ----------------------------------------------------------------------------- publishing

it('publisher confirms ack every publish', async (t) => {
  const { connection, channel, names } = await setup(t, { confirm: true });
  const queue = await declareQueue(channel, names('q'));

  const confirms = [];
  for (let i = 0; i < 10; i++) confirms.push(publishConfirmed(channel, '', queue, `c${i}`, { mandatory: true }));
  await Promise.all(confirms); // each resolves on basic.ack, rejects on basic.nack
  await channel.waitForConfirms();

  assert.equal(await messageCount(connection, queue), 10);
});

it('mandatory unroutable publish is returned with 312 NO_ROUTE', async (t) => {
  const { channel, names } = await setup(t);
  const exchange = names('x');
  await channel.assertExchange(exchange, 'direct', { durable: false });
  const returned = [];
  channel.on('return', (message) => returned.push(message));

  channel.publish(exchange, 'nowhere', Buffer.from('lost'), { mandatory: true, correlationId: 'r1' });

  await waitUntil(() => returned.length > 0, 'basic.return');
  const [message] = returned;
  assert.equal(message.fields.replyCode, 312);
  assert.equal(message.fields.replyText, 'NO_ROUTE');
  assert.equal(message.fields.exchange, exchange);
  assert.equal(message.fields.routingKey, 'nowhere');
  assert.equal(message.content.toString(), 'lost');
  assert.equal(message.properties.correlationId, 'r1');
});

it('mandatory unroutable publish on a confirm channel is returned before it is acked', async (t) => {
  const { channel, names } = await setup(t, { confirm: true });
  const returned = [];
  channel.on('return', (message) => returned.push(message));

  let returnsSeenAtAck;
  await publishConfirmed(channel, '', names('no-such-queue'), 'lost', { mandatory: true }).then(() => {
    returnsSeenAtAck = returned.length;
  });

  assert.equal(returnsSeenAtAck, 1, 'basic.return must precede basic.ack');
  assert.equal(returned[0].fields.replyCode, 312);
  assert.equal(returned[0].fields.replyText, 'NO_ROUTE');
  assert.equal(returned[0].content.toString(), 'lost');
});

// ----------------------------------------------------------------------------- errors

it('passive declare of a missing queue closes only that channel with 404', async (t) => {
  const { connection, channel: bystander, names } = await setup(t);
  const doomed = await channelExpectingError(connection);

  await assert.rejects(doomed.checkQueue(names('missing')), closedWith(404, 'NOT_FOUND', QUEUE_CLASS, QUEUE_DECLARE));

  await doomed.closed;
  assert.equal(doomed.errors.length, 1);
  assert.equal(doomed.errors[0].code, 404);
  assert.equal(connection.closedByBroker(), false);
  await declareQueue(bystander, names('bystander'));
  await assertConnectionUsable(connection, names);
});

it('redeclaring a queue with a different durable flag closes the channel with 406', async (t) => {
  const { connection, channel, names } = await setup(t);
  const queue = await declareQueue(channel, names('q'), { durable: false });
  const doomed = await channelExpectingError(connection);

  await assert.rejects(
    doomed.assertQueue(queue, { durable: true }),
    closedWith(406, 'PRECONDITION_FAILED', QUEUE_CLASS, QUEUE_DECLARE),
  );

  await doomed.closed;
  assert.equal(doomed.errors[0].code, 406);
  assert.equal(connection.closedByBroker(), false);
  assert.equal((await channel.checkQueue(queue)).queue, queue);
  await assertConnectionUsable(connection, names);
});

it('publishing to a missing exchange closes the channel with 404', async (t) => {
  const { connection, names } = await setup(t);
  const doomed = await channelExpectingError(connection);

  doomed.publish(names('missing-x'), 'key', Buffer.from('nowhere'));

  await doomed.closed;
  assert.equal(doomed.errors.length, 1);
  closedWith(404, 'NOT_FOUND', BASIC_CLASS, BASIC_PUBLISH)(doomed.errors[0]);
  assert.equal(connection.closedByBroker(), false);
  await assertConnectionUsable(connection, names);
});

it('acking an unknown delivery tag closes the channel with 406', async (t) => {
  const { connection, names } = await setup(t);
  const doomed = await channelExpectingError(connection);

  doomed.ack({ fields: { deliveryTag: 99 } });

  await doomed.closed;
  assert.equal(doomed.errors.length, 1);
  closedWith(406, 'PRECONDITION_FAILED', BASIC_CLASS, BASIC_ACK)(doomed.errors[0]);
  assert.equal(connection.closedByBroker(), false);
  await assertConnectionUsable(connection, names);
});

it('declaring a queue with the reserved amq. prefix is refused with 403', async (t) => {
  const { connection, names } = await setup(t);
  const doomed = await channelExpectingError(connection);

  await assert.rejects(
    doomed.assertQueue(`amq.${names('q')}`),
    closedWith(403, 'ACCESS_REFUSED', QUEUE_CLASS, QUEUE_DECLARE),
  );

  await doomed.closed;
  assert.equal(connection.closedByBroker(), false);
  await assertConnectionUsable(connection, names);
});

// ----------------------------------------------------------------------------- broker lifecycle

it('broker shutdown closes connections with 320 CONNECTION_FORCED', async () => {
  const ownBroker = await startBroker();
  try {
    const connection = await amqp.connect(ownBroker.url);
    connection.on('error', () => {});
    const closed = new Promise((resolve) => connection.once('close', resolve));

    await ownBroker.stop(); // SIGTERM, then wait for the process to exit

    const error = await closed;
    assert.equal(error?.code, 320);
    assert.match(error.message, /CONNECTION_FORCED/);
    assert.equal(ownBroker.exitCode(), 0);
  } finally {
    await ownBroker.stop();
  }
});
