{{/*
The pod's name, namespace and node from the downward API. Processes turn them into the
OpenTelemetry resource (service.instance.id = the pod name; k8s.pod.name,
k8s.namespace.name, k8s.node.name) and the pod name into their Kafka client.id.
First in the env list, so extraEnv entries can refer to them as $(POD_NAME).
*/}}
{{- define "headwater.downwardEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
{{- end -}}
