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

{{- define "onnxmon.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: {{ .Values.podSecurityContext.runAsUser }}
runAsGroup: {{ .Values.podSecurityContext.runAsGroup }}
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "onnxmon.podTemplate" -}}
metadata:
  labels:
    {{- include "onnxmon.selectorLabels" . | nindent 4 }}
    app.kubernetes.io/component: monitor
    {{- with .Values.commonLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
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
  {{- with .Values.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: {{ .Values.podSecurityContext.runAsUser }}
    runAsGroup: {{ .Values.podSecurityContext.runAsGroup }}
    fsGroup: {{ .Values.podSecurityContext.fsGroup }}
    fsGroupChangePolicy: OnRootMismatch
    seccompProfile:
      type: RuntimeDefault
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
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
    {{- $container := deepCopy . }}
    {{- if not (hasKey $container "securityContext") }}
    {{- $_ := set $container "securityContext" (include "onnxmon.containerSecurityContext" $ | fromYaml) }}
    {{- end }}
    - {{- toYaml $container | nindent 6 }}
  {{- end }}
  containers:
    - name: onnxmon
      image: {{ include "onnxmon.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["onnxmon"]
      args: ["serve", "-c", "/etc/onnxmon/onnxmon.yaml"]
      ports:
        - name: http
          containerPort: {{ .Values.api.port }}
          protocol: TCP
      env:
        {{- include "onnxmon.containerEnv" . | nindent 8 }}
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
      {{- if .Values.gpu.enabled }}
      {{- $limits := default dict (get $resources "limits") }}
      {{- $_ := set $limits .Values.gpu.resourceName (int .Values.gpu.count) }}
      {{- $_ := set $resources "limits" $limits }}
      {{- end }}
      resources:
        {{- toYaml $resources | nindent 8 }}
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
{{- end }}
