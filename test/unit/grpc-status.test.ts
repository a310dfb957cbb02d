// The gRPC status table and grpc-message encoding, in one place for server and agent.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { metadataValues } from '../../pkg/grpc/metadata.js';
import { decodeGrpcMessage, describeGrpcStatus, encodeGrpcMessage, grpcStatusName, GrpcStatus, statusTrailers } from '../../pkg/grpc/status.js';

test('status names come from the one table; unknown codes are named by number', () => {
  assert.equal(grpcStatusName(GrpcStatus.RESOURCE_EXHAUSTED), 'RESOURCE_EXHAUSTED');
  assert.equal(grpcStatusName(99), 'status 99');
  assert.equal(describeGrpcStatus('14', 'server%20shutting down'), 'UNAVAILABLE: server shutting down');
  assert.equal(describeGrpcStatus(undefined, undefined), 'no status');
  assert.equal(describeGrpcStatus('x', ''), 'status x');
});

test('grpc-message is percent-encoded outside printable ASCII and decoded back; bad encoding is kept as sent', () => {
  const text = '100% kaputt: Grüße\n';
  const wire = encodeGrpcMessage(text);
  assert.equal(wire, '100%25 kaputt: Gr%C3%BC%C3%9Fe%0A');
  assert.equal(decodeGrpcMessage(wire), text);
  assert.equal(decodeGrpcMessage('%zz'), '%zz');
  assert.deepEqual(statusTrailers(0, ''), { 'grpc-status': '0' });
  assert.deepEqual(statusTrailers(8, 'too big'), { 'grpc-status': '8', 'grpc-message': 'too big' });
});

test('metadata keeps repeated values in order', () => {
  assert.deepEqual(metadataValues(['agentid', 'a', 'x', 'y', 'agentid', 'b'], 'agentid'), ['a', 'b']);
  assert.deepEqual(metadataValues(['agentid'], 'agentid'), []);
});
