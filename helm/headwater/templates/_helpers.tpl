{{/* Chart name. */}}
{{- define "headwater.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name, used as the prefix of every resource. */}}
{{- define "headwater.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "headwater.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "headwater.labels" -}}
helm.sh/chart: {{ include "headwater.chart" . }}
{{ include "headwater.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: headwater
{{- end -}}

{{/* Selector labels: stable across upgrades, never the chart version. */}}
{{- define "headwater.selectorLabels" -}}
app.kubernetes.io/name: {{ include "headwater.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "headwater.ingest.selectorLabels" -}}
{{ include "headwater.selectorLabels" . }}
app.kubernetes.io/component: ingest
{{- end -}}

{{- define "headwater.ingest.labels" -}}
{{ include "headwater.labels" . }}
app.kubernetes.io/component: ingest
{{- end -}}

{{- define "headwater.enricher.labels" -}}
{{ include "headwater.labels" . }}
app.kubernetes.io/component: enricher
{{- end -}}

{{- define "headwater.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "headwater.enricher.image" -}}
{{- printf "%s:%s" .Values.enricher.image.repository (default .Chart.AppVersion .Values.enricher.image.tag) -}}
{{- end -}}

{{- define "headwater.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ include "headwater.fullname" . }}{{- else -}}default{{- end -}}
{{- end -}}

{{/* The ingest pod's termination grace: the drain grace plus the preStop sleep plus slack. */}}
{{- define "headwater.ingest.terminationGrace" -}}
{{- add .Values.ingest.drainGraceSeconds .Values.ingest.preStopSleepSeconds 10 -}}
{{- end -}}
