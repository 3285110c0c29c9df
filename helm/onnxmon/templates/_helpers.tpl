{{/* Names, labels and the few decisions every template shares. */}}

{{- define "onnxmon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "onnxmon.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "onnxmon.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "onnxmon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "onnxmon.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "onnxmon.labels" -}}
helm.sh/chart: {{ include "onnxmon.chart" . }}
{{ include "onnxmon.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: onnxmon
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The Prometheus job of this release: the Service's name (what a ServiceMonitor makes it), or
monitoring.prometheusRule.job when the scrape is configured elsewhere. Every alert selects on it. */}}
{{- define "onnxmon.job" -}}
{{- default (include "onnxmon.fullname" .) .Values.monitoring.prometheusRule.job }}
{{- end }}

{{/* Where runbook_url points: monitoring.prometheusRule.runbookBaseUrl, by default the runbook of
the docs at this chart's version (a tag, never a moving branch). */}}
{{- define "onnxmon.runbookBaseUrl" -}}
{{- default (printf "https://github.com/onnxmon/onnxmon/blob/v%s/docs/runbook.md" .Chart.Version) .Values.monitoring.prometheusRule.runbookBaseUrl }}
{{- end }}

{{/* The runbook URL of one alert: base#anchor, or base + anchor when the base ends in "/"
(one page per alert, the kubernetes-mixin layout). Called with (list $ "anchor"). */}}
{{- define "onnxmon.runbookUrl" -}}
{{- $base := include "onnxmon.runbookBaseUrl" (index . 0) }}
{{- if hasSuffix "/" $base }}{{ $base }}{{ index . 1 }}{{ else }}{{ $base }}#{{ index . 1 }}{{ end }}
{{- end }}

{{/* "true" when a Prometheus Operator object may be rendered. Enabled objects are rendered
unless monitoring.capabilityCheck opts in to skipping them where the cluster does not serve
monitoring.coreos.com/v1 (helm template without --api-versions never does: GitOps pipelines keep
capabilityCheck false). */}}
{{- define "onnxmon.monitoringServed" -}}
{{- if or (not .Values.monitoring.capabilityCheck) (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") }}true{{ end }}
{{- end }}

{{- define "onnxmon.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "onnxmon.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "onnxmon.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The Secret that holds the database URL and the API token: ours or the user's. */}}
{{- define "onnxmon.secretName" -}}
{{- default (include "onnxmon.fullname" .) .Values.existingSecret }}
{{- end }}

{{/* "true" when the database URL comes from a Secret (PostgreSQL), "" for SQLite on the volume. */}}
{{- define "onnxmon.databaseFromSecret" -}}
{{- if .Values.existingSecret }}{{ if .Values.existingSecretKeys.databaseUrl }}true{{ end }}
{{- else if .Values.database.url }}true{{ end }}
{{- end }}

{{/* "true" when the API bearer token comes from a Secret. */}}
{{- define "onnxmon.tokenFromSecret" -}}
{{- if .Values.existingSecret }}{{ if .Values.existingSecretKeys.apiToken }}true{{ end }}
{{- else if .Values.api.token }}true{{ end }}
{{- end }}

{{- define "onnxmon.databaseUrlKey" -}}
{{- if .Values.existingSecret }}{{ .Values.existingSecretKeys.databaseUrl }}{{ else }}database-url{{ end }}
{{- end }}

{{- define "onnxmon.apiTokenKey" -}}
{{- if .Values.existingSecret }}{{ .Values.existingSecretKeys.apiToken }}{{ else }}api-token{{ end }}
{{- end }}

{{- define "onnxmon.claimName" -}}
{{- default (printf "%s-data" (include "onnxmon.fullname" .)) .Values.persistence.existingClaim }}
{{- end }}

{{- define "onnxmon.spoolClaimName" -}}
{{- default (printf "%s-spool" (include "onnxmon.fullname" .)) .Values.spool.persistence.existingClaim }}
{{- end }}

{{/* daemon.mode of the rendered config follows the workload kind and replica count. */}}
{{- define "onnxmon.daemonMode" -}}
{{- if eq .Values.mode "daemonset" }}daemonset
{{- else if gt (int .Values.replicas) 1 }}sharded
{{- else }}single
{{- end }}
{{- end }}

{{/*
Rules the JSON schema cannot see (or that `helm template --skip-schema-validation` would
bypass): each fails the render with a message that names the value to change.
*/}}
{{- define "onnxmon.validate" -}}
{{- if and (eq .Values.mode "deployment") (gt (int .Values.replicas) 1) (not .Values.sharding.enabled) }}
{{- fail (printf "replicas=%d needs sharding.enabled=true: without sharding every replica would run every check (set replicas: 1, or sharding.enabled: true)" (int .Values.replicas)) }}
{{- end }}
{{- if and (eq .Values.mode "deployment") (lt (int .Values.replicas) 1) }}
{{- fail (printf "replicas must be >= 1, got %d" (int .Values.replicas)) }}
{{- end }}
{{- if not (has .Values.mode (list "deployment" "daemonset")) }}
{{- fail (printf "mode must be 'deployment' or 'daemonset', got %q" .Values.mode) }}
{{- end }}
{{- $multi := or (eq .Values.mode "daemonset") (gt (int .Values.replicas) 1) }}
{{- if and $multi (not (include "onnxmon.databaseFromSecret" .)) }}
{{- fail "several pods (mode=daemonset or replicas>1) cannot share a SQLite file: set database.url (PostgreSQL) or existingSecret with existingSecretKeys.databaseUrl" }}
{{- end }}
{{- if and $multi .Values.persistence.enabled (not .Values.persistence.existingClaim) (not (has "ReadWriteMany" .Values.persistence.accessModes)) (not (has "ReadOnlyMany" .Values.persistence.accessModes)) }}
{{- fail "several pods (mode=daemonset or replicas>1) mount the same volume: set persistence.accessModes to [ReadWriteMany] or use persistence.existingClaim" }}
{{- end }}
{{- if and $multi .Values.spool.persistence.enabled }}
{{- fail "several pods (mode=daemonset or replicas>1) cannot share one spool claim (each would write back the others' results): leave spool.persistence.enabled false (an emptyDir per pod)" }}
{{- end }}
{{- if and (not .Values.persistence.enabled) (not (include "onnxmon.databaseFromSecret" .)) }}
{{- fail "persistence.enabled=false leaves nowhere to keep the SQLite file (the root filesystem is read-only): enable persistence or set database.url / existingSecret" }}
{{- end }}
{{- end }}

{{/* The onnxmon YAML: .Values.config with what the pod layout dictates forced in. */}}
{{- define "onnxmon.config" -}}
{{- $config := deepCopy (default dict .Values.config) }}
{{- $api := default dict (get $config "api") }}
{{- $_ := set $api "host" "0.0.0.0" }}
{{- $_ := set $api "port" (int .Values.api.port) }}
{{- /* the token never sits in a ConfigMap: it comes from the Secret via ONNXMON_API__TOKEN_FILE */}}
{{- $_ := unset $api "token" }}
{{- $_ := set $config "api" $api }}
{{- $daemon := default dict (get $config "daemon") }}
{{- $_ := set $daemon "mode" (include "onnxmon.daemonMode" .) }}
{{- $_ := set $config "daemon" $daemon }}
{{- $store := default dict (get $config "store") }}
{{- $data := .Values.persistence.mountPath }}
{{- if not (hasKey $store "baselines_dir") }}{{ $_ := set $store "baselines_dir" (printf "%s/baselines" $data) }}{{ end }}
{{- if not (hasKey $store "spool_dir") }}{{ $_ := set $store "spool_dir" .Values.spool.mountPath }}{{ end }}
{{- if not (hasKey $store "benchsets_dir") }}{{ $_ := set $store "benchsets_dir" (printf "%s/benchsets" $data) }}{{ end }}
{{- if include "onnxmon.databaseFromSecret" . }}
{{- $_ := unset $store "url" }}
{{- else }}
{{- $_ := set $store "url" (printf "sqlite:///%s/%s" $data .Values.database.sqliteFile) }}
{{- end }}
{{- $_ := set $config "store" $store }}
{{- toYaml $config }}
{{- end }}
