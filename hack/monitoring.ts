// The monitoring pack's one source of truth: the recording and alert rules,
// the dashboard and the scrape jobs are written here once, and `npm run
// monitoring` (hack/monitoring-cli.ts) derives every file in
// manifests/monitoring/ from them: the plain rule file, the Operator's
// PrometheusRule, the dashboard JSON and its ConfigMap, the scrape snippet.
// test/unit/monitoring-pack.test.ts fails when a file differs from what this
// module gives now.
//
// Jobs: `job="yurt-tunnel-server"` and `job="yurt-tunnel-agent"` (the pods'
// k8s-app label, or the snippet's job names); an agent's series carry the
// `node` it runs on. No query uses a Grafana variable, so the e2e test
// (test/e2e/monitoring.test.ts) evaluates every panel's query as it is.

export const SERVER_JOB = 'yurt-tunnel-server';
export const AGENT_JOB = 'yurt-tunnel-agent';
const S = `job="${SERVER_JOB}"`;
const A = `job="${AGENT_JOB}"`;

export interface RecordingRule {
  record: string;
  expr: string;
}

export interface AlertRule {
  alert: string;
  expr: string;
  for: string;
  labels: { severity: 'warning' | 'critical' };
  annotations: { summary: string; description: string; runbook: string };
}

/** What an alert means and what to do: docs/operating.md's list is written from these. */
export const RECORDING_RULES: readonly RecordingRule[] = [
  { record: 'yurttunnel:tunnelled_bytes:rate1m', expr: `sum by (direction) (rate(yurttunnel_server_tunnelled_bytes_total{${S}}[1m]))` },
  {
    record: 'yurttunnel:dial_duration_seconds:p50_1m',
    expr: `histogram_quantile(0.5, sum by (le) (rate(konnectivity_network_proxy_server_dial_duration_seconds_bucket{${S}}[1m])))`,
  },
  {
    record: 'yurttunnel:dial_duration_seconds:p99_1m',
    expr: `histogram_quantile(0.99, sum by (le) (rate(konnectivity_network_proxy_server_dial_duration_seconds_bucket{${S}}[1m])))`,
  },
  { record: 'yurttunnel:dial_failures:rate1m', expr: `sum by (reason) (rate(yurttunnel_server_dial_failures_total{${S}}[1m]))` },
  // Every dial ends as a success (a dial_duration observation) or a failure with a reason.
  {
    record: 'yurttunnel:dials:rate5m',
    expr:
      `sum(rate(konnectivity_network_proxy_server_dial_duration_seconds_count{${S}}[5m])) ` + `+ sum(rate(yurttunnel_server_dial_failures_total{${S}}[5m]))`,
  },
  // A caller that leaves before the answer (YT_ERR_DIAL_CANCELLED) is not the tunnel failing.
  {
    record: 'yurttunnel:dial_failure_ratio:rate5m',
    expr: `sum by (reason) (rate(yurttunnel_server_dial_failures_total{${S},reason!="YT_ERR_DIAL_CANCELLED"}[5m])) / on () group_left () yurttunnel:dials:rate5m`,
  },
  { record: 'yurttunnel:agent_connects:increase10m', expr: `sum by (node) (increase(yurttunnel_agent_server_connects_total{${A}}[10m]))` },
];

/** Where each alert's "what to do" is: the project has no public URL, so the path in its tree. */
const DOCS = 'docs/operating.md';

function alert(name: string, expr: string, forDuration: string, severity: 'warning' | 'critical', summary: string, description: string): AlertRule {
  return {
    alert: name,
    expr,
    for: forDuration,
    labels: { severity },
    annotations: { summary, description, runbook: `${DOCS}#${name.toLowerCase()}` },
  };
}

/** Connects per node in 10 minutes past which an agent counts as flapping (a healthy one connects once per server). */
export const FLAPPING_CONNECTS = 5;
/** Share of dials failing for one reason that is alerted. */
export const DIAL_FAILURE_RATIO = 0.1;

export const ALERT_RULES: readonly AlertRule[] = [
  alert(
    'YurtTunnelAgentFlapping',
    `yurttunnel:agent_connects:increase10m > ${FLAPPING_CONNECTS}`,
    '0m',
    'warning',
    'The tunnel agent on {{ $labels.node }} keeps reconnecting.',
    '{{ $value | humanize }} links to tunnel servers in 10 minutes (more than ' + `${FLAPPING_CONNECTS}): the node's kubelet is reachable only now and then.`,
  ),
  alert(
    'YurtTunnelDialFailures',
    `yurttunnel:dial_failure_ratio:rate5m > ${DIAL_FAILURE_RATIO}`,
    '5m',
    'warning',
    'Tunnel dials fail with {{ $labels.reason }}.',
    '{{ $value | humanizePercentage }} of the dials in the last 5 minutes failed with {{ $labels.reason }}.',
  ),
  alert(
    'YurtTunnelStalledConnections',
    `sum by (instance) (increase(yurttunnel_server_connections_closed_total{${S},reason="YT_ERR_CONN_STALLED"}[10m])) > 0`,
    '0m',
    'warning',
    'The tunnel server closed stalled connections.',
    '{{ $value | humanize }} connections on {{ $labels.instance }} were closed in 10 minutes because their reader stopped ' +
      'behind an agent without flow control (--stalled-connection-timeout).',
  ),
  alert(
    'YurtTunnelCertificateExpiresSoon',
    'yurttunnel_certificate_expiry_timestamp_seconds - time() < 7 * 86400',
    '0m',
    'critical',
    'A tunnel certificate ({{ $labels.role }}) expires within 7 days.',
    'The {{ $labels.role }} certificate of {{ $labels.job }} {{ $labels.instance }} expires in ' + '{{ $value | humanizeDuration }}; it was not renewed.',
  ),
  // kube-state-metrics' kube_pod_info says which nodes have pods; the nodes
  // where our DaemonSet has a pod are the edge nodes (the agent runs on them).
  alert(
    'YurtTunnelNodeWithoutAgent',
    `(count by (node) (kube_pod_info{node!=""}) and on (node) kube_pod_info{created_by_kind="DaemonSet",created_by_name="${AGENT_JOB}"}) ` +
      `unless on (node) (max by (node) (konnectivity_network_proxy_agent_open_server_connections{${A}}) > 0)`,
    '10m',
    'critical',
    'Pods on {{ $labels.node }} are out of the tunnel: no agent there holds a link.',
    '{{ $value }} pods run on {{ $labels.node }}, but no tunnel agent on it reports a link to a server: ' + 'logs, exec and metrics of its pods fail.',
  ),
  alert(
    'YurtTunnelPendingDialsNearLimit',
    `yurttunnel_server_agent_pending_dials_max{${S}} >= 0.8 * yurttunnel_server_max_pending_dials_per_agent{${S}}`,
    '5m',
    'warning',
    'An agent is near its limit of pending dials on {{ $labels.instance }}.',
    "{{ $value }} dials wait for one agent's answer; at --max-pending-dials-per-agent new dials fail with YT_ERR_TOO_MANY_DIALS.",
  ),
  alert(
    'YurtTunnelSessionResumesFailing',
    `sum by (job, instance, node, reason) (increase(yurttunnel_server_agent_sessions_expired_total{${S},reason=~"YT_ERR_RESUME_.*"}[15m])) > 0 ` +
      `or sum by (job, instance, node, reason) (increase(yurttunnel_agent_sessions_expired_total{${A},reason=~"YT_ERR_RESUME_.*|lost_by_server"}[15m])) > 0`,
    '0m',
    'warning',
    'Tunnel sessions could not be resumed ({{ $labels.reason }}).',
    '{{ $value | humanize }} sessions on {{ $labels.job }} {{ $labels.instance }} ended in 15 minutes instead of resuming: ' + 'their connections were cut.',
  ),
  alert(
    'YurtTunnelReplicaWithoutAgents',
    `yurttunnel_server_registered_agents{${S}} == 0 and on () (max(yurttunnel_server_registered_agents{${S}}) > 0)`,
    '5m',
    'critical',
    'Tunnel server {{ $labels.instance }} has no agents while another has some.',
    'Requests that land on {{ $labels.instance }} find no agent (503): agents do not reach this replica.',
  ),
];

export const RULE_GROUPS = [
  { name: 'yurttunnel.rules', rules: RECORDING_RULES },
  { name: 'yurttunnel.alerts', rules: ALERT_RULES },
];

// ---------------------------------------------------------------- dashboard

export interface PanelTarget {
  expr: string;
  legendFormat: string;
}

export interface PanelSpec {
  title: string;
  unit: string;
  targets: PanelTarget[];
}

export const PANELS: readonly PanelSpec[] = [
  {
    title: 'Tunnelled connections',
    unit: 'short',
    targets: [{ expr: `sum by (instance) (konnectivity_network_proxy_server_established_connections{${S}})`, legendFormat: '{{instance}}' }],
  },
  { title: 'Bytes through the tunnel', unit: 'Bps', targets: [{ expr: 'yurttunnel:tunnelled_bytes:rate1m', legendFormat: '{{direction}}' }] },
  {
    title: 'Dial latency',
    unit: 's',
    targets: [
      { expr: 'yurttunnel:dial_duration_seconds:p50_1m', legendFormat: 'p50' },
      { expr: 'yurttunnel:dial_duration_seconds:p99_1m', legendFormat: 'p99' },
    ],
  },
  { title: 'Dial failures by reason', unit: 'ops', targets: [{ expr: 'yurttunnel:dial_failures:rate1m', legendFormat: '{{reason}}' }] },
  { title: 'Agents per server replica', unit: 'short', targets: [{ expr: `yurttunnel_server_registered_agents{${S}}`, legendFormat: '{{instance}}' }] },
  {
    title: 'Session resumes',
    unit: 'ops',
    targets: [
      { expr: `sum(rate(yurttunnel_server_agent_sessions_resumed_total{${S}}[5m]))`, legendFormat: 'resumed' },
      { expr: `sum by (reason) (rate(yurttunnel_server_agent_sessions_expired_total{${S}}[5m]))`, legendFormat: 'expired {{reason}}' },
    ],
  },
  {
    title: 'Pending dials',
    unit: 'short',
    targets: [
      { expr: `sum(konnectivity_network_proxy_server_pending_backend_dials{${S}})`, legendFormat: 'all agents' },
      { expr: `max(yurttunnel_server_agent_pending_dials_max{${S}})`, legendFormat: 'fullest agent' },
      { expr: `min(yurttunnel_server_max_pending_dials_per_agent{${S}})`, legendFormat: 'limit per agent' },
    ],
  },
  {
    title: 'Agent connects in 10 minutes (top 10 nodes)',
    unit: 'short',
    targets: [{ expr: 'topk(10, yurttunnel:agent_connects:increase10m)', legendFormat: '{{node}}' }],
  },
  {
    title: 'Memory (resident)',
    unit: 'bytes',
    targets: [
      { expr: `process_resident_memory_bytes{${S}}`, legendFormat: 'server {{instance}}' },
      { expr: `max(process_resident_memory_bytes{${A}})`, legendFormat: 'agents (largest)' },
      { expr: `avg(process_resident_memory_bytes{${A}})`, legendFormat: 'agents (mean)' },
    ],
  },
  {
    title: 'CPU',
    unit: 'percentunit',
    targets: [
      { expr: `rate(process_cpu_seconds_total{${S}}[1m])`, legendFormat: 'server {{instance}}' },
      { expr: `max(rate(process_cpu_seconds_total{${A}}[1m]))`, legendFormat: 'agents (busiest)' },
    ],
  },
  {
    title: 'Certificate lifetime left',
    unit: 's',
    targets: [{ expr: 'min by (job, role) (yurttunnel_certificate_expiry_timestamp_seconds - time())', legendFormat: '{{job}} {{role}}' }],
  },
];

export const DASHBOARD_UID = 'yurt-tunnel';

export function dashboard(): object {
  const datasource = { type: 'prometheus', uid: '${datasource}' };
  return {
    uid: DASHBOARD_UID,
    title: 'yurt-tunnel',
    tags: ['yurt-tunnel'],
    schemaVersion: 39,
    version: 1,
    editable: true,
    refresh: '30s',
    time: { from: 'now-1h', to: 'now' },
    timezone: 'browser',
    templating: {
      list: [{ name: 'datasource', label: 'Data source', type: 'datasource', query: 'prometheus', current: {}, hide: 0, refresh: 1 }],
    },
    annotations: { list: [] },
    panels: PANELS.map((p, i) => ({
      id: i + 1,
      type: 'timeseries',
      title: p.title,
      datasource,
      gridPos: { h: 8, w: 12, x: (i % 2) * 12, y: Math.floor(i / 2) * 8 },
      fieldConfig: { defaults: { unit: p.unit }, overrides: [] },
      options: { legend: { displayMode: 'list', placement: 'bottom', showLegend: true }, tooltip: { mode: 'multi', sort: 'none' } },
      targets: p.targets.map((t, j) => ({ refId: String.fromCharCode(65 + j), datasource, expr: t.expr, legendFormat: t.legendFormat })),
    })),
  };
}

// ---------------------------------------------------------------- scrape jobs

/**
 * Scrape jobs for a Prometheus without the Operator (Kubernetes pod discovery).
 * The server's meta port listens on the pod's IP with the pack's patch; an
 * agent's stays on its node's loopback and is reached through the tunnel as
 * `<node>:10266` (the server ConfigMap's localhost-proxy-ports, by the DNS route).
 */
export function scrapeConfigs(): object[] {
  const keep = (app: string): object => ({ source_labels: ['__meta_kubernetes_pod_label_k8s_app'], regex: app, action: 'keep' });
  return [
    {
      job_name: SERVER_JOB,
      kubernetes_sd_configs: [{ role: 'pod', namespaces: { names: ['kube-system'] } }],
      relabel_configs: [
        keep(SERVER_JOB),
        { source_labels: ['__meta_kubernetes_pod_ip'], regex: '(.+)', replacement: '$1:10265', target_label: '__address__' },
        { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'pod' },
      ],
    },
    {
      job_name: AGENT_JOB,
      kubernetes_sd_configs: [{ role: 'pod', namespaces: { names: ['kube-system'] } }],
      relabel_configs: [
        keep(AGENT_JOB),
        { source_labels: ['__meta_kubernetes_pod_node_name'], regex: '(.+)', replacement: '$1:10266', target_label: '__address__' },
        { source_labels: ['__meta_kubernetes_pod_node_name'], target_label: 'node' },
        { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'pod' },
      ],
    },
  ];
}

/** The Operator's PodMonitors: the same targets and labels as scrapeConfigs(). */
export function podMonitors(): object[] {
  const monitor = (name: string, port: number, extra: object[]): object => ({
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PodMonitor',
    metadata: { name, namespace: 'kube-system', labels: { 'k8s-app': name } },
    spec: {
      jobLabel: 'k8s-app',
      selector: { matchLabels: { 'k8s-app': name } },
      podMetricsEndpoints: [
        {
          path: '/metrics',
          relabelings: [
            ...extra,
            {
              sourceLabels: [name === SERVER_JOB ? '__meta_kubernetes_pod_ip' : '__meta_kubernetes_pod_node_name'],
              regex: '(.+)',
              replacement: `$1:${port}`,
              targetLabel: '__address__',
            },
          ],
        },
      ],
    },
  });
  return [monitor(SERVER_JOB, 10265, []), monitor(AGENT_JOB, 10266, [{ sourceLabels: ['__meta_kubernetes_pod_node_name'], targetLabel: 'node' }])];
}

// ---------------------------------------------------------------- files

/** YAML for plain data (maps, lists, strings, numbers, booleans): block style, strings double-quoted as in JSON. */
export function toYaml(value: unknown, indent = ''): string {
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    return value.map((v) => `\n${indent}- ${toYaml(v, indent + '  ').replace(/^\n\s*/, '')}`).join('');
  }
  if (typeof value === 'object' && value !== null) {
    const entries: Array<[string, unknown]> = Object.entries(value);
    if (entries.length === 0) return '{}';
    return entries
      .map(([k, v]) => {
        const inner = toYaml(v, indent + '  ');
        const block = typeof v === 'object' && v !== null && Object.keys(v).length > 0;
        return `\n${indent}${k}:${block ? inner : ` ${inner}`}`;
      })
      .join('');
  }
  return JSON.stringify(value);
}

function yamlDocument(header: string, value: unknown): string {
  return `${header
    .split('\n')
    .map((l) => `# ${l}`.trimEnd())
    .join('\n')}\n${toYaml(value).replace(/^\n/, '')}\n`;
}

const GENERATED = 'Generated by `npm run monitoring` from hack/monitoring.ts: edit that, not this file.';

/** Every derived file of manifests/monitoring/, by name, as the generator writes it. */
export function monitoringFiles(): Map<string, string> {
  const files = new Map<string, string>();
  files.set('rules.yaml', yamlDocument(`yurt-tunnel's recording and alert rules, for Prometheus's rule_files.\n${GENERATED}`, { groups: RULE_GROUPS }));
  files.set(
    'prometheus-rule.yaml',
    yamlDocument(`The rules of rules.yaml as the Prometheus Operator's PrometheusRule.\n${GENERATED}`, {
      apiVersion: 'monitoring.coreos.com/v1',
      kind: 'PrometheusRule',
      metadata: { name: 'yurt-tunnel', namespace: 'kube-system', labels: { 'k8s-app': 'yurt-tunnel' } },
      spec: { groups: RULE_GROUPS },
    }),
  );
  const json = `${JSON.stringify(dashboard(), null, 2)}\n`;
  files.set('dashboard.json', json);
  files.set(
    'dashboard-configmap.yaml',
    yamlDocument(`dashboard.json for Grafana's dashboard sidecar (the grafana_dashboard label).\n${GENERATED}`, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'yurt-tunnel-dashboard', namespace: 'kube-system', labels: { grafana_dashboard: '1' } },
      data: { 'yurt-tunnel.json': json },
    }),
  );
  files.set(
    'pod-monitors.yaml',
    podMonitors()
      .map((m, i) => yamlDocument(i === 0 ? `The Prometheus Operator's scrape targets: the server's and the agents' meta ports.\n${GENERATED}` : GENERATED, m))
      .join('---\n'),
  );
  files.set(
    'scrape-configs.yaml',
    yamlDocument(
      `Scrape jobs for a Prometheus without the Operator: add them to scrape_configs.\n` +
        `Agents are scraped through the tunnel as <node>:10266: Prometheus must resolve node names to\n` +
        `the tunnel server (overlays/dns) or run where the iptables route catches them.\n${GENERATED}`,
      { scrape_configs: scrapeConfigs() },
    ),
  );
  return files;
}
