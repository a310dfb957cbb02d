// The `socks` client, for socks5.ts to import on first use. `socks` is
// CommonJS: imported by import() straight from the bundled agent
// (hack/bundle.mjs), it would keep only a default export, where Node finds
// its named exports; imported here, statically, esbuild keeps them.

export { SocksClient } from 'socks';
