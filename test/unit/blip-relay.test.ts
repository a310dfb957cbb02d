// The test relay between agents and servers (test/support/blip-relay.ts):
// round robin over its targets, and the two blips: reset (both ends reset, new
// connections refused until it heals) and silent (nothing crosses, not even a
// close; connections made meanwhile go through after it heals; open ones stay
// dark, or carry on).

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { startBlipRelay } from '../support/blip-relay.js';
import { harness, type Harness } from '../support/harness.js';
import { readExactly, startTCPServer, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 30_000 };

/** A target that answers every chunk with `<name>:<chunk>` and records how its connections ended. */
async function namedEcho(h: Harness, name: string) {
  const ends: string[] = [];
  const received: string[] = [];
  const t = await startTCPServer(h, (s) => {
    s.on('data', (d: Buffer) => {
      received.push(d.toString());
      s.write(`${name}:${d.toString()}`);
    });
    s.on('end', () => {
      ends.push('end');
      s.end();
    });
    s.on('error', (err: NodeJS.ErrnoException) => ends.push(err.code ?? 'error'));
  });
  return { ...t, ends, received };
}

async function dial(h: Harness, port: number): Promise<Socket> {
  const s = connect(port, '127.0.0.1');
  s.on('error', () => {});
  h.defer(() => s.destroy());
  await once(s, 'connect');
  return s;
}

async function ask(s: Socket, text: string, answerLength: number): Promise<string> {
  s.write(text);
  return (await readExactly(s, answerLength)).toString();
}

/** How a client socket ends: 'end' (FIN) or its error code. */
function ending(s: Socket): Promise<string> {
  return new Promise((resolve) => {
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
    s.once('end', () => resolve('end'));
    s.resume();
  });
}

test('connections go to the targets in turn and carry bytes and half-closes both ways', LIMIT, async (t) => {
  const h = harness(t);
  const a = await namedEcho(h, 'a');
  const b = await namedEcho(h, 'b');
  const relay = await startBlipRelay(h, [a.port, b.port]);
  const answers: string[] = [];
  for (let i = 0; i < 4; i++) {
    const s = await dial(h, relay.port);
    answers.push(await ask(s, 'hi', 4));
    s.end();
    assert.equal(await ending(s), 'end', 'the target answered the half-close with its own');
  }
  assert.deepEqual(answers, ['a:hi', 'b:hi', 'a:hi', 'b:hi']);
  await waitFor('both ends closed', () => relay.connections() === 0);
  assert.deepEqual(
    [a.ends, b.ends],
    [
      ['end', 'end'],
      ['end', 'end'],
    ],
  );
  relay.targets.splice(0, 2, b.port);
  assert.equal(await ask(await dial(h, relay.port), 'x', 3), 'b:x', 'the test may change the targets');
});

test('a reset blip resets both ends of every connection, refuses new ones until it heals, then forwards again', LIMIT, async (t) => {
  const h = harness(t);
  const target = await namedEcho(h, 't');
  const relay = await startBlipRelay(h, [target.port]);
  const before = await dial(h, relay.port);
  assert.equal(await ask(before, 'one', 5), 't:one');
  const clientSaw = ending(before);
  const blipAt = performance.now();
  const healed = relay.blip('reset', 300);
  assert.equal(await clientSaw, 'ECONNRESET');
  await waitFor('the target side reset too', () => target.ends.includes('ECONNRESET'));
  // During the blip a new connection is reset as soon as it arrives.
  const during = connect(relay.port, '127.0.0.1');
  const duringSaw = await new Promise<string>((resolve) => {
    during.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
    during.once('end', () => resolve('end'));
  });
  assert.equal(duringSaw, 'ECONNRESET');
  assert.equal(relay.counts.refused, 1);
  await healed;
  assert.ok(performance.now() - blipAt >= 290, "it healed after the blip's length");
  assert.equal(await ask(await dial(h, relay.port), 'two', 5), 't:two');
  assert.deepEqual(target.received, ['one', 'two'], 'nothing of the refused connection reached the target');
});

test('a silent blip: open connections go dark both ways, closes included, and stay dark; one made during it goes through after', LIMIT, async (t) => {
  const h = harness(t);
  const target = await namedEcho(h, 't');
  const relay = await startBlipRelay(h, [target.port]);
  const old = await dial(h, relay.port);
  assert.equal(await ask(old, 'before', 8), 't:before');
  let oldGot = '';
  old.on('data', (d: Buffer) => (oldGot += d.toString()));
  const healed = relay.blip('silent', 300);
  old.write('during');
  const during = await dial(h, relay.port);
  during.write('early');
  let duringGot = '';
  during.on('data', (d: Buffer) => (duringGot += d.toString()));
  await healed;
  // The connection made during the blip reaches the target once it heals, bytes sent meanwhile included.
  await waitFor('the held connection to go through', () => duringGot === 't:early');
  old.write('after');
  old.end();
  // A witness after the old connection's last bytes and its close: once its answer is back, they had their turn.
  assert.equal(await ask(await dial(h, relay.port), 'witness', 9), 't:witness');
  assert.deepEqual(target.received, ['before', 'early', 'witness'], 'nothing of the old connection crossed after the blip began');
  assert.equal(oldGot, '', 'nor anything back to it');
  assert.deepEqual(target.ends, [], 'its close did not cross either');
  assert.equal(relay.connections(), 3);
});

test("a silent blip with oldFlows 'resume': open connections carry on after it heals, nothing lost", LIMIT, async (t) => {
  const h = harness(t);
  const target = await namedEcho(h, 't');
  const relay = await startBlipRelay(h, [target.port]);
  const s = await dial(h, relay.port);
  assert.equal(await ask(s, 'a', 3), 't:a');
  const healed = relay.blip('silent', 200, { oldFlows: 'resume' });
  s.write('b');
  await healed;
  assert.equal((await readExactly(s, 3)).toString(), 't:b');
});

test('freeze is a silent blip without end: nothing crosses until heal()', LIMIT, async (t) => {
  const h = harness(t);
  const target = await namedEcho(h, 't');
  const relay = await startBlipRelay(h, [target.port]);
  const s = await dial(h, relay.port);
  relay.freeze({ oldFlows: 'resume' });
  s.write('x');
  const witness = await dial(h, relay.port);
  witness.write('w');
  relay.heal();
  assert.equal((await readExactly(s, 3)).toString(), 't:x');
  assert.equal((await readExactly(witness, 3)).toString(), 't:w');
});
