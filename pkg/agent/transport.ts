// The transports an agent can reach its server over (`--transport`; transport-choice.ts dials them).

export type AgentTransport = 'auto' | 'grpc' | 'websocket';

export const AGENT_TRANSPORTS: readonly AgentTransport[] = ['auto', 'grpc', 'websocket'];
