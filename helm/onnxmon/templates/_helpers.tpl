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

{{- define "onnxmon.chartLabels" -}}
helm.sh/chart: {{ include "onnxmon.chart" . }}
{{ include "onnxmon.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: onnxmon
{{- end }}

{{/* The keys of onnxmon.chartLabels plus the component: values that set one are refused
(onnxmon.validate), since the Service, the monitors, the NetworkPolicy and the PodDisruptionBudget
select on them. */}}
{{- define "onnxmon.reservedLabels" -}}
{{- toJson (list "helm.sh/chart" "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "app.kubernetes.io/part-of" "app.kubernetes.io/component") }}
{{- end }}

{{/* An object's labels, each key once: commonLabels, the object's own over them (called with
(list $ own)), and the chart's. Appending the maps one after another wrote a key twice when two of
them named it (a duplicate key: malformed YAML, the last one wins or the apply fails). */}}
{{- define "onnxmon.labelsWith" -}}
{{- $root := index . 0 }}
{{- $labels := deepCopy (default dict $root.Values.commonLabels) }}
{{- range $key, $value := (default dict (index . 1)) }}{{ $_ := set $labels $key $value }}{{ end }}
{{- range $key, $value := (include "onnxmon.chartLabels" $root | fromYaml) }}{{ $_ := set $labels $key $value }}{{ end }}
{{- toYaml $labels }}
{{- end }}

{{- define "onnxmon.labels" -}}
{{- include "onnxmon.labelsWith" (list . dict) }}
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

{{/* The namespace of every namespaced object: namespaceOverride, else the release's. */}}
{{- define "onnxmon.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* An object's annotations block: commonAnnotations under the object's own (which win), or
nothing. Called with (list $ ownAnnotations); prints "\nannotations:\n  k: v" so a template writes
{{- include "onnxmon.annotations" (list . $own) | replace "\n" "\n  " }} under metadata. */}}
{{- define "onnxmon.annotations" -}}
{{- $all := merge (deepCopy (default dict (index . 1))) (deepCopy (default dict (index . 0).Values.commonAnnotations)) }}
{{- with $all }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The image reference. The registry is global.imageRegistry (an umbrella chart's mirror), else
image.registry; when one is set it replaces the registry host image.repository names (its first
component, when that has a "." or ":" or is "localhost", Docker's rule) and keeps the path, so
ghcr.io/onnxmon/onnxmon becomes mirror.example/onnxmon/onnxmon. Neither set: the repository as
it is. */}}
{{- define "onnxmon.image" -}}
{{- include "onnxmon.imageOf" (list . .Values.image) }}
{{- end }}

{{/* The reference of an image given as (list $ {registry, repository, tag, digest}); global.imageRegistry wins. */}}
{{- define "onnxmon.imageOf" -}}
{{- $root := index . 0 }}
{{- $image := index . 1 }}
{{- $tag := default $root.Chart.AppVersion $image.tag }}
{{- $global := default dict $root.Values.global }}
{{- $registry := default $image.registry (get $global "imageRegistry") | trimSuffix "/" }}
{{- $repository := $image.repository }}
{{- if $registry }}
{{- $parts := splitList "/" $repository }}
{{- $host := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $host) (contains ":" $host) (eq $host "localhost")) }}
{{- $repository = join "/" (rest $parts) }}
{{- end }}
{{- $repository = printf "%s/%s" $registry $repository }}
{{- end }}
{{- if $image.digest }}
{{- printf "%s@%s" $repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{/* Seconds (a float) from an onnxmon duration: 600, "90s", "15m", "1h", "7d", "500ms"
(monitor/config/fields.py parse_duration). */}}
{{- define "onnxmon.seconds" -}}
{{- $text := trim (toString .) }}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?\\s*(ms|s|m|h|d)?$" $text) }}
{{- fail (printf "cannot read the duration %q in config (expected 600, \"90s\", \"15m\", \"1h\" or \"7d\")" $text) }}
{{- end }}
{{- $number := float64 (regexFind "^[0-9]+(\\.[0-9]+)?" $text) }}
{{- $unit := trim (regexReplaceAll "^[0-9]+(\\.[0-9]+)?" $text "") }}
{{- mulf $number (get (dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 "d" 86400.0 "" 1.0) $unit) }}
{{- end }}

{{/*
How long SIGTERM may take, in whole seconds: the running check finishes or hits its timeout (the
longest of config.defaults.timeout and every model's timeout: checks run in parallel), then, with
daemon.diagnose_on_fail, its diagnosis runs up to daemon.diagnose_budget, then the result is
written within store.write_timeout (else spooled). Keys left out take onnxmon's own defaults
(monitor/config/schema.py; tests/test_helm_platform.py keeps these numbers equal to them).
ONNXMON_* overrides in extraEnv are not seen here.
*/}}
{{- define "onnxmon.stopSeconds" -}}
{{- $config := default dict .Values.config }}
{{- $defaults := default dict (get $config "defaults") }}
{{- $daemon := default dict (get $config "daemon") }}
{{- $store := default dict (get $config "store") }}
{{- $timeout := 600.0 }}
{{- if not (kindIs "invalid" (index $defaults "timeout")) }}{{ $timeout = float64 (include "onnxmon.seconds" (index $defaults "timeout")) }}{{ end }}
{{- $longest := $timeout }}
{{- range $model := (default list (get $config "models")) }}
{{- if and (kindIs "map" $model) (not (kindIs "invalid" (index $model "timeout"))) }}
{{- $longest = maxf $longest (float64 (include "onnxmon.seconds" (index $model "timeout"))) }}
{{- end }}
{{- end }}
{{- $budget := 0.0 }}
{{- if eq (toString (index $daemon "diagnose_on_fail")) "true" }}
{{- $budget = 120.0 }}
{{- if not (kindIs "invalid" (index $daemon "diagnose_budget")) }}{{ $budget = float64 (include "onnxmon.seconds" (index $daemon "diagnose_budget")) }}{{ end }}
{{- end }}
{{- $write := 10.0 }}
{{- if not (kindIs "invalid" (index $store "write_timeout")) }}{{ $write = float64 (include "onnxmon.seconds" (index $store "write_timeout")) }}{{ end }}
{{- int (ceil (addf $longest $budget $write)) }}
{{- end }}

{{/* terminationGracePeriodSeconds: the value given, refused when shorter than onnxmon.stopSeconds
(the kubelet would SIGKILL a check in flight and lose its result); empty (null), that plus 50 s for
the spool, closing the store and the process exit. */}}
{{- define "onnxmon.terminationGracePeriodSeconds" -}}
{{- $stop := int (include "onnxmon.stopSeconds" .) }}
{{- $given := .Values.terminationGracePeriodSeconds }}
{{- if kindIs "invalid" $given }}
{{- add $stop 50 }}
{{- else if lt (int $given) $stop }}
{{- fail (printf "terminationGracePeriodSeconds=%d is shorter than a stop can take: %ds (the longest check timeout, + daemon.diagnose_budget when daemon.diagnose_on_fail, + store.write_timeout); the kubelet would kill the check in flight and lose its result. Set it to at least %d, or leave it empty (null) for the chart to derive %d" (int $given) $stop $stop (add $stop 50)) }}
{{- else }}
{{- int $given }}
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
{{- /* a token the daemon would never see is refused, never dropped: mutating calls would answer 401 or 503 */}}
{{- if (get (default dict (get (default dict .Values.config) "api")) "token") }}
{{- fail "config.api.token does not reach the daemon: the chart keeps the token out of the rendered config (a ConfigMap anyone who reads ConfigMaps can read); move it to api.token (kept in the chart's Secret) or to existingSecret under existingSecretKeys.apiToken" }}
{{- end }}
{{- if and .Values.existingSecret .Values.api.token }}
{{- if .Values.existingSecretKeys.apiToken }}
{{- fail (printf "api.token is not used with existingSecret (the chart creates no Secret; the daemon reads key %q of Secret %q): put the token there and leave api.token empty" .Values.existingSecretKeys.apiToken .Values.existingSecret) }}
{{- else }}
{{- fail (printf "api.token is not used with existingSecret %q, and existingSecretKeys.apiToken is empty: put the token in that Secret and name its key in existingSecretKeys.apiToken, and leave api.token empty" .Values.existingSecret) }}
{{- end }}
{{- end }}
{{- if and (not .Values.persistence.enabled) (not (include "onnxmon.databaseFromSecret" .)) }}
{{- fail "persistence.enabled=false leaves nowhere to keep the SQLite file (the root filesystem is read-only): enable persistence or set database.url / existingSecret" }}
{{- end }}
{{- $strategy := default dict .Values.updateStrategy }}
{{- with $strategy.type }}
{{- $kinds := ternary (list "RollingUpdate" "OnDelete") (list "Recreate" "RollingUpdate") (eq $.Values.mode "daemonset") }}
{{- if not (has . $kinds) }}
{{- fail (printf "updateStrategy.type %q does not apply to mode=%s: use one of %s" . $.Values.mode (join ", " $kinds)) }}
{{- end }}
{{- end }}
{{- if and $strategy.rollingUpdate (ne (toString (default "RollingUpdate" $strategy.type)) "RollingUpdate") }}
{{- fail (printf "updateStrategy.rollingUpdate applies only to type RollingUpdate, not %s" $strategy.type) }}
{{- end }}
{{- with $strategy.rollingUpdate }}
{{- if and (hasKey . "maxSurge") (ne (toString .maxSurge) "0") (ne (toString .maxSurge) "0%") }}
{{- fail (printf "updateStrategy.rollingUpdate.maxSurge=%v would run a new pod beside the old one: two monitors running the same checks (and, on a node, holding GPU memory twice); keep it 0 and use maxUnavailable" .maxSurge) }}
{{- end }}
{{- end }}
{{- with $strategy.rollingUpdate }}
{{- if and (hasKey . "maxUnavailable") (regexMatch "^0+%?$" (toString .maxUnavailable)) }}
{{- fail "updateStrategy.rollingUpdate.maxUnavailable=0 with maxSurge 0 never replaces a pod: use 1, a percentage such as 10%, or type OnDelete" }}
{{- end }}
{{- end }}
{{- if and .Values.gpu.shared (not .Values.gpu.enabled) }}
{{- fail "gpu.shared=true needs gpu.enabled=true (shared: see the node's GPUs without requesting one; enabled=false: no GPU at all)" }}
{{- end }}
{{- /* shared requests nothing: a MIG slice, a time-sliced replica or a count given with it would be
silently dropped, and the pod would share whole GPUs instead of getting the slice asked for */}}
{{- if and .Values.gpu.enabled .Values.gpu.shared }}
{{- if or (ne .Values.gpu.resourceName "nvidia.com/gpu") (ne (int .Values.gpu.count) 1) }}
{{- fail (printf "gpu.shared=true requests no GPU, so gpu.resourceName=%s and gpu.count=%d would be ignored: for a MIG slice or a time-sliced replica set gpu.shared=false (the pod requests it), or leave resourceName and count at their defaults" .Values.gpu.resourceName (int .Values.gpu.count)) }}
{{- end }}
{{- range $kind := list "limits" "requests" }}
{{- range $name, $_ := (default dict (index (default dict $.Values.resources) $kind)) }}
{{- if hasPrefix "nvidia.com/" $name }}
{{- fail (printf "gpu.shared=true requests no GPU, but resources.%s names %s: remove it, or set gpu.shared=false with gpu.resourceName" $kind $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $reserved := include "onnxmon.reservedLabels" . | fromJsonArray }}
{{- $m := .Values.monitoring }}
{{- range $source := list (list "commonLabels" .Values.commonLabels) (list "podLabels" .Values.podLabels) (list "service.labels" .Values.service.labels) (list "ingress.labels" .Values.ingress.labels) (list "monitoring.serviceMonitor.labels" $m.serviceMonitor.labels) (list "monitoring.podMonitor.labels" $m.podMonitor.labels) (list "monitoring.prometheusRule.labels" $m.prometheusRule.labels) (list "monitoring.grafanaDashboard.labels" $m.grafanaDashboard.labels) }}
{{- range $key, $_ := (default dict (index $source 1)) }}
{{- if has $key $reserved }}
{{- fail (printf "%s sets %s, a label the chart sets itself (the Service, the monitors, the NetworkPolicy and the PodDisruptionBudget select on app.kubernetes.io/name, instance and component): use a key of your own" (index $source 0) $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.monitoring.serviceMonitor.enabled .Values.monitoring.podMonitor.enabled }}
{{- fail "monitoring.serviceMonitor.enabled and monitoring.podMonitor.enabled are both true: every pod would be scraped twice (duplicate series); enable one" }}
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

{{/* The workload's update strategy (spec.updateStrategy of the DaemonSet, spec.strategy of the
Deployment). Default: a DaemonSet replaces one node's pod at a time, a Deployment is Recreate (two
pods must never hold the same GPU checks or the SQLite file at once). A RollingUpdate never surges:
maxSurge is always 0, maxUnavailable defaults to 1. */}}
{{- define "onnxmon.updateStrategy" -}}
{{- $strategy := default dict .Values.updateStrategy }}
{{- $type := default (ternary "RollingUpdate" "Recreate" (eq .Values.mode "daemonset")) $strategy.type }}
type: {{ $type }}
{{- if eq $type "RollingUpdate" }}
{{- $rolling := default dict $strategy.rollingUpdate }}
rollingUpdate:
  maxUnavailable: {{ ternary 1 $rolling.maxUnavailable (kindIs "invalid" $rolling.maxUnavailable) }}
  maxSurge: 0
{{- end }}
{{- end }}
