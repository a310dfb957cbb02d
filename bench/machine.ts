// The machine a bench ran on, printed above its table: CPUs, kernel, Node,
// and the Go version the Konnectivity binaries were built with (read from the
// build information every Go binary carries, as `go version -m` does, so no
// Go toolchain is needed).

import { readFileSync } from 'node:fs';
import { cpus, release } from 'node:os';
import { availableParallelism } from 'node:os';

/** Go's build-info header: 14 bytes of magic, pointer size, flags; inline strings follow when flags & 2 (Go 1.18+). */
const BUILDINFO_MAGIC = Buffer.from('\xff Go buildinf:', 'latin1');

function readUvarint(buf: Buffer, pos: number): [number, number] {
  let v = 0;
  let shift = 0;
  for (let i = 0; i < 10; i++) {
    const b = buf[pos++]!;
    v += (b & 0x7f) * 2 ** shift;
    if (b < 0x80) return [v, pos];
    shift += 7;
  }
  throw new Error('malformed varint in Go build info');
}

/** The Go version and main module of a Go binary, or undefined where it has no readable build info. */
export function goBuildInfo(path: string): { goVersion: string; module: string } | undefined {
  let bin: Buffer;
  try {
    bin = readFileSync(path);
  } catch {
    return undefined;
  }
  const at = bin.indexOf(BUILDINFO_MAGIC);
  if (at < 0 || (bin[at + 15]! & 2) === 0) return undefined;
  let pos = at + 32;
  const [vlen, p1] = readUvarint(bin, pos);
  const goVersion = bin.toString('utf8', p1, p1 + vlen);
  pos = p1 + vlen;
  const [mlen, p2] = readUvarint(bin, pos);
  // The module info is framed by 16 bytes of sentinel on each side.
  const info = bin.toString('utf8', p2 + 16, p2 + mlen - 16);
  const mod = /^mod\t(\S+)\t(\S+)/m.exec(info);
  return { goVersion, module: mod === null ? 'unknown' : `${mod[1]} ${mod[2]}` };
}

export interface MachineInfo {
  nproc: number;
  cpuModel: string;
  kernel: string;
  node: string;
  goServer: string;
  goAgent: string;
}

export function machineInfo(goBins: { proxyServer: string; proxyAgent: string } | undefined): MachineInfo {
  const describe = (p: string | undefined): string => {
    if (p === undefined) return 'absent';
    const b = goBuildInfo(p);
    return b === undefined ? 'no build info' : `${b.goVersion} (${b.module})`;
  };
  return {
    nproc: availableParallelism(),
    cpuModel: cpus()[0]?.model ?? 'unknown',
    kernel: release(),
    node: process.version,
    goServer: describe(goBins?.proxyServer),
    goAgent: describe(goBins?.proxyAgent),
  };
}
