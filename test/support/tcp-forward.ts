// A plain TCP forward on loopback, as kube-proxy's node port or a port
// forward is: 127.0.0.1:<listenPort> (0: any) to 127.0.0.1:<targetPort>, one
// upstream connection per client, either end's close closing both.

import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import type { Harness } from './harness.js';

export interface TcpForward {
  port: number;
  /** How many clients it has taken. */
  connections(): number;
}

export async function startTcpForward(h: Harness, targetPort: number, listenPort = 0): Promise<TcpForward> {
  let connections = 0;
  const sockets = new Set<Socket>();
  const forward = createServer((client) => {
    connections++;
    const upstream = connect(targetPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => (client.destroy(), upstream.destroy(), sockets.delete(s)));
    }
    client.pipe(upstream).pipe(client);
  });
  forward.listen(listenPort, '127.0.0.1');
  await once(forward, 'listening');
  h.defer(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => forward.close(r));
  });
  return { port: (forward.address() as AddressInfo).port, connections: () => connections };
}
