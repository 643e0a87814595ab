{{/* A duration of the values ("500ms", "1s", "2m", "1h": the schema's "duration") in seconds,
     as the enricher's _SECONDS settings take it. */}}
{{- define "headwater.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "ms" $d -}}{{ divf (trimSuffix "ms" $d) 1000 }}
{{- else if hasSuffix "s" $d -}}{{ trimSuffix "s" $d }}
{{- else if hasSuffix "m" $d -}}{{ mulf (trimSuffix "m" $d) 60 }}
{{- else -}}{{ mulf (trimSuffix "h" $d) 3600 }}
{{- end -}}
{{- end -}}

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
