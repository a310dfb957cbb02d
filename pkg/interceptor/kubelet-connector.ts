// Connections to kubelets through the tunnel, pooled like any HTTP agent's:
// each is a CONNECT through the proxier's Unix socket (X-Tunnel-Proxy-Host
// picks the node's agent), then, for callers that came over TLS, a TLS session
// to the kubelet presenting the proxy-client certificate. Keep-alive
// connections are reused per node, address and scheme.

import { Agent, type ClientRequestArgs } from 'node:http';
import { isIP, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { checkServerIdentity, connect as tlsConnect, type PeerCertificate } from 'node:tls';
import type { Logger } from '../log/logger.js';
import { errorMessage, KubeletTLSError } from '../protocol/errors.js';
import { dialThroughProxier } from './proxier-dialer.js';

/** Where one request goes; passed to the agent as the `tunnel` request option. */
export interface TunnelTarget {
  /** host:port the edge agent dials. */
  dialAddress: string;
  /** The node, sent as X-Tunnel-Proxy-Host. */
  proxyHost: string | undefined;
  /** Run TLS to the kubelet. */
  tls: boolean;
  userAgent: string | undefined;
}

export interface KubeletTLSMaterial {
  /** The proxy-client certificate and key presented to kubelets. */
  cert: string;
  key: string;
  /** CA that signs kubelet serving certificates; without it they are not verified. */
  kubeletCA: string | undefined;
}


export interface KubeletConnectorOptions {
  /** The proxier's Unix socket. */
  udsPath: string;
  /** Read for every new connection, so rotated certificates apply without a restart. */
  tls: () => KubeletTLSMaterial;
  /** Limit for the TLS handshake with the kubelet. Default 10 s. */
  handshakeTimeoutMs?: number;
  /** How long an idle pooled connection is kept. Default 60 s. */
  idleTimeoutMs?: number;
  logger: Logger;
}

type ConnectOptions = ClientRequestArgs & { tunnel?: TunnelTarget };
type ConnectCallback = (err: Error | null, socket: Duplex) => void;

export class KubeletConnector extends Agent {
  private readonly opts: KubeletConnectorOptions;
  /** Nodes already warned about an unverifiable kubelet certificate (once each). */
  private readonly warnedUnverified = new Set<string>();

  constructor(opts: KubeletConnectorOptions) {
    super({ keepAlive: true, maxFreeSockets: 16, timeout: opts.idleTimeoutMs ?? 60_000, scheduling: 'lifo' });
    this.opts = opts;
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
    this.connect(target).then(
      (socket) => callback(null, socket),
      (err: unknown) => callback(err instanceof Error ? err : new Error(String(err)), undefined as unknown as Duplex),
    );
    return undefined;
  }

  /** A new (unpooled) connection to the target: through the tunnel, then TLS if asked for. */
  async connect(target: TunnelTarget): Promise<Duplex> {
    const socket = await dialThroughProxier({
      udsPath: this.opts.udsPath,
      address: target.dialAddress,
      proxyHost: target.proxyHost,
      userAgent: target.userAgent,
    });
    if (!target.tls) return socket;
    return new Promise((resolve, reject) => this.startTLS(socket, target, (err, tls) => (err ? reject(err) : resolve(tls!))));
  }

  private startTLS(socket: Socket, target: TunnelTarget, done: (err: Error | null, socket?: Duplex) => void): void {
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
      socket,
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
      tls.destroy();
      done(new KubeletTLSError(`TLS handshake with the kubelet of node ${node} at ${target.dialAddress} failed: ${why}`, { cause }));
    };
    const timer = setTimeout(() => fail(`no answer within ${timeoutMs} ms`), timeoutMs);
    timer.unref();
    tls.once('secureConnect', () => {
      clearTimeout(timer);
      tls.off('error', onError);
      done(null, tls);
    });
    const onError = (err: Error): void => fail(errorMessage(err), err);
    tls.once('error', onError);
  }
}
