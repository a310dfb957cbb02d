// prom-client's Registry, Counter, Gauge and Histogram, each required from its
// own file. The package's index also loads what we never use: the default
// process metrics (with @opentelemetry/api, 51 files), Summary (tdigest,
// bintrees), Pushgateway (http, https) and the cluster aggregator, ~3 MB of an
// idle agent's RSS (bench/README.md, "Memory"). These are the classes the
// index exports (one module cache), so a Registry from either works with both.

import { createRequire } from 'node:module';
import type * as prom from 'prom-client';

const require = createRequire(import.meta.url);

export const Registry = require('prom-client/lib/registry.js') as typeof prom.Registry;
export const Counter = require('prom-client/lib/counter.js') as typeof prom.Counter;
export const Gauge = require('prom-client/lib/gauge.js') as typeof prom.Gauge;
export const Histogram = require('prom-client/lib/histogram.js') as typeof prom.Histogram;

export type Registry = prom.Registry;
export type Counter<T extends string = string> = prom.Counter<T>;
export type Gauge<T extends string = string> = prom.Gauge<T>;
export type Histogram<T extends string = string> = prom.Histogram<T>;
