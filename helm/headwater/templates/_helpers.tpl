{{/* Chart name. */}}
{{- define "headwater.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name, the prefix of every resource (63 characters at most). */}}
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

{{/* Chart name and version, for the helm.sh/chart label (never in selectors). */}}
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

{{/* Selector labels: stable across upgrades, so never the chart or app version. */}}
{{- define "headwater.selectorLabels" -}}
app.kubernetes.io/name: {{ include "headwater.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Per-component labels: include with (dict "root" $ "component" "ingest"). */}}
{{- define "headwater.componentLabels" -}}
{{ include "headwater.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "headwater.componentSelectorLabels" -}}
{{ include "headwater.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "headwater.ingest.labels" -}}
{{ include "headwater.componentLabels" (dict "root" . "component" "ingest") }}
{{- end -}}

{{- define "headwater.ingest.selectorLabels" -}}
{{ include "headwater.componentSelectorLabels" (dict "root" . "component" "ingest") }}
{{- end -}}

{{- define "headwater.enricher.labels" -}}
{{ include "headwater.componentLabels" (dict "root" . "component" "enricher") }}
{{- end -}}

{{- define "headwater.enricher.selectorLabels" -}}
{{ include "headwater.componentSelectorLabels" (dict "root" . "component" "enricher") }}
{{- end -}}

{{- define "headwater.ingest.fullname" -}}
{{- printf "%s-ingest" (include "headwater.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "headwater.enricher.fullname" -}}
{{- printf "%s-enricher" (include "headwater.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Images: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "headwater.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "headwater.enricher.image" -}}
{{- printf "%s:%s" .Values.enricher.image.repository (default .Chart.AppVersion .Values.enricher.image.tag) -}}
{{- end -}}

{{- define "headwater.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "headwater.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "headwater.enricher.serviceAccountName" -}}
{{- default (printf "%s-spark" (include "headwater.fullname" .)) .Values.enricher.serviceAccount.name -}}
{{- end -}}

{{/* The Secret with tokens.yaml: the user's, or the one the chart renders from values. */}}
{{- define "headwater.ingest.tokensSecret" -}}
{{- default (printf "%s-gateways" (include "headwater.fullname" .)) .Values.ingest.auth.existingSecret -}}
{{- end -}}

{{- define "headwater.enricher.checkpointClaim" -}}
{{- default (printf "%s-checkpoint" (include "headwater.enricher.fullname" .)) .Values.enricher.checkpointVolume.existingClaim -}}
{{- end -}}

{{/* Longer than preStop sleep plus drain grace, so the process always drains itself. */}}
{{- define "headwater.ingest.terminationGrace" -}}
{{- add .Values.ingest.preStopSleepSeconds .Values.ingest.drainGraceSeconds 10 -}}
{{- end -}}

{{/*
Kafka connection settings that are not plain configuration: the broker CA file, the client
certificate and key (mTLS) and the SASL password, which live in Secrets. Rendered as an EnvVar list for every Kafka client.
*/}}
{{- define "headwater.kafka.secretEnv" -}}
{{- $env := list -}}
{{- with .Values.kafka.tls.caSecret -}}
{{- $file := printf "/etc/headwater/kafka-ca/%s" $.Values.kafka.tls.caKey -}}
{{- $env = append $env (dict "name" "HEADWATER_KAFKA_SSL_CA_LOCATION" "value" $file) -}}
{{- end -}}
{{- with .Values.kafka.tls.clientSecret -}}
{{- $dir := "/etc/headwater/kafka-client" -}}
{{- $env = append $env (dict "name" "HEADWATER_KAFKA_SSL_CERTIFICATE_LOCATION" "value" (printf "%s/%s" $dir $.Values.kafka.tls.clientCertKey)) -}}
{{- $env = append $env (dict "name" "HEADWATER_KAFKA_SSL_KEY_LOCATION" "value" (printf "%s/%s" $dir $.Values.kafka.tls.clientKeyKey)) -}}
{{- end -}}
{{- with .Values.kafka.sasl.passwordSecret -}}
{{- $ref := dict "secretKeyRef" (dict "name" . "key" $.Values.kafka.sasl.passwordKey) -}}
{{- $env = append $env (dict "name" "HEADWATER_KAFKA_SASL_PASSWORD" "valueFrom" $ref) -}}
{{- end -}}
{{- if $env }}{{ toYaml $env }}{{ end -}}
{{- end -}}

{{/* Plain Kafka client configuration shared by every component (ConfigMap data or env). */}}
{{- define "headwater.kafka.config" -}}
HEADWATER_KAFKA_BOOTSTRAP_SERVERS: {{ .Values.kafka.bootstrapServers | quote }}
HEADWATER_KAFKA_SECURITY_PROTOCOL: {{ .Values.kafka.securityProtocol | quote }}
{{- with .Values.kafka.sasl.mechanism }}
HEADWATER_KAFKA_SASL_MECHANISM: {{ . | quote }}
HEADWATER_KAFKA_SASL_USERNAME: {{ $.Values.kafka.sasl.username | quote }}
{{- end }}
{{- end -}}

{{/* "true" when Kafka clients need files from Secrets (the CA, a client certificate). */}}
{{- define "headwater.kafka.hasFiles" -}}
{{- if or .Values.kafka.tls.caSecret .Values.kafka.tls.clientSecret }}true{{ end -}}
{{- end -}}

{{/* Volumes and mounts of the Kafka broker CA and the client certificate, when configured. */}}
{{- define "headwater.kafka.caVolume" -}}
{{- $volumes := list -}}
{{- with .Values.kafka.tls.caSecret -}}
{{- $volumes = append $volumes (dict "name" "kafka-ca" "secret" (dict "secretName" .)) -}}
{{- end -}}
{{- with .Values.kafka.tls.clientSecret -}}
{{- $volumes = append $volumes (dict "name" "kafka-client" "secret" (dict "secretName" .)) -}}
{{- end -}}
{{- if $volumes }}{{ toYaml $volumes }}{{ end -}}
{{- end -}}

{{- define "headwater.kafka.caVolumeMount" -}}
{{- $mounts := list -}}
{{- if .Values.kafka.tls.caSecret -}}
{{- $mounts = append $mounts (dict "name" "kafka-ca" "mountPath" "/etc/headwater/kafka-ca" "readOnly" true) -}}
{{- end -}}
{{- if .Values.kafka.tls.clientSecret -}}
{{- $mounts = append $mounts (dict "name" "kafka-client" "mountPath" "/etc/headwater/kafka-client" "readOnly" true) -}}
{{- end -}}
{{- if $mounts }}{{ toYaml $mounts }}{{ end -}}
{{- end -}}

{{/* Refuse combinations that would install but never work. */}}
{{- define "headwater.validate" -}}
{{- if and .Values.ingest.tls.mtls (not .Values.ingest.tls.secretName) -}}
{{- fail "ingest.tls.mtls needs ingest.tls.secretName (a Secret with tls.crt, tls.key and ca.crt)" -}}
{{- end -}}
{{- if and .Values.ingest.auth.existingSecret .Values.ingest.auth.gateways -}}
{{- fail "set either ingest.auth.existingSecret or ingest.auth.gateways, not both" -}}
{{- end -}}
{{- if and .Values.kafka.sasl.mechanism (not .Values.kafka.sasl.passwordSecret) -}}
{{- fail "kafka.sasl.mechanism needs kafka.sasl.passwordSecret" -}}
{{- end -}}
{{- if and .Values.kafka.tls.clientSecret (not (has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL"))) -}}
{{- fail "kafka.tls.clientSecret (mTLS) needs kafka.securityProtocol SSL or SASL_SSL" -}}
{{- end -}}
{{- if and .Values.kafka.sasl.mechanism (not (hasPrefix "SASL_" .Values.kafka.securityProtocol)) -}}
{{- fail "kafka.sasl.mechanism needs kafka.securityProtocol SASL_PLAINTEXT or SASL_SSL" -}}
{{- end -}}
{{- if and .Values.topics.strimzi.enabled .Values.topics.hook.enabled -}}
{{- fail "topics are provisioned either by Strimzi (topics.strimzi.enabled) or by the hook Job (topics.hook.enabled): disable one" -}}
{{- end -}}
{{- if gt (int .Values.topics.minInSyncReplicas) (int .Values.topics.replicationFactor) -}}
{{- fail "topics.minInSyncReplicas cannot exceed topics.replicationFactor: every acks=all write would fail" -}}
{{- end -}}
{{- if and .Values.enricher.enabled (hasPrefix "/checkpoint" .Values.enricher.checkpointLocation) (not .Values.enricher.checkpointVolume.enabled) -}}
{{- fail "enricher.checkpointLocation is under /checkpoint but enricher.checkpointVolume.enabled is false: use an object store URL or enable the volume" -}}
{{- end -}}
{{- if and .Values.ingest.autoscaling.enabled (gt (int .Values.ingest.autoscaling.minReplicas) (int .Values.ingest.autoscaling.maxReplicas)) -}}
{{- fail "ingest.autoscaling.minReplicas cannot exceed maxReplicas" -}}
{{- end -}}
{{- end -}}
