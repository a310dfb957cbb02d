// The gRPC methods we serve and call, as HTTP/2 paths.

/** Konnectivity's agent stream (proto/agent.proto): agents dial the server and call it. */
export const AGENT_CONNECT_PATH = '/AgentService/Connect';
