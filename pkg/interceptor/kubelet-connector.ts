// Connections to kubelets through the tunnel, pooled like any HTTP agent's:
// each is a tunnelled connection opened in this process (X-Tunnel-Proxy-Host
// picks the node's agent), then, for callers that came over TLS, a TLS session
// to the kubelet presenting the proxy-client certificate. Keep-alive
// connections are reused per node, address and scheme.

import { Agent, type ClientRequest, type ClientRequestArgs } from 'node:http';
import { isIP } from 'node:net';
import type { Duplex } from 'node:stream';
import { checkServerIdentity, connect as tlsConnect, type PeerCertificate } from 'node:tls';
import type { Logger } from '../log/logger.js';
import { abortsThrough } from '../mux/abort.js';
import { DialError, errorMessage } from '../protocol/errors.js';
import { KubeletTLSError } from './errors.js';

/**
 * Opens a connection to `address` (host:port) through the tunnel: through the
 * agent of node `proxyHost` when given, else the agent that serves the
 * address's host. Aborting `signal` cancels a dial still pending. The server
 * wires Tunnel.dial, whose DialError says why a dial failed.
 */
export type TunnelDialer = (address: string, opts: { proxyHost?: string; signal?: AbortSignal }) => Promise<Duplex>;

/** Where one request goes; passed to the agent as the `tunnel` request option. */
export interface TunnelTarget {
  /** host:port the edge agent dials. */
  dialAddress: string;
  /** The node whose agent dials (X-Tunnel-Proxy-Host). */
  proxyHost: string | undefined;
  /** Run TLS to the kubelet. */
  tls: boolean;
}

export interface KubeletTLSMaterial {
  /** The proxy-client certificate and key presented to kubelets. */
  cert: string;
  key: string;
  /** CA that signs kubelet serving certificates; without it they are not verified. */
  kubeletCA: string | undefined;
}

export interface KubeletConnectorOptions {
  dial: TunnelDialer;
  /** Read for every new connection, so rotated certificates apply without a restart. */
  tls: () => KubeletTLSMaterial;
  /** Limit for the TLS handshake with the kubelet. Default 10 s. */
  handshakeTimeoutMs?: number;
  /** How long an idle pooled connection is kept. Default 60 s. */
  idleTimeoutMs?: number;
  logger: Logger;
}

/** A request's options as the agent sees them: `tunnel` says where it goes; aborting `tunnelSignal` cancels its dial. */
type ConnectOptions = ClientRequestArgs & { tunnel?: TunnelTarget; tunnelSignal?: AbortSignal };
type ConnectCallback = (err: Error | null, socket: Duplex) => void;

export class KubeletConnector extends Agent {
  private readonly opts: KubeletConnectorOptions;
  /** Nodes already warned about an unverifiable kubelet certificate (once each). */
  private readonly warnedUnverified = new Set<string>();
  private readonly idleTimeoutMs: number;
  /** The timer that closes a pooled connection left idle. */
  private readonly idleTimers = new WeakMap<Duplex, NodeJS.Timeout>();

  constructor(opts: KubeletConnectorOptions) {
    super({ keepAlive: true, maxFreeSockets: 16, scheduling: 'lifo' });
    this.opts = opts;
    this.idleTimeoutMs = opts.idleTimeoutMs ?? 60_000;
  }

  /** One pool per node, address and scheme. */
  override getName(options?: ConnectOptions): string {
    const t = options?.tunnel;
    return t === undefined ? super.getName(options) : `${t.tls ? 'https' : 'http'}|${t.proxyHost ?? ''}|${t.dialAddress}`;
  }

  // Node's Agent accepts an asynchronous createConnection: return nothing, call back later.
  override createConnection(options: ConnectOptions, callback: ConnectCallback): Duplex | undefined {
    const target = options.tunnel;
    if (target === undefined) {
      callback(new Error('KubeletConnector needs a `tunnel` target on every request'), undefined as unknown as Duplex);
      return undefined;
    }
    this.connect(target, options.tunnelSignal).then(
      (socket) => {
        socket.once('close', () => clearTimeout(this.idleTimers.get(socket)));
        // A pooled connection whose kubelet ended it leaves the pool: a
        // tunnelled connection that can half-close would stay open for writing.
        if (!target.tls) socket.once('end', () => socket.end());
        callback(null, socket);
      },
      (err: unknown) => callback(err instanceof Error ? err : new Error(String(err)), undefined as unknown as Duplex),
    );
    return undefined;
  }

  // The pool's connections are tunnelled connections (or TLS over them), not
  // TCP sockets: TCP keep-alive is the agent's business, and the idle limit is
  // kept here rather than by a socket timeout.
  override keepSocketAlive(socket: Duplex): boolean {
    const timer = setTimeout(() => socket.destroy(), this.idleTimeoutMs);
    timer.unref();
    this.idleTimers.set(socket, timer);
    return true;
  }

  override reuseSocket(socket: Duplex, request: ClientRequest): void {
    clearTimeout(this.idleTimers.get(socket));
    this.idleTimers.delete(socket);
    super.reuseSocket(socket, request);
  }

  /**
   * A new (unpooled) connection to the target: through the tunnel, then TLS
   * if asked for. Aborting `signal` cancels the dial or the handshake.
   */
  async connect(target: TunnelTarget, signal?: AbortSignal): Promise<Duplex> {
    const conn = await this.opts.dial(target.dialAddress, { proxyHost: target.proxyHost, signal });
    if (signal?.aborted === true) {
      conn.destroy();
      throw new DialError('YT_ERR_DIAL_CANCELLED', `the caller gave up on ${target.dialAddress} as its connection opened`);
    }
    if (!target.tls) return conn;
    return new Promise((resolve, reject) => this.startTLS(conn, target, signal, (err, tls) => (err ? reject(err) : resolve(tls!))));
  }

  private startTLS(conn: Duplex, target: TunnelTarget, signal: AbortSignal | undefined, done: (err: Error | null, socket?: Duplex) => void): void {
    const material = this.opts.tls();
    const host = target.dialAddress.replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
    const node = target.proxyHost ?? host;
    const verify = material.kubeletCA !== undefined;
    if (!verify && !this.warnedUnverified.has(node)) {
      this.warnedUnverified.add(node);
      this.opts.logger.warn("cannot verify this kubelet's serving certificate: no --kubelet-ca-file given", {
        node,
        dialAddress: target.dialAddress,
      });
    }
    const tls = tlsConnect({
      socket: conn,
      // No SNI for an IP, as kube-apiserver does.
      servername: isIP(node) === 0 ? node : undefined,
      cert: material.cert,
      key: material.key,
      ca: material.kubeletCA,
      rejectUnauthorized: verify,
      ALPNProtocols: ['http/1.1'],
      // The certificate names the node, or carries its IP: either identifies it.
      checkServerIdentity: (_name: string, cert: PeerCertificate) => {
        const byName = checkServerIdentity(node, cert);
        return byName === undefined || node === host ? byName : checkServerIdentity(host, cert);
      },
    });
    const timeoutMs = this.opts.handshakeTimeoutMs ?? 10_000;
    const fail = (why: string, cause?: unknown): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      tls.destroy();
      done(new KubeletTLSError(`TLS handshake with the kubelet of node ${node} at ${target.dialAddress} failed: ${why}`, { cause }));
    };
    const timer = setTimeout(() => fail(`no answer within ${timeoutMs} ms`), timeoutMs);
    timer.unref();
    const onAbort = (): void => fail('the caller went away');
    signal?.addEventListener('abort', onAbort, { once: true });
    tls.once('secureConnect', () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      tls.off('error', onError);
      // A failure of the session is passed on as one: the tunnelled connection carries the error.
      abortsThrough(tls, conn);
      done(null, tls);
    });
    const onError = (err: Error): void => fail(errorMessage(err), err);
    tls.once('error', onError);
  }
}
