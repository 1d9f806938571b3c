// Warren's web UI in headless Chromium (Debian's, at /usr/bin/chromium or $CHROMIUM), driven
// by Playwright, against a real broker: log in, watch the overview chart move while a
// publisher runs, list the queues, open a stream and page through it by offset, filter it
// by tag, follow new messages live, purge a queue, and find the session alive after a
// reload. A screenshot of each page goes to $WARREN_UI_SCREENSHOTS (default
// target/ui-screenshots) to be looked at.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import amqp from 'amqplib';
import { chromium } from 'playwright-core';
import { freePort } from '../node/warren-broker.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const SHOTS = process.env.WARREN_UI_SCREENSHOTS || path.join(ROOT, 'target', 'ui-screenshots');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitForPort(port, child) {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`warren exited with ${child.exitCode}`);
    const up = await new Promise((resolve) => {
      const socket = net.connect({ host: '127.0.0.1', port });
      socket.once('connect', () => { socket.destroy(); resolve(true); });
      socket.once('error', () => resolve(false));
    });
    if (up) return;
    await sleep(100);
  }
  throw new Error(`nothing listened on ${port}`);
}

let broker, workdir, browser, page, amqpUrl, base;

before(async () => {
  const binary = process.env.WARREN_BIN || path.join(ROOT, 'target', 'debug', 'warren');
  workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-ui-'));
  const [amqpPort, httpPort] = [await freePort(), await freePort()];
  const log = fs.openSync(path.join(workdir, 'warren.log'), 'w');
  broker = spawn(binary, ['--amqp-listen', `127.0.0.1:${amqpPort}`, '--http-listen', `127.0.0.1:${httpPort}`,
    '--data-dir', path.join(workdir, 'data')], { stdio: ['ignore', log, log] });
  await waitForPort(httpPort, broker);
  await waitForPort(amqpPort, broker);
  amqpUrl = `amqp://guest:guest@127.0.0.1:${amqpPort}`;
  base = `http://127.0.0.1:${httpPort}`;
  fs.mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.on('dialog', (dialog) => dialog.accept());
});

after(async () => {
  if (browser) await browser.close();
  if (broker && broker.exitCode === null) {
    broker.kill('SIGTERM');
    await once(broker, 'exit');
  }
  fs.rmSync(workdir, { recursive: true, force: true });
});

const shot = (name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

// Publishes `count` messages to `queue` through the default exchange, with confirms.
async function publish(queue, count, tagOf) {
  const connection = await amqp.connect(amqpUrl);
  const channel = await connection.createConfirmChannel();
  for (let n = 0; n < count; n++) {
    const headers = tagOf ? { 'x-stream-filter-value': tagOf(n) } : {};
    channel.sendToQueue(queue, Buffer.from(`${queue} message ${n}`), { headers, persistent: true });
  }
  await channel.waitForConfirms();
  await connection.close();
}

test('the UI shows the broker live and browses a stream without consuming it', async () => {
  // Log in once.
  await page.goto(base + '/');
  await page.locator('#login-form').waitFor();
  await page.fill('#login-user', 'guest');
  await page.fill('#login-password', 'guest');
  await page.click('#login-submit');
  await page.locator('#live', { hasText: 'live' }).waitFor({ timeout: 10_000 });

  // The overview's chart moves while a publisher runs: no reload, no polling.
  const setup = await amqp.connect(amqpUrl);
  const channel = await setup.createChannel();
  await channel.assertQueue('ui-demo', { durable: true });
  await channel.assertQueue('events', { durable: true, arguments: { 'x-queue-type': 'stream' } });
  const pointsBefore = await page.evaluate(() => window.warren.charts[0].counts()[0][1]);
  let publishing = true;
  const publisher = (async () => {
    while (publishing) {
      for (let i = 0; i < 40; i++) channel.sendToQueue('ui-demo', Buffer.from('tick'));
      await sleep(100);
    }
  })();
  await page.waitForFunction(() => Number(document.querySelector('#card-publish').textContent.replace(/,/g, '')) > 0, null, { timeout: 15_000 });
  await page.waitForFunction((before) => window.warren.charts[0].counts()[0][1] >= before + 3, pointsBefore, { timeout: 15_000 });
  publishing = false;
  await publisher;
  await shot('overview');

  // The queues table, live.
  await page.goto(base + '/#/queues');
  await page.locator('table tbody tr', { hasText: 'ui-demo' }).waitFor();
  await page.locator('table tbody tr', { hasText: 'events' }).waitFor();
  await shot('queues');
  // Sorted and filtered by the broker: deepest first, then only names with "vent".
  const firstQueue = () => document.querySelector('table tbody tr td a')?.textContent;
  assert.equal(await page.evaluate(firstQueue), 'events', 'by name at first');
  await page.click('th[data-key="messages_ready"]');
  await page.waitForFunction(() => document.querySelector('table tbody tr td a')?.textContent === 'ui-demo', null, { timeout: 5_000 });
  await page.fill('#queue-filter', 'vent');
  await page.waitForFunction(() => document.querySelectorAll('table tbody tr').length === 1, null, { timeout: 5_000 });
  assert.equal(await page.evaluate(firstQueue), 'events');
  await page.fill('#queue-filter', '');

  // A stream, paged by offset, filtered by tag, then followed live.
  await publish('events', 60, (n) => (n % 2 === 0 ? 'even' : 'odd'));
  await page.goto(base + '/#/browse/%2F/events');
  await page.locator('#browse-messages .message').first().waitFor();
  const offsets = () => page.$$eval('#browse-messages .message', (nodes) => nodes.map((n) => Number(n.dataset.offset)));
  await page.waitForFunction(() => document.querySelectorAll('#browse-messages .message').length === 25);
  assert.deepEqual((await offsets()).slice(0, 3), [0, 1, 2]);
  await page.click('#browse-next');
  await page.waitForFunction(() => document.querySelector('#browse-messages .message').dataset.offset === '25');
  await page.click('#browse-prev');
  await page.waitForFunction(() => document.querySelector('#browse-messages .message').dataset.offset === '0');
  await page.fill('#browse-filter', 'odd');
  await page.click('#browse-open');
  await page.waitForFunction(() => document.querySelector('#browse-messages .message').dataset.offset === '1');
  assert.ok((await offsets()).every((offset) => offset % 2 === 1), 'only odd-tagged messages');
  await page.fill('#browse-filter', '');
  await page.selectOption('#browse-start', 'last');
  await page.click('#browse-open');
  await page.waitForFunction(() => document.querySelector('#browse-messages .message').dataset.offset === '59');
  await page.click('#browse-tail');
  await publish('events', 3);
  await page.waitForFunction(() => [...document.querySelectorAll('#browse-messages .message')].some((m) => m.dataset.offset === '62'), null, { timeout: 10_000 });
  await shot('browse');
  const stillThere = await (await fetch(`${base}/api/queues/%2F/events`, { headers: { authorization: 'Basic ' + Buffer.from('guest:guest').toString('base64') } })).json();
  assert.equal(stillThere.messages_ready + stillThere.messages_unacknowledged >= 0, true);

  // A queue's page, its depth, and a purge.
  await page.goto(base + '/#/queue/%2F/ui-demo');
  await page.waitForFunction(() => Number((document.querySelector('[data-field="Ready"]') || {}).textContent?.replace(/,/g, '')) > 0, null, { timeout: 10_000 });
  await page.click('#purge');
  await page.waitForFunction(() => document.querySelector('[data-field="Ready"]').textContent === '0', null, { timeout: 10_000 });
  await shot('queue');

  // Exchanges with their publish form, and the connections.
  await page.goto(base + '/#/exchange/%2F/amq.default');
  await page.fill('#publish-key', 'ui-demo');
  await page.fill('#publish-payload', 'from the UI');
  await page.click('#publish-form button[type=submit]');
  await page.locator('#toast', { hasText: 'routed' }).waitFor();
  await page.goto(base + '/#/exchanges');
  await page.locator('table tbody tr', { hasText: 'amq.topic' }).waitFor();
  await shot('exchanges');
  await page.goto(base + '/#/connections');
  await page.locator('table tbody tr', { hasText: 'guest' }).waitFor();
  await shot('connections');

  // Policies: one added through the form applies to the queue it names, is edited, and deleted.
  await page.goto(base + '/#/policies');
  await page.fill('#policy-name', 'ui-limit');
  await page.fill('#policy-pattern', '^ui-demo$');
  await page.selectOption('#policy-apply-to', 'queues');
  await page.fill('#policy-definition', '{"max-length": 3, "ha-mode": "all"}');
  await page.click('#policy-form button[type=submit]');
  await page.locator('#policies table tbody tr', { hasText: 'ui-limit' }).waitFor();
  await page.locator('#policies table tbody tr', { hasText: 'ha-mode' }).waitFor();
  await page.goto(base + '/#/queue/%2F/ui-demo');
  await page.waitForFunction(() => document.querySelector('[data-field="Policy"]')?.textContent === 'ui-limit', null, { timeout: 10_000 });
  await page.goto(base + '/#/policies');
  await page.locator('#policies table tbody tr', { hasText: 'ui-limit' }).locator('button', { hasText: 'Edit' }).click();
  await page.fill('#policy-definition', '{"max-length": 5}');
  await page.click('#policy-form button[type=submit]');
  await page.locator('#policies table tbody tr', { hasText: '"max-length":5' }).waitFor();
  await shot('policies');
  await page.locator('#policies table tbody tr', { hasText: 'ui-limit' }).locator('button', { hasText: 'Delete' }).click();
  await page.locator('#policies table tbody tr', { hasText: 'No policies.' }).waitFor();
  await setup.close();

  // The session survives a reload.
  await page.reload();
  await page.locator('#live', { hasText: 'live' }).waitFor({ timeout: 10_000 });
  assert.equal(await page.isVisible('#login-form'), false);
});
