{{/* What the driver and the executors share: settings, Kafka secrets, checkpoint, security. */}}
{{- define "headwater.enricher.podCommon" -}}
{{- $e := .Values.enricher -}}
labels:
  {{- include "headwater.enricher.labels" . | nindent 2 }}
envFrom:
  - configMapRef:
      name: {{ include "headwater.enricher.fullname" . }}
{{- $env := include "headwater.kafka.secretEnv" . | fromYamlArray | concat $e.extraEnv | concat (include "headwater.downwardEnv" . | fromYamlArray) }}
{{- with $env }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
podSecurityContext:
  {{- toYaml $e.podSecurityContext | nindent 2 }}
securityContext:
  {{- toYaml $e.securityContext | nindent 2 }}
{{- if or $e.checkpointVolume.enabled (include "headwater.kafka.hasFiles" .) }}
volumeMounts:
  {{- if $e.checkpointVolume.enabled }}
  - {name: checkpoint, mountPath: /checkpoint}
  {{- end }}
  {{- with include "headwater.kafka.caVolumeMount" . }}{{ . | nindent 2 }}{{- end }}
{{- end }}
{{- with $e.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $e.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
