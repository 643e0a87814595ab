{{/*
The operator-free enricher (enricher.runner=sparkSubmit): Spark's own pod templates for the
driver and the executors, with what the SparkApplication gives them (settings, Kafka
secrets, checkpoint, security, placement). The driver's template names its owner, the
submitter pod, with placeholders the submitter fills in (its name and uid come from the
downward API): deleting the Job deletes the driver, and the driver owns its executors.
*/}}
{{- define "headwater.enricher.podTemplate" -}}
{{- $root := .root -}}
{{- $e := $root.Values.enricher -}}
{{- $env := include "headwater.kafka.secretEnv" $root | fromYamlArray | concat $e.extraEnv | concat (include "headwater.downwardEnv" $root | fromYamlArray) -}}
apiVersion: v1
kind: Pod
metadata:
  labels:
    {{- include "headwater.enricher.labels" $root | nindent 4 }}
  {{- if eq .role "driver" }}
  ownerReferences:
    - apiVersion: v1
      kind: Pod
      name: "@SUBMITTER_NAME@"
      uid: "@SUBMITTER_UID@"
  {{- end }}
spec:
  securityContext:
    {{- toYaml $e.podSecurityContext | nindent 4 }}
  {{- with $e.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $e.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if or $e.checkpointVolume.enabled (include "headwater.kafka.hasFiles" $root) }}
  volumes:
    {{- if $e.checkpointVolume.enabled }}
    - name: checkpoint
      persistentVolumeClaim:
        claimName: {{ include "headwater.enricher.checkpointClaim" $root }}
    {{- end }}
    {{- with include "headwater.kafka.caVolume" $root }}{{ . | nindent 4 }}{{- end }}
  {{- end }}
  containers:
    - name: {{ .role }}
      envFrom:
        - configMapRef:
            name: {{ include "headwater.enricher.fullname" $root }}
      {{- with $env }}
      env:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $e.securityContext | nindent 8 }}
      {{- if eq .role "driver" }}
      ports:
        - {name: metrics, containerPort: {{ $e.metrics.port }}, protocol: TCP}
      {{- end }}
      {{- if or $e.checkpointVolume.enabled (include "headwater.kafka.hasFiles" $root) }}
      volumeMounts:
        {{- if $e.checkpointVolume.enabled }}
        - {name: checkpoint, mountPath: /checkpoint}
        {{- end }}
        {{- with include "headwater.kafka.caVolumeMount" $root }}{{ . | nindent 8 }}{{- end }}
      {{- end }}
{{- end -}}

{{/* spark-submit's settings: the same driver and executor settings as the SparkApplication. */}}
{{- define "headwater.enricher.submitConf" -}}
{{- $e := .Values.enricher -}}
{{- $conf := dict
  "spark.kubernetes.namespace" .Release.Namespace
  "spark.kubernetes.container.image" (include "headwater.enricher.image" .)
  "spark.kubernetes.container.image.pullPolicy" $e.image.pullPolicy
  "spark.kubernetes.authenticate.driver.serviceAccountName" (include "headwater.enricher.serviceAccountName" .)
  "spark.kubernetes.driver.podTemplateFile" "/tmp/driver.yaml"
  "spark.kubernetes.driver.podTemplateContainerName" "driver"
  "spark.kubernetes.executor.podTemplateFile" "/opt/headwater/pod-templates/executor.yaml"
  "spark.kubernetes.executor.podTemplateContainerName" "executor"
  "spark.kubernetes.submission.waitAppCompletion" "true"
  "spark.driver.cores" ($e.driver.cores | toString)
  "spark.driver.memory" $e.driver.memory
  "spark.driver.memoryOverhead" $e.driver.memoryOverhead
  "spark.executor.instances" ($e.executor.instances | toString)
  "spark.executor.cores" ($e.executor.cores | toString)
  "spark.executor.memory" $e.executor.memory
  "spark.executor.memoryOverhead" $e.executor.memoryOverhead
-}}
{{- with .Values.imagePullSecrets }}
{{- $_ := set $conf "spark.kubernetes.container.image.pullSecrets" (join "," (pluck "name" .)) }}
{{- end }}
{{- range $k, $v := $e.hadoopConf }}
{{- $_ := set $conf (printf "spark.hadoop.%s" $k) ($v | toString) }}
{{- end }}
{{- range $k, $v := $e.sparkConf }}
{{- $_ := set $conf $k ($v | toString) }}
{{- end }}
{{- range $k := keys $conf | sortAlpha }}
- --conf
- {{ printf "%s=%s" $k (get $conf $k) | quote }}
{{- end }}
{{- end -}}
