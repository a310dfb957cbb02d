// Reading a PEM file named by a flag or a kubeconfig, at start-up: the error
// names who named the file, the path and what is wrong with it.

import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { ConfigError, errorMessage } from '../protocol/errors.js';

export interface ReadPemOptions {
  /** Who named the file (a flag, "the cluster CA named by …"): leads the error message. */
  namedBy?: string;
  /** Also check that the file holds a PEM certificate or private key. */
  kind?: 'certificate' | 'key';
}

/** The file's text; throws ConfigError (YT_ERR_FILE_UNREADABLE, YT_ERR_FILE_INVALID) naming it. */
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
    throw new ConfigError('YT_ERR_FILE_INVALID', `${lead}${path} does not hold a PEM ${opts.kind}: ${errorMessage(err)}`, { cause: err });
  }
  return text;
}
