// host:port as flags and dial requests write it.

/** Splits `host:port` / `[v6]:port` (port 1-65535); returns undefined when it is neither. */
export function splitHostPort(address: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(address);
  if (m === null) return undefined;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return undefined;
  return { host: m[1] ?? m[2]!, port };
}
