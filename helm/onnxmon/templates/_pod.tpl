{{/* The pod template shared by the Deployment and the DaemonSet. */}}
{{- define "onnxmon.containerEnv" -}}
- name: ONNXMON_CONFIG
  value: /etc/onnxmon/onnxmon.yaml
- name: ONNXMON_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: HOME
  value: /home/onnxmon
- name: XDG_CACHE_HOME
  value: /home/onnxmon/.cache
{{- with .Values.image.digest }}
- name: ONNXMON_IMAGE_DIGEST
  value: {{ . | quote }}
{{- end }}
{{- if include "onnxmon.databaseFromSecret" . }}
{{- /* the URL (with its password) is a mounted file, never an environment variable (store.url_file) */}}
- name: ONNXMON_STORE__URL_FILE
  value: {{ printf "%s/database-url" .Values.database.urlMountPath }}
{{- end }}
{{- if include "onnxmon.tokenFromSecret" . }}
- name: ONNXMON_API__TOKEN_FILE
  value: {{ printf "%s/api-token" .Values.api.tokenMountPath }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* gpu.shared, the monitor container only: the NVIDIA container runtime exposes the node's GPUs
without a device-plugin request (as dcgm-exporter does); an extraEnv entry of the same name wins. */}}
{{- define "onnxmon.gpuEnv" -}}
{{- if and .Values.gpu.enabled .Values.gpu.shared }}
{{- $own := list }}
{{- range .Values.extraEnv }}{{ $own = append $own .name }}{{ end }}
{{- if not (has "NVIDIA_VISIBLE_DEVICES" $own) }}
- name: NVIDIA_VISIBLE_DEVICES
  value: all
{{- end }}
{{- if not (has "NVIDIA_DRIVER_CAPABILITIES" $own) }}
- name: NVIDIA_DRIVER_CAPABILITIES
  value: compute,utility
{{- end }}
{{- end }}
{{- end }}

{{- define "onnxmon.volumeMounts" -}}
- name: config
  mountPath: /etc/onnxmon
  readOnly: true
- name: data
  mountPath: {{ .Values.persistence.mountPath }}
- name: spool
  mountPath: {{ .Values.spool.mountPath }}
- name: tmp
  mountPath: /tmp
- name: home
  mountPath: /home/onnxmon
{{- if include "onnxmon.tokenFromSecret" . }}
- name: api-token
  mountPath: {{ .Values.api.tokenMountPath }}
  readOnly: true
{{- end }}
{{- if include "onnxmon.databaseFromSecret" . }}
- name: database-url
  mountPath: {{ .Values.database.urlMountPath }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The restricted container securityContext (as a YAML mapping). runAsUser/runAsGroup follow
podSecurityContext (left out where that is null: OpenShift assigns them); each key of
.Values.securityContext replaces the chart's, and a key set to null removes it. */}}
{{- define "onnxmon.containerSecurityContext" -}}
{{- $context := dict "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "runAsNonRoot" true "capabilities" (dict "drop" (list "ALL")) "seccompProfile" (dict "type" "RuntimeDefault") }}
{{- $pod := default dict .Values.podSecurityContext }}
{{- range $key := list "runAsUser" "runAsGroup" }}
{{- if not (kindIs "invalid" (index $pod $key)) }}{{ $_ := set $context $key (int (index $pod $key)) }}{{ end }}
{{- end }}
{{- range $key, $value := (default dict .Values.securityContext) }}
{{- if kindIs "invalid" $value }}{{ $_ := unset $context $key }}{{ else }}{{ $_ := set $context $key $value }}{{ end }}
{{- end }}
{{- toYaml $context }}
{{- end }}

{{/* An extra (init) container as given, with the monitor's securityContext unless it sets its own. */}}
{{- define "onnxmon.extraContainer" -}}
{{- $container := deepCopy (index . 1) }}
{{- if not (hasKey $container "securityContext") }}
{{- $_ := set $container "securityContext" (include "onnxmon.containerSecurityContext" (index . 0) | fromYaml) }}
{{- end }}
{{- toYaml $container }}
{{- end }}

{{- define "onnxmon.podTemplate" -}}
metadata:
  labels:
    {{- /* commonLabels, podLabels over them, the selector's: each key once */}}
    {{- $labels := deepCopy (default dict .Values.commonLabels) }}
    {{- range $key, $value := (default dict .Values.podLabels) }}{{ $_ := set $labels $key $value }}{{ end }}
    {{- range $key, $value := (include "onnxmon.selectorLabels" . | fromYaml) }}{{ $_ := set $labels $key $value }}{{ end }}
    {{- $_ := set $labels "app.kubernetes.io/component" "monitor" }}
    {{- toYaml $labels | nindent 4 }}
  annotations:
    {{- /* the config's checksum (a changed config restarts the pods) over podAnnotations: each key once */}}
    {{- $annotations := deepCopy (default dict .Values.podAnnotations) }}
    {{- $_ := set $annotations "checksum/config" (include (print $.Template.BasePath "/configmap.yaml") . | sha256sum) }}
    {{- toYaml $annotations | nindent 4 }}
spec:
  serviceAccountName: {{ include "onnxmon.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- /* gpu.shared: the NVIDIA runtime class (gpu.runtimeClassName) unless runtimeClassName is set */}}
  {{- with (default (ternary .Values.gpu.runtimeClassName "" (and .Values.gpu.enabled .Values.gpu.shared)) .Values.runtimeClassName) }}
  runtimeClassName: {{ . }}
  {{- end }}
  {{- $pod := default dict .Values.podSecurityContext }}
  securityContext:
    runAsNonRoot: true
    {{- range $key := list "runAsUser" "runAsGroup" "fsGroup" }}
    {{- if not (kindIs "invalid" (index $pod $key)) }}
    {{ $key }}: {{ int (index $pod $key) }}
    {{- end }}
    {{- end }}
    {{- if not (kindIs "invalid" (index $pod "fsGroup")) }}
    fsGroupChangePolicy: OnRootMismatch
    {{- end }}
    seccompProfile:
      type: RuntimeDefault
  terminationGracePeriodSeconds: {{ include "onnxmon.terminationGracePeriodSeconds" . }}
  {{- if or .Values.migrations.enabled .Values.extraInitContainers }}
  initContainers:
  {{- end }}
  {{- if .Values.migrations.enabled }}
    - name: db-upgrade
      image: {{ include "onnxmon.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["onnxmon"]
      args: ["db", "upgrade", "-c", "/etc/onnxmon/onnxmon.yaml"]
      env:
        {{- include "onnxmon.containerEnv" . | nindent 8 }}
      {{- with .Values.envFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        {{- include "onnxmon.volumeMounts" . | nindent 8 }}
      securityContext:
        {{- include "onnxmon.containerSecurityContext" . | nindent 8 }}
      resources:
        {{- toYaml .Values.migrations.resources | nindent 8 }}
  {{- end }}
  {{- /* after the migration (a wrong database URL fails in seconds, before any model download) */}}
  {{- /* each gets the monitor's restricted securityContext unless it brings its own */}}
  {{- range .Values.extraInitContainers }}
    - {{- include "onnxmon.extraContainer" (list $ .) | nindent 6 }}
  {{- end }}
  containers:
    - name: onnxmon
      image: {{ include "onnxmon.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["onnxmon"]
      args:
        {{- toYaml (concat (list "serve" "-c" "/etc/onnxmon/onnxmon.yaml") (default list .Values.extraArgs)) | nindent 8 }}
      ports:
        - name: http
          containerPort: {{ .Values.api.port }}
          protocol: TCP
      env:
        {{- include "onnxmon.containerEnv" . | nindent 8 }}
        {{- with (include "onnxmon.gpuEnv" .) }}
        {{- . | nindent 8 }}
        {{- end }}
      {{- with .Values.envFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        {{- include "onnxmon.volumeMounts" . | nindent 8 }}
      securityContext:
        {{- include "onnxmon.containerSecurityContext" . | nindent 8 }}
      startupProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: {{ .Values.probes.startup.periodSeconds }}
        failureThreshold: {{ .Values.probes.startup.failureThreshold }}
        timeoutSeconds: {{ .Values.probes.startup.timeoutSeconds }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
        failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
        timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
        periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
        failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
        timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds }}
      {{- $resources := deepCopy (default dict .Values.resources) }}
      {{- /* gpu.shared: no device-plugin request (the runtime exposes the node's GPUs) */}}
      {{- if and .Values.gpu.enabled (not .Values.gpu.shared) }}
      {{- $limits := default dict (get $resources "limits") }}
      {{- $_ := set $limits .Values.gpu.resourceName (int .Values.gpu.count) }}
      {{- $_ := set $resources "limits" $limits }}
      {{- end }}
      resources:
        {{- toYaml $resources | nindent 8 }}
  {{- range .Values.extraContainers }}
    - {{- include "onnxmon.extraContainer" (list $ .) | nindent 6 }}
  {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "onnxmon.fullname" . }}
    - name: data
      {{- if .Values.persistence.enabled }}
      persistentVolumeClaim:
        claimName: {{ include "onnxmon.claimName" . }}
      {{- else }}
      emptyDir: {}
      {{- end }}
    - name: spool
      {{- if .Values.spool.persistence.enabled }}
      persistentVolumeClaim:
        claimName: {{ include "onnxmon.spoolClaimName" . }}
      {{- else }}
      emptyDir:
        sizeLimit: {{ .Values.spool.sizeLimit }}
      {{- end }}
    - name: tmp
      emptyDir:
        sizeLimit: {{ .Values.tmpSizeLimit }}
    - name: home
      emptyDir:
        sizeLimit: {{ .Values.homeSizeLimit }}
    {{- if include "onnxmon.tokenFromSecret" . }}
    - name: api-token
      secret:
        secretName: {{ include "onnxmon.secretName" . }}
        defaultMode: 0440
        items:
          - key: {{ include "onnxmon.apiTokenKey" . }}
            path: api-token
    {{- end }}
    {{- if include "onnxmon.databaseFromSecret" . }}
    - name: database-url
      secret:
        secretName: {{ include "onnxmon.secretName" . }}
        defaultMode: 0440
        items:
          - key: {{ include "onnxmon.databaseUrlKey" . }}
            path: database-url
    {{- end }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  {{- /* a constraint without a labelSelector spreads this release's monitor pods */}}
  topologySpreadConstraints:
    {{- range . }}
    {{- $constraint := deepCopy . }}
    {{- if not (hasKey $constraint "labelSelector") }}
    {{- $_ := set $constraint "labelSelector" (dict "matchLabels" (include "onnxmon.selectorLabels" $ | fromYaml)) }}
    {{- end }}
    - {{- toYaml $constraint | nindent 6 }}
    {{- end }}
  {{- end }}
{{- end }}
