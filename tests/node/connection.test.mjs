// Warren against amqplib (Node.js, promise API): connection-level behaviour, as RabbitMQ
// behaves: connection.update-secret, and closing a connection while publishes are in flight.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import amqp from 'amqplib';
import { startBroker } from './warren-broker.mjs';

const TEST_TIMEOUT_MS = 30_000;
/** Closes raced against publishes still being written, each a fresh connection. */
const CLOSE_WHILE_PUBLISHING_ROUNDS = 10;
/** Publishes queued before each of those closes, and their size. */
const PUBLISHES_BEFORE_CLOSE = 2_000;
const PUBLISH_BYTES = 4 * 1024;

let broker;
before(async () => {
  broker = await startBroker();
});
after(async () => {
  await broker?.stop();
});

const it = (name, fn) => test(name, { timeout: TEST_TIMEOUT_MS }, fn);

/** A connection that records every 'error' it emits. */
async function connect() {
  const connection = await amqp.connect(broker.url);
  connection.errors = [];
  connection.on('error', (error) => connection.errors.push(error));
  return connection;
}

it('updateSecret is answered with update-secret-ok and the connection carries on', async () => {
  const connection = await connect();
  let acknowledged = 0;
  connection.connection.on('update-secret-ok', () => acknowledged++);
  await connection.updateSecret(Buffer.from('a refreshed token'), 'token refresh');
  assert.equal(acknowledged, 1);
  const channel = await connection.createChannel();
  const { queue } = await channel.assertQueue('', { exclusive: true });
  channel.sendToQueue(queue, Buffer.from('after update-secret'));
  const { messageCount } = await channel.checkQueue(queue);
  assert.equal(messageCount, 1);
  await connection.close();
  assert.deepEqual(connection.errors, []);
});

it('closing while publishes are in flight ends cleanly with close-ok', async () => {
  const body = Buffer.alloc(PUBLISH_BYTES, 'x');
  for (let round = 0; round < CLOSE_WHILE_PUBLISHING_ROUNDS; round++) {
    const connection = await connect();
    const closed = new Promise((resolve) => connection.once('close', resolve));
    const channel = await connection.createChannel();
    const { queue } = await channel.assertQueue('', { exclusive: true });
    for (let i = 0; i < PUBLISHES_BEFORE_CLOSE; i++) channel.sendToQueue(queue, body);
    // The close resolves only when close-ok arrives; a reset instead rejects it (EPIPE,
    // ECONNRESET) or leaves it pending.
    await connection.close();
    await closed;
    assert.deepEqual(connection.errors, [], `round ${round}`);
  }
});
