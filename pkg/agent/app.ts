// yurt-tunnel-agent's run sequence: read the certificates, build the dial
// policy and identifiers, keep links to the servers; drain on shutdown.

import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import type { Logger } from '../log/logger.js';
import { formatAgentIdentifiers, IDENTIFIER_KEYS, emptyIdentifiers } from '../protocol/identifiers.js';
import { AllowList } from './allow-list.js';
import { ClientSet } from './client-set.js';
import { DialLimit } from './dial-limit.js';
import { Dialer } from './dialer.js';

export interface AgentOptions {
  nodeName: string;
  nodeIP?: string;
  tunnelServerAddr: string;
  caFile: string;
  certFile: string;
  keyFile: string;
  /** URL-query identifiers; default `ipv4=<node-ip>&host=<node-name>`. */
  agentIdentifiers?: string;
  /** Comma list for the allow-list; default the node IPs and loopback. */
  allowedDestinations?: string;
  dialTimeoutMs: number;
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  syncIntervalMs: number;
  syncIntervalCapMs: number;
  /** How long a draining agent waits for its connections before exiting. */
  drainTimeoutMs: number;
  /** Dials the agent runs at once (all links together). Default 256. */
  maxConcurrentDials?: number;
  logger: Logger;
}

/** Default identifiers, as OpenYurt: the node IP (v4 or v6) and the node name. */
export function defaultIdentifiers(nodeName: string, nodeIP: string | undefined): string {
  const ids = emptyIdentifiers();
  if (nodeIP !== undefined && isIP(nodeIP) === 6) ids.ipv6.push(nodeIP);
  else if (nodeIP !== undefined && isIP(nodeIP) === 4) ids.ipv4.push(nodeIP);
  ids.host.push(nodeName);
  return formatAgentIdentifiers(ids);
}

/** Rejects identifiers with unknown keys or empty values, as the upstream agent does at startup. */
export function checkIdentifiers(text: string): void {
  for (const [key, value] of new URLSearchParams(text)) {
    if (!(IDENTIFIER_KEYS as readonly string[]).includes(key)) {
      throw new TypeError(
        `--agent-identifiers has unknown key ${JSON.stringify(key)}; known keys: ${IDENTIFIER_KEYS.join(', ')} (e.g. ipv4=10.0.0.5&host=node1)`,
      );
    }
    if (value === '') throw new TypeError(`--agent-identifiers has an empty value for ${key}`);
  }
}

export class TunnelAgent {
  private stopping: Promise<void> | undefined;

  private constructor(
    readonly clients: ClientSet,
    private readonly opts: AgentOptions,
  ) {}

  static async start(opts: AgentOptions): Promise<TunnelAgent> {
    if (opts.nodeName === '') throw new TypeError('a node name is required (--node-name or env NODE_NAME)');
    if (opts.tunnelServerAddr === '') {
      throw new TypeError('--tunnelserver-addr is required (host:port of yurt-tunnel-server\'s agent port, 10262)');
    }
    if (opts.nodeIP !== undefined && isIP(opts.nodeIP) === 0) {
      throw new TypeError(`--node-ip ${JSON.stringify(opts.nodeIP)} is not an IP address`);
    }
    const identifiers = opts.agentIdentifiers ?? defaultIdentifiers(opts.nodeName, opts.nodeIP);
    checkIdentifiers(identifiers);
    const allowList =
      opts.allowedDestinations !== undefined
        ? AllowList.parse(opts.allowedDestinations)
        : AllowList.defaultFor(opts.nodeIP !== undefined ? [opts.nodeIP] : []);
    const [ca, cert, key] = await Promise.all(
      [opts.caFile, opts.certFile, opts.keyFile].map(async (f) => {
        try {
          return await readFile(f, 'utf8');
        } catch (err: unknown) {
          throw new Error(`cannot read ${f}: ${(err as Error).message}`);
        }
      }),
    );
    const clients = new ClientSet({
      connection: {
        address: opts.tunnelServerAddr,
        tls: { ca: ca!, cert: cert!, key: key! },
        agentID: opts.nodeName,
        identifiers,
        dialer: new Dialer({ allowList, timeoutMs: opts.dialTimeoutMs }),
        keepaliveTimeMs: opts.keepaliveTimeMs,
        keepaliveTimeoutMs: opts.keepaliveTimeoutMs,
        dialLimit: new DialLimit(opts.maxConcurrentDials),
        logger: opts.logger,
      },
      syncIntervalMs: opts.syncIntervalMs,
      syncIntervalCapMs: opts.syncIntervalCapMs,
      logger: opts.logger,
    });
    opts.logger.info('yurt-tunnel-agent starting', {
      agentID: opts.nodeName,
      server: opts.tunnelServerAddr,
      identifiers,
      allowedDestinations: allowList.description,
    });
    clients.start();
    return new TunnelAgent(clients, opts);
  }

  /**
   * Sends DRAIN to every server, then waits until no tunnelled connection is
   * left or the drain timeout passes, then stops.
   */
  async drainAndStop(): Promise<void> {
    this.clients.drain();
    const deadline = Date.now() + this.opts.drainTimeoutMs;
    while (this.clients.connCount > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const left = this.clients.connCount;
    if (left > 0) this.opts.logger.warn('drain timeout passed; closing remaining connections', { connections: left });
    await this.stop();
  }

  /** Closes every link and connection. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= this.clients.close().then(() => this.opts.logger.info('yurt-tunnel-agent stopped'));
    return this.stopping;
  }
}
