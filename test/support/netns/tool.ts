// A small child process for tests to run inside a network namespace (or the
// root one), one job per subcommand:
//
//   tool.js forward <listen> <connect>   pipe each connection on <listen> to <connect>;
//                                        endpoints are tcp:HOST:PORT or unix:PATH
//   tool.js banner <json>                listen on each {host, port, banner}: write the banner, then close
//   tool.js probe <host> <port>          connect, read until the peer closes, print JSON {ok, data} or {ok: false, code}
//
// forward and banner print "ready" once every listener is up, and run until killed.

import { once } from 'node:events';
import { rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';

type Endpoint = { host: string; port: number } | { path: string };

function endpoint(text: string): Endpoint {
  if (text.startsWith('unix:')) return { path: text.slice(5) };
  const m = /^tcp:(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(text);
  if (m === null) throw new Error(`not tcp:HOST:PORT or unix:PATH: ${text}`);
  return { host: m[1] ?? m[2]!, port: Number(m[3]) };
}

async function listen(server: Server, at: Endpoint): Promise<void> {
  if ('path' in at) {
    rmSync(at.path, { force: true });
    server.listen(at.path);
  } else {
    server.listen(at.port, at.host);
  }
  await once(server, 'listening');
}

async function forward(from: string, to: string): Promise<void> {
  const target = endpoint(to);
  const server = createServer((inbound) => {
    const outbound: Socket = 'path' in target ? connect(target.path) : connect(target.port, target.host);
    inbound.pipe(outbound).pipe(inbound);
    inbound.on('error', () => outbound.destroy());
    outbound.on('error', () => inbound.destroy());
  });
  await listen(server, endpoint(from));
  process.stdout.write('ready\n');
}

async function banner(json: string): Promise<void> {
  const listeners = JSON.parse(json) as { host: string; port: number; banner: string }[];
  for (const l of listeners) {
    const server = createServer((socket) => {
      socket.on('error', () => socket.destroy());
      socket.end(l.banner);
    });
    await listen(server, { host: l.host, port: l.port });
  }
  process.stdout.write('ready\n');
}

function probe(host: string, port: number): void {
  const socket = connect({ host, port, timeout: 5000 });
  const chunks: Buffer[] = [];
  let done = false;
  const finish = (result: object): void => {
    if (done) return;
    done = true;
    process.stdout.write(`${JSON.stringify(result)}\n`);
    socket.destroy();
  };
  socket.on('data', (c: Buffer) => chunks.push(c));
  socket.on('end', () => finish({ ok: true, data: Buffer.concat(chunks).toString() }));
  socket.on('timeout', () => finish({ ok: false, code: 'ETIMEDOUT' }));
  socket.on('error', (err: NodeJS.ErrnoException) => finish({ ok: false, code: err.code ?? err.message }));
}

const [command, ...args] = process.argv.slice(2);
switch (command) {
  case 'forward':
    await forward(args[0]!, args[1]!);
    break;
  case 'banner':
    await banner(args[0]!);
    break;
  case 'probe':
    probe(args[0]!, Number(args[1]));
    break;
  default:
    process.stderr.write(`unknown subcommand ${command}\n`);
    process.exit(2);
}
