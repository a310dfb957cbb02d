// Reading a PEM file named by a flag or a kubeconfig, at start-up: the error
// names who named the file, the path, what is wrong with it and what it holds.

import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { ConfigError, errorMessage } from '../protocol/errors.js';

export interface ReadPemOptions {
  /** Who named the file (a flag, "the cluster CA named by …"): leads the error message. */
  namedBy?: string;
  /** Also check that the file holds a PEM certificate or private key. */
  kind?: 'certificate' | 'key';
}

const PEM_LABEL = /^-----BEGIN ([A-Z0-9 ]+)-----\r?$/gm;

/** What a PEM text holds, for an error message: "a certificate (subject CN=a, issuer CN=b)", "a private key", "no PEM block". */
export function describePem(text: string): string {
  const labels = [...text.matchAll(PEM_LABEL)].map((m) => m[1]!);
  if (labels.length === 0) return text.trim() === '' ? 'nothing (the file is empty)' : 'no PEM block (no -----BEGIN … ----- line)';
  const first = labels[0]!;
  let what: string;
  if (first === 'CERTIFICATE') {
    try {
      const x = new X509Certificate(text);
      what = `a certificate (subject ${oneLine(x.subject)}, issuer ${oneLine(x.issuer)})`;
    } catch {
      what = 'a CERTIFICATE block that does not parse';
    }
  } else if (first.endsWith('PRIVATE KEY')) {
    what = `a private key (${first})`;
  } else if (first === 'CERTIFICATE REQUEST' || first === 'NEW CERTIFICATE REQUEST') {
    what = 'a certificate signing request';
  } else {
    what = `a ${first} block`;
  }
  return labels.length > 1 ? `${what} and ${labels.length - 1} more PEM block(s)` : what;
}

/** An X.509 name as Node prints it (one attribute a line), on one line. */
function oneLine(name: string): string {
  return name
    .split('\n')
    .filter((s) => s !== '')
    .join(', ');
}

/** The file's text; throws ConfigError (YT_ERR_FILE_UNREADABLE, YT_ERR_FILE_INVALID) naming it and what it holds. */
export async function readPemFile(path: string, opts: ReadPemOptions = {}): Promise<string> {
  const lead = opts.namedBy === undefined ? '' : `${opts.namedBy}: `;
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err: unknown) {
    throw new ConfigError('YT_ERR_FILE_UNREADABLE', `${lead}cannot read ${path}: ${errorMessage(err)}`, { cause: err });
  }
  try {
    if (opts.kind === 'certificate') new X509Certificate(text);
    else if (opts.kind === 'key') createPrivateKey(text);
  } catch (err: unknown) {
    throw new ConfigError('YT_ERR_FILE_INVALID', `${lead}${path} does not hold a PEM ${opts.kind}: it holds ${describePem(text)} (${errorMessage(err)})`, {
      cause: err,
    });
  }
  return text;
}

export interface PemPairPaths {
  cert: { path: string; namedBy: string };
  key: { path: string; namedBy: string };
}

/** A certificate and its private key, each checked, and checked to belong together. */
export async function readCertKeyPair(files: PemPairPaths): Promise<{ cert: string; key: string }> {
  const [cert, key] = await Promise.all([
    readPemFile(files.cert.path, { namedBy: files.cert.namedBy, kind: 'certificate' }),
    readPemFile(files.key.path, { namedBy: files.key.namedBy, kind: 'key' }),
  ]);
  let matches: boolean;
  try {
    matches = new X509Certificate(cert).checkPrivateKey(createPrivateKey(key));
  } catch (err: unknown) {
    // A key of another type than the certificate's (EC against RSA) can throw instead of answering false.
    throw new ConfigError('YT_ERR_FILE_INVALID', keyMismatch(files, cert, errorMessage(err)), { cause: err });
  }
  if (!matches) throw new ConfigError('YT_ERR_FILE_INVALID', keyMismatch(files, cert, undefined));
  return { cert, key };
}

function keyMismatch(files: PemPairPaths, cert: string, detail: string | undefined): string {
  return (
    `${files.key.namedBy}: ${files.key.path} is not the private key of ${files.cert.path} (${files.cert.namedBy}, which holds ${describePem(cert)})` +
    (detail === undefined ? '' : `: ${detail}`) +
    '; give the key the certificate was issued for'
  );
}
