// What the start-up rehearsal optimised must survive the first real link:
// V8 throws optimised code away when an object it relied on the shape of
// turns up with another shape ('wrong map'), or when a shape it took as
// settled changes. Checked in a child process with V8's own predicates.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { distUrl as url, runWithNatives } from '../support/v8-natives.js';

/** Runs `body` with V8's natives and returns what it printed, as JSON. */
function natives(body: string): Record<string, boolean> {
  const script = `
    const optimized = (f) => (%GetOptimizationStatus(f) & 16) !== 0;
    ${body}`;
  return runWithNatives<Record<string, boolean>>(script);
}

// Node's tick queue stores into a Uint8Array (setHasTickScheduled, inlined into process.nextTick, its stream
// internals and our callers of them); the first Buffer Node's C++ side makes (the real link's certificate check,
// a hash) moves an object off the plain Uint8Array map, which threw all of that away after the rehearsal.
test('runStartupRehearsal settles the Uint8Array map first: code storing into a Uint8Array, optimised after it, survives a Buffer made by C++', () => {
  const out = natives(`
    const { runStartupRehearsal } = await import(${url('dist/pkg/grpc/data-path-rehearsal.js')});
    const { silentLogger } = await import(${url('dist/pkg/log/logger.js')});
    const { createHash } = await import('node:crypto');
    await runStartupRehearsal(silentLogger(), (size) => Promise.resolve({ ...size, ms: 0 }));
    const flags = new Uint8Array(4);
    const set = (v) => { flags[0] = v; };
    %PrepareFunctionForOptimization(set);
    set(1); set(0);
    %OptimizeFunctionOnNextCall(set);
    set(1);
    const before = optimized(set);
    createHash('sha256').update('first real link').digest();
    set(0);
    console.log(JSON.stringify({ before, after: optimized(set) }));`);
  assert.deepEqual(out, { before: true, after: true });
});

// The client set's options and the rehearsal's are objects of different shapes: onPacket read the metrics
// through them, and threw the rehearsal's optimised code away at the first real packet.
test('ServerConnection.onPacket optimised on one connection survives a connection built from options of another shape', () => {
  const out = natives(`
    const { ServerConnection } = await import(${url('dist/pkg/agent/server-connection.js')});
    const { AgentMetrics } = await import(${url('dist/pkg/agent/metrics.js')});
    const { Dialer } = await import(${url('dist/pkg/agent/dialer.js')});
    const { AllowList } = await import(${url('dist/pkg/agent/allow-list.js')});
    const { silentLogger } = await import(${url('dist/pkg/log/logger.js')});
    const dialer = new Dialer({ allowList: AllowList.parse('127.0.0.1') });
    const tls = { ca: '', cert: '', key: '' };
    // As the rehearsal builds them, then as the client set does (spread options, more keys, another order).
    const rehearsal = new ServerConnection({ address: 'rehearsal', tls, agentID: 'a', identifiers: '', dialer, logger: silentLogger(), metrics: new AgentMetrics() });
    const real = new ServerConnection({ ...{ address: '127.0.0.1:1', tls, agentID: 'a', identifiers: '', dialer, keepaliveTimeMs: 1000, keepaliveTimeoutMs: 1000, metrics: new AgentMetrics(), logger: silentLogger() }, onConnectionClosed: () => {} });
    const onPacket = ServerConnection.prototype.onPacket;
    const p = { type: 'DIAL_CLS', random: 7n };
    %PrepareFunctionForOptimization(onPacket);
    onPacket.call(rehearsal, p); onPacket.call(rehearsal, p);
    %OptimizeFunctionOnNextCall(onPacket);
    onPacket.call(rehearsal, p);
    const before = optimized(onPacket);
    onPacket.call(real, p);
    console.log(JSON.stringify({ before, after: optimized(onPacket) }));
    rehearsal.close('test over'); real.close('test over');`);
  assert.deepEqual(out, { before: true, after: true });
});
