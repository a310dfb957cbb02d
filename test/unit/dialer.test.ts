// The agent's dialer: each failure is an AgentDialError whose `code` keeps
// the socket's errno (or says which of our checks refused), whose message is
// Go's wording for the DIAL_RSP, and whose `cause` is the original error.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AllowList } from '../../pkg/agent/allow-list.js';
import { Dialer } from '../../pkg/agent/dialer.js';
import { AgentDialError } from '../../pkg/agent/errors.js';
import { harness } from '../support/harness.js';
import { closedPort, startHangingListener } from '../support/tunnel.js';

const LIMIT = { timeout: 20_000 };

async function dialError(dialer: Dialer, address: string, signal?: AbortSignal): Promise<AgentDialError> {
  const err: unknown = await dialer.dial(address, signal).then(
    ({ socket }) => {
      socket.destroy();
      return undefined;
    },
    (e: unknown) => e,
  );
  assert.ok(err instanceof AgentDialError, `expected an AgentDialError, got ${String(err)}`);
  return err;
}

test('a refused connection keeps ECONNREFUSED as its code and the socket error as its cause', LIMIT, async () => {
  const port = await closedPort();
  const err = await dialError(new Dialer({ allowList: AllowList.parse('127.0.0.1') }), `127.0.0.1:${port}`);
  assert.equal(err.code, 'ECONNREFUSED');
  assert.equal(err.message, `dial tcp 127.0.0.1:${port}: connect: connection refused`);
  assert.equal((err.cause as NodeJS.ErrnoException).code, 'ECONNREFUSED');
});

test('an address the allow-list forbids is YT_ERR_DIAL_DENIED, before any socket is opened', LIMIT, async () => {
  const err = await dialError(new Dialer({ allowList: AllowList.parse('127.0.0.2') }), '127.0.0.1:1');
  assert.equal(err.code, 'YT_ERR_DIAL_DENIED');
  assert.match(err.message, /^dial tcp 127\.0\.0\.1:1: denied by policy/);
});

test('a name that does not resolve keeps the resolver code', LIMIT, async () => {
  const err = await dialError(new Dialer({ allowList: AllowList.parse('*') }), 'no-such-host.invalid:80');
  assert.ok(err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN', `code ${err.code}`);
  assert.ok(err.cause !== undefined);
  assert.match(err.message, /^dial tcp: lookup no-such-host\.invalid: /);
});

test("a dial that gets no answer in time is YT_ERR_DIAL_TIMEOUT with Go's i/o timeout wording", LIMIT, async (t) => {
  const h = harness(t);
  const port = await startHangingListener(h);
  const err = await dialError(new Dialer({ allowList: AllowList.parse('127.0.0.1'), timeoutMs: 200 }), `127.0.0.1:${port}`);
  assert.equal(err.code, 'YT_ERR_DIAL_TIMEOUT');
  assert.match(err.message, /i\/o timeout/);
});

test('a cancelled dial is YT_ERR_DIAL_CANCELLED', LIMIT, async (t) => {
  const h = harness(t);
  const port = await startHangingListener(h);
  const cancel = new AbortController();
  const pending = dialError(new Dialer({ allowList: AllowList.parse('127.0.0.1') }), `127.0.0.1:${port}`, cancel.signal);
  setImmediate(() => cancel.abort());
  const err = await pending;
  assert.equal(err.code, 'YT_ERR_DIAL_CANCELLED');
  assert.equal(err.message, `dial tcp 127.0.0.1:${port}: operation was canceled`);
});

test('an address that is not host:port is YT_ERR_BAD_ADDRESS', LIMIT, async () => {
  const err = await dialError(new Dialer({ allowList: AllowList.parse('*') }), 'nonsense');
  assert.equal(err.code, 'YT_ERR_BAD_ADDRESS');
});

test('a dial cancelled before it starts is YT_ERR_DIAL_CANCELLED too, not an AbortError', LIMIT, async () => {
  const err = await dialError(new Dialer({ allowList: AllowList.parse('127.0.0.1') }), '127.0.0.1:1', AbortSignal.abort());
  assert.equal(err.code, 'YT_ERR_DIAL_CANCELLED');
});
