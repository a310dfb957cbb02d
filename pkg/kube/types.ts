// The Kubernetes object types other rooms may name, so that only pkg/kube
// imports @kubernetes/client-node.

export type { V1ConfigMap, V1Node, V1Pod, V1Service, V1ServicePort } from '@kubernetes/client-node';
