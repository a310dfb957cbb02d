// Whether TLS runs to the far end: a caller that came over TLS gets TLS to the
// node too, except for a port mapped to the insecure (HTTP) master port (10255
// and the ConfigMap's http-proxy-ports), whose far end speaks plain HTTP. A
// plain caller never gets TLS (and with it the proxy-client identity).

import { splitAddress } from '../request-context.js';
import type { Middleware } from './middleware.js';

/** `mappings` is read on every request, so a reloaded configuration applies at once. */
export function masterPortTLS(mappings: () => ReadonlyMap<number, 'secure' | 'insecure'>): Middleware {
  return (ctx) => {
    if (!ctx.tls) return;
    const dest = splitAddress(ctx.dialAddress);
    if (dest !== undefined && mappings().get(dest.port) === 'insecure') ctx.tls = false;
  };
}
