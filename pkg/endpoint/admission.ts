// Whether the agent endpoint takes a Connect call: that it is a gRPC call for
// AgentService/Connect, the connect rate (a reconnect storm, or a flood of
// resume claims, is turned away with a retryable status), the agent's
// metadata, the identity check against its client certificate, and the limit
// of streams per agent. The cheap refusals come first: nothing is parsed or
// logged for a call the rate turns away, and an unknown identifier key is
// logged only for a call that passed the identity check, as one line per call
// through the log limiter. A refusal says which rule refused it, for the
// metric and the log line.

import type { PeerCertificate } from 'node:tls';
import { firstNonPrintableASCII, quoteMetadataValue } from '../grpc/metadata.js';
import type { IncomingCall } from '../grpc/server-call-head.js';
import { AGENT_CONNECT_PATH } from '../grpc/services.js';
import { GrpcStatus } from '../grpc/status.js';
import type { LogLimiter } from '../log/log-limiter.js';
import { CONN_WINDOW_HEADER, parseConnWindow } from '../protocol/flow-control.js';
import { HALF_CLOSE_HEADER, announcesHalfClose } from '../protocol/half-close.js';
import { parseAgentIdentifiers, type AgentIdentifiers } from '../protocol/identifiers.js';
import { PROBE_HEADER, announcesProbe } from '../protocol/probe.js';
import { RESUME_HEADER, SESSION_HEADER, parseResumeWindow, parseSessionClaims, type SessionClaim } from '../protocol/resume.js';
import { checkAgentIdentity, type AgentIdentityCheck } from './agent-identity.js';
import { ConnectRate } from './connect-rate.js';
import type { AgentEndpointMetrics } from './metrics.js';

/** What an agent's call says about it. */
export interface AgentMetadata {
  agentID: string;
  identifiers: AgentIdentifiers;
  /** The agent's window for our flow control extension, if it announced one. */
  agentWindow: number | undefined;
  /** What the per-agent stream limit counts this call under. */
  identityKeys: string[];
  /** The agent announced half-close. */
  halfClose: boolean;
  /** SHA-256 fingerprint of the verified client certificate ('' if none). */
  fingerprint: string;
  /**
   * The identity check verified that the certificate names agentID (off with
   * --agent-identity-check none): a session it opened may be taken back with
   * another certificate naming the same agent (session-table.ts).
   */
  identityVerified: boolean;
  /** The agent's resume window, when it announced session resume. */
  resumeWindowMs: number | undefined;
  /** The sessions the agent asks to resume. */
  claims: SessionClaim[];
  /** The agent already holds links to every server it knows of: this call looks for another (protocol/probe.ts). */
  probe: boolean;
}

/** What admission reads of a call: a gRPC call's head, or a WebSocket upgrade's (ws-call-head.ts). */
export type CallHead = Pick<IncomingCall, 'check' | 'metadata'>;

/** The agent's verified client certificate: from its TLS handshake, or forwarded by a trusted proxy. */
export type AgentCertificate = Pick<PeerCertificate, 'subject' | 'subjectaltname' | 'fingerprint256'>;

/** A call refused before any message, and the rule that refused it. */
export interface Refusal {
  code: number;
  message: string;
  by: 'shutdown' | 'connect_rate' | 'call' | 'identity' | 'stream_limit';
}

export interface AdmissionOptions {
  maxStreamsPerAgent: number;
  /** New calls admitted per second; 0 admits all. */
  maxConnectRate: number;
  identityCheck: AgentIdentityCheck;
  metrics: AgentEndpointMetrics;
  /** Every warning here is one a caller can provoke at will: all go through the limiter. */
  log: LogLimiter;
}

/** Unknown identifier keys named in their log line (the rest only counted), each cut to KEY_CHARS_SHOWN. */
const UNKNOWN_KEYS_SHOWN = 3;
const KEY_CHARS_SHOWN = 32;

export class Admission {
  private readonly connectRate: ConnectRate | undefined;
  /** Open Connect calls by agent identity: "cert:<sha256 fingerprint>" and "id:<agentID>". */
  private readonly streamsByIdentity = new Map<string, number>();
  private rateRefusals = 0;

  constructor(private readonly opts: AdmissionOptions) {
    const rate = opts.maxConnectRate;
    this.connectRate = rate > 0 ? new ConnectRate(rate, 2 * rate) : undefined;
  }

  get connectRateLimit(): number | undefined {
    return this.connectRate?.perSecond;
  }

  /** Calls the connect rate limit has refused so far, for its summary line. */
  get connectRateRefusals(): number {
    return this.rateRefusals;
  }

  /**
   * Whether we take this call now, and the agent's metadata if so. Every call
   * counts in the connect rate, resume claims too: a refused claim is retried
   * by its agent within its resume window. A call that takes back a session
   * it holds (`resumes`) skips only the stream limit: during a silent blip the
   * call it replaces still counts.
   */
  admit(
    call: CallHead,
    peer: AgentCertificate | undefined,
    shuttingDown: boolean,
    resumes: (meta: AgentMetadata) => boolean = () => false,
  ): AgentMetadata | Refusal {
    if (shuttingDown) return { code: GrpcStatus.UNAVAILABLE, message: 'yurt-tunnel-server is shutting down', by: 'shutdown' };
    const bad = call.check([AGENT_CONNECT_PATH]);
    if (bad !== undefined) return { ...bad, by: 'call' };
    const overRate = this.checkConnectRate();
    if (overRate !== undefined) return overRate;
    const meta = this.readAgentMetadata(call, peer);
    if ('code' in meta || resumes(meta)) return meta;
    return this.checkStreamLimit(meta);
  }

  private checkConnectRate(): Refusal | undefined {
    if (this.connectRate !== undefined && !this.connectRate.tryTake()) {
      this.rateRefusals++;
      this.opts.metrics.refused('connect_rate');
      return {
        code: GrpcStatus.UNAVAILABLE,
        message: `too many agents are connecting (limit ${this.connectRate.perSecond} per second, --max-agent-connect-rate); retry after a backoff`,
        by: 'connect_rate',
      };
    }
    return undefined;
  }

  /** Counts a call that was admitted and served, until `release`. */
  hold(keys: readonly string[]): void {
    this.count(keys, 1);
  }

  release(keys: readonly string[]): void {
    this.count(keys, -1);
  }

  private readAgentMetadata(call: CallHead, peer: AgentCertificate | undefined): AgentMetadata | Refusal {
    const ids = call.metadata('agentid');
    if (ids.length !== 1 || ids[0] === '') {
      const got = ids.length === 1 ? 'an empty one' : String(ids.length);
      return { code: GrpcStatus.INVALID_ARGUMENT, message: `expected one agent ID in the "agentid" metadata, got ${got}`, by: 'call' };
    }
    const agentID = ids[0]!;
    const bad = firstNonPrintableASCII(agentID);
    if (bad >= 0) {
      return {
        code: GrpcStatus.INVALID_ARGUMENT,
        message:
          `the agent ID in the "agentid" metadata must be printable ASCII (gRPC metadata values are; node names are ` +
          `lower-case DNS names), got byte 0x${agentID.charCodeAt(bad).toString(16).padStart(2, '0')} at offset ${bad} of ${quoteMetadataValue(agentID)}`,
        by: 'call',
      };
    }
    const idValues = call.metadata('agentidentifiers');
    if (idValues.length > 1) {
      return {
        code: GrpcStatus.INVALID_ARGUMENT,
        message: `expected at most one "agentidentifiers" metadata value, got ${idValues.length}`,
        by: 'call',
      };
    }
    // Counted, not logged, until the call has passed the identity check: one header can hold thousands.
    let unknownKeys = 0;
    const someUnknownKeys: string[] = [];
    const identifiers = parseAgentIdentifiers(idValues[0] ?? '', (key) => {
      if (unknownKeys++ < UNKNOWN_KEYS_SHOWN) someUnknownKeys.push(key.length > KEY_CHARS_SHOWN ? `${key.slice(0, KEY_CHARS_SHOWN)}...` : key);
    });
    const check = this.opts.identityCheck;
    const verdict = checkAgentIdentity(peer, agentID, identifiers, check);
    if (!verdict.ok) {
      this.opts.log.warn('agent refused by the identity check', {
        agentID,
        identityCheck: check,
        claim: `${verdict.check}=${verdict.claimed}`,
        reason: verdict.reason,
      });
      return { code: GrpcStatus.PERMISSION_DENIED, message: `agent identity check (${check}) failed: ${verdict.reason}`, by: 'identity' };
    }
    if (unknownKeys > 0) {
      this.opts.log.warn('ignoring unknown agent identifier keys', { agentID, unknownKeys, firstKeys: someUnknownKeys });
    }
    const fingerprint = peer?.fingerprint256 ?? '';
    const identityKeys = [`id:${agentID}`];
    if (fingerprint !== '') identityKeys.push(`cert:${fingerprint}`);
    const claims = parseSessionClaims(call.metadata(SESSION_HEADER));
    if (claims instanceof Error) return { code: GrpcStatus.INVALID_ARGUMENT, message: claims.message, by: 'call' };
    return {
      agentID,
      identifiers,
      agentWindow: parseConnWindow(call.metadata(CONN_WINDOW_HEADER)),
      halfClose: announcesHalfClose(call.metadata(HALF_CLOSE_HEADER)),
      identityKeys,
      fingerprint,
      identityVerified: check !== 'none' && fingerprint !== '',
      resumeWindowMs: parseResumeWindow(call.metadata(RESUME_HEADER)),
      claims,
      probe: announcesProbe(call.metadata(PROBE_HEADER)),
    };
  }

  private checkStreamLimit(meta: AgentMetadata): AgentMetadata | Refusal {
    const { agentID, identityKeys } = meta;
    const over = this.overStreamLimit(identityKeys);
    if (over !== undefined) {
      this.opts.metrics.refused('stream_limit');
      const by = over.key.startsWith('id:') ? `agentID ${agentID}` : `the client certificate of agent ${agentID}`;
      return {
        code: GrpcStatus.RESOURCE_EXHAUSTED,
        message:
          `too many Connect streams: ${by} already holds ${over.open} (limit ${this.opts.maxStreamsPerAgent}, ` +
          'the server flag --max-agent-streams); close one or raise the limit',
        by: 'stream_limit',
      };
    }
    return meta;
  }

  /** The first identity key at its limit, if any. */
  private overStreamLimit(keys: readonly string[]): { key: string; open: number } | undefined {
    for (const key of keys) {
      const open = this.streamsByIdentity.get(key) ?? 0;
      if (open >= this.opts.maxStreamsPerAgent) return { key, open };
    }
    return undefined;
  }

  private count(keys: readonly string[], delta: 1 | -1): void {
    for (const key of keys) {
      const n = (this.streamsByIdentity.get(key) ?? 0) + delta;
      if (n <= 0) this.streamsByIdentity.delete(key);
      else this.streamsByIdentity.set(key, n);
    }
  }
}
