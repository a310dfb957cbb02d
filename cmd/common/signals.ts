// Runs a service until SIGTERM/SIGINT: the first signal asks it to stop
// gracefully, a second one exits at once.

/**
 * Holds the event loop open until the process exits. The services' timers
 * are unref'd (a retry loop must not keep a test alive), so an agent waiting
 * between retries with no socket open, or a server waiting for its
 * certificate, would otherwise end by itself: the process lives until it is
 * told to stop.
 */
export function holdProcessOpen(): void {
  setInterval(() => {}, 2 ** 30);
}

export function onShutdownSignals(stop: (signal: NodeJS.Signals) => Promise<void>): void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals): void => {
    if (stopping) {
      process.stderr.write(`received ${signal} again; exiting now\n`);
      process.exit(1);
    }
    stopping = true;
    stop(signal).then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`shutdown failed: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}
