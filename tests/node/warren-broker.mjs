// Runs a real Warren broker for the amqplib cross-client tests.
//
// The binary is $WARREN_BIN (default: target/debug/warren in the repository root). The broker
// listens on a free loopback port and keeps its data in a fresh temporary directory.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const STARTUP_TIMEOUT_MS = 20_000;
const SHUTDOWN_TIMEOUT_MS = 10_000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Asks the kernel for a free loopback port, then releases it. */
export async function freePort() {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

function canConnect(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Starts the broker; resolves once it accepts TCP connections to
 * { url, stop() (SIGTERM, wait, remove its data; safe to call twice), log(), exitCode() }.
 */
export async function startBroker() {
  const binary = process.env.WARREN_BIN || path.join(REPO_ROOT, 'target', 'debug', 'warren');
  if (!fs.existsSync(binary)) {
    throw new Error(`broker binary not found at ${binary}; run \`cargo build --bin warren\` or set WARREN_BIN`);
  }
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-node-'));
  const logPath = path.join(workdir, 'warren.log');
  const logFd = fs.openSync(logPath, 'w');
  const port = await freePort();
  const child = spawn(
    binary,
    ['--amqp-listen', `127.0.0.1:${port}`, '--data-dir', path.join(workdir, 'data')],
    { stdio: ['ignore', logFd, logFd] },
  );
  fs.closeSync(logFd);
  let exited = false;
  let exitCode = null;
  child.once('exit', (code, signal) => {
    exited = true;
    exitCode = code ?? signal;
  });
  const log = () => fs.readFileSync(logPath, 'utf8');

  async function stop() {
    if (!exited) {
      const exit = once(child, 'exit');
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), SHUTDOWN_TIMEOUT_MS);
      await exit;
      clearTimeout(timer);
    }
    fs.rmSync(workdir, { recursive: true, force: true });
  }

  const deadline = Date.now() + STARTUP_TIMEOUT_MS;
  while (!(await canConnect(port))) {
    if (exited || Date.now() > deadline) {
      const reason = exited ? `exited with ${child.exitCode}` : `did not listen on ${port} in time`;
      const output = log();
      await stop();
      throw new Error(`warren ${reason}:\n${output}`);
    }
    await sleep(50);
  }
  return { url: `amqp://guest:guest@127.0.0.1:${port}`, stop, log, exitCode: () => exitCode };
}
