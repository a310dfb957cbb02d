// The stand-in kubelet and the protocol helpers tests use to talk to it
// (directly or through the tunnel).
//
//   const kubelet = new StandinKubelet({ cert, key, clientCA, portForwardTargets: { 80: echoAddress } });
//   await kubelet.start();                 // kubelet.port, kubelet.url
//   ...                                    // kubelet.requests, kubelet.waitForRequests(n), kubelet.followStreams
//   await kubelet.close();
//
// Clients: upgradeToChannelWebSocket (exec/attach, v5/v4 channels),
// upgradeToSpdy + openPortForward (port-forward, SPDY exec), PatternVerifier
// for GET /bytes?n=N, raw-http helpers for byte-exact request heads.

export { StandinKubelet } from './server.js';
export { WEBSOCKET_EXEC_PROTOCOLS, type StandinKubeletOptions } from './options.js';
export type { RecordedRequest, ClientSubject, TLSClientErrorRecord } from './record.js';
export type { FollowStreamRecord } from './logs.js';
export { PORT_FORWARD_PROTOCOLS, type PortForwardRecord, type PortForwardTarget } from './port-forward.js';
export { SPDY_EXEC_PROTOCOLS } from './spdy-exec.js';
export { PatternVerifier, patternByte, patternBytes, patternView, writePattern } from './bytes.js';
export { exitStatusJSON } from './exec.js';
export { CHANNEL } from './ws-exec.js';
export { ChannelWebSocketClient, upgradeToChannelWebSocket, type ChannelWebSocketRequest } from './ws-client.js';
export {
  GOAWAY_STATUS,
  forwardPatternEcho,
  RST_STATUS,
  SpdySession,
  SpdyStream,
  openPortForward,
  readAll,
  upgradeToSpdy,
  type PortForwardStreams,
  type SpdyHeaders,
  type SpdySessionOptions,
  type SpdyUpgrade,
  type SpdyUpgradeRequest,
} from './spdy.js';
export { ChunkedDecoder, dialTLS, headerValue, readBody, readResponseHead, readToEnd, requestHead, type ResponseHead } from './raw-http.js';
export {
  PatternMismatchError,
  SpdyProtocolError,
  SpdySessionClosedError,
  SpdyStreamResetError,
  StandinTimeoutError,
  UpgradeRefusedError,
  WebSocketProtocolError,
} from './errors.js';
