// The errors of pkg/grpc, on the shared bases in pkg/protocol/errors.ts.

import { TunnelError } from '../protocol/errors.js';

/** An HPACK header block that cannot be decoded (RFC 7541). */
export class HpackError extends TunnelError {
  override readonly name = 'HpackError';
  readonly code = 'YT_ERR_HPACK';
}

/** A Huffman-coded HPACK string that cannot be decoded (EOS, bad padding, an unfinished code). */
export class HuffmanError extends TunnelError {
  override readonly name = 'HuffmanError';
  readonly code = 'YT_ERR_HPACK_HUFFMAN';
}

/**
 * HTTP/2 frames a client sent that break the framing rules or our announced limits (a header block cut by another
 * frame, a bad padding, a frame or header block too large). `http2Code` is the RFC 9113 error code for the GOAWAY.
 */
export class Http2FrameError extends TunnelError {
  override readonly name = 'Http2FrameError';
  readonly code = 'YT_ERR_HTTP2_FRAME';
  readonly http2Code: number;
  constructor(message: string, options?: { cause?: unknown; http2Code?: number }) {
    super(message, options);
    this.http2Code = options?.http2Code ?? 0x1; // PROTOCOL_ERROR
  }
}
