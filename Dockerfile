# One image for both yurt-tunnel-server and yurt-tunnel-agent.
#   docker build -t yurt-tunnel .
#   docker run yurt-tunnel yurt-tunnel-server --help
#   docker run yurt-tunnel yurt-tunnel-agent --help
# BASE_IMAGE pins the Node base, e.g. by digest:
#   docker build --build-arg BASE_IMAGE=node:20-bookworm-slim@sha256:<digest> -t yurt-tunnel .
# Without a registry, `npm run image -- build` assembles a local base and builds with buildah (hack/image.ts).

ARG BASE_IMAGE=node:20-bookworm-slim

FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json tsconfig.json ./
# Scripts off: `prepare` would build before the sources are here.
RUN npm ci --ignore-scripts
COPY cmd ./cmd
COPY pkg ./pkg
COPY proto ./proto
COPY hack/bundle.mjs ./hack/bundle.mjs
# Each CLI bundled into dist/bin (hack/bundle.mjs: a third of the start time); node_modules stays for cluster mode's
# @kubernetes/client-node, which is not bundled.
RUN npx tsc -p tsconfig.json && node hack/bundle.mjs && npm prune --omit=dev --ignore-scripts

FROM ${BASE_IMAGE}
# The server's iptables manager needs iptables and conntrack (and root with NET_ADMIN); the agent needs neither.
# jemalloc: glibc's malloc keeps the memory a flood of connections freed, jemalloc gives it back
# (docs/operating.md, "Memory after a flood"); linked to one path whatever the architecture.
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables conntrack libjemalloc2 \
 && ln -s "$(find /usr/lib -name libjemalloc.so.2 | head -n 1)" /usr/local/lib/libjemalloc.so.2 \
 && test -e /usr/local/lib/libjemalloc.so.2 \
 && rm -rf /var/lib/apt/lists/*
ENV LD_PRELOAD=/usr/local/lib/libjemalloc.so.2 MALLOC_CONF=background_thread:true
WORKDIR /app
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist/bin ./dist/bin
COPY --from=build /src/proto ./proto
RUN chmod +x dist/bin/*/main.js \
 && ln -s /app/dist/bin/yurt-tunnel-server/main.js /usr/local/bin/yurt-tunnel-server \
 && ln -s /app/dist/bin/yurt-tunnel-agent/main.js /usr/local/bin/yurt-tunnel-agent
# Non-root by default; a server that runs the iptables manager is given root and NET_ADMIN by its manifest.
USER node
# Meta ports: server 10265, agent 10266 (/healthz, /readyz, /metrics).
EXPOSE 10262 10263 10264 10265 10266
CMD ["yurt-tunnel-server", "--help"]
