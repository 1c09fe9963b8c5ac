{{/* Names ------------------------------------------------------------------------------------ */}}
{{- define "wisp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "wisp.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "wisp.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels: include "wisp.labels" (dict "ctx" $ "component" "policy") */}}
{{- define "wisp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wisp.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "wisp.labels" -}}
{{ include "wisp.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: wisp
helm.sh/chart: {{ include "wisp.chart" .ctx }}
{{- with .ctx.Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Every pod of the release (for NetworkPolicies). */}}
{{- define "wisp.releasePodSelector" -}}
app.kubernetes.io/name: {{ include "wisp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wisp.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Services and endpoints ------------------------------------------------------------------- */}}
{{- define "wisp.gatewayService" -}}
{{- printf "%s-gateway" (include "wisp.fullname" .) -}}
{{- end -}}

{{- define "wisp.gatewayHost" -}}
{{- printf "%s.%s.svc" (include "wisp.gatewayService" .) .Release.Namespace -}}
{{- end -}}

{{- define "wisp.issuerUrl" -}}
{{- if .Values.issuerUrl -}}
{{- .Values.issuerUrl -}}
{{- else -}}
{{- printf "https://%s" (include "wisp.gatewayHost" .) -}}
{{- end -}}
{{- end -}}

{{- define "wisp.natsName" -}}
{{- printf "%s-nats" (include "wisp.fullname" .) -}}
{{- end -}}

{{/* NATS URLs: every in-chart server (clients fail over between them), or the external list. */}}
{{- define "wisp.natsUrl" -}}
{{- if .Values.nats.enabled -}}
{{- $name := include "wisp.natsName" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.nats.replicas) -}}
{{- $urls = append $urls (printf "%s://%s-%d.%s-headless.%s.svc:4222" (ternary "tls" "nats" $.Values.nats.tls.enabled) $name $i $name $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- required "nats.external.urls is required when nats.enabled is false" .Values.nats.external.urls -}}
{{- end -}}
{{- end -}}

{{- define "wisp.natsAuthSecret" -}}
{{- if .Values.nats.enabled -}}
{{- printf "%s-nats-auth" (include "wisp.fullname" .) -}}
{{- else -}}
{{- .Values.nats.external.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* Copies JetStream keeps of every wisp bucket and stream (--jetstream-replicas):
     nats.jetstream.replicas, or with 0 the in-chart cluster's size up to 3 (1 with nats.external,
     whose size the chart cannot know). More than the in-chart cluster has fails the render. */}}
{{- define "wisp.jetstreamReplicas" -}}
{{- $r := int .Values.nats.jetstream.replicas -}}
{{- if and .Values.nats.enabled (gt $r (int .Values.nats.replicas)) -}}
{{- fail (printf "nats.jetstream.replicas (%d) is more than nats.replicas (%d): JetStream cannot place the copies" $r (int .Values.nats.replicas)) -}}
{{- end -}}
{{- if gt $r 0 -}}
{{- $r -}}
{{- else if .Values.nats.enabled -}}
{{- min (int .Values.nats.replicas) 3 -}}
{{- else -}}
1
{{- end -}}
{{- end -}}

{{/* Flags every wisp service takes: include "wisp.commonArgs" (dict "ctx" $ "port" 9102) */}}
{{- define "wisp.commonArgs" -}}
- --nats-url={{ include "wisp.natsUrl" .ctx }}
- --jetstream-replicas={{ include "wisp.jetstreamReplicas" .ctx }}
- --metrics-address=0.0.0.0:{{ .port }}
- --log-level={{ .ctx.Values.global.logLevel }}
- --log-format={{ .ctx.Values.global.logFormat }}
{{- if and (not .ctx.Values.nats.enabled) .ctx.Values.nats.external.credsKey }}
- --nats-creds=/etc/wisp/nats/creds
{{- end }}
{{- if and (not .ctx.Values.nats.enabled) .ctx.Values.nats.external.caKey }}
- --nats-ca=/etc/wisp/nats/ca.crt
{{- end }}
{{- include "wisp.natsTlsArgs" .ctx }}
{{- end -}}

{{/* In-chart NATS with TLS (nats.tls.enabled): trust the CA of nats.tls.clientSecret and present
     its certificate (the server verifies it when nats.tls.verifyClients). */}}
{{- define "wisp.natsTlsArgs" -}}
{{- if and .Values.nats.enabled .Values.nats.tls.enabled }}
- --nats-ca=/etc/wisp/nats-tls/ca.crt
- --nats-cert=/etc/wisp/nats-tls/tls.crt
- --nats-key=/etc/wisp/nats-tls/tls.key
{{- end }}
{{- end -}}

{{/* The external NATS creds file / CA, mounted from nats.external.existingSecret; or the client
     certificate for the in-chart NATS with TLS. */}}
{{- define "wisp.natsFilesWanted" -}}
{{- if and (not .Values.nats.enabled) (or .Values.nats.external.credsKey .Values.nats.external.caKey) -}}true{{- end -}}
{{- if and .Values.nats.enabled .Values.nats.tls.enabled -}}true{{- end -}}
{{- end -}}

{{- define "wisp.natsVolume" -}}
{{- if and .Values.nats.enabled .Values.nats.tls.enabled }}
- name: nats-tls
  secret:
    secretName: {{ required "nats.tls.clientSecret is required with nats.tls.enabled" .Values.nats.tls.clientSecret }}
    items:
      - {key: ca.crt, path: ca.crt}
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- else if include "wisp.natsFilesWanted" . }}
- name: nats-client
  secret:
    secretName: {{ required "nats.external.existingSecret is required with credsKey/caKey" .Values.nats.external.existingSecret }}
    items:
      {{- with .Values.nats.external.credsKey }}
      - {key: {{ . }}, path: creds}
      {{- end }}
      {{- with .Values.nats.external.caKey }}
      - {key: {{ . }}, path: ca.crt}
      {{- end }}
{{- end }}
{{- end -}}

{{- define "wisp.natsVolumeMount" -}}
{{- if and .Values.nats.enabled .Values.nats.tls.enabled }}
- name: nats-tls
  mountPath: /etc/wisp/nats-tls
  readOnly: true
{{- else if include "wisp.natsFilesWanted" . }}
- name: nats-client
  mountPath: /etc/wisp/nats
  readOnly: true
{{- end }}
{{- end -}}

{{/* NATS credentials as environment (never as flags, so they stay out of `ps`):
     include "wisp.natsEnv" (dict "ctx" $ "user" "policy") */}}
{{- define "wisp.natsEnv" -}}
{{- if .ctx.Values.nats.enabled -}}
{{- if .ctx.Values.nats.auth.enabled }}
- name: WISP_NATS_USER
  value: {{ ternary .user (printf "wisp-%s" .user) (eq .user "wispctl") | quote }}
- name: WISP_NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "wisp.natsAuthSecret" .ctx }}
      key: {{ printf "%s-password" .user }}
{{- end }}
{{- else if .ctx.Values.nats.external.user }}
- name: WISP_NATS_USER
  value: {{ .ctx.Values.nats.external.user | quote }}
- name: WISP_NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ required "nats.external.existingSecret is required with nats.external.user" .ctx.Values.nats.external.existingSecret }}
      key: password
{{- end }}
{{- end -}}

{{/* Pod spec pieces -------------------------------------------------------------------------- */}}
{{- define "wisp.antiAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "wisp.selectorLabels" . | nindent 12 }}
    - weight: 50
      podAffinityTerm:
        topologyKey: topology.kubernetes.io/zone
        labelSelector:
          matchLabels:
            {{- include "wisp.selectorLabels" . | nindent 12 }}
{{- end -}}

{{- define "wisp.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Probes against the metrics port: /healthz (alive) and /readyz (connected, ready to serve). */}}
{{- define "wisp.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: 5
  failureThreshold: 2
startupProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 2
  failureThreshold: 30
{{- end -}}

{{/* TLS mode after resolving "auto" against the API versions the cluster serves. */}}
{{- define "wisp.tlsMode" -}}
{{- $mode := .Values.tls.mode -}}
{{- if eq $mode "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}certManager{{- else -}}generated{{- end -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{- define "wisp.tlsSecret" -}}
{{- if eq (include "wisp.tlsMode" .) "existingSecret" -}}
{{- required "tls.existingSecret is required when tls.mode is existingSecret" .Values.tls.existingSecret -}}
{{- else -}}
{{- printf "%s-gateway-tls" (include "wisp.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "wisp.monitoringAvailable" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/* PodDisruptionBudget budget: maxUnavailable when set, else minAvailable. */}}
{{- define "wisp.pdbBudget" -}}
{{- if hasKey . "maxUnavailable" -}}
maxUnavailable: {{ .maxUnavailable }}
{{- else -}}
minAvailable: {{ .minAvailable }}
{{- end -}}
{{- end -}}
