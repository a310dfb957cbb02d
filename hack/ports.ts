// A loopback port for a process that must be told its port before it listens
// (kube-apiserver, etcd, the Go binaries, our CLIs in the demo and bench).
//
// Chosen below the kernel's ephemeral range (32768 and up on Linux), so that no
// listener on port 0 and no outgoing connection, of which the tests open
// thousands at once, can take it between our check and the process's bind.
// (The Go proxy-server also refuses agent ports above 32767.)

import { createServer } from 'node:net';

export async function freeLowPort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const server = createServer();
    const ok = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (ok) {
      await new Promise((r) => server.close(r));
      return port;
    }
  }
  throw new Error('no free loopback port between 20000 and 32000 after 50 tries');
}
