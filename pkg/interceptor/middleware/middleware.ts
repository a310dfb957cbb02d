import type { RequestContext } from '../request-context.js';

/** One step of the master server's chain: adjusts the context or throws an HttpError. */
export type Middleware = (ctx: RequestContext) => void;
