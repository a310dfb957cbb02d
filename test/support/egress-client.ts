// A ProxyService/Proxy client built the way upstream ones are (grpc-js and
// proto-loader reading proto/*.proto), for the GRPC egress frontend: one
// stream, one dial, as konnectivity-client uses it.

import * as grpc from '@grpc/grpc-js';
import type { Harness } from './harness.js';
import { konnectivityProtos, type UpstreamPacket } from './upstream.js';
import { waitFor } from './tunnel.js';

export interface EgressCall {
  call: grpc.ClientDuplexStream<UpstreamPacket, UpstreamPacket>;
  /** Every packet received so far. */
  packets: UpstreamPacket[];
  /** The stream's gRPC status, once it has ended. */
  status: Promise<grpc.StatusObject>;
  /** The DATA bytes received so far. */
  received(): Buffer;
  /** The CLOSE_RSP, once it came. */
  closeResponse(): UpstreamPacket['closeResponse'];
}

/** Opens a Proxy stream over the Unix socket `path` and dials `address`; resolves once the dial succeeded. */
export async function egressDial(h: Harness, path: string, address: string): Promise<EgressCall & { connectID: string }> {
  const ProxyService = konnectivityProtos().ProxyService as grpc.ServiceClientConstructor;
  const client = new ProxyService(`unix:${path}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
  const call = (client as unknown as { Proxy(): EgressCall['call'] }).Proxy();
  h.defer(() => {
    call.cancel();
    client.close();
  });
  call.on('error', () => {
    // The status promise reports how the stream ended.
  });
  const packets: UpstreamPacket[] = [];
  call.on('data', (p: UpstreamPacket) => packets.push(p));
  const status = new Promise<grpc.StatusObject>((resolve) => call.once('status', resolve));
  call.write({ type: 'DIAL_REQ', dialRequest: { protocol: 'tcp', address, random: '77' } });
  await waitFor(`DIAL_RSP for ${address}`, () => packets.length > 0, 10_000);
  const rsp = packets[0]!.dialResponse;
  if (rsp === undefined || rsp.error !== '') throw new Error(`dial ${address} failed: ${JSON.stringify(packets[0])}`);
  return {
    call,
    packets,
    status,
    connectID: rsp.connectID,
    received: () => Buffer.concat(packets.flatMap((p) => (p.type === 'DATA' && p.data ? [p.data.data] : []))),
    closeResponse: () => packets.find((p) => p.type === 'CLOSE_RSP')?.closeResponse,
  };
}
