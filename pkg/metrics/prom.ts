// The prom-client classes the rooms use, from the package's public entry point.
// Its index also loads what we never use (the default process metrics with
// @opentelemetry/api, Summary's tdigest and bintrees, Pushgateway, the cluster
// aggregator): +3.4 MB RSS in a process that already has TLS, HTTP/2 and
// winston (56.7 -> 60.1 MB, three runs, Node 20.20), the price of not
// deep-requiring prom-client/lib/*.js, which is private and may move in any
// release.

export { Counter, Gauge, Histogram, Registry } from 'prom-client';
