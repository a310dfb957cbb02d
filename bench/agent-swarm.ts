// A load generator for the scale bench: one process holding many agent links,
// each a real pkg/agent ServerConnection (its own TLS connection, HTTP/2
// session, Connect call and keepalive pings) with an agentID of its own, all
// sharing one client certificate. It answers dials like an agent does.
//
//   node agent-swarm.js SERVER_ADDR FIRST COUNT CERT_DIR [RESUME_WINDOW_MS]
//
// RESUME_WINDOW_MS (default 0, off) announces session resume as the agent CLI
// does (its default is 10 s): the server then keeps a session for each link.
// Prints "ready COUNT" once every link is up, "lost N" when links drop, and
// closes every link when stdin ends or on SIGTERM.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { AllowList } from '../pkg/agent/allow-list.js';
import { DialLimit } from '../pkg/agent/dial-limit.js';
import { Dialer } from '../pkg/agent/dialer.js';
import { ServerConnection } from '../pkg/agent/server-connection.js';

const [addressArg, firstArg, countArg, certDir, resumeArg] = process.argv.slice(2);
if (addressArg === undefined || certDir === undefined) {
  process.stderr.write('usage: agent-swarm.js SERVER_ADDR FIRST COUNT CERT_DIR\n');
  process.exit(2);
}
const address = addressArg;
const first = Number(firstArg);
const count = Number(countArg);
const resumeWindowMs = Number(resumeArg ?? 0);
const tls = {
  ca: readFileSync(join(certDir, 'ca.crt'), 'utf8'),
  cert: readFileSync(join(certDir, 'tls.crt'), 'utf8'),
  key: readFileSync(join(certDir, 'tls.key'), 'utf8'),
};
const dialer = new Dialer({ allowList: AllowList.defaultFor([]) });
const dialLimit = new DialLimit(100_000);
const links: ServerConnection[] = [];
let lost = 0;
/** Links closed by stop() are not lost. */
let stopping = false;

async function openLink(i: number): Promise<void> {
  const agentID = `scale-${i}`;
  const link = new ServerConnection({ address, tls, agentID, identifiers: `host=${agentID}`, dialer, dialLimit, resumeWindowMs });
  await link.open();
  links.push(link);
  void link.whenClosed().then(() => {
    if (stopping) return;
    lost++;
    process.stdout.write(`lost ${lost}\n`);
  });
}

async function main(): Promise<void> {
  // A few at a time: a thousand TLS handshakes at once would only queue.
  let next = first;
  const end = first + count;
  await Promise.all(
    Array.from({ length: Math.min(20, count) }, async () => {
      while (next < end) await openLink(next++);
    }),
  );
  process.stdout.write(`ready ${links.length}\n`);
}

function stop(): void {
  stopping = true;
  for (const l of links) l.close('the scale bench is over');
  setTimeout(() => process.exit(0), 200).unref();
}

createInterface({ input: process.stdin }).on('close', stop);
process.on('SIGTERM', stop);
main().catch((err: unknown) => {
  process.stderr.write(`agent swarm failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
