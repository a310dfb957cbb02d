// The gRPC methods we serve and call, as HTTP/2 paths.

/** Konnectivity's agent stream (proto/agent.proto): agents dial the server and call it. */
export const AGENT_CONNECT_PATH = '/AgentService/Connect';

/** Konnectivity's client stream (proto/client.proto): kube-apiserver's egress selector calls it, one stream per dial. */
export const PROXY_PATH = '/ProxyService/Proxy';
