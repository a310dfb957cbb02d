// One certificate's files, as client-go's FileStore keeps them: each issued
// certificate and its key in `<prefix>-<time>.pem`, and `<prefix>-current.pem`
// a symlink to the newest. Every certificate has its own prefix, never shared
// (OpenYurt's proxy-client certificate once shared the server's store).

import { X509Certificate, createPrivateKey } from 'node:crypto';
import { mkdir, readFile, readlink, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { errorCode, errorMessage } from '../protocol/errors.js';
import type { CertKeyPair } from './pki.js';

export type StoredCertificate =
  | { kind: 'found'; pair: CertKeyPair; path: string }
  | { kind: 'missing'; path: string }
  /** A file is there but unusable; `problem` says why, for the log line. */
  | { kind: 'unusable'; path: string; problem: string };

const CERT_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/g;
const KEY_BLOCK = /-----BEGIN (?:RSA |EC )?PRIVATE KEY-----[\s\S]+?-----END (?:RSA |EC )?PRIVATE KEY-----\n?/;

function stamp(date: Date): string {
  return date.toISOString().replace(/[:T]/g, '-').replace(/\..*$/, '');
}

export class PemFileStore {
  constructor(
    readonly dir: string,
    readonly prefix: string,
  ) {}

  get currentPath(): string {
    return join(this.dir, `${this.prefix}-current.pem`);
  }

  async load(): Promise<StoredCertificate> {
    const path = this.currentPath;
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (err: unknown) {
      if (errorCode(err) === 'ENOENT') return { kind: 'missing', path };
      return { kind: 'unusable', path, problem: `cannot read: ${errorMessage(err)}` };
    }
    const certs = text.match(CERT_BLOCK);
    const key = KEY_BLOCK.exec(text)?.[0];
    if (certs === null || key === undefined) {
      return { kind: 'unusable', path, problem: 'does not hold a PEM certificate and a PEM private key' };
    }
    try {
      const x509 = new X509Certificate(certs[0]);
      if (!x509.checkPrivateKey(createPrivateKey(key))) return { kind: 'unusable', path, problem: 'the private key does not match the certificate' };
    } catch (err: unknown) {
      return { kind: 'unusable', path, problem: `cannot parse: ${errorMessage(err)}` };
    }
    return { kind: 'found', pair: { cert: certs.join(''), key }, path };
  }

  /** Writes a new file and points `-current.pem` at it atomically; returns the new file's path. */
  async save(pair: CertKeyPair, now = new Date()): Promise<string> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const name = `${this.prefix}-${stamp(now)}.pem`;
    const path = join(this.dir, name);
    const body = `${pair.cert.trimEnd()}\n${pair.key.trimEnd()}\n`;
    await writeFile(path, body, { mode: 0o600 });
    const tmpLink = join(this.dir, `.${this.prefix}-current.${process.pid}.tmp`);
    await rm(tmpLink, { force: true });
    await symlink(name, tmpLink);
    await rename(tmpLink, this.currentPath);
    return path;
  }

  /** Where `-current.pem` points, for log lines; undefined when it is not a symlink. */
  async target(): Promise<string | undefined> {
    try {
      return await readlink(this.currentPath);
    } catch {
      return undefined;
    }
  }
}
