// Retry on 409 Conflict, as client-go's RetryOnConflict: read, modify, write;
// when someone else wrote in between, read again, a bounded number of times.

import { isConflict } from './errors.js';
import { sleep } from '../timers/sleep.js';

export interface RetryOnConflictOptions {
  attempts?: number;
  /** First wait; doubled per attempt. */
  delayMs?: number;
}

export async function retryOnConflict<T>(update: () => Promise<T>, opts: RetryOnConflictOptions = {}): Promise<T> {
  const attempts = opts.attempts ?? 5;
  let delay = opts.delayMs ?? 10;
  for (let attempt = 1; ; attempt++) {
    try {
      return await update();
    } catch (err: unknown) {
      if (!isConflict(err) || attempt >= attempts) throw err;
      await sleep(delay * (1 + Math.random()));
      delay *= 2;
    }
  }
}
