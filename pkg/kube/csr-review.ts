// Whether one of the tunnel's CertificateSigningRequests may be approved: the
// request must be exactly what our agent or server creates, and its requester
// must be who the certificate names (spec/yurttunnel.md §4.3; OpenYurt's
// approver checks the names but never the requester, so any user allowed to
// create CSRs could get a certificate for any node).
//   - agent (tunnel-agent-client / openyurt:yurttunnel, kube-apiserver-client):
//     created with the kubelet's credentials, so the requester is
//     system:node:<name> in system:nodes; DNS SAN exactly <name>; IP SANs only
//     addresses of Node <name>;
//   - server serving (system:node:tunnel-server / system:nodes, kubelet-serving):
//     requested by the server's ServiceAccount, naming only what our server
//     names (servingNames in tunnel-addresses.ts, from the Services and Nodes
//     the approver sees, with its --cert-ips/--cert-dns-names). A kubelet-serving
//     certificate naming a node's address would let its holder pose as that
//     node's kubelet to kube-apiserver; this way even a stolen ServiceAccount
//     token gets no name the server does not hold anyway;
//   - server proxy client (tunnel-proxy-client / openyurt:yurttunnel,
//     kube-apiserver-client): requested by the server's ServiceAccount, no names.
// Usages must be exactly those our certificate manager asks for.

import type { V1CertificateSigningRequest, V1Node } from '@kubernetes/client-node';
import { CLIENT_USAGES, KUBE_APISERVER_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, SERVING_USAGES, type KeyUsage } from '../certs/certificate-manager.js';
import { AGENT_COMMON_NAME, PROXY_CLIENT_COMMON_NAME, SERVER_COMMON_NAME, SERVER_ORGANIZATION, YURTTUNNEL_ORGANIZATION } from '../certs/local-store.js';
import { normalizeIP } from '../certs/read-certificate.js';
import { readSigningRequest, type SigningRequestSummary } from '../certs/read-signing-request.js';
import { errorMessage } from '../protocol/errors.js';

export type CsrReview =
  /** Not a request our agent or server makes: someone else's to decide. */
  | { verdict: 'not-ours'; why: string }
  | { verdict: 'approve'; message: string }
  /** Ours by its name, but not to be approved: left pending. */
  | { verdict: 'refuse'; reason: string };

export interface CsrReviewContext {
  /** The server's ServiceAccount as a username: `system:serviceaccount:kube-system:yurt-tunnel-server`. */
  serverUser: string;
  /** Node `name` from the API, undefined when there is none. */
  readNode(name: string): Promise<V1Node | undefined>;
  /** Every name and address our server's serving certificate may carry now. */
  servingNames(): Promise<AllowedNames>;
}

export interface AllowedNames {
  ips: readonly string[];
  dnsNames: readonly string[];
}

const NODE_USER_PREFIX = 'system:node:';
const NODES_GROUP = 'system:nodes';

interface Kind {
  what: string;
  signerName: string;
  organization: string;
  usages: readonly KeyUsage[];
}

const KINDS: Readonly<Record<string, Kind>> = {
  [AGENT_COMMON_NAME]: { what: 'agent client', signerName: KUBE_APISERVER_CLIENT_SIGNER, organization: YURTTUNNEL_ORGANIZATION, usages: CLIENT_USAGES },
  [PROXY_CLIENT_COMMON_NAME]: {
    what: 'server proxy client',
    signerName: KUBE_APISERVER_CLIENT_SIGNER,
    organization: YURTTUNNEL_ORGANIZATION,
    usages: CLIENT_USAGES,
  },
  [SERVER_COMMON_NAME]: { what: 'server serving', signerName: KUBELET_SERVING_SIGNER, organization: SERVER_ORGANIZATION, usages: SERVING_USAGES },
};

/** The PEM request of a CSR object: typed reads and watch events both carry it base64-encoded. */
export function requestPem(csr: V1CertificateSigningRequest): string {
  const raw = csr.spec.request;
  return raw.includes('-----BEGIN') ? raw : Buffer.from(raw, 'base64').toString('utf8');
}

/** Approved, denied, failed or issued: nothing left to decide. */
export function isDecided(csr: V1CertificateSigningRequest): boolean {
  if ((csr.status?.certificate ?? '') !== '') return true;
  return (csr.status?.conditions ?? []).some((c) => ['Approved', 'Denied', 'Failed'].includes(c.type) && c.status !== 'False');
}

const sameSet = (a: readonly string[], b: readonly string[]): boolean =>
  a.length === b.length && new Set(a).size === new Set(b).size && a.every((x) => b.includes(x));

export async function reviewTunnelCsr(csr: V1CertificateSigningRequest, ctx: CsrReviewContext): Promise<CsrReview> {
  const signerName = csr.spec.signerName;
  if (signerName !== KUBE_APISERVER_CLIENT_SIGNER && signerName !== KUBELET_SERVING_SIGNER) return { verdict: 'not-ours', why: `signer ${signerName}` };
  let req: SigningRequestSummary;
  try {
    req = readSigningRequest(requestPem(csr));
  } catch (err: unknown) {
    // Our requests are RSA, which forge reads; kubelets' own serving CSRs (ECDSA) land here and are not ours.
    return { verdict: 'not-ours', why: `request not readable as ours: ${errorMessage(err)}` };
  }
  const kind = Object.hasOwn(KINDS, req.commonName) ? KINDS[req.commonName] : undefined;
  if (kind === undefined) return { verdict: 'not-ours', why: `common name ${req.commonName}` };
  const refuse = (reason: string): CsrReview => ({ verdict: 'refuse', reason: `${kind.what} CSR: ${reason}` });

  if (signerName !== kind.signerName) return refuse(`signer ${signerName}, want ${kind.signerName}`);
  if (!req.signatureValid) return refuse('the request is not signed by its own key');
  const extra = req.subject.filter((a) => a.name !== 'CN' && a.name !== 'O');
  if (extra.length > 0) return refuse(`subject has other attributes: ${extra.map((a) => `${a.name}=${a.value}`).join(',')}`);
  if (!sameSet(req.organizations, [kind.organization])) return refuse(`organizations ${req.organizations.join(',') || 'none'}, want ${kind.organization}`);
  const usages = csr.spec.usages ?? [];
  if (!sameSet(usages, kind.usages)) return refuse(`usages ${usages.join(',') || 'none'}, want exactly ${kind.usages.join(',')}`);
  if (req.otherNames.length > 0) return refuse(`names other than DNS and IP: ${req.otherNames.join(',')}`);

  const user = csr.spec.username ?? '';
  const groups = csr.spec.groups ?? [];
  if (req.commonName !== AGENT_COMMON_NAME) {
    if (user !== ctx.serverUser) return refuse(`requested by ${user || 'nobody'}, not by the server's ServiceAccount ${ctx.serverUser}`);
    if (req.commonName === PROXY_CLIENT_COMMON_NAME && req.dnsNames.length + req.ips.length > 0) {
      return refuse(`names ${[...req.dnsNames, ...req.ips].join(',')}, want none`);
    }
    if (req.commonName === SERVER_COMMON_NAME) {
      if (req.dnsNames.length + req.ips.length === 0) return refuse('no DNS or IP names');
      const own = await ctx.servingNames();
      const ownIPs = new Set(own.ips.map(normalizeIP));
      const foreign = [...req.dnsNames.filter((n) => !own.dnsNames.includes(n)), ...req.ips.filter((ip) => !ownIPs.has(ip))];
      if (foreign.length > 0) {
        return refuse(
          `names ${foreign.join(',')}, not among the server's own serving names ` +
            '(the tunnel Services and their addresses, cloud nodes of a NodePort x-tunnel-server-svc, loopback, --cert-ips, --cert-dns-names)',
        );
      }
    }
    return { verdict: 'approve', message: `${kind.what} certificate requested by the server's ServiceAccount ${user}` };
  }

  // The agent's: the node's own credentials, naming that node and only its addresses.
  if (!user.startsWith(NODE_USER_PREFIX) || !groups.includes(NODES_GROUP)) {
    return refuse(`requested by ${user || 'nobody'} (groups ${groups.join(',') || 'none'}), not by a node (${NODE_USER_PREFIX}<name> in ${NODES_GROUP})`);
  }
  const node = user.slice(NODE_USER_PREFIX.length);
  if (!sameSet(req.dnsNames, [node])) return refuse(`requested by node ${node} but names DNS ${req.dnsNames.join(',') || 'none'}, want exactly ${node}`);
  if (req.ips.length > 0) {
    const found = await ctx.readNode(node);
    if (found === undefined) return refuse(`node ${node} not found, so its addresses ${req.ips.join(',')} cannot be checked`);
    const own = new Set((found.status?.addresses ?? []).map((a) => normalizeIP(a.address)));
    const foreign = req.ips.filter((ip) => !own.has(ip));
    if (foreign.length > 0)
      return refuse(`requested by node ${node} but names IP ${foreign.join(',')}, not an address of that node (has ${[...own].join(',') || 'none'})`);
  }
  return { verdict: 'approve', message: `agent client certificate requested by node ${node} for itself` };
}
