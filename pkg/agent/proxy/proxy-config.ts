// Which proxy the agent dials its servers through: --proxy-url, else the
// environment as command-line tools read it (https_proxy, HTTPS_PROXY,
// all_proxy, ALL_PROXY; lower case first, as curl), with NO_PROXY's
// exceptions (no-proxy.ts) and Basic or SOCKS5 credentials from the URL or
// from --proxy-credentials-file. An https:// proxy's certificate is checked
// against --proxy-ca-file when given (those CAs only, as curl's
// --proxy-cacert), else Node's built-in list and NODE_EXTRA_CA_CERTS. Read
// once at start-up: a mistake stops the agent with the flag or variable named.

import { readFile } from 'node:fs/promises';
import { readPemFile } from '../../certs/read-pem.js';
import { ConfigError } from '../../protocol/errors.js';
import { errorMessage } from '../../protocol/errors.js';
import { NoProxy } from './no-proxy.js';

export type ProxyProtocol = 'http' | 'https' | 'socks5' | 'socks5h';

export interface ProxyCredentials {
  username: string;
  password: string;
}

export interface ProxyServer {
  protocol: ProxyProtocol;
  /** Host name or IP (without brackets). */
  host: string;
  port: number;
  credentials: ProxyCredentials | undefined;
  /** PEM CAs an https:// proxy's certificate must lead to (--proxy-ca-file); undefined: Node's defaults. */
  ca?: string;
  /** The URL without its user information: what logs and errors show. */
  display: string;
  /** Where it was set (`--proxy-url`, `HTTPS_PROXY`, ...), for messages. */
  namedBy: string;
}

export interface ProxyConfig {
  server: ProxyServer;
  noProxy: NoProxy;
}

export interface ProxySettings {
  /** --proxy-url: wins over the environment. */
  proxyUrl?: string;
  /** --proxy-credentials-file: a file holding `user:password`; wins over the URL's user information. */
  credentialsFile?: string;
  /** --proxy-ca-file: PEM CAs trusted for an https:// proxy's certificate, instead of Node's defaults. */
  caFile?: string;
  /** Where the *_PROXY variables are read (the CLI passes process.env). */
  env?: NodeJS.ProcessEnv;
}

const ENV_PROXY = ['https_proxy', 'HTTPS_PROXY', 'all_proxy', 'ALL_PROXY'];
const ENV_NO_PROXY = ['no_proxy', 'NO_PROXY'];
const DEFAULT_PORTS: Record<ProxyProtocol, number> = { http: 80, https: 443, socks5: 1080, socks5h: 1080 };

/** The proxy to use, or undefined when none is set; throws naming the flag or variable when it is unusable. */
export async function proxyConfigFrom(s: ProxySettings): Promise<ProxyConfig | undefined> {
  const env = s.env ?? {};
  const pick = (names: string[]): [string, string] | undefined =>
    names.flatMap((n): [string, string][] => (env[n] !== undefined && env[n].trim() !== '' ? [[n, env[n].trim()]] : []))[0];
  const given: [string, string] | undefined = s.proxyUrl !== undefined && s.proxyUrl !== '' ? ['--proxy-url', s.proxyUrl] : pick(ENV_PROXY);
  if (given === undefined) {
    const orphan = s.credentialsFile !== undefined ? '--proxy-credentials-file' : s.caFile !== undefined ? '--proxy-ca-file' : undefined;
    if (orphan !== undefined) throw new TypeError(`${orphan} is given but no proxy is set (--proxy-url, HTTPS_PROXY or ALL_PROXY)`);
    return undefined;
  }
  const server = parseProxyUrl(given[1], given[0]);
  if (s.credentialsFile !== undefined) server.credentials = await readCredentials(s.credentialsFile);
  if (s.caFile !== undefined) {
    if (server.protocol !== 'https') throw new TypeError(`--proxy-ca-file is for an https:// proxy; ${given[0]} names ${server.display}`);
    server.ca = await readPemFile(s.caFile, { namedBy: '--proxy-ca-file', kind: 'certificate' });
  }
  return { server, noProxy: new NoProxy(pick(ENV_NO_PROXY)?.[1] ?? '') };
}

/** The proxy for a server at host:port: undefined when there is none or NO_PROXY lets it be dialled directly. */
export function proxyFor(config: ProxyConfig | undefined, host: string, port: number): ProxyServer | undefined {
  if (config === undefined || config.noProxy.bypasses(host, port)) return undefined;
  return config.server;
}

/** A proxy URL (`scheme://[user:password@]host[:port]`; no scheme means http, as curl and Go read it). */
export function parseProxyUrl(text: string, namedBy: string): ProxyServer {
  let url: URL;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `http://${text}`);
  } catch {
    throw new TypeError(`${namedBy}: ${JSON.stringify(redact(text))} is not a URL (e.g. http://proxy.example:3128 or socks5h://proxy.example:1080)`);
  }
  const protocol = url.protocol.slice(0, -1) as ProxyProtocol;
  if (!(protocol in DEFAULT_PORTS)) {
    throw new TypeError(`${namedBy}: proxy scheme ${JSON.stringify(url.protocol)} is not supported; use http://, https://, socks5:// or socks5h://`);
  }
  if (url.hostname === '') throw new TypeError(`${namedBy}: ${JSON.stringify(redact(text))} names no proxy host`);
  if ((url.pathname !== '' && url.pathname !== '/') || url.search !== '' || url.hash !== '') {
    throw new TypeError(`${namedBy}: ${JSON.stringify(redact(text))} has a path or query; a proxy URL is scheme://host:port`);
  }
  const credentials = url.username !== '' || url.password !== '' ? { username: decode(url.username), password: decode(url.password) } : undefined;
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = url.port !== '' ? Number(url.port) : DEFAULT_PORTS[protocol];
  const display = `${protocol}://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return { protocol, host, port, credentials, display, namedBy };
}

/** `text` with any user information replaced, for messages. */
export function redact(text: string): string {
  return text.replace(/^([a-z][a-z0-9+.-]*:\/\/)?[^/@]*@/i, (_m, scheme: string | undefined) => `${scheme ?? ''}***@`);
}

function decode(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

async function readCredentials(path: string): Promise<ProxyCredentials> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err: unknown) {
    throw new ConfigError('YT_ERR_FILE_UNREADABLE', `--proxy-credentials-file: cannot read ${path}: ${errorMessage(err)}`, { cause: err });
  }
  const line = text.replace(/\r?\n$/, '');
  const colon = line.indexOf(':');
  if (colon <= 0 || line.includes('\n')) {
    throw new ConfigError('YT_ERR_FILE_INVALID', `--proxy-credentials-file: ${path} must hold one line user:password`);
  }
  return { username: line.slice(0, colon), password: line.slice(colon + 1) };
}
